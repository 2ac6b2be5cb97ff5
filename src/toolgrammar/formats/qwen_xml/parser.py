"""The block reader of the ``qwen-xml`` format: where a block starts and ends, and what it holds.

The format (Qwen3-Coder, Qwen3.5 and later)::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    ...
    </function>
    </tool_call>

Values are raw text, not JSON: the chat template writes ``<parameter=KEY>\\n`` + value +
``\\n</parameter>\\n``, a string as it is and anything else as JSON. Exactly one ``\\n`` on each
side of a value is markup (a value that ends in a newline is written ``...\\n\\n</parameter>``).

Turn
    The turn itself (reasoning, content, whitespace trimming, what waits in a stream) is read by
    :mod:`toolgrammar.formats.reader`, the one turn reader every format shares; this module supplies
    only :class:`QwenXmlBlocks`. Unlike hermes, a ``<tool_call>`` ends an opened ``<think>``
    (``block_ends_reasoning``): the reasoning runs to the first ``</think>`` **or the first**
    ``<tool_call>``, whichever comes first, since Qwen3.5 models often start a call without
    closing the prefilled ``<think>``, and llama.cpp, vLLM and CanIToolCall's ``call-inside-think``
    fixture all read that ``<tool_call>`` as the end of the reasoning.

Blocks
    A block starts at ``<tool_call>``, or at a *bare* ``<function=`` that starts a line of content
    (the opener forgotten, as Qwen3-Coder sometimes does: Ollama #18530, llama.cpp's
    ``bare-function`` tests). Blocks are read structurally, never by searching for a closing
    marker, so markers inside a value (``</tool_call>``, ``<function=x>``, an inline
    ``</parameter>``) stay in the value. Inside ``<function=NAME>``, whitespace separates the tags;
    each ``<parameter=KEY>`` value ends at the first :data:`value delimiter <VALUE_END>`:

    - ``\\n</parameter>``: the canonical close;
    - ``</parameter>`` directly followed by ``<parameter=`` or ``</function>`` (or by ``\\n`` and
      one of them): the close written without newlines (``<parameter=city>Paris</parameter>``);
    - ``\\n<parameter=`` or ``\\n</function>``: a value whose ``</parameter>`` is *missing*
      (vLLM #57699; the next tag at a line start ends it).

    So a value cannot contain those strings; everything else is allowed, and the grammar
    (:mod:`.grammar`) forbids exactly :data:`VALUE_FORBIDDEN` in generated values, which keeps the
    grammar and this parser in agreement. A ``<tool_call>`` block ends at the ``</tool_call>`` that
    follows its ``</function>``; a bare block ends at its ``</function>`` (plus a stray
    ``</tool_call>`` right after it, which the model wrote for the opener it forgot). A block whose
    markup breaks ends at the first ``</tool_call>`` after the break; a ``<tool_call>`` block with
    no ``</tool_call>`` is ``truncated`` (the turn was cut), never a call. A bare ``<function=`` whose
    markup breaks was not a block: it stays in the content as text.

Modes
    ``strict`` (default) judges a model's turn: a bare function is a ``bare-function`` error and a
    missing ``</parameter>`` a ``missing-close-parameter`` error, even though the call can be read.
    ``lenient`` reads those calls as llama.cpp and vLLM do (and as CanIToolCall's ``malformed``
    fixtures expect), and is what the conformance adapter uses; it also keeps the last value of a
    parameter given twice, where strict mode reports ``malformed-block``. Every other check is the
    same, and both modes find exactly the same blocks, so the error counts of a strict parse say
    how many calls a lenient server would have recovered. A ``<tool_call>`` that ends an unclosed
    ``<think>`` is read the same way in both modes: the reasoning is cut, the call is checked
    like any other (the grammar forbids it: reasoning text avoids ``<tool_call>``). The hermes
    ``seed`` mode has no counterpart here: the seed harness never saw this format.

Checks (both modes), each block on its own, in order
    ``truncated`` (unclosed), ``malformed-block`` (markup that is not ``<function=NAME>``, then
    parameters, then ``</function>``, then ``</tool_call>``; in strict mode also a parameter
    given twice), then in strict mode ``bare-function`` and ``missing-close-parameter``, then the values are converted
    and :func:`toolgrammar.formats.checks.check_call` runs (``unknown-tool``, ``missing-argument``,
    ``unknown-argument``, ``wrong-type`` / ``schema-violation``).

Values (:func:`convert_value`), by the parameter's schema
    A string-typed value stays text exactly (``02139``, ``true``, ``{"a": 1}``, ``7`` stay strings).
    ``null`` is ``None`` when the schema allows null (also for ``["string", "null"]``; Python's
    ``None`` too when it does not allow a string). Booleans accept JSON ``true``/``false`` and the
    Python literals ``True``/``False`` that the Qwen3-Coder-30B and Qwen3.5 templates write.
    Integers and numbers are JSON numbers parsed by :mod:`json`, so they stay exact: ``1e20`` is the
    float ``1e+20`` and an integer beyond int64 is a Python ``int``, never a wrapped one; ``NaN`` and
    ``Infinity`` are not numbers. Objects and arrays are JSON. A value that does not convert stays
    text and the schema check reports it (``schema-violation``). When the schema allows several
    readings (``["string", "null"]``, ``anyOf``), the first of null, text, boolean, number,
    object/array that the schema accepts wins. A number that overflows to infinity (``1e400``) is
    not read as a number. A parameter whose schema says nothing about its type is text unless it
    is a JSON object or array.

Streaming
    A block is read incrementally (:class:`ScanMemo`), so the shared
    :class:`~toolgrammar.formats.reader.TurnStreamState` emits each call once its block is complete
    and checked; :func:`parse_turn` feeds the same reader the whole turn, so streaming and one-shot
    parses agree by construction. :class:`QwenXmlStreamState` is that reader with
    :class:`QwenXmlBlocks`. A ``<tool_call>`` block whose markup breaks less than 24 characters
    before the end of the text so far waits for those characters (or the end of the turn): its
    error message quotes them, and must not depend on how the turn was chunked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from toolgrammar.formats.calls import Block, CallError, ToolCall, TurnParse
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import loads
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import NOT_A_BLOCK, NotABlock, Opener, StreamPiece, TurnStreamState, read_turn
from toolgrammar.formats.reader import check_mode as check_reader_mode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from toolgrammar.schema import ToolSet

QwenXmlMode = Literal["strict", "lenient"]
"""How malformed-but-readable markup is judged (see the module docstring)."""

MODES: tuple[str, ...] = ("strict", "lenient")

DEFAULT_MARKERS = Markers()

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"

VALUE_END = re.compile(
    r"\n</parameter>"
    r"|</parameter>(?=\n?(?:<parameter=|</function>))"
    r"|\n(?=<parameter=|</function>)"
)
"""Where a parameter value ends: the earliest match after ``<parameter=KEY>`` (module docstring).
The third branch (a bare newline) means the value's ``</parameter>`` is missing."""

