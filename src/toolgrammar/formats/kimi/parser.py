"""The strict block readers of the Kimi formats: one section (the block) -> one checked block per call.

K2 (:class:`KimiBlocks`)
    A block starts at ``<|tool_calls_section_begin|>`` and ends at ``<|tool_calls_section_end|>``. A
    call is ``<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>``: ID is
    ``functions.NAME:IDX`` (whitespace around it allowed; a bare ``NAME:IDX`` is read too, as servers
    do), ARGS one JSON object (read string and escape aware, so ``<|tool_call_end|>`` inside a string
    stays in it), whitespace, the closer. Text between calls is not content: it becomes a
    ``malformed-block`` error and the calls around it stand (CanIToolCall's ``noise-between-markers``).
    An empty section holds no call and no error.

K3 (:class:`KimiK3Blocks`)
    The tools channel ``<|open|>tools<|sep|>`` ... ``<|close|>tools<|sep|>`` holds calls
    ``<|open|>call tool="NAME" index="N"<|sep|>`` + arguments + ``<|close|>call<|sep|>``; an argument is
    ``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>`` (attributes XML-escaped).
    A value ends at the first ``<|close|>argument<|sep|>`` followed by the next argument or the call's
    closer (after whitespace), so the same text inside a value stays in it (the token ids tell the
    control token from the text; the text alone needs the structure). ``type="string"`` values are raw
    text, any other type strict JSON. The other channel markup (``<|open|>response<|sep|>``,
    ``<|close|>response<|sep|>``, ``<|close|>message<|sep|>``) is neither content nor reasoning: each is
    read as an empty block (no call), and ``<|open|>response<|sep|>`` ends an open reasoning channel.

Checks, truncation and streaming as in :mod:`toolgrammar.formats.deepseek.parser` (both read their sections
with :mod:`toolgrammar.formats.sections`): each call is its own block; a cut call is ``truncated`` and the
complete calls before it stand.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.json_text import loads
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import Opener
from toolgrammar.formats.sections import (
    BrokenMarkup,
    Item,
    NeedMore,
    SectionCut,
    check_section,
    excerpt,
    expect,
    json_error,
    json_object_end,
    malformed,
    resync_call,
    skip_ws,
    truncated,
    until,
)
from toolgrammar.formats.spec import format_spec

if TYPE_CHECKING:
    from toolgrammar.schema import ToolSet

PACKAGE = "toolgrammar.formats.kimi"
MODES: tuple[str, ...] = ("strict",)
_ID = re.compile(r"\s*(?:functions\.)?([^\s:<>]+):(\d+)\s*\Z")


@dataclass(frozen=True)
class K2:
    """The K2 call markup (``[k2]`` of ``format.toml``)."""

    call_open: str
    call_close: str
    argument_open: str
    id_prefix: str
    id_sep: str


@dataclass(frozen=True)
class K3:
    """The K3 XTML markup (``[k3]`` of ``format.toml``)."""

    open: str
    close: str
    sep: str
    response_open: str
    response_close: str
    message_close: str
    call_open: str
    call_index: str
    call_close: str
    argument_open: str
    argument_type: str
    argument_close: str


def k2_markup() -> K2:
    return K2(**format_spec(PACKAGE)["k2"])


def k3_markup() -> K3:
    return K3(**{k: v for k, v in format_spec(PACKAGE)["k3"].items() if k != "markers"})


class _Cursor:
    """Reads one section call by call, resuming after the last complete item (the block cursor)."""

    __slots__ = ("close", "cut", "pos")

    def __init__(self, start: int, opener: str, close: str) -> None:
        self.pos = start + len(opener)
        self.close = close
        self.cut = SectionCut(start, start, False)

    def read_call(self, text: str, pos: int, final: bool) -> Item | None:
        """The call at ``pos`` (``None``: no call starts there); raises :class:`NeedMore`."""
        raise NotImplementedError

    def call_starts(self) -> tuple[str, ...]:
        raise NotImplementedError

    def advance(self, text: str, final: bool) -> SectionCut | None:
        cut = self.cut
        while True:
            pos = skip_ws(text, self.pos)
            if text.startswith(self.close, pos):
                cut.end, cut.closed = pos + len(self.close), True
                return cut
            starts = self.call_starts()
            if any(text.startswith(s, pos) for s in starts):
                try:
                    item = self.read_call(text, pos, final)
                except NeedMore:
                    return None
                assert item is not None
                cut.items.append(item)
                self.pos = item.end
                if not item.closed:
                    cut.end = len(text)
                    return cut
                continue
            rest = text[pos:]
            if not final and any(w.startswith(rest) for w in (self.close, *starts)):
                return None
            if pos == len(text):
                cut.end = len(text)
                if not cut.items or cut.items[-1].closed:
                    cut.items.append(Item(len(text), len(text), False, error=truncated(self.close)))
                return cut
            # Text between calls: an error of its own, up to the next call or the section's end.
            found = [p for p in (text.find(w, pos) for w in (self.close, *starts)) if p != -1]
            if not found:
                if not final:
                    return None
                cut.items.append(Item(pos, len(text), False, error=truncated(self.close, "text in the section")))
                cut.end = len(text)
                return cut
            nxt = min(found)
            message = f"text between calls in the section: {excerpt(text, pos)}"
            cut.items.append(Item(pos, nxt, True, error=malformed(message)))
            self.pos = nxt


class K2Section(_Cursor):
    __slots__ = ("m",)

    def __init__(self, start: int, markers: Markers, m: K2) -> None:
        super().__init__(start, markers.block_open, markers.block_close)
        self.m = m

    def call_starts(self) -> tuple[str, ...]:
        return (self.m.call_open,)

    def read_call(self, text: str, pos: int, final: bool) -> Item | None:
        m = self.m
        try:
            p = pos + len(m.call_open)
            a = until(text, p, m.argument_open, final, "the call id", bad="<\n")
            match = _ID.match(text[p:a])
            if match is None:
                raise BrokenMarkup(p, f"the call id {text[p:a]!r} is not {m.id_prefix}NAME{m.id_sep}INDEX")
            body_start = a + len(m.argument_open)
            body_end = json_object_end(text, body_start, final)
            end = expect(text, skip_ws(text, body_end), m.call_close, final, "after the JSON arguments")
        except BrokenMarkup as broken:
            return resync_call(text, pos, broken, m.call_close, final)
        try:
            arguments = loads(text[body_start:body_end])
        except (ValueError, RecursionError) as error:
            return Item(pos, end, True, match.group(1), error=json_error(error))
        return Item(pos, end, True, match.group(1), arguments)


class K3Section(_Cursor):
    __slots__ = ("m",)

    def __init__(self, start: int, markers: Markers, m: K3) -> None:
        super().__init__(start, markers.block_open, markers.block_close)
        self.m = m

    def call_starts(self) -> tuple[str, ...]:
        return (self.m.call_open,)

    def read_call(self, text: str, pos: int, final: bool) -> Item | None:
        m = self.m
        try:
            p = pos + len(m.call_open)
            q = until(text, p, '"', final, "the tool name", bad="<>\n")
            name = html.unescape(text[p:q])
            q = expect(text, q, m.call_index, final, "after the tool name")
            e = until(text, q, '"', final, "the call index", bad="<>\n")
            if not text[q:e].isdigit():
                raise BrokenMarkup(q, f"the call index {text[q:e]!r} is not a number")
            q = expect(text, e + 1, m.sep, final, "after the call's attributes")
            arguments: dict[str, Any] = {}
            error: CallError | None = None
            while True:
                q = skip_ws(text, q)
                if text.startswith(m.call_close, q):
                    end = q + len(m.call_close)
                    return Item(pos, end, True, name, arguments if error is None else None, error)
                if not text.startswith(m.argument_open, q):
                    rest = text[q:]
                    if not final and (m.call_close.startswith(rest) or m.argument_open.startswith(rest)):
                        raise NeedMore
                    raise BrokenMarkup(q, f"expected an argument or {m.call_close!r}, found {excerpt(text, q)}")
                k0 = q + len(m.argument_open)
                k1 = until(text, k0, '"', final, "an argument key", bad="<>\n")
                key = html.unescape(text[k0:k1])
                t0 = expect(text, k1, m.argument_type, final, f"after argument key {key!r}")
                t1 = until(text, t0, '"', final, "an argument type", bad="<>\n")
                kind = text[t0:t1]
                v0 = expect(text, t1 + 1, m.sep, final, f"after argument {key!r}'s attributes")
                v1 = self._value_end(text, v0, final, key)
                raw = text[v0:v1]
                q = v1 + len(m.argument_close)
                if error is not None:
                    continue
                if key in arguments:
                    error = malformed(f"argument {key!r} is given twice")
                elif kind == "string":
                    arguments[key] = raw
                else:
                    try:
                        arguments[key] = loads(raw)
                    except (ValueError, RecursionError) as err:
                        error = json_error(err)
        except BrokenMarkup as broken:
            return resync_call(text, pos, broken, m.call_close, final)

    def _value_end(self, text: str, start: int, final: bool, key: str) -> int:
        """The ``<|close|>argument<|sep|>`` that ends the value: the first one followed (after whitespace)
        by the next argument or the call's closer."""
        m = self.m
        at = start
        while True:
            close = until(text, at, m.argument_close, final, f"the value of argument {key!r}")
            after = skip_ws(text, close + len(m.argument_close))
            rest = text[after:]
            if rest.startswith(m.argument_open) or rest.startswith(m.call_close):
                return close
            if not final and any(w.startswith(rest) for w in (m.argument_open, m.call_close)):
                raise NeedMore
            at = close + 1


