"""The block reader of the ``glm`` format: where a block starts and ends, and what it holds.

The format (GLM-4.5/4.6 with newlines, GLM-4.7/5.x compact; tags from ``format.toml``)::

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    ...
    </tool_call>

    <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>

Values are raw text, exactly what lies between ``<arg_value>`` and ``</arg_value>`` (no newline is
markup, unlike qwen-xml): the chat templates write a string as it is and anything else as JSON.
:func:`toolgrammar.formats.qwen_xml.parser.convert_value` reads a value by the tool schema (the
same typing rules as qwen-xml: a string-typed value stays text, ``3`` for an integer is ``3``).

Turn
    Read by :mod:`toolgrammar.formats.reader`, the one turn reader; this module supplies only
    :class:`GlmBlocks`. A ``<tool_call>`` ends an opened ``<think>`` (``block_ends_reasoning``), as
    in qwen-xml: GLM-4.7 and 5.x prompts pre-open ``<think>``, and a model that starts a call
    without closing it has ended its reasoning. The grammar agrees (reasoning text avoids
    ``<tool_call>``).

Blocks
    A block starts at ``<tool_call>`` and is read structurally, never by searching for a closing
    marker, so tags inside a value (``</tool_call>``, ``<arg_key>``) stay in the value:

    - after the opener, optional whitespace, then ``NAME``: the text up to the first ``<`` or
      whitespace character (tool names hold neither: :meth:`GlmFormat.check_tools`);
    - then any number of arguments, each ``<arg_key>KEY</arg_key>``, optional whitespace,
      ``<arg_value>VALUE</arg_value>``; ``KEY`` is the text up to the first ``<`` (it must be
      ``</arg_key>``), ``VALUE`` the text up to the first ``</arg_value>``;
    - then ``</tool_call>``.

    Whitespace is allowed between any two of these pieces, so both variants' spellings and the
    mixes servers see (``</arg_key><arg_value>`` in a GLM-4.5 turn) read the same. A value cannot
    contain ``</arg_value>``; the grammar keeps it out of generated values. A block whose markup
    breaks ends at the first ``</tool_call>`` after the break (``malformed-block``); one with no
    ``</tool_call>`` is ``truncated`` (the turn was cut), never a call.

    A value whose ``</arg_value>`` never comes: at the end of the turn, when a ``</tool_call>``
    follows it, the value is the text up to the first such ``</tool_call>`` and the block ends
    there (vLLM #57826: the closing tag of the last value forgotten). Until the turn ends it waits,
    since a later ``</arg_value>`` would make that ``</tool_call>`` part of the value.

Modes
    ``strict`` (default) judges a model's turn: a value without ``</arg_value>`` is a
    ``missing-close-parameter`` error, an argument given twice a ``malformed-block``. ``lenient``
    reads both as servers do (the recovered value; the last of the duplicates) and is what the
    conformance adapter uses (CanIToolCall's ``glm47-missing-last-close-arg-value`` expects the
    recovered call). Both modes find exactly the same blocks; every other check is the same.

Checks, each block on its own, in order
    ``truncated``, ``malformed-block``, (strict) ``missing-close-parameter``, then the values are
    converted and :func:`toolgrammar.formats.checks.check_call` runs (``unknown-tool``,
    ``missing-argument``, ``unknown-argument``, ``wrong-type`` / ``schema-violation``).

Streaming
    Each block is read incrementally (:class:`ScanMemo`): every search resumes where the previous
    one stopped, so a block streamed in any number of chunks costs time linear in its length.
    Streaming and one-shot parses agree by construction (the same reader). A break whose error
    message quotes text up to the end of what has arrived waits for 24 more characters (or the end
    of the turn), so the message never depends on the chunking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from toolgrammar.formats.calls import Block, CallError, ToolCall
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.qwen_xml.parser import convert_value
from toolgrammar.formats.reader import Opener
from toolgrammar.formats.reader import check_mode as check_reader_mode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict", "lenient")

_WS = " \t\r\n"
_NAME_END = re.compile(r"[<\s]")
_EXCERPT = 24


@dataclass(frozen=True)
class Tags:
    """The argument tags (``[tags]`` of ``format.toml``)."""

    key_open: str
    key_close: str
    value_open: str
    value_close: str


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("glm", mode, MODES)


@dataclass(frozen=True)
class Argument:
    """One ``<arg_key>``/``<arg_value>`` pair as written."""

    key: str
    raw: str
    """The value text, exactly as written."""
    closed: bool
    """False when the value's ``</arg_value>`` is missing (the block's ``</tool_call>`` ended it)."""


@dataclass(frozen=True)
class BlockScan:
    """What :class:`BlockRead` read from one block (the reader's :class:`~toolgrammar.formats.reader.Cut`)."""

    start: int
    end: int
    body_start: int
    body_end: int
    closed: bool
    """Whether the block's ``</tool_call>`` was found."""
    name: str | None = None
    arguments: tuple[Argument, ...] = ()
    problem: str | None = None
    """Why the markup is malformed (``None`` when it is well formed)."""
    where: str = ""
    """Where reading stopped (for the ``truncated`` message)."""


class _NeedMore(Exception):
    def __init__(self, where: str) -> None:
        self.where = where


class _Broken(Exception):
    def __init__(self, pos: int, message: str, shown: int = -1) -> None:
        self.pos = pos
        self.message = message
        self.shown = pos if shown < 0 else shown
        """Where the message's excerpt of the text starts."""


def _excerpt(text: str, pos: int) -> str:
    piece = text[pos : pos + _EXCERPT]
    return repr(piece + ("..." if len(text) > pos + _EXCERPT else "")) if piece else "the end of the turn"


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in _WS:
        pos += 1
    return pos


def _partial(text: str, pos: int, *words: str) -> bool:
    """Whether the text from ``pos`` to its end is a proper prefix of one of ``words`` (more text decides)."""
    rest = text[pos : pos + max(len(w) for w in words)]
    return any(len(rest) < len(w) and w.startswith(rest) for w in words)


@dataclass
class ScanMemo:
    """What scans of a growing block's text have settled so far; everything recorded is final."""

    stage: Literal["head", "args", "done"] = "head"
    pos: int = -1
    name: str | None = None
    arguments: list[Argument] = field(default_factory=list)
    searches: dict[int, int] = field(default_factory=dict)
    """Searches (name end, key end, value end) that found nothing yet: where the piece starts -> where
    the search resumes."""
    broken: _Broken | None = None
    close_from: int = -1
    """After a break: no ``</tool_call>`` starts before this offset."""
    end: int = -1
    """``done``: offset past the block; ``body_end`` where its closer starts."""
    body_end: int = -1
    closed: bool = False


class BlockRead:
    """One block read as the text grows (a :class:`~toolgrammar.formats.reader.BlockCursor`)."""

    def __init__(self, start: int, markers: Markers, tags: Tags) -> None:
        self.start = start
        self.markers = markers
        self.tags = tags
        self.body_start = start + len(markers.block_open)
        self.memo = ScanMemo(pos=self.body_start)

    def advance(self, text: str, final: bool) -> BlockScan | None:
        memo = self.memo
        try:
            if memo.broken is None:
                if memo.stage == "head":
                    self._head(text)
                if memo.stage == "args":
                    self._args(text, final)
            else:
                self._after_break(text)
        except _NeedMore as need:
            if not final:
                return None
            end = len(text)
            problem = memo.broken.message if memo.broken is not None else None
            return BlockScan(self.start, end, min(self.body_start, end), end, False, memo.name, (), problem, need.where)
        except _Broken as broken:
            if not final and broken.shown + _EXCERPT >= len(text):  # the message quotes text still to come
                return None
            memo.broken = broken
            memo.close_from = broken.pos
            return self.advance(text, final)
        problem = memo.broken.message if memo.broken is not None else None
        args = tuple(memo.arguments)
        return BlockScan(self.start, memo.end, self.body_start, memo.body_end, memo.closed, memo.name, args, problem)

    # -- stages

    def _search(self, pattern: re.Pattern[str] | str, text: str, at: int) -> int:
        """The first match of ``pattern`` at or after ``at`` (-1: none yet); a repeated search of the
        same piece resumes where the previous one stopped."""
        searches = self.memo.searches
        begin = searches.get(at, at)
        if isinstance(pattern, str):
            found = text.find(pattern, begin)
            reach = len(pattern)
        else:
            m = pattern.search(text, begin)
            found = -1 if m is None else m.start()
            reach = 1
        if found == -1:
            searches[at] = max(at, len(text) - reach + 1)
        return found

    def _head(self, text: str) -> None:
        memo = self.memo
        pos = _skip_ws(text, memo.pos)
        if pos == len(text):
            raise _NeedMore(f"after {self.markers.block_open}")
        end = self._search(_NAME_END, text, pos)
        if end == -1:
            raise _NeedMore("in the tool name")
        if end == pos:
            raise _Broken(pos, f"expected a tool name after {self.markers.block_open}, found {_excerpt(text, pos)}")
        memo.name, memo.pos, memo.stage = text[pos:end], end, "args"

    def _args(self, text: str, final: bool) -> None:
        memo, tags, closer = self.memo, self.tags, self.markers.block_close
        name = memo.name
        while True:
            pos = memo.pos = _skip_ws(text, memo.pos)
            if text.startswith(tags.key_open, pos):
                key_start = pos + len(tags.key_open)
                key_end = self._search("<", text, key_start)
                if key_end == -1:
                    raise _NeedMore(f"in an argument name of {name}")
                if not text.startswith(tags.key_close, key_end):
                    if _partial(text, key_end, tags.key_close):
                        raise _NeedMore(f"in an argument name of {name}")
                    raise _Broken(
                        key_start,
                        f"{tags.key_open} is not closed by {tags.key_close} before {_excerpt(text, key_end)}",
                        key_end,
                    )
                key = text[key_start:key_end]
                if not key:
                    raise _Broken(pos, f"{tags.key_open}{tags.key_close} has an empty argument name")
                at = _skip_ws(text, key_end + len(tags.key_close))
                if not text.startswith(tags.value_open, at):
                    if at == len(text) or _partial(text, at, tags.value_open):
                        raise _NeedMore(f"after the argument name {key!r}")
                    raise _Broken(at, f"expected {tags.value_open} after argument {key!r}, found {_excerpt(text, at)}")
                value_start = at + len(tags.value_open)
                value_end = self._search(tags.value_close, text, value_start)
                if value_end != -1:
                    memo.arguments.append(Argument(key, text[value_start:value_end], True))
                    memo.pos = value_end + len(tags.value_close)
                    continue
                if final:  # the last </arg_value> forgotten: the block's </tool_call> ends the value
                    close = text.find(closer, value_start)
                    if close != -1:
                        memo.arguments.append(Argument(key, text[value_start:close], False))
                        memo.stage, memo.body_end, memo.end, memo.closed = "done", close, close + len(closer), True
                        return
                raise _NeedMore(f"in the value of argument {key!r}")
            if text.startswith(closer, pos):
                memo.stage, memo.body_end, memo.end, memo.closed = "done", pos, pos + len(closer), True
                return
            if pos == len(text) or _partial(text, pos, tags.key_open, closer):
                raise _NeedMore(f"in {name}, before {closer}")
            raise _Broken(pos, f"expected {tags.key_open} or {closer} in {name}, found {_excerpt(text, pos)}")

    def _after_break(self, text: str) -> None:
        """A block whose markup broke ends at the next closing marker."""
        memo, closer = self.memo, self.markers.block_close
        close = text.find(closer, memo.close_from)
        if close == -1:
            memo.close_from = max(memo.close_from, len(text) - len(closer) + 1)
            raise _NeedMore(f"after malformed markup, before {closer}")
        memo.stage, memo.body_end, memo.end, memo.closed = "done", close, close + len(closer), True


def check_scan(scan: BlockScan, tools: ToolSet, mode: str, markers: Markers, tags: Tags) -> ToolCall | CallError:
    """The verdict on one block: a valid call, or the first failing check (module docstring)."""
    if not scan.closed:
        where = f" ({scan.where})" if scan.where else ""
        detail = f"; its markup was already malformed: {scan.problem}" if scan.problem else ""
        return CallError(
            "truncated", f"error: tool call is truncated: the turn ended before {markers.block_close}{where}{detail}"
        )
    if scan.problem is not None:
        return CallError("malformed-block", f"error: malformed tool call: {scan.problem}")
    if mode == "strict":
        seen: set[str] = set()
        for a in scan.arguments:
            if a.key in seen:
                return CallError("malformed-block", f"error: malformed tool call: argument {a.key!r} is given twice")
            seen.add(a.key)
        for a in scan.arguments:
            if not a.closed:
                return CallError(
                    "missing-close-parameter",
                    f"error: the value of argument {a.key!r} is not closed: write {tags.value_close} after it",
                )
    tool = tools.get(scan.name) if scan.name is not None else None
    properties: Mapping[str, Any] = tool.parameters.get("properties", {}) if tool is not None else {}
    arguments = {a.key: convert_value(a.raw, properties.get(a.key)) for a in scan.arguments}
    return check_call({"name": scan.name, "arguments": arguments}, tools)


class GlmBlocks:
    """The glm :class:`~toolgrammar.formats.reader.BlockReader` for one mode, set of markers and tags."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = True

    def __init__(self, mode: str, markers: Markers, tags: Tags) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.tags = tags
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open),)

    def open_block(self, start: int, opener: Opener) -> BlockRead:
        return BlockRead(start, self.markers, self.tags)

    def check(self, text: str, cut: BlockScan, tools: ToolSet) -> Block:
        verdict = check_scan(cut, tools, self.mode, self.markers, self.tags)
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]
        if isinstance(verdict, CallError):
            return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=verdict)
        return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, call=verdict)


__all__ = ["MODES", "Argument", "BlockRead", "BlockScan", "GlmBlocks", "ScanMemo", "Tags", "check_mode", "check_scan"]
