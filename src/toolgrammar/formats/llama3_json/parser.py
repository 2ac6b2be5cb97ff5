"""The block reader of the ``llama3-json`` format: where a JSON call starts and ends, and what it holds.

Blocks
    A call starts at ``<|python_tag|>`` (the JSON follows it) or, without the tag, at ``{"name"`` (the
    object's first key as the chat template writes it), anywhere in the message. Any other JSON in the
    text (``{"a": 1} is a dict``, ``{}``) is content. There is no closing marker: the call ends where
    its JSON value ends (string and escape aware, so ``<|python_tag|>`` or braces inside a string stay
    in the string). When parallel calls are joined by ``;`` (``{...}; {...}``), the ``;`` and the spaces
    after it belong to the call before, so the content between two calls stays empty. A value that
    never completes by the turn's end is ``truncated``; after ``<|python_tag|>`` a body that does not
    start like a JSON value (a built-in tool's Python call) runs to the end of the turn and is
    ``invalid-json``.

Checks (strict)
    ``json.loads`` of the value (``raw-newline-in-string`` / ``invalid-json``); then an object whose keys
    are ``name`` and exactly one of ``parameters`` (the template's) or ``arguments``, plus optionally
    ``"type": "function"`` (Meta's own example), else ``wrong-keys``; then
    :func:`toolgrammar.formats.checks.check_call`.

Whitespace
    ``strip_whitespace`` is false: content around calls is kept verbatim (``Let me check. <|python_tag|>``
    leaves ``"Let me check. "``), as CanIToolCall's llama fixtures expect; Llama templates write no
    separators of their own around a call.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import JsonValueScanner, json_error_kind, loads
from toolgrammar.formats.reader import Opener, Span
from toolgrammar.formats.reader import check_mode as check_reader_mode
from toolgrammar.formats.spec import format_spec

if TYPE_CHECKING:
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)
BLOCK: dict[str, Any] = format_spec("toolgrammar.formats.llama3_json")["block"]
_SEPARATOR = re.compile(r";[ \t]*")


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("llama3-json", mode, MODES)


def separator_end(text: str, at: int, openers: tuple[str, ...], final: bool) -> int | None:
    """Where the content resumes after a call whose JSON ends at ``at``: past ``;`` and spaces when
    another call follows them, else ``at``; ``None`` while the text so far cannot tell."""
    rest = text[at:]
    if not rest:
        return at if final else None
    if rest[0] != ";":
        return at
    m = _SEPARATOR.match(rest)
    assert m is not None
    after = rest[m.end() :]
    if any(after.startswith(o) for o in openers):
        return at + m.end()
    if not final and (not after or any(o.startswith(after) for o in openers)):
        return None
    return at


class JsonCallEnd:
    """Finds where one call ends as the text grows (the end of its JSON value, then a separator)."""

    __slots__ = ("_scanned", "_scanner", "body_start", "done", "openers", "start")

    def __init__(self, start: int, body_start: int, openers: tuple[str, ...]) -> None:
        self.start = start
        self.body_start = body_start
        self.openers = openers
        self._scanner = JsonValueScanner()
        self._scanned = body_start
        self.done = -1
        """Offset just past the JSON value (-1: not complete yet; -2: not a JSON value)."""

    def advance(self, text: str, final: bool) -> Span | None:
        if self.done == -1:
            self.done = self._scanner.feed(text, self._scanned)
            self._scanned = len(text)
        if self.done == -2:  # not JSON: to the end of the turn
            return Span(self.start, self.body_start, len(text), len(text), True) if final else None
        if self.done == -1:
            return Span(self.start, self.body_start, len(text), len(text), False) if final else None
        end = separator_end(text, self.done, self.openers, final)
        if end is None:
            return None
        return Span(self.start, self.body_start, self.done, end, True)


class Llama3JsonBlocks:
    """The llama3-json :class:`~toolgrammar.formats.reader.BlockReader` (strict mode)."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False
    strip_whitespace: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open), Opener(BLOCK["bare_open"]))
        self._opener_texts = tuple(o.text for o in self.openers)

    def open_block(self, start: int, opener: Opener) -> JsonCallEnd:
        tagged = opener.text == self.markers.block_open
        body_start = start + len(opener.text) if tagged else start
        return JsonCallEnd(start, body_start, self._opener_texts)

    def check(self, text: str, cut: Span, tools: ToolSet) -> Block:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]
        verdict = check_body(body, cut.closed, tools)
        if isinstance(verdict, CallError):
            return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=verdict)
        return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, call=verdict)


WRONG_KEYS = (
    'error: a llama tool call must be a JSON object with "name" and one of "parameters" or "arguments" '
    '(and optionally "type": "function")'
)


def call_object(obj: Any) -> dict[str, Any] | CallError:
    """``{"name", "arguments"}`` from a decoded llama call object, or ``wrong-keys``."""
    if not isinstance(obj, dict):
        return CallError("wrong-keys", WRONG_KEYS)
    keys = set(obj)
    arg_keys = [k for k in BLOCK["arguments_keys"] if k in keys]
    allowed = {BLOCK["name_key"], *BLOCK["arguments_keys"], BLOCK["type_key"]}
    if BLOCK["name_key"] not in keys or len(arg_keys) != 1 or not keys <= allowed:
        return CallError("wrong-keys", WRONG_KEYS)
    if BLOCK["type_key"] in keys and obj[BLOCK["type_key"]] != BLOCK["type_value"]:
        return CallError("wrong-keys", WRONG_KEYS)
    return {"name": obj[BLOCK["name_key"]], "arguments": obj[arg_keys[0]]}


def check_body(body: str, closed: bool, tools: ToolSet) -> ToolCall | CallError:
    """The verdict on one call's JSON text."""
    kind: Literal["truncated", "invalid-json"]
    if not closed:
        return CallError("truncated", "error: tool call is truncated: the turn ended inside its JSON")
    try:
        obj = loads(body)
    except RecursionError:
        kind = "invalid-json"
        return CallError(kind, "error: tool call is not valid JSON: nesting too deep")
    except ValueError as error:
        return CallError(json_error_kind(error), f"error: tool call is not valid JSON: {error}")
    call = call_object(obj)
    if isinstance(call, CallError):
        return call
    return check_call(call, tools)


def render_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the Llama 3.x chat template renders it (no ``<|python_tag|>``)."""
    key = BLOCK["arguments_keys"][0]
    return (
        '{"name": '
        + json.dumps(name, ensure_ascii=False)
        + f', "{key}": '
        + json.dumps(arguments, ensure_ascii=False)
        + "}"
    )


__all__ = ["BLOCK", "MODES", "JsonCallEnd", "Llama3JsonBlocks", "Span", "call_object", "check_body", "render_call"]