@dataclass(frozen=True)
class _Markup:
    """A piece of channel markup read as an empty block (no call)."""

    end: int


class _MarkupRead:
    __slots__ = ("end",)

    def __init__(self, start: int, opener: Opener) -> None:
        self.end = start + len(opener.text)

    def advance(self, text: str, final: bool) -> _Markup:
        return _Markup(self.end)


class KimiBlocks:
    """The K2 :class:`~toolgrammar.formats.reader.BlockReader`."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False
    strip_whitespace: ClassVar[bool] = False
    """CanIToolCall's Kimi fixtures keep content verbatim (``"I'll check. "`` before a section)."""

    def __init__(self, mode: str, markers: Markers) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown parse mode {mode!r}; the kimi formats have 'strict' only")
        self.mode = mode
        self.markers = markers
        self.m = k2_markup()
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open),)

    def open_block(self, start: int, opener: Opener) -> K2Section:
        return K2Section(start, self.markers, self.m)

    def check(self, text: str, cut: SectionCut, tools: ToolSet) -> tuple[Block, ...]:
        return check_section(text, cut, tools)


class KimiK3Blocks:
    """The K3 :class:`~toolgrammar.formats.reader.BlockReader`: the tools channel, and channel markup."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False
    strip_whitespace: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown parse mode {mode!r}; the kimi formats have 'strict' only")
        self.mode = mode
        self.markers = markers
        self.m = k3_markup()
        self.reasoning_enders: tuple[str, ...] = (self.m.response_open,)
        """A response channel ends an open reasoning channel (a completion may skip ``<|close|>think<|sep|>``)."""
        self._markup = (self.m.response_open, self.m.response_close, self.m.message_close)
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open), *(Opener(w) for w in self._markup))

    def open_block(self, start: int, opener: Opener) -> K3Section | _MarkupRead:
        if opener.text in self._markup:
            return _MarkupRead(start, opener)
        return K3Section(start, self.markers, self.m)

    def check(self, text: str, cut: SectionCut | _Markup, tools: ToolSet) -> tuple[Block, ...]:
        if isinstance(cut, _Markup):
            return ()
        return check_section(text, cut, tools)


__all__ = ["MODES", "K2Section", "K3Section", "KimiBlocks", "KimiK3Blocks", "k2_markup", "k3_markup"]