VALUE_FORBIDDEN: tuple[str, ...] = (
    "\n</parameter>",
    "\n<parameter=",
    "\n</function>",
    "</parameter><parameter=",
    "</parameter></function>",
)
"""What ``"\\n" + value`` may not contain for :data:`VALUE_END` to end the value exactly after it.

Every match of :data:`VALUE_END` contains one of these (its ``</parameter>\\n<parameter=`` and
``</parameter>\\n</function>`` forms contain ``\\n<parameter=`` / ``\\n</function>``), and none
of them can straddle the end of a value followed by ``\\n</parameter>``. The grammar generates
values that avoid them; every value CanIToolCall's canonical fixtures hold does."""

_NAME_END = re.compile(r"[>\n<]")
_WS = " \t\r\n"
_BOOLEANS = {"true": True, "false": False, "True": True, "False": False}


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("qwen-xml", mode, MODES)


# --------------------------------------------------------------------------- one-shot parse


def parse_turn(
    text: str,
    tools: ToolSet,
    *,
    mode: str = "strict",
    markers: Markers = DEFAULT_MARKERS,
    reasoning_started: bool = False,
) -> TurnParse:
    """Split one assistant turn into reasoning, content and checked blocks (see the module docstring).

    Bad model output never raises: it becomes blocks with errors. ``mode`` is ``"strict"`` or
    ``"lenient"``; ``reasoning_started=True`` when the generation prompt already opened ``<think>``.
    """
    return read_turn(text, tools, QwenXmlBlocks(mode, markers), reasoning_started=reasoning_started)


