"""Streamed arguments: a call's name and a final prefix of its arguments JSON, read from a block as it grows.

A server that streams a call OpenAI-style sends the call's name once it is complete, then
``function.arguments`` fragments as tokens arrive, and never takes a fragment back. The grammar only
admits prefixes of valid calls, so every fragment can be final: :func:`partial_call` reads the text of
one block so far and returns the name (once complete) and the longest prefix of the final
:meth:`~toolgrammar.formats.calls.ToolCall.arguments_json` (``json.dumps(arguments, ensure_ascii=False)``)
that every valid completion of the block shares, as far as this module can tell. :class:`ArgumentDeltas`
turns successive :class:`PartialCall` values of one call into those fragments.

What is streamed, and when (the granularity of each format is in its reader's docstring below)
    - String values character by character, re-encoded as ``json.dumps`` writes them (the wire's escapes
      decoded, ``ensure_ascii=False``): an escape (or a ``\\uD83D`` waiting for its low surrogate) is held
      until it is complete, and so is raw text that may be the start of the value's closing markup.
    - An object key with its ``": "`` once the key is complete; ``", "`` once an item separator is read;
      ``{``/``[`` when they open and ``}``/``]`` when they close.
    - A number, ``true``/``false``/``null`` once complete, through ``json.loads`` + ``json.dumps`` (``1e2``
      is ``100.0``, ``-0`` is ``0``).
    - An object whose grammar allows any keys (a map, ``additionalProperties`` only, or a free-form ``{}``
      value) as a whole once it closes: a repeated key there would replace an earlier value
      (``json.loads`` keeps the last one, at the first one's place), so nothing inside is final before.
    - Non-JSON formats stream the JSON their values convert to: a raw string value character by
      character where its conversion is the text itself; other values once they are complete.

Granularity per format (details in each reader's docstring)
    - ``hermes``, ``llama3-json``, ``mistral``, ``mistral-think-text``, ``mistral-v3``, ``deepseek-v3``,
      ``deepseek-v3.1``, ``kimi``, ``gpt-oss`` (JSON on the wire): the name when it ends; the arguments
      character by character (:class:`JsonTransducer`).
    - ``qwen-xml``, ``glm``, ``glm45``: the name at its ``>`` / ``<``; a string-only parameter character by
      character; an object or array parameter (a schema that reads no text) as JSON; other values once
      complete.
    - ``deepseek``, ``deepseek-v3.2``, ``deepseek-v4``, ``deepseek-v4.1`` (DSML) and ``kimi-k3``: the name at
      its closing ``"``; string values (``string="true"``, ``type="string"``) character by character; JSON
      objects and arrays as JSON; JSON scalars once complete.
    - ``gemma4``: the name at ``{``; ``<|"|>`` strings character by character, objects and arrays as they open
      and close, bare scalars once complete.
    - ``llama4-pythonic``: the name at ``(``; one-line string literals character by character (Python's escapes
      decoded); any other value once complete.

The block text: from the block's opener, as :func:`~toolgrammar.turn.parser.parse_turn` cuts the block, up
to now; a *section* (``block_holds_calls``) whole from its opener (:class:`PartialCallReader`).

"Valid completion" means one the block grammar allows: the readers follow the spelling the grammar writes
(with any whitespace the parser allows between tokens). Where the strict parser reads more than the grammar
writes, the reader stops streaming at the first difference (keys in another order than ``{"name",
"arguments"}``, a key given twice, Meta's ``"type": "function"``); when such a block is complete and the strict
parser reads it as valid calls whose ``arguments_json()`` extends what was streamed, those arguments are
returned whole. A top-level key given twice (``json.loads`` keeps the last value) is the one text the grammar
never writes whose streamed prefix can be wrong: the first value was final by the grammar's rules.

Cost: :class:`PartialCallReader` reads a growing block incrementally (each read looks at the new text, and
re-reads at most a marker's length of held-back text), so a block costs time linear in its length however it
is split (a 50,000-character string argument read 4 characters at a time: 0.1 to 0.25 s in every format);
:func:`partial_call` builds a fresh reader for one text (linear in it, so calling it on every prefix is
quadratic: keep a reader per block).
"""

from __future__ import annotations

import ast
import html
import json
import re
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, TypeVar

from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.deepseek import DeepSeekV41Format
from toolgrammar.formats.deepseek.shape import Variant, variants
from toolgrammar.formats.gemma4 import Gemma4Format
from toolgrammar.formats.gemma4.notation import CALL_PREFIX, ITEM_SEP, KEY_SEP, QUOTE
from toolgrammar.formats.gemma4.parser import Malformed, bare_value
from toolgrammar.formats.glm import TAGS, GlmFormat
from toolgrammar.formats.gpt_oss import GptOssFormat
from toolgrammar.formats.gpt_oss.parser import CHANNEL, CONSTRAIN, MESSAGE, RECIPIENT_PREFIX, ROLE, START, TO
from toolgrammar.formats.hermes import HermesFormat
from toolgrammar.formats.json_text import JsonValueScanner, loads
from toolgrammar.formats.kimi import KimiFormat, KimiK3Format
from toolgrammar.formats.kimi.parser import k2_markup, k3_markup
from toolgrammar.formats.llama3_json import Llama3JsonFormat
from toolgrammar.formats.llama4_pythonic import Llama4PythonicFormat
from toolgrammar.formats.llama4_pythonic.parser import json_problem
from toolgrammar.formats.mistral import MistralFormat
from toolgrammar.formats.qwen_xml import QwenXmlFormat
from toolgrammar.formats.qwen_xml.parser import (
    FUNCTION_CLOSE,
    FUNCTION_OPEN,
    PARAMETER_OPEN,
    VALUE_END,
    convert_value,
    schema_types,
)

if TYPE_CHECKING:
    from toolgrammar.formats.base import ToolCallFormat
    from toolgrammar.schema import Tool, ToolSet

T = TypeVar("T")
Wait = Generator[None, None, T]
"""A reading step: it yields while the text so far ends inside what it reads (more text decides)."""

JSON_WS = " \t\n\r"
"""Whitespace between JSON tokens, and between the markup pieces of every built-in format."""


class StreamingError(ToolgrammarError, RuntimeError):
    """Misuse of a reader (a text that does not extend the one read before) or an internal inconsistency
    (streamed arguments that stopped being a prefix: a bug, never bad model output)."""


@dataclass(frozen=True)
class PartialCall:
    """One call of a block, as far as the text so far decides it."""

    name: str | None = None
    """The tool's name, once it is complete (and an offered tool)."""
    arguments: str = ""
    """A prefix of the final ``arguments_json()`` shared by every valid completion of the block."""
    complete: bool = False
    """Whether ``arguments`` is the whole final ``arguments_json()`` (its closing ``}`` was read)."""


# --------------------------------------------------------------------------- the text and the calls read


class _Off(Exception):
    """The text left the spelling this reader follows (or names no offered tool): streaming stops here."""


class _Text:
    """The block text so far (it only grows) and where reading stands."""

    __slots__ = ("pos", "s")

    def __init__(self) -> None:
        self.s = ""
        self.pos = 0


class _Call:
    """One call being read: its name once final, and the final arguments text emitted so far."""

    __slots__ = ("complete", "name", "parts", "text")

    def __init__(self) -> None:
        self.name: str | None = None
        self.parts: list[str] = []
        self.text = ""
        self.complete = False

    def emit(self, piece: str) -> None:
        self.parts.append(piece)

    def partial(self) -> PartialCall:
        if self.parts:
            self.text += "".join(self.parts)
            self.parts.clear()
        return PartialCall(self.name, self.text, self.complete)


class _Calls:
    """The calls of one block, in order (a section holds several)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[_Call] = []

    def new(self) -> _Call:
        call = _Call()
        self.calls.append(call)
        return call


def _enc(text: str) -> str:
    """``text`` as ``json.dumps(..., ensure_ascii=False)`` writes it inside a string's quotes."""
    return encode_basestring(text)[1:-1]


