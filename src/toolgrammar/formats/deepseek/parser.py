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

import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.deepseek.shape import Variant, variant_markers, variants
from toolgrammar.formats.json_text import loads
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import Opener
from toolgrammar.formats.sections import (
    WHITESPACE,
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

if TYPE_CHECKING:
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)


# --------------------------------------------------------------------------- calls


def _read_json_call(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One ``<｜tool▁call▁begin｜>`` call at ``pos`` (V3 or V3.1 spelling)."""
    p = pos + len(v.call_open)
    v3 = variants()["v3"]
    head = v3.call_type + v3.tool_sep
    if text.startswith(head, p):
        after = p + len(head)
        if after == len(text) and not final:
            raise NeedMore
        nxt = text[after : after + 1]
        v3_form = nxt not in ("{", "") and nxt not in WHITESPACE
    else:
        rest = text[p:]
        if not final and len(rest) < len(head) and head.startswith(rest):
            raise NeedMore
        v3_form = False
    if v3_form:
        name_start = p + len(head)
        nl = until(text, name_start, v3.fence_open[0], final, "the tool name", bad="<")
        name = text[name_start:nl]
        q = expect(text, nl, v3.fence_open, final, "after the tool name")
        body_start = q
        body_end = json_object_end(text, q, final)
        q = skip_ws(text, body_end)
        q = expect(text, q, v3.fence_close.strip(), final, "after the JSON arguments")
        q = skip_ws(text, q)
        end = expect(text, q, v.call_close, final, "to close the call")
    else:
        sep = until(text, p, v.tool_sep, final, "the tool name", bad="<\n")
        name = text[p:sep]
        body_start = sep + len(v.tool_sep)
        body_end = json_object_end(text, body_start, final)
        q = skip_ws(text, body_end)
        end = expect(text, q, v.call_close, final, "to close the call")
    try:
        arguments = loads(text[body_start:body_end])
    except (ValueError, RecursionError) as error:
        return Item(pos, end, True, name, error=json_error(error))
    return Item(pos, end, True, name, arguments)


_STRING_ATTR = re.compile(r'" string="(true|false)">')


def _read_invoke(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One DSML ``invoke`` at ``pos``."""
    p = pos + len(v.call_open)
    q = until(text, p, '"', final, "the tool name", bad="<>\n")
    name = text[p:q]
    if text.startswith('"/>', q):
        return Item(pos, q + 3, True, name, {})
    rest = text[q:]
    if not final and len(rest) < 3 and ('"/>'.startswith(rest) or '">'.startswith(rest)):
        raise NeedMore
    q = expect(text, q, '">', final, "after the tool name")
    arguments: dict[str, Any] = {}
    error: CallError | None = None
    while True:
        q = skip_ws(text, q)
        if text.startswith(v.call_close, q):
            return Item(pos, q + len(v.call_close), True, name, arguments if error is None else None, error)
        if text.startswith(v.param_open, q):
            k0 = q + len(v.param_open)
            k1 = until(text, k0, '"', final, "a parameter name", bad="<>\n")
            key = text[k0:k1]
            m = _STRING_ATTR.match(text, k1)
            if m is None:
                rest = text[k1:]
                if not final and any(w.startswith(rest) for w in ('" string="true">', '" string="false">')):
                    raise NeedMore
                expected = '\'" string="true">\' or \'" string="false">\''
                raise BrokenMarkup(k1, f"expected {expected} after parameter {key!r}")
            v0 = m.end()
            v1 = until(text, v0, v.param_close, final, f"the value of parameter {key!r}")
            raw = text[v0:v1]
            q = v1 + len(v.param_close)
            if error is not None:
                continue
            if key in arguments:
                error = malformed(f"parameter {key!r} is given twice")
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
            raise NeedMore
        raise BrokenMarkup(q, f"expected a parameter or {v.call_close!r}, found {excerpt(text, q)}")


def _read_call(text: str, pos: int, v: Variant, final: bool) -> Item:
    """One call at ``pos``; a markup fault ends it at the next call closer (a ``malformed-block`` item)."""
    try:
        return _read_invoke(text, pos, v, final) if v.dsml else _read_json_call(text, pos, v, final)
    except BrokenMarkup as broken:
        return resync_call(text, pos, broken, v.call_close, final)


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
            pos = skip_ws(text, self.pos)
            if text.startswith(v.section_close, pos):
                cut.end, cut.closed = pos + len(v.section_close), True
                return cut
            if text.startswith(v.call_open, pos):
                try:
                    item = _read_call(text, pos, v, final)
                except NeedMore:
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
                    cut.items.append(Item(len(text), len(text), False, error=truncated(v.section_close)))
                return cut
            close = text.find(v.section_close, pos)
            if close == -1 and not final:
                return None
            message = f"expected a call or {v.section_close!r} in the section, found {excerpt(text, pos)}"
            if close == -1:
                cut.items.append(Item(pos, len(text), False, error=truncated(v.section_close, message)))
                cut.end = len(text)
                return cut
            cut.items.append(Item(pos, close, True, error=malformed(message)))
            cut.end, cut.closed = close + len(v.section_close), True
            return cut


class DeepSeekBlocks:
    """The DeepSeek :class:`~toolgrammar.formats.reader.BlockReader`: the sections of every sub-format."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str = "strict", markers: Markers | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown parse mode {mode!r}; the deepseek formats have 'strict' only")
        self.mode = mode
        self.markers = markers or variant_markers(variants()["v41"])
        self._by_opener: dict[str, Variant] = {}
        for v in variants().values():
            self._by_opener.setdefault(v.section_open, v)  # V3 and V3.1 share one (each call says which)
        self.openers: tuple[Opener, ...] = tuple(Opener(o) for o in self._by_opener)

    def open_block(self, start: int, opener: Opener) -> SectionRead:
        return SectionRead(start, self._by_opener[opener.text])

    def check(self, text: str, cut: SectionCut, tools: ToolSet) -> tuple[Block, ...]:
        return check_section(text, cut, tools)


__all__ = ["MODES", "DeepSeekBlocks", "SectionRead"]