# --------------------------------------------------------------------------- one block


@dataclass(frozen=True)
class Parameter:
    """One ``<parameter=KEY>`` as written."""

    key: str
    raw: str
    """The value text, the markup newlines removed."""
    closed: bool
    """False when the value's ``</parameter>`` is missing (the next tag ended it)."""


@dataclass(frozen=True)
class BlockScan:
    """What :func:`scan_block` read from one block.

    ``status``: ``done`` (the block's extent is known: ``end``), ``more`` (the text so far ends
    inside the block; at the end of the turn it is ``truncated``, or ``fallback`` when a bare block
    is already complete), or ``text`` (a bare ``<function=`` that is not a block).
    """

    status: Literal["done", "more", "text"]
    start: int
    bare: bool
    end: int = -1
    body_start: int = -1
    body_end: int = -1
    closed: bool = False
    """Whether the block's closing marker was found (``</tool_call>``; ``</function>`` when bare)."""
    name: str | None = None
    parameters: tuple[Parameter, ...] = ()
    problem: str | None = None
    """Why the markup is malformed (``None`` when it is well formed)."""
    where: str = ""
    """Where reading stopped (for the ``truncated`` message)."""
    fallback: BlockScan | None = None
    open_value: int = -1
    """``more`` inside a parameter value: where that value starts (a later scan may resume there)."""


class _NeedMore(Exception):
    def __init__(self, where: str, open_value: int = -1) -> None:
        self.where = where
        self.open_value = open_value


class _Broken(Exception):
    def __init__(self, pos: int, message: str, shown: int = -1) -> None:
        self.pos = pos
        self.message = message
        self.shown = pos if shown < 0 else shown
        """Where the message's excerpt of the text starts (it quotes up to 24 characters from there)."""


def _excerpt(text: str, pos: int) -> str:
    piece = text[pos : pos + 24]
    return repr(piece + ("..." if len(text) > pos + 24 else "")) if piece else "the end of the turn"


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in _WS:
        pos += 1
    return pos


def _tag_value(text: str, pos: int, tag: str, where: str, memo: ScanMemo) -> tuple[str, int]:
    """The ``NAME`` of ``<tag=NAME>`` whose ``NAME`` starts at ``pos``, and the offset past ``>``."""
    m = _NAME_END.search(text, memo.tag_from if memo.tag_at == pos else pos)
    if m is None:  # a later scan of a longer text searches only what is new
        memo.tag_at, memo.tag_from = pos, len(text)
        raise _NeedMore(where)
    if m.group() != ">":
        raise _Broken(pos, f"<{tag}=...> is not closed by '>' before {_excerpt(text, m.start())}", m.start())
    name = text[pos : m.start()]
    if not name:
        raise _Broken(pos, f"<{tag}=> has an empty name")
    return name, m.end()


VALUE_END_REACH = 24
"""Longest stretch of text one :data:`VALUE_END` match looks at (``</parameter>`` + ``\n</function>``)."""


@dataclass
class ScanMemo:
    """What scans of a growing block's text have settled so far, so the next scan reads only what is new.

    Everything recorded is final: a longer text that extends the scanned one reads the same markup up
    to there (:func:`scan_block`). The stream keeps one per open block; a scan without one starts fresh.
    """

    stage: Literal["head", "params", "tail"] = "head"
    pos: int = -1
    """Where the current stage resumes (-1: at its beginning); whitespace before it is already skipped."""
    name: str | None = None
    params: list[Parameter] = field(default_factory=list)
    frozen: tuple[Parameter, ...] = ()
    """``params`` as a tuple, once the stage is ``tail``."""
    function_end: int = -1
    tag_at: int = -1
    """A ``<tag=NAME`` whose ``>`` was not found yet: where NAME starts ..."""
    tag_from: int = -1
    """... and where its search resumes."""
    value_at: int = -1
    """A parameter value whose end was not found yet: where it starts ..."""
    value_from: int = -1
    """... and where the search for its end resumes (:data:`VALUE_END_REACH` before the old text end)."""
    broken: _Broken | None = None
    """The markup broke here (a ``<tool_call>`` block): it ends at the next closing marker."""
    close_from: int = -1
    """No closing marker starts before this offset (after a break)."""