def _key(first: bool, key: str) -> str:
    """An object member's key as ``json.dumps`` writes it, with the separator before it unless it is the first."""
    return ("" if first else ", ") + encode_basestring(key) + ": "


# --------------------------------------------------------------------------- reading steps


def _starts(t: _Text, word: str) -> Wait[bool]:
    """Whether ``word`` is at the reading position (not consumed)."""
    while True:
        s, pos = t.s, t.pos
        if s.startswith(word, pos):
            return True
        rest = s[pos : pos + len(word)]
        if len(rest) < len(word) and word.startswith(rest):
            yield
            continue
        return False


def _which(t: _Text, words: tuple[str, ...]) -> Wait[str | None]:
    """Which of ``words`` is at the reading position (``None``: none; not consumed)."""
    while True:
        s, pos = t.s, t.pos
        undecided = False
        for w in words:
            if s.startswith(w, pos):
                return w
            rest = s[pos : pos + len(w)]
            if len(rest) < len(w) and w.startswith(rest):
                undecided = True
        if not undecided:
            return None
        yield


def _lit(t: _Text, word: str) -> Wait[None]:
    """Consume ``word``."""
    if not (yield from _starts(t, word)):
        raise _Off(f"expected {word!r} at {t.pos}")
    t.pos += len(word)


def _ws(t: _Text, chars: str = JSON_WS) -> Wait[None]:
    """Skip whitespace, up to the next other character (which must arrive first)."""
    while True:
        s, i = t.s, t.pos
        n = len(s)
        while i < n and s[i] in chars:
            i += 1
        t.pos = i
        if i < n:
            return
        yield


def _peek(t: _Text) -> Wait[str]:
    """The character at the reading position (not consumed)."""
    while t.pos >= len(t.s):
        yield
    return t.s[t.pos]


def _find(t: _Text, word: str) -> Wait[int]:
    """Offset of the next ``word`` at or after the reading position (not consumed)."""
    frm = t.pos
    while True:
        k = t.s.find(word, frm)
        if k != -1:
            return k
        frm = max(t.pos, len(t.s) - len(word) + 1)
        yield


def _search(t: _Text, pattern: re.Pattern[str]) -> Wait[re.Match[str]]:
    """The next match of a one-character ``pattern`` at or after the reading position (not consumed)."""
    frm = t.pos
    while True:
        m = pattern.search(t.s, frm)
        if m is not None:
            return m
        frm = len(t.s)
        yield


def _held_from(s: str, frm: int, words: tuple[str, ...]) -> int:
    """The first offset at or after ``frm`` from which the rest of ``s`` is a proper prefix of one of
    ``words`` (what more text may turn into one of them); ``len(s)`` when there is none."""
    n = len(s)
    for p in range(max(frm, n - max(map(len, words)) + 1), n):
        rest = s[p:]
        if any(len(rest) < len(w) and w.startswith(rest) for w in words):
            return p
    return n


def _tool(tools: ToolSet, name: str) -> Tool:
    tool = tools.get(name)
    if tool is None:
        raise _Off(f"unknown tool {name!r}")
    return tool


# --------------------------------------------------------------------------- which objects may repeat a key

Schemas = tuple[dict[str, Any], ...] | None
"""The schemas a value may be read against (the union of ``anyOf`` branches); ``None``: unknown (any JSON)."""

_ANY_VALUE_KEYS = frozenset({"additionalProperties", "properties", "required", "items"})


def _flat(schemas: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for s in schemas:
        if isinstance(s, dict) and "anyOf" in s:
            base = {k: v for k, v in s.items() if k != "anyOf"}
            out.extend(_flat(tuple({**base, **sub} for sub in s["anyOf"])))
        elif isinstance(s, dict):
            out.append(s)
    return out


def _types(s: dict[str, Any]) -> list[str] | None:
    """The ``type`` list of a schema; ``None`` when the grammar reads it as any JSON value."""
    types = s.get("type")
    if types is None:
        return None
    return [types] if isinstance(types, str) else list(types)


def _object_safe(schemas: Schemas) -> bool:
    """Whether no object the grammar allows at this place repeats a key (declared properties, literals)."""
    if schemas is None:
        return False
    for s in _flat(schemas):
        if "const" in s or "enum" in s:
            continue
        types = _types(s)
        if types is None:
            if not s or not (set(s) - _ANY_VALUE_KEYS):
                return False  # any JSON value: a free-form object
            continue
        if "object" in types and not s.get("properties") and isinstance(s.get("additionalProperties"), dict):
            return False  # a map: any string keys
    return True


def _member(schemas: Schemas, key: str) -> Schemas:
    if schemas is None:
        return None
    out = []
    for s in _flat(schemas):
        types = _types(s)
        if "const" in s or "enum" in s or types is None:
            return None
        if "object" in types and key in (s.get("properties") or {}):
            out.append(s["properties"][key])
    return tuple(out)


def _items(schemas: Schemas) -> Schemas:
    if schemas is None:
        return None
    out = []
    for s in _flat(schemas):
        types = _types(s)
        if "const" in s or "enum" in s or types is None:
            return None
        if "array" in types:
            out.append(s.get("items", {}))
    return tuple(out)


# --------------------------------------------------------------------------- the canonical-JSON transducer

_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')
_KEY = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_NUMBER_CHARS = frozenset("-+0123456789.eE")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")
_LITERALS = ("true", "false", "null")
_SIMPLE_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "/", "b": "\\b", "f": "\\f", "n": "\\n", "r": "\\r", "t": "\\t"}


class _Frame:
    __slots__ = ("array", "keys", "schemas")

    def __init__(self, array: bool, schemas: Schemas) -> None:
        self.array = array
        self.schemas = schemas
        self.keys: set[str] = set()


