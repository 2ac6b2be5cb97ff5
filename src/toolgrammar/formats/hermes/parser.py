"""The block reader of the ``hermes`` format: where a ``<tool_call>`` block ends and what it holds.

Turn
    The turn itself (reasoning, content, whitespace trimming, what waits in a stream) is read by
    :mod:`toolgrammar.formats.reader`, the one turn reader every format shares; this module supplies
    only :class:`HermesBlocks`. A hermes ``<tool_call>`` does not end an opened ``<think>``
    (``block_ends_reasoning`` is false): with the prompt's ``<think>``, ``Maybe <tool_call>
    now?</think>`` is all reasoning.

Blocks, ``mode="strict"`` (the default)
    A block starts at ``<tool_call>``. The parser then reads the JSON value that follows (string
    and escape aware, counting brackets), so a ``</tool_call>`` *inside a JSON string* stays in the
    string; the block ends at the first ``</tool_call>`` after the complete value. When the body
    does not start like a JSON object, array or string, or the value never completes, the block
    ends at the first ``</tool_call>`` after the opener instead (the JSON is broken anyway, and
    the next block still parses). No ``</tool_call>`` at all means the turn was cut: the block is
    ``truncated``, never a call, even if its JSON happens to be complete.

Blocks, ``mode="seed"``
    The seed harness's exact regular expression (vLLM's for Qwen):
    ``<tool_call>(.*?)</tool_call>|<tool_call>(.*)`` with ``re.DOTALL``, so a block always ends at
    the first ``</tool_call>``. The one difference from strict mode is a ``</tool_call>`` inside a
    JSON string: CanIToolCall's ``marker-in-arguments`` turn
    ``<tool_call>{..."text": "Use <tool_call> ... </tool_call> tags"}}</tool_call>`` is one valid
    call in strict mode, but in seed mode the block is cut inside the string (``invalid-json``)
    and the rest of the call, closing marker included, lands in ``content``. Use seed mode only to
    reproduce the seed's numbers. :class:`BlockEnd` reads exactly what that expression matches,
    incrementally (the first ``</tool_call>`` after the opener, else the rest of the turn).

Checks (both modes), each block on its own
    Unclosed -> ``truncated``. Otherwise strict ``json.loads`` of the body (no leniency for
    control characters; ``NaN``/``Infinity`` are rejected too, since they are not JSON): a literal
    line break inside a string -> ``raw-newline-in-string`` (``json`` stops at the first error, so
    the kind is the first error's), any other error -> ``invalid-json``; then
    :func:`toolgrammar.formats.checks.check_call`. One block's error never affects another block.

Streaming
    :class:`HermesBlocks` reads a block incrementally (in strict mode the JSON scan resumes where it
    stopped), so the shared :class:`~toolgrammar.formats.reader.TurnStreamState` emits a call as soon
    as its block closes. A block whose value never completes waits for the end of the turn (a later
    ``</tool_call>`` could still follow the value). :func:`parse_turn` feeds the same reader the
    whole turn, so streaming and one-shot parses are equal by construction for every chunking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from toolgrammar.formats.base import ParseMode
from toolgrammar.formats.calls import Block, CallError, TurnParse
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import JsonValueScanner, json_error_kind, loads
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import Opener, Span, StreamPiece, TurnStreamState, read_turn
from toolgrammar.formats.reader import check_mode as check_reader_mode

if TYPE_CHECKING:
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.schema import ToolSet

DEFAULT_MARKERS = Markers()

MODES: tuple[str, ...] = ("strict", "seed")


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("hermes", mode, MODES)


def parse_turn(
    text: str,
    tools: ToolSet,
    *,
    mode: ParseMode = "strict",
    markers: Markers = DEFAULT_MARKERS,
    reasoning_started: bool = False,
) -> TurnParse:
    """Split one assistant turn into reasoning, content and checked blocks (see the module docstring)."""
    return read_turn(text, tools, HermesBlocks(mode, markers), reasoning_started=reasoning_started)


# --------------------------------------------------------------------------- the block reader


class HermesBlocks:
    """The hermes :class:`~toolgrammar.formats.reader.BlockReader` for one mode and set of markers."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str = "strict", markers: Markers = DEFAULT_MARKERS) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open),)

    def open_block(self, start: int, opener: Opener) -> BlockEnd:
        return BlockEnd(start, self.markers, json_aware=self.mode == "strict")

    def check(self, text: str, cut: Span, tools: ToolSet) -> Block:
        return check_block(text, cut.start, cut.body_start, cut.body_end, cut.end, cut.closed, tools, self.markers)


