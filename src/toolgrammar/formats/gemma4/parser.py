"""The block reader of the ``gemma4`` format: ``<|tool_call>call:NAME{...}<tool_call|>``.

Values use Gemma 4's object notation, not JSON (``format.toml``)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>c<|"|>}<tool_call|>

Keys are bare (they may hold spaces: ``key with space:1.5e-05``; surrounding whitespace is not part
of the key), strings sit between two ``<|"|>`` and are never escaped (raw newlines, quotes, braces
and markers are text), numbers are written as Python's ``str()`` writes them (``1e-05``, ``1e+21``),
``true``/``false``/``null`` are literals, ``{...}`` and ``[...]`` nest, items are joined by ``,``
(whitespace around items and separators is allowed: SGLang's tests write ``[1, 2, ...]``).

Turn
    The shared turn reader (:mod:`toolgrammar.formats.reader`): reasoning is the thought channel,
    ``<|channel>thought`` ... ``<channel|>`` (the text after ``thought`` is the reasoning, trimmed);
    with thinking off the generation prompt already holds an empty, closed thought channel.

Blocks
    A block starts at ``<|tool_call>``. Its end is the first ``<tool_call|>`` outside a ``<|"|>``
    string (a marker inside a string stays in the string); none by the end of the turn: ``truncated``.
    The body must be ``call:NAME{...}`` with a well-formed object and nothing after it but
    whitespace, else ``malformed-block``.

Values (:func:`parse_value`)
    Typed by their notation: a ``<|"|>`` string is a string, even ``<|"|>42<|"|>``; a bare
    ``true``/``false``/``null`` is a boolean or null; a bare number is an ``int`` (no fraction or
    exponent) or a finite ``float``. Any other bare text is kept as a string, and the schema check
    judges it (``schema-violation`` when the parameter is not a string). Then
    :func:`toolgrammar.formats.checks.check_call` runs (``unknown-tool``, ``missing-argument``...).

Streaming
    The search for the closer resumes where it stopped and tracks whether it is inside a string, so
    a block costs time linear in its length; the body is parsed once, when its end is known.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.calls import Block, CallError, ToolCall
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.gemma4.notation import CALL_PREFIX, ITEM_SEP, KEY_SEP, QUOTE
from toolgrammar.formats.reader import Opener, Span
from toolgrammar.formats.reader import check_mode as check_reader_mode

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_BARE_END = re.compile(r"[,}\]]")
_KEY_FORBIDDEN = ("{", "}", "[", "]", ",", ":", QUOTE)
_NAME = re.compile(r"call:([^{<\s]*)")
_WS = " \t\r\n"


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("gemma4", mode, MODES)


class BlockEnd:
    """Finds the block's closer as the text grows: the first one outside a ``<|"|>`` string."""

    __slots__ = ("_in_string", "_pos", "body_start", "closer", "start")

    def __init__(self, start: int, markers: Markers) -> None:
        self.start = start
        self.body_start = start + len(markers.block_open)
        self.closer = markers.block_close
        self._pos = self.body_start
        self._in_string = False

    def advance(self, text: str, final: bool) -> Span | None:
        closer = self.closer
        while True:
            if self._in_string:
                q = text.find(QUOTE, self._pos)
                if q == -1:
                    break
                self._pos, self._in_string = q + len(QUOTE), False
                continue
            q, c = text.find(QUOTE, self._pos), text.find(closer, self._pos)
            if c != -1 and (q == -1 or c < q):
                return Span(self.start, self.body_start, c, c + len(closer), True)
            if q == -1:
                break
            self._pos, self._in_string = q + len(QUOTE), True
        if final:
            return Span(self.start, self.body_start, len(text), len(text), False)
        longest = max(len(QUOTE), len(closer))
        self._pos = max(self._pos, len(text) - longest + 1)
        return None


class Malformed(ValueError):
    """The body is not ``call:NAME{...}`` in Gemma 4's notation."""


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def parse_value(s: str, i: int) -> tuple[Any, int]:
    """The value at ``s[i:]`` (after optional whitespace) and the offset past it."""
    i = _skip(s, i)
    if s.startswith(QUOTE, i):
        j = s.find(QUOTE, i + len(QUOTE))
        if j == -1:
            raise Malformed(f"a string opened at offset {i} is not closed by {QUOTE}")
        return s[i + len(QUOTE) : j], j + len(QUOTE)
    if s.startswith("{", i):
        return _object(s, i + 1)
    if s.startswith("[", i):
        return _array(s, i + 1)
    m = _BARE_END.search(s, i)
    end = len(s) if m is None else m.start()
    return bare_value(s[i:end].strip(_WS), i), end