class JsonTransducer:
    """Reads one JSON value from its wire text and emits ``json.dumps(value, ensure_ascii=False)`` as it
    becomes final (module docstring), fed the growing text piece by piece.

    ``emit`` receives each final piece. ``schemas``: what the value is read against (the tool's
    ``parameters`` for a call's arguments), which says where an object may repeat a key; ``None``: any
    JSON. ``object_only``: the value must be an object (a call's arguments). :meth:`feed` reads on from an
    offset; :attr:`done` once the value is complete (``feed`` then returns the offset just past it),
    :attr:`failed` when the text is not JSON (or repeats a key where the grammar never does).
    """

    __slots__ = (
        "_scanned",
        "_scanner",
        "_start",
        "done",
        "emit",
        "failed",
        "mode",
        "object_only",
        "schemas",
        "stack",
    )

    def __init__(self, emit: Callable[[str], None], schemas: Schemas = None, *, object_only: bool = False) -> None:
        self.emit = emit
        self.schemas = schemas
        self.object_only = object_only
        self.stack: list[_Frame] = []
        self.mode = "value"
        self.done = False
        self.failed = False
        self._start = -1
        self._scanner: JsonValueScanner | None = None
        self._scanned = -1

    def _end_value(self) -> None:
        if self.stack:
            self.mode = "after"
        else:
            self.done = True

    def _fail(self, i: int) -> int:
        self.failed = True
        return i

    def feed(self, s: str, i: int) -> int:
        """Read ``s`` from offset ``i``; returns where reading stopped (the end of ``s`` while more is needed)."""
        n = len(s)
        while i < n and not self.done and not self.failed:
            mode = self.mode
            if mode == "string":
                i = self._string(s, i)
                if self.mode == "string":
                    return i
                continue
            c = s[i]
            if mode in ("value", "first_item", "first_key", "next_key", "colon", "after") and c in JSON_WS:
                i += 1
                continue
            if mode == "value":
                i = self._value(s, i, c)
            elif mode == "first_item":
                if c == "]":
                    self.emit("]")
                    self.stack.pop()
                    self._end_value()
                    i += 1
                else:
                    self.schemas = self.stack[-1].schemas
                    self.mode = "value"
            elif mode in ("first_key", "next_key"):
                if c == "}" and mode == "first_key":
                    self.emit("}")
                    self.stack.pop()
                    self._end_value()
                    i += 1
                elif c == '"':
                    self._start, self.mode = i, "key"
                else:
                    return self._fail(i)
            elif mode == "key":
                i = self._key(s, i)
                if self.mode == "key":
                    return i
            elif mode == "colon":
                if c != ":":
                    return self._fail(i)
                self.mode = "value"
                i += 1
            elif mode == "after":
                frame = self.stack[-1]
                if c == ",":
                    self.emit(", ")
                    if frame.array:
                        self.schemas, self.mode = frame.schemas, "value"
                    else:
                        self.mode = "next_key"
                    i += 1
                elif c == ("]" if frame.array else "}"):
                    self.emit(c)
                    self.stack.pop()
                    self._end_value()
                    i += 1
                else:
                    return self._fail(i)
            elif mode == "number":
                j = i
                while j < n and s[j] in _NUMBER_CHARS:
                    j += 1
                if j == n:
                    return n
                try:
                    value = json.loads(s[self._start : j])
                except ValueError:
                    return self._fail(i)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    return self._fail(i)
                self.emit(json.dumps(value))
                self._end_value()
                i = j
            elif mode == "literal":
                j = i
                while j < n and s[j] in _LETTERS and j - self._start < 5:
                    j += 1
                word = s[self._start : j]
                if word in _LITERALS:
                    self.emit(word)
                    self._end_value()
                    i = j
                elif j == n and any(w.startswith(word) for w in _LITERALS):
                    return n
                else:
                    return self._fail(i)
            else:  # "raw": an object that may repeat a key, emitted whole once it closes
                assert self._scanner is not None
                end = self._scanner.feed(s, self._scanned)
                if end < 0:
                    if end == -2:
                        return self._fail(i)
                    self._scanned = n
                    return n
                try:
                    value = loads(s[self._start : end])
                except (ValueError, RecursionError):
                    return self._fail(i)
                self.emit(json.dumps(value, ensure_ascii=False))
                self._end_value()
                i = end
        return i

    def _value(self, s: str, i: int, c: str) -> int:
        if self.object_only and not self.stack and c != "{":
            return self._fail(i)
        if c == "{":
            if _object_safe(self.schemas) or (self.object_only and not self.stack):
                self.emit("{")
                self.stack.append(_Frame(False, self.schemas))
                self.mode = "first_key"
                return i + 1
            self._start, self._scanned, self.mode = i, i, "raw"
            self._scanner = JsonValueScanner()
            return i
        if c == "[":
            self.emit("[")
            self.stack.append(_Frame(True, _items(self.schemas)))
            self.mode = "first_item"
            return i + 1
        if c == '"':
            self.emit('"')
            self.mode = "string"
            return i + 1
        if c in "-0123456789":
            self._start, self.mode = i, "number"
            return i + 1
        if c in "tfn":
            self._start, self.mode = i, "literal"
            return i + 1
        return self._fail(i)

    def _key(self, s: str, i: int) -> int:
        n = len(s)
        m = _KEY.match(s, self._start)
        assert m is not None
        end = m.end()
        if end == n or (end == n - 1 and s[end] == "\\"):
            return n
        if s[end] != '"':
            return self._fail(i)
        try:
            key = json.loads(s[self._start : end + 1])
        except ValueError:
            return self._fail(i)
        frame = self.stack[-1]
        if key in frame.keys:  # the grammar never repeats a declared property
            return self._fail(i)
        self.emit(encode_basestring(key) + ": ")  # the separator before it was emitted at its comma
        frame.keys.add(key)
        self.schemas = _member(frame.schemas, key)
        self.mode = "colon"
        return end + 1

    def _string(self, s: str, i: int) -> int:
        """Inside a string value: emit what is final; stop at its end (or where more text is needed)."""
        n = len(s)
        emit = self.emit
        while i < n:
            m = _PLAIN.match(s, i)
            if m is not None:
                emit(m.group())  # no quote, backslash or control character: json.dumps writes it as it is
                i = m.end()
                continue
            c = s[i]
            if c == '"':
                emit('"')
                self._end_value()
                return i + 1
            if c != "\\":
                self.failed = True  # a raw control character: not JSON
                return i
            if i + 1 >= n:
                return i
            e = s[i + 1]
            if e in _SIMPLE_ESCAPES:
                emit(_SIMPLE_ESCAPES[e])
                i += 2
                continue
            if e != "u":
                self.failed = True
                return i
            if i + 6 > n:
                return i
            if not _HEX4.fullmatch(s, i + 2, i + 6):
                self.failed = True
                return i
            cp = int(s[i + 2 : i + 6], 16)
            if 0xD800 <= cp <= 0xDBFF:  # json.loads joins it with a \uDC00-\uDFFF escape right after it
                nxt = s[i + 6 : i + 8]
                if len(nxt) < 2 and "\\u".startswith(nxt):
                    return i
                if nxt == "\\u":
                    if i + 12 > n:
                        return i
                    if not _HEX4.fullmatch(s, i + 8, i + 12):
                        self.failed = True
                        return i
                    low = int(s[i + 8 : i + 12], 16)
                    if 0xDC00 <= low <= 0xDFFF:
                        emit(_enc(chr(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00))))
                        i += 12
                        continue
            emit(_enc(chr(cp)))
            i += 6
        return i


def _json(t: _Text, call: _Call, schemas: Schemas, *, arguments: bool = False) -> Wait[None]:
    """One JSON value at the reading position (after whitespace), streamed into ``call``; ``arguments``:
    the call's arguments object (``call.complete`` once it closes)."""
    tr = JsonTransducer(call.emit, schemas, object_only=arguments)
    while True:
        t.pos = tr.feed(t.s, t.pos)
        if tr.done:
            if arguments:
                call.complete = True
            return
        if tr.failed:
            raise _Off(f"not JSON at {t.pos}")
        yield


def _json_string(t: _Text) -> Wait[str]:
    """A whole JSON string token at the reading position, decoded (a name or a key)."""
    start = t.pos
    while True:
        s = t.s
        if not s.startswith('"', start):
            if start < len(s):
                raise _Off(f"expected a JSON string at {start}")
            yield
            continue
        m = _KEY.match(s, start)
        assert m is not None
        end = m.end()
        if end == len(s) or (end == len(s) - 1 and s[end] == "\\"):
            yield
            continue
        if s[end] != '"':
            raise _Off(f"not a JSON string at {start}")
        try:
            value = json.loads(s[start : end + 1])
        except ValueError:
            raise _Off(f"not a JSON string at {start}") from None
        t.pos = end + 1
        return value


def _arguments_of(tool: Tool) -> Schemas:
    return (tool.parameters,)


def _property(tool: Tool, key: str) -> Any:
    return (tool.parameters.get("properties") or {}).get(key)


# --------------------------------------------------------------------------- raw values (the XML-ish formats)


def _raw_string(t: _Text, call: _Call, end: str) -> Wait[None]:
    """A raw string value that ends at the first ``end`` (consumed), streamed as a JSON string."""
    call.emit('"')
    while True:
        s = t.s
        k = s.find(end, t.pos)
        if k != -1:
            call.emit(_enc(s[t.pos : k]) + '"')
            t.pos = k + len(end)
            return
        safe = _held_from(s, t.pos, (end,))
        if safe > t.pos:
            call.emit(_enc(s[t.pos : safe]))
            t.pos = safe
        yield


def _raw_json(t: _Text, call: _Call, end: str, schemas: Schemas) -> Wait[None]:
    """A JSON value (``json.loads`` of the text up to the first ``end``, consumed): an object or array
    streamed, a scalar once complete."""
    start = t.pos
    yield from _ws(t)
    if t.s[t.pos] in "{[":
        yield from _json(t, call, schemas)
        k = yield from _find(t, end)
        if t.s[t.pos : k].strip(JSON_WS):
            raise _Off(f"text after a JSON value at {t.pos}")
    else:
        k = yield from _find(t, end)
        try:
            value = loads(t.s[start:k])
        except (ValueError, RecursionError):
            raise _Off(f"not JSON at {start}") from None
        call.emit(json.dumps(value, ensure_ascii=False))
    t.pos = k + len(end)