def scan_block(
    text: str,
    start: int,
    *,
    bare: bool,
    markers: Markers = DEFAULT_MARKERS,
    memo: ScanMemo | None = None,
    final: bool = False,
) -> BlockScan:
    """Read the block that starts at ``start`` (at ``<tool_call>``, or at ``<function=`` when ``bare``).

    Pure function of ``text``: if ``text`` ends inside the block the status is ``more``, and a
    longer text that extends it gives a result at least as far along (the stream relies on this).
    ``memo``: the :class:`ScanMemo` of earlier scans of prefixes of ``text`` (the stream passes the
    same one as its text grows): each scan then reads only the text the previous ones did not settle,
    so a block streamed in any number of chunks costs time linear in its length. A ``more`` result
    scanned with a memo carries no parameters (the memo has them). ``final``: ``text`` is the whole
    turn, so a break whose error message quotes the text up to its end is settled (without it, such a
    break waits for more text: the message must not depend on how the text was chunked).
    """
    own = memo is None
    memo = ScanMemo() if memo is None else memo
    opener, closer = markers.block_open, markers.block_close
    body_start = start if bare else start + len(opener)
    if memo.broken is not None:
        return _after_break(text, start, body_start, closer, memo)
    try:
        if memo.stage == "head":
            _scan_head(text, start, bare, opener, memo)
        if memo.stage == "params":
            _scan_params(text, memo)
        return _scan_tail(text, start, bare, body_start, closer, memo, own)
    except _NeedMore as need:
        params = tuple(memo.params) if own else ()
        return BlockScan(
            "more", start, bare, name=memo.name, parameters=params, where=need.where, open_value=need.open_value
        )
    except _Broken as broken:
        if bare:
            return BlockScan("text", start, True)
        if len(text) > broken.shown + 24:  # the message's excerpt is complete: the break is final
            memo.broken, memo.close_from = broken, broken.pos
            return _after_break(text, start, body_start, closer, memo)
        if not final:  # found again by the next scan (a few characters on), with a longer excerpt
            return BlockScan("more", start, False, name=memo.name, problem=broken.message)
        return _after_break(
            text, start, body_start, closer, ScanMemo(name=memo.name, params=memo.params, broken=broken)
        )


def _scan_head(text: str, start: int, bare: bool, opener: str, memo: ScanMemo) -> None:
    """``<function=NAME>`` (after ``<tool_call>`` and whitespace unless bare)."""
    if bare:
        pos = start + len(FUNCTION_OPEN)
    else:
        pos = memo.pos = _skip_ws(text, memo.pos if memo.pos >= 0 else start + len(opener))
        if not text.startswith(FUNCTION_OPEN, pos):
            rest = text[pos : pos + len(FUNCTION_OPEN)]
            if len(rest) < len(FUNCTION_OPEN) and FUNCTION_OPEN.startswith(rest):
                raise _NeedMore(f"after {opener}")
            raise _Broken(pos, f"expected <function=NAME> after {opener}, found {_excerpt(text, pos)}")
        pos += len(FUNCTION_OPEN)
    memo.name, memo.pos = _tag_value(text, pos, "function", "in <function=...>", memo)
    memo.stage = "params"


