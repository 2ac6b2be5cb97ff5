"""The strict block reader of the DeepSeek formats: one section (the block) -> one checked block per call.

Sections
    A block starts at a section opener of any sub-format (``<｜tool▁calls▁begin｜>``, which V3 and V3.1
    share, or a DSML ``<｜DSML｜function_calls>`` / ``<｜DSML｜tool_calls>`` / ``<｜DSML｜ calls>``) and
    ends at its closer. Inside, only calls and whitespace between them: anything else makes the
    rest of the section one ``malformed-block`` error. The section is read call by call, so a
    marker *inside* an argument (a JSON string, a DSML string value) never ends it.

Calls
    ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`` (V3) or
    ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>`` (V3.1; told apart per call: after
    ``function<｜tool▁sep｜>`` V3 writes a name, V3.1 a JSON object). ARGS is read as a JSON value
    (string and escape aware) and must be followed by the fence (V3) and the call closer; whitespace
    around them is allowed, anything else is ``malformed-block``. DSML: ``<P invoke name="NAME">``,
    parameters ``<P parameter name="KEY" string="true|false">VALUE</P parameter>`` separated by
    whitespace, ``</P invoke>`` (or the self-closing ``<P invoke name="NAME"/>``, no arguments). A
    ``string="true"`` value is the raw text, exactly as written; ``string="false"`` is strict JSON
    (``invalid-json`` otherwise). A parameter given twice is ``malformed-block``.

Checks
    Each call is its own :class:`~toolgrammar.formats.calls.Block`: JSON errors (``raw-newline-in-string`` /
    ``invalid-json``), markup errors (``malformed-block``), then :func:`toolgrammar.formats.checks.check_call`.
    A call the turn's end cut is ``truncated``; the complete calls before it stand (CanIToolCall:
    "when two parallel calls are cut in the second one, the first, complete call is kept"). A
    section cut after a complete call (its closer missing) adds one ``truncated`` block.

Streaming
    :class:`SectionRead` resumes after the last complete call; the section's calls are emitted when
    its closer arrives (or the turn ends).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.base import Markers
from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.deepseek.shape import Variant, variants
from toolgrammar.formats.hermes.parser import JsonValueScanner
from toolgrammar.formats.reader import Opener
from toolgrammar.formats.text import partial_suffix

if TYPE_CHECKING:
    from toolgrammar.schema.tools import ToolSet

MODES: tuple[str, ...] = ("strict",)

_WS = " \t\r\n"


class _More(Exception):
    """The text so far ends inside this piece: more text decides."""


@dataclass(frozen=True)
class Item:
    """One call (or one broken stretch) of a section, as read."""

    start: int
    end: int
    closed: bool
    name: str | None = None
    arguments: Any = None
    error: CallError | None = None


@dataclass
class SectionCut:
    """Where one section lies and the calls read in it."""

    start: int
    end: int
    closed: bool
    items: list[Item] = field(default_factory=list)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str) -> Any:
    """Strict JSON (``NaN`` / ``Infinity`` refused)."""
    return json.loads(text, parse_constant=_reject_constant)


def json_error(error: Exception) -> CallError:
    """``raw-newline-in-string`` when JSON stopped at a literal line break inside a string, else ``invalid-json``."""
    if (
        isinstance(error, json.JSONDecodeError)
        and error.msg.startswith("Invalid control character")
        and 0 <= error.pos < len(error.doc)
        and error.doc[error.pos] in "\n\r"
    ):
        return CallError("raw-newline-in-string", f"error: tool call arguments are not valid JSON: {error}")
    return CallError("invalid-json", f"error: tool call arguments are not valid JSON: {error}")


def _malformed(message: str) -> CallError:
    return CallError("malformed-block", f"error: malformed tool call: {message}")


def _excerpt(text: str, pos: int) -> str:
    return repr(text[pos : pos + 24]) if pos < len(text) else "the end of the turn"


class _Broken(Exception):
    """The markup broke at ``pos``; ``json``: the arguments never formed a JSON value (``invalid-json``)."""

    def __init__(self, pos: int, message: str, *, json: bool = False) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.json = json


def _expect(text: str, pos: int, word: str, final: bool, what: str) -> int:
    """``pos`` past ``word`` at ``pos``; :class:`_More` when the text ends inside it; else :class:`_Broken`."""
    if text.startswith(word, pos):
        return pos + len(word)
    rest = text[pos:]
    if not final and len(rest) < len(word) and word.startswith(rest):
        raise _More
    raise _Broken(pos, f"expected {word!r} {what}, found {_excerpt(text, pos)}")


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _until(text: str, pos: int, stop: str, final: bool, what: str, bad: str = "") -> int:
    """Offset of the first ``stop`` at or after ``pos`` (``bad`` characters may not come before it)."""
    end = text.find(stop, pos)
    if end == -1 and final:
        raise _Broken(len(text), f"the turn ended inside {what}")
    # A stop still being written at the end of the text may start with a ``bad`` character.
    limit = end if end != -1 else len(text) - partial_suffix(text, stop, pos)
    for c in bad:
        hit = text.find(c, pos, limit)
        if hit != -1:
            raise _Broken(hit, f"{what} holds {c!r}")
    if end == -1:
        raise _More
    return end


def _json_value(text: str, pos: int, final: bool) -> int:
    """End of the JSON object that starts at ``pos`` (after whitespace)."""
    start = _skip_ws(text, pos)
    if start == len(text) and not final:
        raise _More
    if not text.startswith("{", start):
        raise _Broken(start, f"the arguments are not a JSON object: {_excerpt(text, start)}")
    done = JsonValueScanner().feed(text, start)
    if done >= 0:
        return done
    if final:  # never completes: the call ends at its closer (if any) and its JSON is invalid
        raise _Broken(start, "the JSON arguments never complete", json=True)
    raise _More


# --------------------------------------------------------------------------- calls


def _read_json_call(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One ``<｜tool▁call▁begin｜>`` call at ``pos`` (V3 or V3.1 spelling)."""
    p = pos + len(v.call_open)
    v3 = variants()["v3"]
    head = v3.call_type + v3.tool_sep
    if text.startswith(head, p):
        after = p + len(head)
        if after == len(text) and not final:
            raise _More
        nxt = text[after : after + 1]
        v3_form = nxt not in ("{", "") and nxt not in _WS
    else:
        rest = text[p:]
        if not final and len(rest) < len(head) and head.startswith(rest):
            raise _More
        v3_form = False
    if v3_form:
        name_start = p + len(head)
        nl = _until(text, name_start, v3.fence_open[0], final, "the tool name", bad="<")
        name = text[name_start:nl]
        q = _expect(text, nl, v3.fence_open, final, "after the tool name")
        body_start = q
        body_end = _json_value(text, q, final)
        q = _skip_ws(text, body_end)
        q = _expect(text, q, v3.fence_close.strip(), final, "after the JSON arguments")
        q = _skip_ws(text, q)
        end = _expect(text, q, v.call_close, final, "to close the call")
    else:
        sep = _until(text, p, v.tool_sep, final, "the tool name", bad="<\n")
        name = text[p:sep]
        body_start = sep + len(v.tool_sep)
        body_end = _json_value(text, body_start, final)
        q = _skip_ws(text, body_end)
        end = _expect(text, q, v.call_close, final, "to close the call")
    try:
        arguments = loads(text[body_start:body_end])
    except (ValueError, RecursionError) as error:
        return Item(pos, end, True, name, error=json_error(error))
    return Item(pos, end, True, name, arguments)