def _string_only(schema: Any) -> bool:
    """Whether ``convert_value`` reads any text as itself for this schema (a string-only type)."""
    return schema_types(schema) == frozenset({"string"})


def _json_container_only(schema: Any) -> bool:
    """Whether ``convert_value`` reads an object or array text as JSON for this schema, never as text."""
    types = schema_types(schema)
    return types is not None and "string" not in types and bool(types & {"object", "array"})


# --------------------------------------------------------------------------- JSON-argument formats


Reader = Callable[[_Text, _Calls, "ToolSet"], Wait[None]]
"""A format's reader of one block: a generator over the growing text that fills in the calls."""


def _hermes(fmt: HermesFormat) -> Reader:
    """``hermes``: ``<tool_call>{"name": NAME, "arguments": ARGS}</tool_call>``. The name once its JSON
    string closes; the arguments character by character (:class:`JsonTransducer`)."""
    m, b = fmt.markers, fmt.block
    name_key, arguments_key = json.dumps(b["name_key"]), json.dumps(b["arguments_key"])

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        yield from _ws(t)
        yield from _lit(t, "{")
        yield from _ws(t)
        yield from _lit(t, name_key)
        yield from _ws(t)
        yield from _lit(t, ":")
        yield from _ws(t)
        call = out.new()
        tool = _tool(tools, (yield from _json_string(t)))
        call.name = tool.name
        yield from _ws(t)
        yield from _lit(t, ",")
        yield from _ws(t)
        yield from _lit(t, arguments_key)
        yield from _ws(t)
        yield from _lit(t, ":")
        yield from _ws(t)
        yield from _json(t, call, _arguments_of(tool), arguments=True)
        yield from _ws(t)
        yield from _lit(t, "}")
        yield from _ws(t)
        yield from _lit(t, m.block_close)

    return read


def _llama3_json(fmt: Llama3JsonFormat) -> Reader:
    """``llama3-json``: ``[<|python_tag|>]{"name": NAME, "parameters"|"arguments": ARGS}``. As hermes
    (Meta's ``"type": "function"`` first is read by the parser, never written by the grammar: it stops
    streaming, and the complete call is returned at the end)."""
    m, b = fmt.markers, fmt.block
    name_key = json.dumps(b["name_key"])

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        if (yield from _starts(t, m.block_open)):
            t.pos += len(m.block_open)
            yield from _ws(t)
        yield from _lit(t, "{")
        yield from _ws(t)
        yield from _lit(t, name_key)
        yield from _ws(t)
        yield from _lit(t, ":")
        yield from _ws(t)
        call = out.new()
        tool = _tool(tools, (yield from _json_string(t)))
        call.name = tool.name
        yield from _ws(t)
        yield from _lit(t, ",")
        yield from _ws(t)
        if (yield from _json_string(t)) not in b["arguments_keys"]:
            raise _Off("not an arguments key")
        yield from _ws(t)
        yield from _lit(t, ":")
        yield from _ws(t)
        yield from _json(t, call, _arguments_of(tool), arguments=True)

    return read


_MISTRAL_BAD_NAME = re.compile(r"[\[\]\s{}]")
_CALL_ID = re.compile(r"[A-Za-z0-9]+")


def _mistral(fmt: MistralFormat) -> Reader:
    """``mistral`` / ``mistral-think-text``: ``[TOOL_CALLS]NAME[ARGS]{json}`` (``[CALL_ID]ID`` after the name
    allowed); the name at the first ``[``, the arguments character by character. ``mistral-v3``: the
    ``[TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]`` array, one call per item, as hermes."""
    m, b = fmt.markers, fmt.block
    if b["shape"] == "array":
        return _mistral_array(fmt)

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        call = out.new()
        k = yield from _find(t, "[")
        name = t.s[t.pos : k]
        if not name or _MISTRAL_BAD_NAME.search(name):
            raise _Off(f"bad tool name {name!r}")
        call.name = _tool(tools, name).name
        t.pos = k
        if (yield from _starts(t, b["call_id"])):
            t.pos += len(b["call_id"])
            k = yield from _find(t, "[")
            if not _CALL_ID.fullmatch(t.s, t.pos, k):
                raise _Off("bad call id")
            t.pos = k
        yield from _lit(t, b["args"])
        yield from _ws(t)
        yield from _json(t, call, _arguments_of(tools[name]), arguments=True)

    return read


def _mistral_array(fmt: MistralFormat) -> Reader:
    m, b = fmt.markers, fmt.block
    name_key, arguments_key = json.dumps(b["name_key"]), json.dumps(b["arguments_key"])

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        yield from _ws(t)
        yield from _lit(t, "[")
        while True:
            yield from _ws(t)
            yield from _lit(t, "{")
            yield from _ws(t)
            yield from _lit(t, name_key)
            yield from _ws(t)
            yield from _lit(t, ":")
            yield from _ws(t)
            call = out.new()
            tool = _tool(tools, (yield from _json_string(t)))
            call.name = tool.name
            yield from _ws(t)
            yield from _lit(t, ",")
            yield from _ws(t)
            yield from _lit(t, arguments_key)
            yield from _ws(t)
            yield from _lit(t, ":")
            yield from _ws(t)
            yield from _json(t, call, _arguments_of(tool), arguments=True)
            yield from _ws(t)
            yield from _lit(t, "}")
            yield from _ws(t)
            nxt = yield from _which(t, (",", "]"))
            if nxt is None:
                raise _Off("expected ',' or ']' after a call")
            t.pos += 1
            if nxt == "]":
                return

    return read


_GPT_WORD = re.compile(r"[A-Za-z0-9_.+\-]+")
_GPT_RECIPIENT_END = re.compile(r"[\s<]")


def _gpt_oss(fmt: GptOssFormat) -> Reader:
    """``gpt-oss``: a harmony header with the recipient ``functions.NAME`` (in the role header or after the
    channel), then ``<|message|>`` and the JSON arguments. The name once the recipient ends; the arguments
    character by character. The block text may start at the header's ``<|start|>``/``<|channel|>`` (what
    ``parse_turn`` cuts) or at `` to=`` (what the grammar writes)."""

    def recipient(t: _Text, out: _Calls, tools: ToolSet) -> Wait[_Call]:
        t.pos += len(TO)
        m = yield from _search(t, _GPT_RECIPIENT_END)
        who = t.s[t.pos : m.start()]
        if not who.startswith(RECIPIENT_PREFIX):
            raise _Off(f"recipient {who!r} is not a function")
        call = out.new()
        call.name = _tool(tools, who[len(RECIPIENT_PREFIX) :]).name
        t.pos = m.start()
        return call

    def word(t: _Text) -> Wait[None]:
        while True:
            m = _GPT_WORD.match(t.s, t.pos)
            if m is None and t.pos < len(t.s):
                raise _Off(f"expected a word at {t.pos}")
            if m is None:
                yield
                continue
            if m.end() < len(t.s):
                t.pos = m.end()
                return
            yield

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        if (yield from _starts(t, START)):
            t.pos += len(START)
            yield from _lit(t, ROLE)
        call = None
        if (yield from _starts(t, TO)):
            call = yield from recipient(t, out, tools)
        if (yield from _starts(t, CHANNEL)):
            t.pos += len(CHANNEL)
            yield from word(t)
            if call is None and (yield from _starts(t, TO)):
                call = yield from recipient(t, out, tools)
        if call is None:
            raise _Off("a header without a recipient")
        if not (yield from _starts(t, MESSAGE)):
            if (yield from _starts(t, " ")):
                t.pos += 1
            if (yield from _starts(t, CONSTRAIN)):
                t.pos += len(CONSTRAIN)
            yield from word(t)
        yield from _lit(t, MESSAGE)
        yield from _ws(t)
        assert call.name is not None
        yield from _json(t, call, _arguments_of(tools[call.name]), arguments=True)

    return read