class BlockEnd:
    """Finds where one block ends as the text grows: strict mode's structure-aware rule, or the seed's.

    ``json_aware`` (strict): the first closing marker after the complete JSON value; when the body
    does not start like a value, or (at the turn's end) the value never completed, the first one
    after the opener. Otherwise (seed): the first closing marker after the opener, exactly what
    ``<tool_call>(.*?)</tool_call>|<tool_call>(.*)`` matches. No closing marker by the turn's end:
    the block runs to the end, unclosed. Each call reads only the text the previous ones did not.
    """

    __slots__ = ("_scanned", "_scanner", "_search", "body_start", "closer", "floor", "start")

    def __init__(self, start: int, markers: Markers = DEFAULT_MARKERS, *, json_aware: bool = True) -> None:
        self.start = start
        self.body_start = start + len(markers.block_open)
        self.closer = markers.block_close
        self._scanner = JsonValueScanner() if json_aware else None
        self._scanned = self.body_start
        self.floor = -1 if json_aware else self.body_start
        """Where the closing marker is searched from (-1: the JSON value is still open)."""
        self._search = self.body_start
        """No closing marker starts between ``floor`` and this offset."""

    def advance(self, text: str, final: bool) -> Span | None:
        if self.floor == -1:
            assert self._scanner is not None
            done = self._scanner.feed(text, self._scanned)
            self._scanned = len(text)
            if done == -1 and not final:
                return None
            self.floor = self._search = done if done >= 0 else self.body_start
        close = text.find(self.closer, self._search)
        if close != -1:
            return Span(self.start, self.body_start, close, close + len(self.closer), True)
        if final:
            return Span(self.start, self.body_start, len(text), len(text), False)
        self._search = max(self.floor, len(text) - len(self.closer) + 1)
        return None


def strict_block_close(text: str, body_start: int, closer: str) -> int:
    """Offset of the ``closer`` that ends the block whose body starts at ``body_start`` (-1: none)."""
    scanner = JsonValueScanner()
    done = scanner.feed(text, body_start)
    if done >= 0:
        return text.find(closer, done)
    return text.find(closer, body_start)


class HermesStreamState(TurnStreamState[Span]):
    """The shared turn reader with :class:`HermesBlocks` (the incremental hermes parse)."""

    def __init__(
        self,
        tools: ToolSet,
        *,
        mode: ParseMode = "strict",
        markers: Markers = DEFAULT_MARKERS,
        reasoning_started: bool = False,
    ) -> None:
        super().__init__(tools, HermesBlocks(mode, markers), reasoning_started=reasoning_started)


def check_block(
    text: str,
    start: int,
    body_start: int,
    body_end: int,
    end: int,
    closed: bool,
    tools: ToolSet,
    markers: Markers = DEFAULT_MARKERS,
) -> Block:
    """Check one block on its own and return it with its verdict."""
    raw, body = text[start:end], text[body_start:body_end]
    verdict = check_body(body, closed, tools, markers)
    if isinstance(verdict, CallError):
        return Block(raw=raw, body=body, start=start, end=end, closed=closed, error=verdict)
    return Block(raw=raw, body=body, start=start, end=end, closed=closed, call=verdict)


def check_body(body: str, closed: bool, tools: ToolSet, markers: Markers = DEFAULT_MARKERS) -> ToolCall | CallError:
    """The verdict on one block body: a valid call, or the first failing check."""
    try:
        obj = loads(body)
    except RecursionError:
        kind: Literal["truncated", "invalid-json"] = "invalid-json" if closed else "truncated"
        return CallError(kind, "error: tool call is not valid JSON: nesting too deep")
    except ValueError as error:
        if not closed:
            return CallError(
                "truncated",
                f"error: tool call is truncated: the turn ended before {markers.block_close} "
                f"and the JSON is incomplete: {error}",
            )
        return CallError(json_error_kind(error), f"error: tool call is not valid JSON: {error}")
    if not closed:
        return CallError("truncated", f"error: tool call is truncated: the turn ended before {markers.block_close}")
    return check_call(obj, tools)


__all__ = [
    "MODES",
    "BlockEnd",
    "HermesBlocks",
    "HermesStreamState",
    "Span",
    "StreamPiece",
    "check_block",
    "check_body",
    "check_mode",
    "parse_turn",
    "strict_block_close",
]