def bare_value(text: str, at: int = 0) -> Any:
    """A bare scalar: a literal, a number, or (any other text) the text itself."""
    if not text:
        raise Malformed(f"a value is missing at offset {at}")
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if _NUMBER.fullmatch(text):
        if "." not in text and "e" not in text and "E" not in text:
            return int(text)
        value = float(text)
        if math.isfinite(value):
            return value
    if QUOTE in text or "{" in text or "[" in text:
        raise Malformed(f"unexpected markup in the bare value {text!r}")
    return text


def _object(s: str, i: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    i = _skip(s, i)
    if s.startswith("}", i):
        return out, i + 1
    while True:
        i = _skip(s, i)
        if s.startswith(QUOTE, i):
            key, i = parse_value(s, i)
            i = _skip(s, i)
            if not s.startswith(KEY_SEP, i):
                raise Malformed(f"expected {KEY_SEP!r} after the key {key!r}")
            i += len(KEY_SEP)
        else:
            colon = s.find(KEY_SEP, i)
            if colon == -1:
                raise Malformed(f"a key at offset {i} has no {KEY_SEP!r}")
            key = s[i:colon].strip(_WS)
            if not key or any(w in key for w in _KEY_FORBIDDEN):
                raise Malformed(f"bad key {s[i:colon]!r}")
            i = colon + len(KEY_SEP)
        if key in out:
            raise Malformed(f"the key {key!r} is given twice")
        out[key], i = parse_value(s, i)
        i = _skip(s, i)
        if s.startswith(ITEM_SEP, i):
            i += len(ITEM_SEP)
            continue
        if s.startswith("}", i):
            return out, i + 1
        raise Malformed(f"expected {ITEM_SEP!r} or '}}' at offset {i}, found {s[i : i + 12]!r}")


def _array(s: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    i = _skip(s, i)
    if s.startswith("]", i):
        return out, i + 1
    while True:
        value, i = parse_value(s, i)
        out.append(value)
        i = _skip(s, i)
        if s.startswith(ITEM_SEP, i):
            i += len(ITEM_SEP)
            continue
        if s.startswith("]", i):
            return out, i + 1
        raise Malformed(f"expected {ITEM_SEP!r} or ']' at offset {i}, found {s[i : i + 12]!r}")


def parse_body(body: str) -> tuple[str, dict[str, Any]]:
    """``call:NAME{...}`` -> the name and the arguments (:class:`Malformed` when it is not that)."""
    i = _skip(body, 0)
    if not body.startswith(CALL_PREFIX, i):
        raise Malformed(f"expected {CALL_PREFIX!r}, found {body[i : i + 12]!r}")
    i += len(CALL_PREFIX)
    brace = body.find("{", i)
    if brace == -1:
        raise Malformed("no '{' after the tool name")
    name = body[i:brace]
    if not name or any(c in name for c in _WS + "<"):
        raise Malformed(f"bad tool name {name!r}")
    arguments, end = _object(body, brace + 1)
    if body[end:].strip():
        raise Malformed(f"text after the arguments: {body[end : end + 24]!r}")
    return name, arguments


def check_body(body: str, closed: bool, tools: ToolSet, markers: Markers) -> ToolCall | CallError:
    """The verdict on one block body: a valid call, or the first failing check."""
    if not closed:
        return CallError("truncated", f"error: tool call is truncated: the turn ended before {markers.block_close}")
    try:
        name, arguments = parse_body(body)
    except Malformed as error:
        return CallError("malformed-block", f"error: malformed tool call: {error}")
    except RecursionError:
        return CallError("malformed-block", "error: malformed tool call: nesting too deep")
    return check_call({"name": name, "arguments": arguments}, tools)


class Gemma4Blocks:
    """The gemma4 :class:`~toolgrammar.formats.reader.BlockReader`."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open),)

    def open_block(self, start: int, opener: Opener) -> BlockEnd:
        return BlockEnd(start, self.markers)

    def check(self, text: str, cut: Span, tools: ToolSet) -> Block:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]
        verdict = check_body(body, cut.closed, tools, self.markers)
        if isinstance(verdict, CallError):
            return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=verdict)
        return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, call=verdict)


def block_name(raw: str) -> str | None:
    match = _NAME.search(raw)
    return match.group(1) if match else None


__all__ = ["MODES", "BlockEnd", "Gemma4Blocks", "Malformed", "Span", "bare_value", "check_body", "parse_body"]