# --------------------------------------------------------------------------- sections: DeepSeek, Kimi


def _deepseek(fmt: DeepSeekV41Format) -> Reader:
    """The DeepSeek sections (one section holds every call; the opener names the sub-format).

    V3 (``function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```...``) and V3.1 (``NAME<｜tool▁sep｜>ARGS``): the
    name once it ends (``\\n`` / ``<``), the JSON arguments character by character. DSML (V3.2, V4, V4.1):
    the name at its closing ``"``; each parameter's key once complete; a ``string="true"`` value (raw text)
    character by character, holding back what may start ``</｜DSML｜parameter>``; a ``string="false"``
    value (JSON) streamed when it is an object or array, else once complete."""
    by_opener: dict[str, Variant] = {}
    for v in variants().values():
        by_opener.setdefault(v.section_open, v)
    openers = tuple(by_opener)
    v3 = variants()["v3"]
    head = v3.call_type + v3.tool_sep

    def json_call(t: _Text, call: _Call, v: Variant, tools: ToolSet) -> Wait[None]:
        v3_form = False
        if (yield from _starts(t, head)):
            after = t.pos + len(head)
            while len(t.s) <= after:
                yield
            v3_form = t.s[after] != "{" and t.s[after] not in JSON_WS
        if v3_form:
            t.pos += len(head)
            k = yield from _find(t, v3.fence_open[0])
            name = t.s[t.pos : k]
            if "<" in name:
                raise _Off("bad tool name")
            tool = _tool(tools, name)
            call.name = tool.name
            t.pos = k
            yield from _lit(t, v3.fence_open)
            yield from _ws(t)
            yield from _json(t, call, _arguments_of(tool), arguments=True)
            yield from _ws(t)
            yield from _lit(t, v3.fence_close.strip())
        else:
            k = yield from _find(t, "<")
            name = t.s[t.pos : k]
            if "\n" in name:
                raise _Off("bad tool name")
            tool = _tool(tools, name)
            call.name = tool.name
            t.pos = k
            yield from _lit(t, v.tool_sep)
            yield from _ws(t)
            yield from _json(t, call, _arguments_of(tool), arguments=True)
        yield from _ws(t)
        yield from _lit(t, v.call_close)

    def dsml_call(t: _Text, call: _Call, v: Variant, tools: ToolSet) -> Wait[None]:
        k = yield from _find(t, '"')
        name = t.s[t.pos : k]
        if any(c in name for c in "<>\n"):
            raise _Off("bad tool name")
        tool = _tool(tools, name)
        call.name = tool.name
        t.pos = k
        end = yield from _which(t, ('"/>', '">'))
        if end is None:
            raise _Off("bad invoke tag")
        t.pos += len(end)
        if end == '"/>':
            call.emit("{}")
            call.complete = True
            return
        call.emit("{")
        seen: set[str] = set()
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (v.call_close, v.param_open))
            if nxt is None:
                raise _Off("expected a parameter")
            t.pos += len(nxt)
            if nxt == v.call_close:
                call.emit("}")
                call.complete = True
                return
            k = yield from _find(t, '"')
            key = t.s[t.pos : k]
            if key in seen or any(c in key for c in "<>\n"):
                raise _Off(f"bad or repeated parameter {key!r}")
            call.emit(_key(not seen, key))
            seen.add(key)
            t.pos = k
            kind = yield from _which(t, ('" string="true">', '" string="false">'))
            if kind is None:
                raise _Off("bad parameter tag")
            t.pos += len(kind)
            if "true" in kind:
                yield from _raw_string(t, call, v.param_close)
            else:
                sub = _property(tool, key)
                yield from _raw_json(t, call, v.param_close, None if sub is None else (sub,))

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        opener = yield from _which(t, openers)
        if opener is None:
            raise _Off("not a section opener")
        v = by_opener[opener]
        t.pos += len(opener)
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (v.section_close, v.call_open))
            if nxt is None:
                raise _Off("expected a call")
            t.pos += len(nxt)
            if nxt == v.section_close:
                return
            call = out.new()
            yield from (dsml_call(t, call, v, tools) if v.dsml else json_call(t, call, v, tools))

    return read


_KIMI_ID_NAME = re.compile(r"\s*(?:functions\.)?([^\s:<>]+)")
_KIMI_ID = re.compile(r"\s*(?:functions\.)?([^\s:<>]+):(\d+)\s*")


def _kimi(fmt: KimiFormat) -> Reader:
    """``kimi`` (K2): ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>``
    calls in one section; the name at the ``:`` of its id, the JSON arguments character by character."""
    m, k2 = fmt.markers, k2_markup()

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (m.block_close, k2.call_open))
            if nxt is None:
                raise _Off("expected a call")
            t.pos += len(nxt)
            if nxt == m.block_close:
                return
            call = out.new()
            k = yield from _find(t, k2.id_sep)
            named = _KIMI_ID_NAME.fullmatch(t.s, t.pos, k)
            if named is None:
                raise _Off("bad call id")
            tool = _tool(tools, named.group(1))
            call.name = tool.name
            a = yield from _find(t, k2.argument_open)
            if not _KIMI_ID.fullmatch(t.s, t.pos, a):
                raise _Off("bad call id")
            t.pos = a + len(k2.argument_open)
            yield from _ws(t)
            yield from _json(t, call, _arguments_of(tool), arguments=True)
            yield from _ws(t)
            yield from _lit(t, k2.call_close)

    return read


def _kimi_k3(fmt: KimiK3Format) -> Reader:
    """``kimi-k3`` (XTML): ``<|open|>call tool="NAME" index="N"<|sep|>`` + arguments ``<|open|>argument
    key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>``. The name at its closing ``"``; each key once
    complete; a ``type="string"`` value (raw text) character by character, holding back a
    ``<|close|>argument<|sep|>`` until what follows it says whether it ends the value; other values (JSON)
    streamed when they are an object or array, else once complete."""
    m, k3 = fmt.markers, k3_markup()
    ends = (k3.argument_open, k3.call_close)

    def value_end(t: _Text, call: _Call | None) -> Wait[int]:
        """The ``<|close|>argument<|sep|>`` that ends the value at the reading position (the first one
        followed, after whitespace, by the next argument or the call's closer); with ``call``, the value is
        raw text streamed into it as it becomes final."""
        frm = t.pos
        while True:
            s = t.s
            k = s.find(k3.argument_close, frm)
            if k == -1:
                frm = _held_from(s, frm, (k3.argument_close,))
                if call is not None and frm > t.pos:
                    call.emit(_enc(s[t.pos : frm]))
                    t.pos = frm
                yield
                continue
            a = k + len(k3.argument_close)
            while a < len(s) and s[a] in JSON_WS:
                a += 1
            rest = s[a:]
            if any(rest.startswith(w) for w in ends):
                return k
            if call is not None and k > t.pos:
                call.emit(_enc(s[t.pos : k]))
                t.pos = k
            if any(len(rest) < len(w) and w.startswith(rest) for w in ends):
                frm = k
                yield
                continue
            frm = k + 1

    def attribute(t: _Text) -> Wait[str]:
        k = yield from _find(t, '"')
        text = t.s[t.pos : k]
        if any(c in text for c in "<>\n"):
            raise _Off("bad attribute")
        t.pos = k
        return text

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (m.block_close, k3.call_open))
            if nxt is None:
                raise _Off("expected a call")
            t.pos += len(nxt)
            if nxt == m.block_close:
                return
            call = out.new()
            tool = _tool(tools, html.unescape((yield from attribute(t))))
            call.name = tool.name
            yield from _lit(t, k3.call_index)
            if not (yield from attribute(t)).isdigit():
                raise _Off("bad call index")
            t.pos += 1
            yield from _lit(t, k3.sep)
            call.emit("{")
            seen: set[str] = set()
            while True:
                yield from _ws(t)
                nxt = yield from _which(t, (k3.call_close, k3.argument_open))
                if nxt is None:
                    raise _Off("expected an argument")
                t.pos += len(nxt)
                if nxt == k3.call_close:
                    call.emit("}")
                    call.complete = True
                    break
                key = html.unescape((yield from attribute(t)))
                if key in seen:
                    raise _Off(f"repeated argument {key!r}")
                call.emit(_key(not seen, key))
                seen.add(key)
                yield from _lit(t, k3.argument_type)
                kind = yield from attribute(t)
                t.pos += 1
                yield from _lit(t, k3.sep)
                if kind == "string":
                    call.emit('"')
                    k = yield from value_end(t, call)
                    call.emit(_enc(t.s[t.pos : k]) + '"')
                    t.pos = k + len(k3.argument_close)
                    continue
                start = t.pos
                yield from _ws(t)
                if t.s[t.pos] in "{[":
                    sub = _property(tool, key)
                    yield from _json(t, call, None if sub is None else (sub,))
                    k = yield from value_end(t, None)
                    if t.s[t.pos : k].strip(JSON_WS):
                        raise _Off("text after a JSON value")
                else:
                    t.pos = start
                    k = yield from value_end(t, None)
                    try:
                        value = loads(t.s[start:k])
                    except (ValueError, RecursionError):
                        raise _Off("not JSON") from None
                    call.emit(json.dumps(value, ensure_ascii=False))
                t.pos = k + len(k3.argument_close)

    return read