_STRING_ATTR = re.compile(r'" string="(true|false)">')


def _read_invoke(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One DSML ``invoke`` at ``pos``."""
    p = pos + len(v.call_open)
    q = _until(text, p, '"', final, "the tool name", bad="<>\n")
    name = text[p:q]
    if text.startswith('"/>', q):
        return Item(pos, q + 3, True, name, {})
    rest = text[q:]
    if not final and len(rest) < 3 and ('"/>'.startswith(rest) or '">'.startswith(rest)):
        raise _More
    q = _expect(text, q, '">', final, "after the tool name")
    arguments: dict[str, Any] = {}
    error: CallError | None = None
    while True:
        q = _skip_ws(text, q)
        if text.startswith(v.call_close, q):
            return Item(pos, q + len(v.call_close), True, name, arguments if error is None else None, error)
        if text.startswith(v.param_open, q):
            k0 = q + len(v.param_open)
            k1 = _until(text, k0, '"', final, "a parameter name", bad="<>\n")
            key = text[k0:k1]
            m = _STRING_ATTR.match(text, k1)
            if m is None:
                rest = text[k1:]
                if not final and any(w.startswith(rest) for w in ('" string="true">', '" string="false">')):
                    raise _More
                raise _Broken(k1, f'expected \'" string="true">\' or \'" string="false">\' after parameter {key!r}')
            v0 = m.end()
            v1 = _until(text, v0, v.param_close, final, f"the value of parameter {key!r}")
            raw = text[v0:v1]
            q = v1 + len(v.param_close)
            if error is not None:
                continue
            if key in arguments:
                error = _malformed(f"parameter {key!r} is given twice")
            elif m.group(1) == "true":
                arguments[key] = raw
            else:
                try:
                    arguments[key] = loads(raw)
                except (ValueError, RecursionError) as e:
                    error = json_error(e)
            continue
        rest = text[q:]
        if not final and (v.call_close.startswith(rest) or v.param_open.startswith(rest)):
            raise _More
        raise _Broken(q, f"expected a parameter or {v.call_close!r}, found {_excerpt(text, q)}")


def _read_call(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One call at ``pos``; a markup fault ends it at the next call closer (a ``malformed-block`` item)."""
    try:
        return _read_invoke(text, pos, v, final) if v.dsml else _read_json_call(text, pos, v, final)
    except _Broken as broken:
        close = text.find(v.call_close, broken.pos)
        if close != -1:
            if broken.json:
                error = CallError("invalid-json", f"error: tool call arguments are not valid JSON: {broken.message}")
            else:
                error = _malformed(broken.message)
            return Item(pos, close + len(v.call_close), True, error=error)
        if not final:
            raise _More from None
        return Item(pos, len(text), False, error=_truncated(v.call_close, broken.message))


def _truncated(closer: str, detail: str = "") -> CallError:
    more = f" ({detail})" if detail else ""
    return CallError("truncated", f"error: tool call is truncated: the turn ended before {closer}{more}")


# --------------------------------------------------------------------------- the section


class SectionRead:
    """One section read as the text grows (the :class:`~toolgrammar.formats.reader.BlockCursor`)."""

    __slots__ = ("cut", "pos", "variant")

    def __init__(self, start: int, variant: Variant) -> None:
        self.variant = variant
        self.pos = start + len(variant.section_open)
        """Where the next call (or the closer) is looked for: after the last complete item."""
        self.cut = SectionCut(start, start, False)

    def advance(self, text: str, final: bool) -> SectionCut | None:
        v, cut = self.variant, self.cut
        while True:
            pos = _skip_ws(text, self.pos)
            if text.startswith(v.section_close, pos):
                cut.end, cut.closed = pos + len(v.section_close), True
                return cut
            if text.startswith(v.call_open, pos):
                try:
                    item = _read_call(text, pos, v, final)
                except _More:
                    return None
                cut.items.append(item)
                self.pos = item.end
                if not item.closed:
                    cut.end = len(text)
                    return cut
                continue
            rest = text[pos:]
            if not final and (v.section_close.startswith(rest) or v.call_open.startswith(rest)):
                return None  # only whitespace or a marker's first characters so far
            if pos == len(text):  # final: the section was cut after a complete call
                cut.end = len(text)
                if not cut.items or cut.items[-1].closed:
                    cut.items.append(Item(len(text), len(text), False, error=_truncated(v.section_close)))
                return cut
            close = text.find(v.section_close, pos)
            if close == -1 and not final:
                return None
            message = f"expected a call or {v.section_close!r} in the section, found {_excerpt(text, pos)}"
            if close == -1:
                cut.items.append(Item(pos, len(text), False, error=_truncated(v.section_close, message)))
                cut.end = len(text)
                return cut
            cut.items.append(Item(pos, close, True, error=_malformed(message)))
            cut.end, cut.closed = close + len(v.section_close), True
            return cut


def check_section(text: str, cut: SectionCut, tools: ToolSet) -> tuple[Block, ...]:
    """One block per call of the section, each with its verdict."""
    out = []
    for item in cut.items:
        raw = text[item.start : item.end]
        if item.error is not None:
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=item.closed, error=item.error))
            continue
        verdict = check_call({"name": item.name, "arguments": item.arguments}, tools)
        if isinstance(verdict, CallError):
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=True, error=verdict))
        else:
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=True, call=verdict))
    return tuple(out)


class DeepSeekBlocks:
    """The DeepSeek :class:`~toolgrammar.formats.reader.BlockReader`: the sections of every sub-format."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str = "strict", markers: Markers | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown parse mode {mode!r}; the deepseek formats have 'strict' only")
        from toolgrammar.formats.deepseek import DeepSeekFormat

        self.mode = mode
        self.markers = markers or DeepSeekFormat.markers
        self._by_opener: dict[str, Variant] = {}
        for v in variants().values():
            self._by_opener.setdefault(v.section_open, v)  # V3 and V3.1 share one (each call says which)
        self.openers: tuple[Opener, ...] = tuple(Opener(o) for o in self._by_opener)

    def open_block(self, start: int, opener: Opener) -> SectionRead:
        return SectionRead(start, self._by_opener[opener.text])

    def check(self, text: str, cut: SectionCut, tools: ToolSet) -> tuple[Block, ...]:
        return check_section(text, cut, tools)


__all__ = ["MODES", "DeepSeekBlocks", "Item", "SectionCut", "SectionRead", "check_section", "json_error", "loads"]