def _scan_params(text: str, memo: ScanMemo) -> None:
    """The ``<parameter=KEY>`` values up to ``</function>``; each one is recorded once it is complete."""
    name = memo.name
    while True:
        pos = memo.pos = _skip_ws(text, memo.pos)
        if text.startswith(PARAMETER_OPEN, pos):
            key, value_start = _tag_value(text, pos + len(PARAMETER_OPEN), "parameter", f"in <function={name}>", memo)
            m = VALUE_END.search(text, memo.value_from if memo.value_at == value_start else value_start)
            if m is None:
                memo.value_at = value_start
                memo.value_from = max(value_start, len(text) - VALUE_END_REACH)
                raise _NeedMore(f"in the value of parameter {key!r}", value_start)
            raw = text[value_start : m.start()]
            memo.params.append(Parameter(key, raw[1:] if raw.startswith("\n") else raw, m.group() != "\n"))
            memo.pos = m.end()
            continue
        if text.startswith(FUNCTION_CLOSE, pos):
            memo.stage, memo.function_end = "tail", pos + len(FUNCTION_CLOSE)
            memo.pos = memo.function_end
            return
        rest = text[pos : pos + len(PARAMETER_OPEN)]  # a short slice: the rest of a long text is never copied
        if len(rest) < len(PARAMETER_OPEN) and (PARAMETER_OPEN.startswith(rest) or FUNCTION_CLOSE.startswith(rest)):
            raise _NeedMore(f"in <function={name}>, before {FUNCTION_CLOSE}")
        raise _Broken(
            pos, f"expected <parameter=NAME> or {FUNCTION_CLOSE} in <function={name}>, found {_excerpt(text, pos)}"
        )


def _scan_tail(text: str, start: int, bare: bool, body_start: int, closer: str, memo: ScanMemo, own: bool) -> BlockScan:
    """After ``</function>``: the block's closing marker (optional for a bare block)."""
    function_end, name = memo.function_end, memo.name
    after = memo.pos = _skip_ws(text, memo.pos)
    rest = text[after : after + len(closer)]
    if len(memo.frozen) != len(memo.params):  # the parameters are final here: one copy per block
        memo.frozen = tuple(memo.params)
    params = memo.frozen
    if bare:
        done = BlockScan("done", start, True, function_end, body_start, function_end, True, name, params)
        if text.startswith(closer, after):
            return BlockScan("done", start, True, after + len(closer), body_start, function_end, True, name, params)
        if len(rest) < len(closer) and closer.startswith(rest):
            return BlockScan("more", start, True, name=name, parameters=params if own else (), fallback=done)
        return done
    if text.startswith(closer, after):
        return BlockScan("done", start, False, after + len(closer), body_start, after, True, name, params)
    if len(rest) < len(closer) and closer.startswith(rest):
        raise _NeedMore(f"after {FUNCTION_CLOSE}")
    raise _Broken(after, f"expected {closer} after {FUNCTION_CLOSE}, found {_excerpt(text, after)}")


def _after_break(text: str, start: int, body_start: int, closer: str, memo: ScanMemo) -> BlockScan:
    """A ``<tool_call>`` block whose markup broke ends at the next closing marker."""
    broken = memo.broken
    assert broken is not None
    close = text.find(closer, max(broken.pos, memo.close_from))
    if close == -1:
        memo.close_from = max(broken.pos, len(text) - len(closer) + 1)
        return BlockScan("more", start, False, name=memo.name, problem=broken.message)
    params = tuple(memo.params)
    return BlockScan(
        "done", start, False, close + len(closer), body_start, close, True, memo.name, params, broken.message
    )


def truncated_scan(scan: BlockScan, text_end: int, markers: Markers = DEFAULT_MARKERS) -> BlockScan:
    """The end-of-turn reading of a block whose scan needed more text."""
    if scan.fallback is not None:
        return scan.fallback
    return BlockScan(
        "done",
        scan.start,
        scan.bare,
        text_end,
        scan.start if scan.bare else min(scan.start + len(markers.block_open), text_end),
        text_end,
        False,
        scan.name,
        scan.parameters,
        scan.problem,
        scan.where,
    )