# --------------------------------------------------------------------------- qwen-xml, glm

_QWEN_NAME_END = re.compile(r"[>\n<]")
_QWEN_VALUE_ENDS = (
    "\n</parameter>",
    "</parameter><parameter=",
    "</parameter></function>",
    "</parameter>\n<parameter=",
    "</parameter>\n</function>",
    "\n<parameter=",
    "\n</function>",
)
"""Every shortest text :data:`~toolgrammar.formats.qwen_xml.parser.VALUE_END` matches (its look-ahead included)."""


def _qwen_xml(fmt: QwenXmlFormat) -> Reader:
    """``qwen-xml``: ``<function=NAME>`` then ``<parameter=KEY>\\nVALUE\\n</parameter>`` per argument. The
    name at its ``>``; each key once complete; a value whose schema is string-only character by character
    (the markup newline before it dropped, anything that may start its end held back); a JSON object or
    array value (a schema that reads no text) streamed; any other value once complete, through the
    parser's own ``convert_value`` (a ``["string", "null"]`` value is only known whole)."""
    m = fmt.markers

    def tag_name(t: _Text) -> Wait[str]:
        found = yield from _search(t, _QWEN_NAME_END)
        if found.group() != ">" or found.start() == t.pos:
            raise _Off("bad tag")
        name = t.s[t.pos : found.start()]
        t.pos = found.end()
        return name

    def value(t: _Text, call: _Call, schema: Any, streamed: bool) -> Wait[None]:
        """The value from the reading position (just past ``>``) to its end, consumed."""
        start = t.pos
        while len(t.s) <= start:
            yield
        content = start + 1 if t.s[start] == "\n" else start
        settled, sent = start, content
        if streamed:
            call.emit('"')
        while True:
            s = t.s
            found = VALUE_END.search(s, settled)
            if found is not None:
                if found.group() == "\n":
                    raise _Off("a parameter without </parameter>")
                raw = s[content : found.start()]
                if streamed:
                    call.emit(_enc(s[sent : found.start()]) + '"')
                else:
                    call.emit(json.dumps(convert_value(raw, schema), ensure_ascii=False))
                t.pos = found.end()
                return
            settled = _held_from(s, settled, _QWEN_VALUE_ENDS)
            if streamed and settled > sent:
                call.emit(_enc(s[sent:settled]))
                sent = settled
            yield

    def container(t: _Text, call: _Call, schema: Any) -> Wait[None]:
        """A JSON object or array value, streamed, then its end."""
        yield from _json(t, call, (schema,))
        while True:
            s = t.s
            found = VALUE_END.search(s, t.pos)
            if found is not None:
                if found.group() == "\n" or s[t.pos : found.start()].strip():
                    raise _Off("bad value end")
                t.pos = found.end()
                return
            yield

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        yield from _ws(t)
        yield from _lit(t, FUNCTION_OPEN)
        call = out.new()
        tool = _tool(tools, (yield from tag_name(t)))
        call.name = tool.name
        call.emit("{")
        seen: set[str] = set()
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (PARAMETER_OPEN, FUNCTION_CLOSE))
            if nxt is None:
                raise _Off("expected a parameter")
            t.pos += len(nxt)
            if nxt == FUNCTION_CLOSE:
                call.emit("}")
                call.complete = True
                break
            key = yield from tag_name(t)
            if key in seen:
                raise _Off(f"repeated parameter {key!r}")
            call.emit(_key(not seen, key))
            seen.add(key)
            schema = _property(tool, key)
            if _json_container_only(schema):
                after = t.pos
                yield from _ws(t)
                if t.s[t.pos] in "{[":
                    yield from container(t, call, schema)
                    continue
                t.pos = after
            yield from value(t, call, schema, _string_only(schema))
        yield from _ws(t)
        yield from _lit(t, m.block_close)

    return read


_GLM_NAME_END = re.compile(r"[<\s]")


def _glm(fmt: GlmFormat) -> Reader:
    """``glm`` / ``glm45``: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...``. The
    name once it ends (``<`` or whitespace); each key once complete; a value whose schema is string-only
    character by character (holding back what may start ``</arg_value>``); a JSON object or array value
    (a schema that reads no text) streamed; any other value once complete (``convert_value``)."""
    m, tags = fmt.markers, TAGS

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        yield from _ws(t)
        call = out.new()
        found = yield from _search(t, _GLM_NAME_END)
        tool = _tool(tools, t.s[t.pos : found.start()])
        call.name = tool.name
        t.pos = found.start()
        call.emit("{")
        seen: set[str] = set()
        while True:
            yield from _ws(t)
            nxt = yield from _which(t, (tags.key_open, m.block_close))
            if nxt is None:
                raise _Off("expected an argument")
            t.pos += len(nxt)
            if nxt == m.block_close:
                call.emit("}")
                call.complete = True
                return
            k = yield from _find(t, "<")
            key = t.s[t.pos : k]
            if not key or key in seen:
                raise _Off(f"bad or repeated argument {key!r}")
            call.emit(_key(not seen, key))
            seen.add(key)
            t.pos = k
            yield from _lit(t, tags.key_close)
            yield from _ws(t)
            yield from _lit(t, tags.value_open)
            schema = _property(tool, key)
            if _string_only(schema):
                yield from _raw_string(t, call, tags.value_close)
                continue
            start = t.pos
            if _json_container_only(schema):
                yield from _ws(t)
                if t.s[t.pos] in "{[":
                    yield from _json(t, call, (schema,))
                    k = yield from _find(t, tags.value_close)
                    if t.s[t.pos : k].strip():
                        raise _Off("text after a JSON value")
                    t.pos = k + len(tags.value_close)
                    continue
                t.pos = start
            k = yield from _find(t, tags.value_close)
            call.emit(json.dumps(convert_value(t.s[start:k], schema), ensure_ascii=False))
            t.pos = k + len(tags.value_close)

    return read


# --------------------------------------------------------------------------- gemma4

_GEMMA_BARE_END = re.compile(r"[,}\]]")
_GEMMA_KEY_FORBIDDEN = ("{", "}", "[", "]", ",", ":", QUOTE)


