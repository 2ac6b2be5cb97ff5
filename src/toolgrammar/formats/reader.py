"""The one turn reader: one assistant turn -> reasoning, content and checked blocks, for every format.

A format supplies only its :class:`BlockReader`: the :class:`Opener` strings where a block may
start, a :class:`BlockCursor` that finds where a started block ends (fed the growing text), and
``check``, which turns a cut-out block into a :class:`~toolgrammar.formats.calls.Block` (a call or an error).
Everything else is read here, the same way for every format: :class:`TurnStreamState` is the
reader, :func:`read_turn` feeds it a whole turn at once, and
the turn layer's ``TurnStreamParser`` feeds it chunks, so streaming and one-shot parses agree by
construction for every chunking.

Reasoning
    ``reasoning_content`` is the ``<think>`` part: from a ``<think>`` that opens the turn (after
    optional whitespace), or from the start of the turn when the generation prompt already opened
    it (``reasoning_started=True``; Qwen3-Thinking-2507 and Qwen3.5+ prompts end with
    ``<think>\\n``), to the first ``</think>``. When the block reader says
    :attr:`~BlockReader.block_ends_reasoning` (qwen-xml), the first block opener (``<tool_call>``)
    ends it too, whichever comes first; the opener then starts a block. A turn cut while thinking
    is all reasoning. Without an opened ``<think>``, a bare ``</think>`` that comes before any
    block opener and any ``<think>`` still marks what precedes it as reasoning (the prompt must have
    opened it).

Content
    The rest of the turn with every block cut out, the pieces joined verbatim. A block starts at
    the earliest :class:`Opener`; one marked ``line_start`` only where it starts a line of content
    (at the start of the content that follows the turn's start, ``</think>`` or a block, or right
    after a ``\\n``). A block reader may find that a candidate is not a block after all
    (:data:`NOT_A_BLOCK`): it then stays in the content as text.

Whitespace
    Leading and trailing whitespace of ``content`` and ``reasoning_content`` is formatting, not
    text, and is stripped (an empty result is ``None``): the Qwen chat templates write
    ``<think>\\n`` + reasoning + ``\\n</think>\\n\\n`` + content, then ``\\n`` before the first block
    and between blocks; CanIToolCall's expected values (the message fields the template was given)
    drop exactly those separators, and one engine test also drops a space before the opener
    (``sglang-text-before-call-with-space``). Whitespace inside the text is kept as written.

Streaming (what waits)
    :meth:`TurnStreamState.feed` emits only text and calls that no later text can change:
    reasoning and content up to a possible partial marker at the end of the text so far (trailing
    whitespace held back too, since it may turn out to be the end of the turn: :class:`Trimmed`),
    and a call once its block's end is known and it passes every check. Until a ``</think>``, a
    block opener or a ``<think>`` decides it (or the turn ends), text at the start of a turn whose
    reasoning was not opened waits, since a later bare ``</think>`` would make it reasoning. A
    block whose end only the turn's end decides is resolved by :meth:`TurnStreamState.finish`.
    Each marker search resumes where the previous one stopped, so a turn costs time linear in its
    length however it is split (a block cursor must do the same for its block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Literal, Protocol, TypeVar

from toolgrammar.formats.calls import TurnParse
from toolgrammar.formats.text import Trimmed, partial_suffix

if TYPE_CHECKING:
    from toolgrammar.formats.calls import Block, ToolCall
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

StreamPiece = tuple[Literal["content", "reasoning"], str] | tuple[Literal["tool_call"], "ToolCall"]
"""What :meth:`TurnStreamState.feed` emits: a piece of content or reasoning text, or one checked call."""


@dataclass(frozen=True)
class Opener:
    """A string where a block may start."""

    text: str
    line_start: bool = False
    """Only where it starts a line of content (qwen-xml's bare ``<function=``, its opener forgotten)."""


class Cut(Protocol):
    """Where a block ends, as a block cursor found it (the format's own record of the block)."""

    @property
    def end(self) -> int:
        """Offset just past the block's last character: the content resumes there."""
        ...


class NotABlock:
    """The type of :data:`NOT_A_BLOCK`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_A_BLOCK"


@dataclass(frozen=True)
class Span:
    """Where one block lies in the turn (a :class:`Cut`): ``text[start:end]`` is the block,
    ``text[body_start:body_end]`` its body (to the end of the turn when it is not ``closed``)."""

    start: int
    body_start: int
    body_end: int
    end: int
    closed: bool


def check_mode(format_name: str, mode: str, modes: tuple[str, ...]) -> None:
    """Raise ``ValueError`` for a parse mode the format does not have, naming the ones it has."""
    if mode not in modes:
        hint = " (the seed harness's regex mode exists only for hermes)" if mode == "seed" else ""
        raise ValueError(f"unknown {format_name} parse mode {mode!r}; expected {' or '.join(map(repr, modes))}{hint}")


NOT_A_BLOCK: Final = NotABlock()
"""What :meth:`BlockCursor.advance` returns when the candidate turned out to be text, not a block."""

CutT = TypeVar("CutT", bound=Cut)
CutT_co = TypeVar("CutT_co", bound=Cut, covariant=True)


class BlockCursor(Protocol[CutT_co]):
    """Reads one block from its opener on, as the text grows."""

    def advance(self, text: str, final: bool) -> CutT_co | NotABlock | None:
        """Where the block that starts at the cursor's offset ends in ``text``.

        ``None``: ``text`` may end inside the block, more text decides (never when ``final``, the
        whole turn). Otherwise the block's :class:`Cut` (an unclosed block at the turn's end is cut
        there; ``check`` calls it truncated), or :data:`NOT_A_BLOCK`. ``text`` only ever grows
        between calls; the cursor reads only what it did not read before.
        """
        ...


class BlockReader(Protocol[CutT]):
    """What a format supplies to read its turns: where blocks start and end, and what they hold.

    One reader is built for one parse mode and one set of markers (``modes`` lists the modes its
    format has; building one for another mode raises ``ValueError``).
    """

    modes: ClassVar[tuple[str, ...]]

    @property
    def markers(self) -> Markers:
        """The format's markers (``<think>``, ``</think>``, the block opener)."""
        ...

    @property
    def openers(self) -> tuple[Opener, ...]:
        """Where a block may start; the earliest one in the content wins (the first listed on a tie)."""
        ...

    @property
    def block_ends_reasoning(self) -> bool:
        """Whether ``markers.block_open`` ends an opened ``<think>`` (and then starts a block)."""
        ...

    # Optional: ``bare_think_close`` (a class attribute; ``True`` when absent): whether a turn that does not
    # open with ``think_open`` may still hold reasoning up to a bare ``think_close`` (the ``auto`` phase);
    # ``False``: such a turn is all content (gpt-oss: its analysis message is the only reasoning opener).
    # Optional on a :class:`Cut`: ``markup`` (``True``): ``text[start:cut.end]`` is markup that is neither
    # content nor a block (a gpt-oss message header or message end); it is dropped and no block is recorded.

    # Optional: ``strip_whitespace`` (a class attribute; ``True`` when absent): whether the leading and
    # trailing whitespace of ``content`` and ``reasoning_content`` is stripped (module docstring,
    # Whitespace). A reader that sets it ``False`` gets both verbatim (``""`` is still ``None``).

    def open_block(self, start: int, opener: Opener) -> BlockCursor[CutT]:
        """A cursor for the block candidate at ``start`` (where ``opener`` was found)."""
        ...

    def check(self, text: str, cut: CutT, tools: ToolSet) -> Block | tuple[Block, ...]:
        """The block ``cut`` out of ``text`` with its verdict (a call, or the first failing check).

        A reader whose block is a *section* holding several calls (DeepSeek, Kimi) returns one
        :class:`~toolgrammar.formats.calls.Block` per call instead, in order (possibly none).
        """
        ...