def check_scan(scan: BlockScan, tools: ToolSet, mode: str, markers: Markers = DEFAULT_MARKERS) -> ToolCall | CallError:
    """The verdict on one complete block scan: a valid call, or the first failing check."""
    if not scan.closed:
        closer = FUNCTION_CLOSE if scan.bare else markers.block_close
        where = f" ({scan.where})" if scan.where else ""
        detail = f"; its markup was already malformed: {scan.problem}" if scan.problem else ""
        return CallError("truncated", f"error: tool call is truncated: the turn ended before {closer}{where}{detail}")
    if scan.problem is not None:
        return CallError("malformed-block", f"error: malformed tool call: {scan.problem}")
    seen: set[str] = set()
    for p in scan.parameters:
        if p.key in seen and mode == "strict":
            return CallError("malformed-block", f"error: malformed tool call: parameter {p.key!r} is given twice")
        seen.add(p.key)
    if mode == "strict":
        if scan.bare:
            return CallError(
                "bare-function",
                f"error: <function={scan.name}> is not inside a tool-call block: write {markers.block_open} before it",
            )
        for p in scan.parameters:
            if not p.closed:
                return CallError(
                    "missing-close-parameter",
                    f"error: parameter {p.key!r} is not closed: write {PARAMETER_CLOSE} after its value",
                )
    tool = tools.get(scan.name) if scan.name is not None else None
    properties: Mapping[str, Any] = tool.parameters.get("properties", {}) if tool is not None else {}
    arguments = {p.key: convert_value(p.raw, properties.get(p.key)) for p in scan.parameters}
    return check_call({"name": scan.name, "arguments": arguments}, tools)


def block_of(text: str, scan: BlockScan, verdict: ToolCall | CallError) -> Block:
    raw, body = text[scan.start : scan.end], text[scan.body_start : scan.body_end]
    if isinstance(verdict, CallError):
        return Block(raw=raw, body=body, start=scan.start, end=scan.end, closed=scan.closed, error=verdict)
    return Block(raw=raw, body=body, start=scan.start, end=scan.end, closed=scan.closed, call=verdict)


# --------------------------------------------------------------------------- values


def schema_types(schema: Any) -> frozenset[str] | None:
    """The JSON types a (normalized) schema allows, or ``None`` when it does not constrain the type."""
    if not isinstance(schema, dict):
        return None
    out: set[str] = set()
    constrained = False
    declared = schema.get("type")
    if isinstance(declared, str):
        out.add(declared)
        constrained = True
    elif isinstance(declared, list):
        out.update(t for t in declared if isinstance(t, str))
        constrained = True
    literals = list(schema.get("enum", ()) or ()) + ([schema["const"]] if "const" in schema else [])
    if literals and not constrained:
        out.update(_json_type(v) for v in literals)
        constrained = True
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        for branch in branches:
            types = schema_types(branch)
            if types is None:
                return None
            out |= types
        constrained = True
    return frozenset(out) if constrained else None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def value_candidates(raw: str, schema: Any) -> list[Any]:
    """The readings of a parameter's text that its schema's types allow, most natural first.

    ``null`` (when the text is ``null``, or ``None`` and no string is allowed), the text itself
    (when a string is allowed), a boolean (JSON or Python spelling), a finite JSON number, a JSON
    object or array. A schema that does not constrain the type reads a JSON object or array as
    one, anything else as text.
    """
    types = schema_types(schema)
    text = raw.strip()
    if types is None:
        value = _json_container(text)
        return [raw] if value is None else [value, raw]
    out: list[Any] = []
    if "null" in types and (text == "null" or (text == "None" and "string" not in types)):
        out.append(None)
    if "string" in types:
        out.append(raw)
    if "boolean" in types and text in _BOOLEANS:
        out.append(_BOOLEANS[text])
    if types & {"integer", "number"}:
        number = _json_number(text)
        if number is not None:
            out.append(number)
    if types & {"object", "array"}:
        value = _json_container(text)
        if (isinstance(value, dict) and "object" in types) or (isinstance(value, list) and "array" in types):
            out.append(value)
    return out


def _json_number(text: str) -> int | float | None:
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # "1e400" overflows to inf, which no JSON text can carry back out
    return value