def _gemma4(fmt: Gemma4Format) -> Reader:
    """``gemma4``: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`` in Gemma 4's object notation. The
    name at its ``{``; keys once complete; a ``<|"|>`` string character by character (holding back what
    may start ``<|"|>``); objects and arrays as they open and close; a bare scalar once complete."""
    m = fmt.markers

    def string(t: _Text) -> Wait[str]:
        t.pos += len(QUOTE)
        k = yield from _find(t, QUOTE)
        text = t.s[t.pos : k]
        t.pos = k + len(QUOTE)
        return text

    def value(t: _Text, call: _Call) -> Wait[None]:
        yield from _ws(t)
        if (yield from _starts(t, QUOTE)):
            t.pos += len(QUOTE)
            yield from _raw_string(t, call, QUOTE)
            return
        c = t.s[t.pos]
        if c == "{":
            yield from obj(t, call)
        elif c == "[":
            t.pos += 1
            call.emit("[")
            yield from _ws(t)
            if t.s[t.pos] == "]":
                t.pos += 1
                call.emit("]")
                return
            while True:
                yield from value(t, call)
                yield from _ws(t)
                c = t.s[t.pos]
                t.pos += 1
                if c == "]":
                    call.emit("]")
                    return
                if c != ITEM_SEP:
                    raise _Off("expected ',' or ']'")
                call.emit(", ")
        else:
            found = yield from _search(t, _GEMMA_BARE_END)
            try:
                scalar = bare_value(t.s[t.pos : found.start()].strip(JSON_WS))
            except Malformed:
                raise _Off("bad bare value") from None
            call.emit(json.dumps(scalar, ensure_ascii=False))
            t.pos = found.start()

    def obj(t: _Text, call: _Call) -> Wait[None]:
        t.pos += 1
        call.emit("{")
        yield from _ws(t)
        if t.s[t.pos] == "}":
            t.pos += 1
            call.emit("}")
            return
        seen: set[str] = set()
        while True:
            yield from _ws(t)
            if (yield from _starts(t, QUOTE)):
                key = yield from string(t)
                yield from _ws(t)
                yield from _lit(t, KEY_SEP)
            else:
                k = yield from _find(t, KEY_SEP)
                key = t.s[t.pos : k].strip(JSON_WS)
                if not key or any(w in key for w in _GEMMA_KEY_FORBIDDEN):
                    raise _Off(f"bad key {key!r}")
                t.pos = k + len(KEY_SEP)
            if key in seen:
                raise _Off(f"repeated key {key!r}")
            call.emit(_key(not seen, key))
            seen.add(key)
            yield from value(t, call)
            yield from _ws(t)
            c = t.s[t.pos]
            t.pos += 1
            if c == "}":
                call.emit("}")
                return
            if c != ITEM_SEP:
                raise _Off("expected ',' or '}'")

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        yield from _lit(t, m.block_open)
        yield from _ws(t)
        yield from _lit(t, CALL_PREFIX)
        call = out.new()
        k = yield from _find(t, "{")
        name = t.s[t.pos : k]
        if any(c in name for c in JSON_WS + "<"):
            raise _Off("bad tool name")
        call.name = _tool(tools, name).name
        t.pos = k
        yield from obj(t, call)
        call.complete = True
        yield from _ws(t)
        yield from _lit(t, m.block_close)

    return read


# --------------------------------------------------------------------------- llama4-pythonic

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PY_WS = " \t\n\r\f"
_PY_SIMPLE_ESCAPES = frozenset("\\'\"abfnrtv\n")


def _py_escape_length(s: str, i: int) -> int:
    """Length of the complete escape at ``s[i]`` (a backslash); 0 while more text decides; -1: not one
    this reader decodes."""
    n = len(s)
    if i + 1 >= n:
        return 0
    e = s[i + 1]
    if e in _PY_SIMPLE_ESCAPES:
        return 2
    if e in "01234567":
        j = i + 2
        while j < n and j < i + 4 and s[j] in "01234567":
            j += 1
        return j - i if j < n or j == i + 4 else 0
    width = {"x": 2, "u": 4, "U": 8}.get(e)
    if width is not None:
        return 2 + width if i + 2 + width <= n else 0
    if e == "N":
        close = s.find("}", i + 2, i + 100)
        if close == -1:
            return 0 if n < i + 100 else -1
        return close + 1 - i
    if e == "\r":
        return -1
    return 2  # an unknown escape: Python keeps it as written