def read_turn(text: str, tools: ToolSet, reader: BlockReader[Any], *, reasoning_started: bool = False) -> TurnParse:
    """Split one whole assistant turn into reasoning, content and checked blocks (module docstring).

    Bad model output never raises: it becomes blocks with errors.
    """
    state = TurnStreamState(tools, reader, reasoning_started=reasoning_started)
    state.feed(text)
    return state.finish()


class _NextMatch:
    """The first occurrence of ``marker`` at or after an offset of a growing text, remembered.

    The reader asks again and again from offsets that only move forward (after each block, each
    rejected candidate); searching the whole rest of the text each time is quadratic on text dense
    with candidates. Here every character is searched about once per marker.
    """

    __slots__ = ("clean", "found", "marker", "start")

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.start = 0
        self.found = -1
        """The first occurrence at or after ``start`` (-1: none before ``clean``)."""
        self.clean = 0

    def find(self, text: str, start: int) -> int:
        if start >= self.start and (self.found == -1 or start <= self.found):
            if self.found != -1:
                return self.found
            begin = max(start, self.clean)
        else:
            begin = start
        self.start, self.found = start, text.find(self.marker, begin)
        if self.found == -1:
            self.clean = max(begin, len(text) - len(self.marker) + 1)
        return self.found


def _trim(text: str | None) -> str | None:
    if text is None:
        return None
    return text.strip() or None