def _json_container(text: str) -> dict[str, Any] | list[Any] | None:
    if text[:1] not in ("{", "["):
        return None
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict | list) and _finite(value) else None


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def convert_value(raw: str, schema: Any) -> Any:
    """A parameter's raw text as the value its schema asks for (see the module docstring).

    The first of :func:`value_candidates` that is valid against ``schema`` (``jsonschema``, only
    consulted when there are two readings or more: ``["string", "null"]``, ``anyOf``...). Never
    raises: text that does not convert is returned as it is, for the schema check to report.
    """
    candidates = value_candidates(raw, schema)
    if not candidates:
        return raw
    if len(candidates) == 1 or not isinstance(schema, dict):
        return candidates[0]
    validator = _validator(schema)
    return next((c for c in candidates if validator.is_valid(c)), candidates[0])


_VALIDATORS: dict[int, tuple[Any, Any]] = {}


def _validator(schema: dict[str, Any]) -> Any:
    entry = _VALIDATORS.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    from jsonschema import Draft202012Validator  # lazy: only ambiguous readings need it

    from toolgrammar.schema import FORMAT_CHECKER  # lazy too: built with jsonschema

    # The judge checks formats (toolgrammar.formats.checks): a reading is chosen by the same rules.
    validator = Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    if len(_VALIDATORS) > 4096:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


# --------------------------------------------------------------------------- the block reader


class QwenXmlBlocks:
    """The qwen-xml :class:`~toolgrammar.formats.reader.BlockReader` for one mode and set of markers.

    A block starts at ``<tool_call>`` or at a bare ``<function=`` that starts a line of content (in
    both modes: they find the same blocks); :func:`scan_block` finds where it ends and
    :func:`check_scan` judges it.
    """

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = True

    def __init__(self, mode: str = "strict", markers: Markers = DEFAULT_MARKERS) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self._bare = Opener(FUNCTION_OPEN, line_start=True)
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open), self._bare)

    def open_block(self, start: int, opener: Opener) -> BlockRead:
        return BlockRead(start, bare=opener == self._bare, markers=self.markers)

    def check(self, text: str, cut: BlockScan, tools: ToolSet) -> Block:
        return block_of(text, cut, check_scan(cut, tools, self.mode, self.markers))


class BlockRead:
    """One block read as the text grows: :func:`scan_block` with the block's :class:`ScanMemo`."""

    __slots__ = ("bare", "markers", "memo", "start")

    def __init__(self, start: int, *, bare: bool, markers: Markers = DEFAULT_MARKERS) -> None:
        self.start, self.bare, self.markers = start, bare, markers
        self.memo = ScanMemo()

    def advance(self, text: str, final: bool) -> BlockScan | NotABlock | None:
        scan = scan_block(text, self.start, bare=self.bare, markers=self.markers, memo=self.memo, final=final)
        if scan.status == "more":
            if not final:
                return None
            scan = truncated_scan(scan, len(text), self.markers)
        return NOT_A_BLOCK if scan.status == "text" else scan


class QwenXmlStreamState(TurnStreamState[BlockScan]):
    """The shared turn reader with :class:`QwenXmlBlocks` (the incremental qwen-xml parse).

    ``feed(chunk)`` returns the pieces that no later text can change; ``finish()`` ends the turn and
    returns the :class:`~toolgrammar.formats.calls.TurnParse` (what :func:`parse_turn` returns for the whole
    text).
    """

    def __init__(
        self,
        tools: ToolSet,
        *,
        mode: str = "strict",
        markers: Markers = DEFAULT_MARKERS,
        reasoning_started: bool = False,
    ) -> None:
        super().__init__(tools, QwenXmlBlocks(mode, markers), reasoning_started=reasoning_started)


__all__ = [
    "MODES",
    "VALUE_END",
    "VALUE_FORBIDDEN",
    "BlockRead",
    "BlockScan",
    "Parameter",
    "QwenXmlBlocks",
    "QwenXmlMode",
    "QwenXmlStreamState",
    "ScanMemo",
    "StreamPiece",
    "check_mode",
    "check_scan",
    "convert_value",
    "parse_turn",
    "scan_block",
    "schema_types",
    "value_candidates",
]