def _py_literal(text: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes warn (SyntaxWarning / DeprecationWarning)
        return ast.literal_eval(text)


def _llama4_pythonic(fmt: Llama4PythonicFormat) -> Reader:
    """``llama4-pythonic``: ``[NAME(KEY=VALUE, ...), ...]`` (bare or in ``<|python_start|>``), one call per
    item. The name at its ``(``; each key at its ``=``; a value that starts with a quote (a one-line string)
    character by character, its escapes decoded as Python does; any other value (and a triple-quoted or
    concatenated string) once complete, through ``ast.literal_eval`` as the parser reads it."""
    m, b = fmt.markers, fmt.block

    def identifier(t: _Text) -> Wait[str]:
        while True:
            found = _IDENTIFIER.match(t.s, t.pos)
            if found is None and t.pos < len(t.s):
                raise _Off(f"expected a name at {t.pos}")
            if found is None:
                yield
                continue
            if found.end() < len(t.s):
                t.pos = found.end()
                return found.group()
            yield

    def whole_value(t: _Text, call: _Call) -> Wait[None]:
        """A value up to the ``,`` or ``)`` that ends it (brackets and quotes counted, as the parser's
        list scanner counts them), read as Python reads it."""
        start = i = t.pos
        depth, quote, escape = 0, "", False
        while True:
            s = t.s
            n = len(s)
            while i < n:
                ch = s[i]
                if quote:
                    if escape:
                        escape = False
                    elif ch == "\\":
                        escape = True
                    elif ch == quote:
                        quote = ""
                elif ch in "'\"":
                    quote = ch
                elif ch in "([{":
                    depth += 1
                elif ch in ")]}":
                    if depth == 0:
                        break
                    depth -= 1
                elif ch == "," and depth == 0:
                    break
                i += 1
            if i < n:
                break
            yield
        try:
            value = _py_literal("(" + t.s[start:i] + "\n)")
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise _Off("not a literal") from None
        if json_problem(value):
            raise _Off("not a JSON value")
        call.emit(json.dumps(value, ensure_ascii=False))
        t.pos = i

    def string_value(t: _Text, call: _Call) -> Wait[bool]:
        """A one-line string literal streamed; ``False`` (nothing read) for a triple-quoted one."""
        q = t.s[t.pos]
        while len(t.s) < t.pos + 3 and t.s[t.pos + 1 : t.pos + 2] in ("", q):
            yield
        if t.s[t.pos : t.pos + 3] == q * 3:
            return False
        t.pos += 1
        call.emit('"')
        plain = re.compile(r"[^\\\r\n" + q + "]+")
        while True:
            s = t.s
            found = plain.match(s, t.pos)
            if found is not None:
                call.emit(_enc(found.group()))
                t.pos = found.end()
                continue
            if t.pos >= len(s):
                yield
                continue
            c = s[t.pos]
            if c == q:
                t.pos += 1
                break
            if c != "\\":
                raise _Off("a line break in a string")
            size = _py_escape_length(s, t.pos)
            if size == 0:
                yield
                continue
            if size < 0:
                raise _Off("an escape this reader does not decode")
            try:
                decoded = _py_literal(q + s[t.pos : t.pos + size] + q)
            except (ValueError, SyntaxError):
                raise _Off("a bad escape") from None
            call.emit(_enc(decoded))
            t.pos += size
        yield from _ws(t, _PY_WS)
        if t.s[t.pos] not in ",)":
            raise _Off("more after a string (a concatenation?)")
        call.emit('"')
        return True

    def one_call(t: _Text, call: _Call, tools: ToolSet) -> Wait[None]:
        tool = _tool(tools, (yield from identifier(t)))
        yield from _ws(t, _PY_WS)
        yield from _lit(t, "(")
        call.name = tool.name
        call.emit("{")
        seen: set[str] = set()
        while True:
            yield from _ws(t, _PY_WS)
            if t.s[t.pos] == ")":
                t.pos += 1
                call.emit("}")
                call.complete = True
                return
            key = yield from identifier(t)
            yield from _ws(t, _PY_WS)
            yield from _lit(t, "=")
            if (yield from _peek(t)) == "=" or key in seen:
                raise _Off("not a keyword argument")
            call.emit(_key(not seen, key))
            seen.add(key)
            yield from _ws(t, _PY_WS)
            if t.s[t.pos] not in "'\"" or not (yield from string_value(t, call)):
                yield from whole_value(t, call)
            yield from _ws(t, _PY_WS)
            c = t.s[t.pos]
            if c == ",":
                t.pos += 1
            elif c != ")":
                raise _Off("expected ',' or ')'")

    def read(t: _Text, out: _Calls, tools: ToolSet) -> Wait[None]:
        if (yield from _starts(t, m.block_open)):
            t.pos += len(m.block_open)
            yield from _ws(t, _PY_WS)
        yield from _lit(t, b["list_open"])
        while True:
            yield from _ws(t, _PY_WS)
            yield from one_call(t, out.new(), tools)
            yield from _ws(t, _PY_WS)
            c = t.s[t.pos]
            t.pos += 1
            if c == ",":
                yield from _ws(t, _PY_WS)
                if t.s[t.pos] == b["list_close"]:
                    return
            elif c == b["list_close"]:
                return
            else:
                raise _Off("expected ',' or ']'")

    return read


# --------------------------------------------------------------------------- the readers of the formats

_READERS: list[tuple[type, Callable[[Any], Reader]]] = [
    (HermesFormat, _hermes),
    (QwenXmlFormat, _qwen_xml),
    (GptOssFormat, _gpt_oss),
    (Gemma4Format, _gemma4),
    (GlmFormat, _glm),
    (Llama3JsonFormat, _llama3_json),
    (Llama4PythonicFormat, _llama4_pythonic),
    (MistralFormat, _mistral),
    (DeepSeekV41Format, _deepseek),
    (KimiK3Format, _kimi_k3),
    (KimiFormat, _kimi),
]
"""Format class -> the factory of its reader; the first class the format is an instance of wins (a
subclass before its base)."""


def register_reader(cls: type, factory: Callable[[Any], Reader]) -> None:
    """Stream the calls of ``cls`` (and its subclasses) with ``factory(fmt)`` (checked before the built-ins)."""
    _READERS.insert(0, (cls, factory))


def _reader_of(fmt: ToolCallFormat) -> Reader | None:
    return next((factory(fmt) for cls, factory in _READERS if isinstance(fmt, cls)), None)


class PartialCallReader:
    """The calls of one block, read as its text grows (one reader per block).

    ``read(text)`` takes the block's whole text so far, from its opener, and returns one
    :class:`PartialCall` per call begun in it, in order. For most formats the block is what
    :func:`~toolgrammar.turn.parser.parse_turn` cuts as one (for ``gpt-oss`` from the message header, or
    from the `` to=`` the grammar writes) and holds one call. A *section* (``block_holds_calls``: DeepSeek,
    Kimi, ``mistral-v3``, ``llama4-pythonic``) is read whole, from the section's opener to its closer, and
    gives one partial call per call in it (``parse_turn`` returns those calls as its blocks), every one
    before the last complete. Each ``text`` must extend the one read before (:class:`StreamingError`
    otherwise).

    A format with no reader (an out-of-tree one; see :func:`register_reader`) streams nothing: the name
    and the whole arguments arrive when the strict parser reads the block as complete valid calls.
    """

    def __init__(self, fmt: str | ToolCallFormat, tools: ToolSet) -> None:
        self.format = get_format(fmt)
        self.tools = tools
        self._text = _Text()
        self._calls = _Calls()
        reader = _reader_of(self.format)
        self._gen: Wait[None] | None = None if reader is None else reader(self._text, self._calls, tools)
        self._state = "reading" if reader is not None else "off"

    @property
    def stopped(self) -> bool:
        """Whether streaming stopped before the block's end (text the reader does not follow)."""
        return self._state == "off"

    def read(self, text: str) -> tuple[PartialCall, ...]:
        prev = self._text.s
        if len(text) < len(prev) or not text.startswith(prev):
            raise StreamingError(
                "PartialCallReader.read: the text must extend the text read before; read each block with its own "
                "reader (a new PartialCallReader per block)"
            )
        self._text.s = text
        if self._state == "reading" and self._gen is not None:
            try:
                next(self._gen)
            except StopIteration:
                self._state = "done"
            except _Off:
                self._state = "off"
        # Every built-in block ends with one of these characters: the parser is asked only then.
        if self._state == "off" and text and (self._gen is None or text[-1] in "}]>"):
            self._complete_from_parser(text)
        return tuple(c.partial() for c in self._calls.calls)

    def _complete_from_parser(self, text: str) -> None:
        """When the strict parser reads ``text`` as complete valid calls that extend what was streamed,
        those calls' names and whole arguments."""
        turn = self.format.parse_turn(text, self.tools)
        blocks = turn.blocks
        if not blocks or turn.content or turn.reasoning_content:
            return
        if any(b.call is None or not b.closed for b in blocks):
            return
        calls = [b.call for b in blocks if b.call is not None]
        mine = self._calls.calls
        if len(calls) < len(mine):
            return
        for call, got in zip(calls, (c.partial() for c in mine), strict=False):
            if got.name not in (None, call.name) or not call.arguments_json().startswith(got.arguments):
                return
        while len(mine) < len(calls):
            self._calls.new()
        for call, c in zip(calls, mine, strict=True):
            c.name = call.name
            c.partial()
            c.emit(call.arguments_json()[len(c.text) :])
            c.complete = True


def partial_calls(fmt: str | ToolCallFormat, block_text: str, tools: ToolSet) -> tuple[PartialCall, ...]:
    """The calls of one block's text so far (:class:`PartialCallReader`): one for most formats, one per
    call begun in a section."""
    return PartialCallReader(fmt, tools).read(block_text)


def partial_call(fmt: str | ToolCallFormat, block_text: str, tools: ToolSet) -> PartialCall:
    """The call that ``block_text`` (one block from its opener up to now) holds, as far as the text decides
    it: its name once complete, and a prefix of its final ``arguments_json()`` that every valid completion
    shares (module docstring). For a section (several calls in one block), the last call begun; the calls
    before it are complete (:func:`partial_calls` returns them all). No call begun yet: an empty one."""
    calls = partial_calls(fmt, block_text, tools)
    return calls[-1] if calls else PartialCall()


class ArgumentDeltas:
    """One call's OpenAI-style stream: the name once, then ``function.arguments`` fragments.

    ``feed`` each successive :class:`PartialCall` of the call; it returns the new fragment (what
    ``arguments`` holds beyond what was sent, ``""`` when nothing new). Fragments wait for the name: the
    first delta of a call carries it (:attr:`name`, :attr:`name_sent`). A name that changes, or arguments
    that no longer extend what was sent, raise :class:`StreamingError` (a bug, never bad model output).
    """

    __slots__ = ("name", "name_sent", "sent")

    def __init__(self) -> None:
        self.name: str | None = None
        """The call's name, once a partial call carried it."""
        self.name_sent = False
        """Whether :meth:`name_delta` handed the name out."""
        self.sent = ""
        """The arguments sent so far (the concatenation of every fragment returned)."""

    def name_delta(self) -> str | None:
        """The name, the first time it is known (to send in the call's first delta); ``None`` otherwise."""
        if self.name is None or self.name_sent:
            return None
        self.name_sent = True
        return self.name

    def feed(self, partial: PartialCall) -> str:
        if partial.name is not None:
            if self.name is not None and partial.name != self.name:
                raise StreamingError(f"the call's name changed from {self.name!r} to {partial.name!r}")
            self.name = partial.name
        if self.name is None:
            return ""
        arguments = partial.arguments
        if not arguments.startswith(self.sent):
            raise StreamingError(
                f"streamed arguments are no longer a prefix: sent {self.sent[-40:]!r}, now {arguments[-40:]!r}"
            )
        fragment = arguments[len(self.sent) :]
        self.sent = arguments
        return fragment


__all__ = [
    "ArgumentDeltas",
    "JsonTransducer",
    "PartialCall",
    "PartialCallReader",
    "StreamingError",
    "partial_call",
    "partial_calls",
    "register_reader",
]
