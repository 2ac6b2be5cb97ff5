"""The strict parser of the ``hermes`` format: one turn -> reasoning, content and checked blocks.

Turn
    ``reasoning_content`` is the ``<think>`` part: from a ``<think>`` that opens the turn (after
    optional whitespace) to the first ``</think>``, or to the end of the turn when it is never
    closed (a turn cut while thinking is all reasoning). When the generation prompt already opened
    ``<think>`` (Qwen3-Thinking-2507 prompts end with ``<think>\\n``), pass
    ``reasoning_started=True``: everything up to the first ``</think>`` is reasoning. Without it a
    bare ``</think>`` that comes before any ``<tool_call>`` and any ``<think>`` still marks what
    precedes it as reasoning (the prompt must have opened it). ``content`` is the rest of the turn
    with every block cut out, the pieces joined verbatim.

Whitespace
    Leading and trailing whitespace of ``content`` and ``reasoning_content`` is formatting, not
    text, and is stripped (an empty result is ``None``). The Qwen3 chat template writes
    ``<think>\\n`` + reasoning + ``\\n</think>\\n\\n`` + content, then ``\\n`` before the first block
    and between blocks; CanIToolCall's expected values (the message fields the template was given)
    drop exactly those separators, and one engine test also drops a space before the opener
    (``sglang-text-before-call-with-space``). Whitespace inside the text is kept as written.

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
    reproduce the seed's numbers.

Checks (both modes), each block on its own
    Unclosed -> ``truncated``. Otherwise strict ``json.loads`` of the body (no leniency for
    control characters; ``NaN``/``Infinity`` are rejected too, since they are not JSON): a literal
    line break inside a string -> ``raw-newline-in-string`` (``json`` stops at the first error, so
    the kind is the first error's), any other error -> ``invalid-json``; then
    :func:`toolgrammar.checks.check_call`. One block's error never affects another block.

Streaming
    :class:`HermesStreamState` is the incremental half: it emits only text and calls that no later
    text can change. :class:`toolgrammar.parser.TurnStreamParser` drives it and takes the final
    parse from :func:`parse_turn` on the whole text, so streaming and one-shot parses are equal by
    construction for every chunking; the tests check that the streamed deltas add up to it.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Literal

from ...checks import check_call
from ...turn import Block, CallError, TurnParse
from ..base import Markers, ParseMode
from ..text import Trimmed, partial_suffix

if TYPE_CHECKING:
    from ...tools import ToolSet
    from ...turn import ToolCall

DEFAULT_MARKERS = Markers()

_JSON_WS = " \t\n\r"
_STRING_STOP = re.compile(r'[\\"]')
_STRUCTURE = re.compile(r'["{}\[\]]')

StreamPiece = tuple[Literal["content", "reasoning"], str] | tuple[Literal["tool_call"], "ToolCall"]
"""What :class:`HermesStreamState` emits: a piece of content or reasoning text, or one checked call."""


# --------------------------------------------------------------------------- one-shot parse


def parse_turn(
    text: str,
    tools: ToolSet,
    *,
    mode: ParseMode = "strict",
    markers: Markers = DEFAULT_MARKERS,
    reasoning_started: bool = False,
) -> TurnParse:
    """Split one assistant turn into reasoning, content and checked blocks (see the module docstring)."""
    if mode not in ("strict", "seed"):
        raise ValueError(f"unknown parse mode {mode!r}; expected 'strict' or 'seed'")
    reasoning, pos = split_reasoning(text, markers, reasoning_started=reasoning_started)
    pieces: list[str] = []
    blocks: list[Block] = []
    for start, body_start, body_end, end, closed in find_blocks(text, pos, markers, mode):
        pieces.append(text[pos:start])
        blocks.append(check_block(text, start, body_start, body_end, end, closed, tools, markers))
        pos = end
    pieces.append(text[pos:])
    return TurnParse(content=_trim("".join(pieces)), reasoning_content=_trim(reasoning), blocks=tuple(blocks))


def split_reasoning(text: str, markers: Markers, *, reasoning_started: bool = False) -> tuple[str | None, int]:
    """The raw reasoning text (``None`` when there is none) and the offset where the rest starts."""
    if reasoning_started:
        return _reasoning_until_close(text, 0, markers)
    lead = len(text) - len(text.lstrip())
    if text.startswith(markers.think_open, lead):
        return _reasoning_until_close(text, lead + len(markers.think_open), markers)
    close = text.find(markers.think_close)
    if close != -1 and all(_absent_before(text, m, close) for m in (markers.block_open, markers.think_open)):
        return text[:close], close + len(markers.think_close)
    return None, 0


def _reasoning_until_close(text: str, start: int, markers: Markers) -> tuple[str, int]:
    close = text.find(markers.think_close, start)
    if close == -1:
        return text[start:], len(text)
    return text[start:close], close + len(markers.think_close)


def _absent_before(text: str, marker: str, index: int) -> bool:
    """True when no ``marker`` starts before ``index``."""
    return text.find(marker, 0, index + len(marker) - 1) == -1


def find_blocks(text: str, pos: int, markers: Markers, mode: ParseMode) -> list[tuple[int, int, int, int, bool]]:
    """Every block from ``pos`` on, as ``(start, body_start, body_end, end, closed)`` offsets."""
    out: list[tuple[int, int, int, int, bool]] = []
    if mode == "seed":
        for m in _seed_pattern(markers).finditer(text, pos):
            closed = m.group(1) is not None
            group = 1 if closed else 2
            out.append((m.start(), m.start(group), m.end(group), m.end(), closed))
        return out
    opener, closer = markers.block_open, markers.block_close
    while (start := text.find(opener, pos)) != -1:
        body_start = start + len(opener)
        close = strict_block_close(text, body_start, closer)
        if close == -1:
            out.append((start, body_start, len(text), len(text), False))
            break
        end = close + len(closer)
        out.append((start, body_start, close, end, True))
        pos = end
    return out


def strict_block_close(text: str, body_start: int, closer: str) -> int:
    """Offset of the ``closer`` that ends the block whose body starts at ``body_start`` (-1: none)."""
    scanner = JsonValueScanner()
    done = scanner.feed(text, body_start)
    if done >= 0:
        return text.find(closer, done)
    return text.find(closer, body_start)


_SEED_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {}


def _seed_pattern(markers: Markers) -> re.Pattern[str]:
    key = (markers.block_open, markers.block_close)
    if key not in _SEED_PATTERNS:
        o, c = re.escape(markers.block_open), re.escape(markers.block_close)
        _SEED_PATTERNS[key] = re.compile(f"{o}(.*?){c}|{o}(.*)", re.DOTALL)
    return _SEED_PATTERNS[key]


class JsonValueScanner:
    """Finds where the JSON value that starts a block body ends, fed piece by piece.

    It reads only as much as it must: whitespace, then one object, array or string, tracking
    bracket depth, string state and backslash escapes (``\\"`` does not end a string). It does not
    validate the JSON; ``json.loads`` does that once the block is cut out.
    """

    __slots__ = ("_depth", "_escape", "_in_string", "state")

    def __init__(self) -> None:
        self.state: Literal["before", "value", "done", "broken"] = "before"
        self._depth = 0
        self._in_string = False
        self._escape = False

    def feed(self, text: str, start: int = 0) -> int:
        """Scan ``text[start:]``. Returns the offset just past the value once it is complete, ``-1``
        while it is still open (or not begun), ``-2`` when the body does not start like an object,
        array or string (the block end then falls back to the first closing marker)."""
        if self.state == "done" or self.state == "broken":
            raise ValueError(f"scanner already {self.state}")
        i, n = start, len(text)
        if self.state == "before":
            while i < n and text[i] in _JSON_WS:
                i += 1
            if i == n:
                return -1
            first = text[i]
            i += 1
            if first in "{[":
                self._depth = 1
            elif first == '"':
                self._in_string = True
            else:
                self.state = "broken"
                return -2
            self.state = "value"
        while i < n:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    i += 1
                    continue
                m = _STRING_STOP.search(text, i)
                if m is None:
                    return -1
                i = m.end()
                if m.group() == "\\":
                    self._escape = True
                    continue
                self._in_string = False
                if self._depth == 0:
                    self.state = "done"
                    return i
            else:
                m = _STRUCTURE.search(text, i)
                if m is None:
                    return -1
                i = m.end()
                ch = m.group()
                if ch == '"':
                    self._in_string = True
                elif ch in "{[":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        self.state = "done"
                        return i
        return -1


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
        obj = _loads(body)
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
        return CallError(_json_error_kind(error), f"error: tool call is not valid JSON: {error}")
    if not closed:
        return CallError("truncated", f"error: tool call is truncated: the turn ended before {markers.block_close}")
    return check_call(obj, tools)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(body: str) -> Any:
    return json.loads(body, parse_constant=_reject_constant)


def _json_error_kind(error: ValueError) -> Literal["raw-newline-in-string", "invalid-json"]:
    """``raw-newline-in-string`` exactly when json stopped at a literal line break inside a string.

    ``json`` reports a control character in a string as ``Invalid control character at`` with
    ``pos`` on that character (CPython's scanner, 3.11+); a line break is ``\\n`` or ``\\r``.
    """
    if (
        isinstance(error, json.JSONDecodeError)
        and error.msg.startswith("Invalid control character")
        and 0 <= error.pos < len(error.doc)
        and error.doc[error.pos] in "\n\r"
    ):
        return "raw-newline-in-string"
    return "invalid-json"


def _trim(text: str | None) -> str | None:
    if text is None:
        return None
    return text.strip() or None


# --------------------------------------------------------------------------- streaming




class HermesStreamState:
    """Incremental hermes parse: emits content, reasoning and calls as soon as they are final.

    "Final" means no later text can change it: reasoning and content up to a possible partial
    marker at the end of the text so far (trailing whitespace held back, since it may turn out to
    be the end of the text), and a call once its block is closed (in strict mode: after its JSON
    value is complete and the closing marker follows). A block whose value never completes is
    resolved only at the end of the turn, by the one-shot parse. Each chunk is scanned once
    (linear in the turn's length however it is split).
    """

    def __init__(
        self,
        tools: ToolSet,
        *,
        mode: ParseMode = "strict",
        markers: Markers = DEFAULT_MARKERS,
        reasoning_started: bool = False,
    ) -> None:
        if mode not in ("strict", "seed"):
            raise ValueError(f"unknown parse mode {mode!r}; expected 'strict' or 'seed'")
        self.tools = tools
        self.mode = mode
        self.markers = markers
        self._buf = ""
        self._i = 0  # first offset not yet classified
        self._search = 0  # where the next marker search may start (earlier offsets were searched)
        self._phase: Literal["head", "auto", "reasoning", "content", "block"] = (
            "reasoning" if reasoning_started else "head"
        )
        self._content = Trimmed()
        self._reasoning = Trimmed()
        self._block_start = 0
        self._scanner = JsonValueScanner()
        self._value_end = -1  # strict: offset past the block's complete JSON value; -2: broken

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return self._buf

    def feed(self, chunk: str) -> list[StreamPiece]:
        """Add ``chunk``; return the pieces that became final."""
        out: list[StreamPiece] = []
        if not chunk:
            return out
        self._buf += chunk
        while True:
            before = (self._phase, self._i)
            getattr(self, f"_step_{self._phase}")(out)
            if (self._phase, self._i) == before:
                return out

    def _emit(self, out: list[StreamPiece], kind: Literal["content", "reasoning"], text: str) -> None:
        piece = (self._content if kind == "content" else self._reasoning).push(text)
        if piece:
            out.append((kind, piece))

    def _find(self, marker: str, start: int) -> int:
        return self._buf.find(marker, max(start, self._search))

    def _searched(self, marker: str, start: int) -> None:
        """Remember that ``marker`` does not start before the last ``len(marker)-1`` characters."""
        self._search = max(start, len(self._buf) - len(marker) + 1)

    def _step_head(self, out: list[StreamPiece]) -> None:
        buf, opener = self._buf, self.markers.think_open
        rest = buf.lstrip()
        if not rest or (len(rest) < len(opener) and opener.startswith(rest)):
            return
        if rest.startswith(opener):
            self._phase, self._i = "reasoning", len(buf) - len(rest) + len(opener)
        else:
            self._phase, self._i = "auto", 0
        self._search = self._i

    def _step_auto(self, out: list[StreamPiece]) -> None:
        m, buf = self.markers, self._buf
        close = buf.find(m.think_close, self._search)
        first_other = min(
            (p for p in (buf.find(m.block_open, self._search), buf.find(m.think_open, self._search)) if p != -1),
            default=-1,
        )
        if close != -1 and (first_other == -1 or close < first_other):
            self._emit(out, "reasoning", buf[:close])
            self._phase, self._i = "content", close + len(m.think_close)
            self._search = self._i
        elif first_other != -1:
            self._phase, self._i, self._search = "content", 0, 0  # no reasoning: the whole turn is content
        else:
            longest = max(len(m.think_close), len(m.block_open), len(m.think_open))
            self._search = max(0, len(buf) - longest + 1)

    def _step_reasoning(self, out: list[StreamPiece]) -> None:
        closer = self.markers.think_close
        close = self._find(closer, self._i)
        if close != -1:
            self._emit(out, "reasoning", self._buf[self._i : close])
            self._phase, self._i = "content", close + len(closer)
            self._search = self._i
            return
        safe = len(self._buf) - partial_suffix(self._buf, closer, self._i)
        if safe > self._i:
            self._emit(out, "reasoning", self._buf[self._i : safe])
            self._i = safe
        self._searched(closer, self._i)

    def _step_content(self, out: list[StreamPiece]) -> None:
        opener = self.markers.block_open
        start = self._find(opener, self._i)
        if start != -1:
            self._emit(out, "content", self._buf[self._i : start])
            self._phase, self._block_start = "block", start
            self._i = self._search = start + len(opener)
            self._scanner = JsonValueScanner()
            self._value_end = -1
            return
        safe = len(self._buf) - partial_suffix(self._buf, opener, self._i)
        if safe > self._i:
            self._emit(out, "content", self._buf[self._i : safe])
            self._i = safe
        self._searched(opener, self._i)

    def _step_block(self, out: list[StreamPiece]) -> None:
        closer, body_start = self.markers.block_close, self._block_start + len(self.markers.block_open)
        if self.mode == "strict" and self._value_end == -1:
            done = self._scanner.feed(self._buf, self._i)
            self._i = len(self._buf)
            if done == -1:
                return
            self._value_end = done
            self._search = done if done >= 0 else body_start
        # Strict mode: the closer must follow the complete value (-2: broken value, first closer wins).
        floor = self._value_end if self._value_end >= 0 else body_start
        close = self._find(closer, floor)
        if close == -1:
            self._searched(closer, floor)
            return
        end = close + len(closer)
        block = check_block(self._buf, self._block_start, body_start, close, end, True, self.tools, self.markers)
        if block.call is not None:
            out.append(("tool_call", block.call))
        self._phase, self._i = "content", end
        self._search = end


__all__ = [
    "HermesStreamState",
    "JsonValueScanner",
    "check_block",
    "check_body",
    "find_blocks",
    "parse_turn",
    "split_reasoning",
    "strict_block_close",
]