def _verbatim(text: str | None) -> str | None:
    return text or None


Phase = Literal["head", "auto", "reasoning", "content", "block"]


@dataclass(frozen=True)
class BlockSpan:
    """Where one block lies in the turn, from its opener to its end, and what it holds."""

    start: int
    end: int
    blocks: tuple[Block, ...]
    """The checked calls (one per call of a section); empty for markup that is neither text nor a call (a
    gpt-oss message header)."""

    @property
    def valid(self) -> bool:
        """Whether the span holds calls and every one is valid."""
        return bool(self.blocks) and all(b.call is not None for b in self.blocks)

    @property
    def leaves_content(self) -> bool:
        """Whether a client's ``content`` leaves this span out: it holds calls, all valid (they go to
        ``tool_calls``), or it is markup (``blocks`` empty). A span with an invalid call stays in ``content``."""
        return self.valid or not self.blocks


class TurnStreamState(Generic[CutT]):
    """The turn reader, fed chunk by chunk: emits content, reasoning and calls as soon as they are final.

    ``feed(chunk)`` returns the pieces that no later text can change; ``finish()`` ends the turn and
    returns the :class:`~toolgrammar.formats.calls.TurnParse` (what :func:`read_turn` returns for the whole
    text). See the module docstring for what waits.
    """

    def __init__(
        self, tools: ToolSet, reader: BlockReader[CutT], *, reasoning_started: bool = False, read_reasoning: bool = True
    ) -> None:
        self.tools = tools
        self.reader = reader
        self.markers = reader.markers
        self._buf = ""
        self._i = 0
        """The first offset not yet classified (in the ``block`` phase: the block's start)."""
        self._phase: Phase = "reasoning" if reasoning_started else "head"
        if not self.markers.think_open or not read_reasoning:  # the whole turn is content
            self._phase = "content"
            reasoning_started = False
        self._strip: bool = getattr(reader, "strip_whitespace", True)
        self._segment = 0
        """Where the current run of content started (a ``line_start`` opener may start a block there)."""
        self._floor = 0
        """Block candidates before this offset were found to be text."""
        self._auto_search = 0
        """No ``</think>``, block opener or ``<think>`` starts before this offset (the ``auto`` phase)."""
        self._next = [_NextMatch("\n" + o.text if o.line_start else o.text) for o in reader.openers]
        """The next occurrence of each opener (a ``line_start`` one: after a newline) in the content."""
        self._ends_reasoning = (
            (self.markers.think_close,)
            + ((self.markers.block_open,) if reader.block_ends_reasoning else ())
            # Optional ``reasoning_enders`` (default none): other openers that end an open reasoning
            # part and start a block there (Kimi K3's response channel).
            + tuple(getattr(reader, "reasoning_enders", ()))
        )
        self._cursor: BlockCursor[CutT] | None = None
        self._reasoning_parts: list[str] | None = [] if reasoning_started else None
        self._content_parts: list[str] = []
        self._blocks: list[Block] = []
        self.spans: list[BlockSpan] = []
        """Where each block of the turn lies, in order, as soon as its end is known (markup included)."""
        self._content = Trimmed()
        self._reasoning = Trimmed()
        self._final = False
        self._result: TurnParse | None = None
        self._steps = {
            "head": self._step_head,
            "auto": self._step_auto,
            "reasoning": self._step_reasoning,
            "content": self._step_content,
            "block": self._step_block,
        }

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return self._buf

    @property
    def open_block(self) -> int | None:
        """Where the block being read starts (its opener: a section's, a gpt-oss message header's); ``None``
        outside a block."""
        return self._i if self._phase == "block" else None

    @property
    def settled(self) -> int:
        """The text before this offset is read for good: every block in it is in :attr:`spans`, the rest is
        content or reasoning (at an open block: its start)."""
        return self._i if self._phase in ("content", "block", "reasoning") else 0

    def feed(self, chunk: str) -> list[StreamPiece]:
        """Add ``chunk``; return the pieces that became final."""
        if self._final:
            raise ValueError(f"the turn has ended; start a new {type(self).__name__} for the next turn")
        out: list[StreamPiece] = []
        if chunk:
            # Appending to an attribute copies the whole buffer (quadratic when streaming character
            # by character); with the only reference held in a local, CPython grows it in place.
            buf, self._buf = self._buf, ""
            buf += chunk
            self._buf = buf
            self._run(out)
        return out

    def finish(self) -> TurnParse:
        """End the turn (resolving every open part) and return its parse."""
        if self._result is None:
            self._final = True
            self._run([])
            reasoning = self._reasoning_parts
            trim = _trim if self._strip else _verbatim
            self._result = TurnParse(
                content=trim("".join(self._content_parts)),
                reasoning_content=trim("".join(reasoning)) if reasoning is not None else None,
                blocks=tuple(self._blocks),
            )
        return self._result

    # -- the machine: each step returns whether the next one may get further

    def _run(self, out: list[StreamPiece]) -> None:
        while self._steps[self._phase](out):
            pass

    def _emit(self, out: list[StreamPiece], kind: Literal["content", "reasoning"], text: str) -> None:
        if not text:
            return
        if kind == "content":
            self._content_parts.append(text)
            piece = self._content.push(text) if self._strip else text
        else:
            if self._reasoning_parts is None:
                self._reasoning_parts = []
            self._reasoning_parts.append(text)
            piece = self._reasoning.push(text) if self._strip else text
        if piece:
            out.append((kind, piece))

    def _to_content(self, at: int) -> bool:
        self._phase, self._i, self._segment = "content", at, at
        return True

    def _step_head(self, out: list[StreamPiece]) -> bool:
        buf, opener = self._buf, self.markers.think_open
        rest = buf.lstrip()
        if not self._final and (not rest or (len(rest) < len(opener) and opener.startswith(rest))):
            return False
        if rest.startswith(opener):
            self._phase, self._i = "reasoning", len(buf) - len(rest) + len(opener)
            self._reasoning_parts = []
        elif getattr(self.reader, "bare_think_close", True):
            self._phase, self._i = "auto", 0
        else:  # the reader never reads a bare closer as the end of reasoning the prompt opened (gpt-oss)
            return self._to_content(0)
        return True

    def _step_auto(self, out: list[StreamPiece]) -> bool:
        buf, m, at = self._buf, self.markers, self._auto_search
        close = buf.find(m.think_close, at)
        others = [p for p in (buf.find(m.block_open, at), buf.find(m.think_open, at)) if p != -1]
        first_other = min(others, default=-1)
        if close != -1 and (first_other == -1 or close < first_other):
            self._emit(out, "reasoning", buf[:close])
            return self._to_content(close + len(m.think_close))
        if first_other != -1 or self._final:
            return self._to_content(0)  # no reasoning: the whole turn is content
        longest = max(len(m.think_close), len(m.block_open), len(m.think_open))
        self._auto_search = max(0, len(buf) - longest + 1)  # none starts before the last few characters
        return False

    def _step_reasoning(self, out: list[StreamPiece]) -> bool:
        buf, i = self._buf, self._i
        if self._reasoning_parts is None:
            self._reasoning_parts = []
        found = [(p, marker) for marker in self._ends_reasoning if (p := buf.find(marker, i)) != -1]
        if found:
            pos, marker = min(found)
            self._emit(out, "reasoning", buf[i:pos])
            return self._to_content(pos + len(marker) if marker == self.markers.think_close else pos)
        if self._final:
            self._emit(out, "reasoning", buf[i:])
            return self._to_content(len(buf))
        safe = len(buf) - max(partial_suffix(buf, marker, i) for marker in self._ends_reasoning)
        if safe > i:
            self._emit(out, "reasoning", buf[i:safe])
            self._i = safe
        return False

    def _line_start(self, pos: int) -> bool:
        """Whether a ``line_start`` opener at ``pos`` may start a block (it starts a line of content)."""
        return pos == self._segment or pos == 0 or self._buf[pos - 1] == "\n"

    def _candidate(self, opener: Opener, search: _NextMatch, at: int) -> int:
        """The first offset at or after ``at`` where ``opener`` may start a block (-1: none yet)."""
        if not opener.line_start:
            return search.find(self._buf, at)
        if self._buf.startswith(opener.text, at) and self._line_start(at):
            return at
        newline = search.find(self._buf, at)  # later ones start a line when a newline precedes them
        return -1 if newline == -1 else newline + 1

    def _step_content(self, out: list[StreamPiece]) -> bool:
        buf, i = self._buf, self._i
        at = max(i, self._floor)
        start, first = -1, None
        for opener, search in zip(self.reader.openers, self._next, strict=True):
            pos = self._candidate(opener, search, at)
            if pos != -1 and (start == -1 or pos < start):
                start, first = pos, opener
        if first is not None:
            self._emit(out, "content", buf[i:start])
            self._phase, self._i = "block", start
            self._cursor = self.reader.open_block(start, first)
            return True
        if self._final:
            self._emit(out, "content", buf[i:])
            self._i = len(buf)
            return False
        hold = 0
        for opener in self.reader.openers:
            part = partial_suffix(buf, opener.text, i)
            if part and (not opener.line_start or self._line_start(len(buf) - part)):
                hold = max(hold, part)
        safe = len(buf) - hold
        if safe > i:
            self._emit(out, "content", buf[i:safe])
            self._i = safe
        return False

    def _step_block(self, out: list[StreamPiece]) -> bool:
        assert self._cursor is not None
        cut = self._cursor.advance(self._buf, self._final)
        if cut is None:
            return False
        self._cursor = None
        if isinstance(cut, NotABlock):
            self._floor = self._i + 1
            self._phase = "content"
            return True
        if getattr(cut, "markup", False):  # markup that is neither text nor a call (a gpt-oss message header)
            self.spans.append(BlockSpan(self._i, cut.end, ()))
            return self._to_content(cut.end)
        checked = self.reader.check(self._buf, cut, self.tools)
        blocks = checked if isinstance(checked, tuple) else (checked,)
        self.spans.append(BlockSpan(self._i, cut.end, blocks))
        for block in blocks:
            self._blocks.append(block)
            if block.call is not None:
                out.append(("tool_call", block.call))
        return self._to_content(cut.end)


__all__ = [
    "NOT_A_BLOCK",
    "BlockCursor",
    "BlockReader",
    "BlockSpan",
    "Cut",
    "NotABlock",
    "Opener",
    "StreamPiece",
    "TurnStreamState",
    "read_turn",
]
