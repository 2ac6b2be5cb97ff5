"""Tool lists -> validated, normalized tools: the one place tool schemas are read.

:func:`load_tools` takes the OpenAI tool list (``{"type": "function", "function": {...}}``), bare
``{"name", "description", "parameters"}`` entries, a JSON file holding either, or a :class:`ToolSet`,
checks everything once and returns an immutable :class:`ToolSet`. Every later stage (grammar, parser,
processors) reads the *normalized* schemas and never the originals, so a constraint is either enforced
or rejected here with a :class:`~toolgrammar.errors.ToolSchemaError` that names the tool, the JSON
pointer of the offending node (relative to the tool's ``parameters``) and the keyword. Nothing is
dropped silently except the annotation keywords (:data:`ANNOTATION_KEYWORDS`), which constrain nothing.

The normalized schema (what ``grammar.py`` and ``parser.py`` rely on)
----------------------------------------------------------------------
- Every ``$ref`` is inlined (a deep copy per use); ``$defs``/``definitions`` and annotations are gone.
- The top level is exactly ``{"type": "object", "properties": {...}, "required": [...],
  "additionalProperties": False}``: the strict parser rejects unknown arguments, so the grammar never
  generates one. Missing, ``null`` and ``{}`` parameters all mean "no arguments" (``{}`` is how vLLM's and
  SGLang's tests, and CanIToolCall's glm/llama fixtures, spell it); anything else must say
  ``"type": "object"``.
- Every nested node whose ``type`` includes ``"object"`` is either a *record* node, with
  ``"properties"`` (maybe ``{}``) and ``"required"`` (maybe ``[]``), whose keys are exactly the declared
  properties; or a *map* node, with an ``"additionalProperties"`` schema and no ``"properties"``: any
  string keys, each value valid against that schema. A bare ``{"type": "object"}`` (no properties, no
  additionalProperties) means "any object" in JSON Schema and real outputs use it that way (CanIToolCall's
  ``nested-json-deep`` fills ``"when": {"type": "object"}`` with three keys), so it becomes the map node
  ``"additionalProperties": {}``; ``additionalProperties: true`` becomes ``{}`` as well.
- A ``true`` sub-schema becomes ``{}`` (any JSON value); ``type`` stays a string or a list; keyword and
  property order follow the original schema; nothing else changes.
- An ``anyOf`` node has no other constraining keyword, and an ``enum``/``const`` value always satisfies
  the rest of its node (checked with ``jsonschema``), so the grammar can emit the literals as they are.

This module imports the standard library, ``jsonschema`` and numpy (for its cache entries) only:
no torch, no transformers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import jsonschema
import jsonschema.exceptions
import numpy as np

from toolgrammar.errors import ToolSchemaError

__all__ = [
    "ANNOTATION_KEYWORDS",
    "ARGUMENT_MODES",
    "JSON_TYPES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "SUPPORTED_KEYWORDS",
    "TOOL_NAME_PATTERN",
    "ArgumentMode",
    "Tool",
    "ToolSet",
    "load_tools",
]

ArgumentMode = Literal["schema", "strings"]
"""How arguments are constrained: ``"schema"`` (each tool's JSON Schema) or ``"strings"`` (the seed
harness's rule: every declared argument is a string, required ones present, no unknown ones)."""

ARGUMENT_MODES: tuple[str, ...] = ("schema", "strings")

SUPPORTED_KEYWORDS: frozenset[str] = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
    }
)
"""The schema keywords the grammar enforces (``$ref``/``$defs``/``definitions`` are resolved here)."""

ANNOTATION_KEYWORDS: frozenset[str] = frozenset(
    {
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "$schema",
        "$id",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
"""Keywords dropped on purpose: they describe a value but constrain nothing."""

JSON_TYPES: tuple[str, ...] = ("string", "number", "integer", "boolean", "null", "object", "array")
"""The type names ``type`` may use."""

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
"""A tool name both formats carry verbatim (hermes: inside a JSON string; qwen-xml: ``<function=NAME>``).
Matched with ``fullmatch`` (a ``$`` would let a trailing newline through)."""

MAX_SCHEMA_DEPTH = 64
"""Deepest schema nesting accepted (after ``$ref`` inlining); deeper input gets a clear error, not a
``RecursionError``."""

MAX_SCHEMA_NODES = 20_000
"""Most schema nodes one tool may have once every ``$ref`` is inlined: a chain of definitions that each
use the previous one twice doubles at every step, and a grammar that large is a mistake, not a tool."""

_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties")
_ARRAY_KEYWORDS = ("items", "minItems", "maxItems")
_REF_KEYWORDS = ("$ref", "$defs", "definitions")
_ENTRY_KEYS_OPENAI = frozenset({"type", "function"})
_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
_ENTRY_KEYS_BARE = _FUNCTION_KEYS | {"type"}
_TOP_LEVEL_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_FINGERPRINT_VERSION = "toolgrammar.tools/1"

_KEYWORD_HINTS: dict[str, str] = {
    "oneOf": "use anyOf instead: the grammar cannot enforce that exactly one branch matches",
    "allOf": "merge the branches into one schema",
    "not": "the grammar cannot generate 'anything but' a schema",
    "nullable": 'OpenAPI\'s nullable is not JSON Schema: use "type": ["T", "null"] or anyOf with {"type": "null"}',
    "prefixItems": "tuple arrays are not supported: use one items schema",
    "if": "conditional schemas are not supported",
    "then": "conditional schemas are not supported",
    "else": "conditional schemas are not supported",
}
for _kw in ("pattern", "format", "minLength", "maxLength", "contentEncoding", "contentMediaType"):
    _KEYWORD_HINTS[_kw] = "string constraints are not enforced: describe the format in 'description' instead"
for _kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
    _KEYWORD_HINTS[_kw] = "numeric bounds are not enforced: use enum for a small set, or describe the range"
for _kw in ("uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems"):
    _KEYWORD_HINTS[_kw] = "this array constraint is not enforced"
for _kw in (
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
):
    _KEYWORD_HINTS[_kw] = "this object constraint is not enforced"
_TYPE_HINTS = {"int": "integer", "float": "number", "double": "number", "str": "string", "bool": "boolean"}
_TYPE_HINTS |= {"dict": "object", "list": "array", "none": "null", "None": "null", "map": "object"}


# --------------------------------------------------------------------------------------------------
# Public data model


@dataclass(frozen=True)
class Tool:
    """One validated tool.

    Equality compares every field; the hash uses the name and the normalized parameters.
    """

    name: str
    """The tool's name; matches :data:`TOOL_NAME_PATTERN`."""
    description: str | None
    """The tool's description as given, or ``None``."""
    parameters: dict[str, Any]
    """The normalized parameters schema (see the module docstring for the contract)."""
    source: dict[str, Any]
    """A deep copy of the entry exactly as given (either shape), for chat templates and re-normalizing."""

    def __hash__(self) -> int:
        return hash((self.name, _canonical_json(self.parameters)))

    def to_openai(self) -> dict[str, Any]:
        """This tool as an OpenAI tool entry with its original description and parameters."""
        fn = self.source.get("function", self.source)
        return {"type": "function", "function": _plain({k: v for k, v in fn.items() if k != "type"}, "")}


@dataclass(frozen=True)
class ToolSet:
    """An immutable, validated tool list in one argument mode; build it with :func:`load_tools`.

    Iterating yields the tools in the order given; ``name in toolset`` and ``toolset[name]`` look tools
    up by name (``KeyError`` naming the known tools when absent).
    """

    tools: tuple[Tool, ...]
    """The tools, in the order given."""
    mode: ArgumentMode = "schema"
    """How arguments are constrained (:data:`ArgumentMode`)."""

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        object.__setattr__(self, "tools", tuple(self.tools))
        seen: dict[str, int] = {}
        for index, tool in enumerate(self.tools):
            if not isinstance(tool, Tool):
                raise ToolSchemaError(f"ToolSet.tools[{index}] is a {type(tool).__name__}, not a Tool; use load_tools")
            if tool.name in seen:
                raise ToolSchemaError(
                    f"duplicate tool name: entries #{seen[tool.name]} and #{index} are both named {tool.name!r}; "
                    "tool names must be unique",
                    tool=tool.name,
                )
            seen[tool.name] = index

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            known = ", ".join(repr(n) for n in self.names) or "(none)"
            raise KeyError(f"unknown tool {name!r}; known tools: {known}") from None

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @cached_property
    def _by_name(self) -> dict[str, Tool]:
        return {tool.name: tool for tool in self.tools}

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in order."""
        return tuple(tool.name for tool in self.tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._by_name.get(name) if isinstance(name, str) else None

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of the mode and the normalized tools; a cache key.

        Canonical: keywords sorted inside each schema node, property order kept (it shapes the grammar),
        compact separators, UTF-8. It depends on nothing but the data, so it is the same in every run and
        on every machine; annotations and ``$ref`` spelling do not change it, descriptions do.
        """
        payload = {
            "version": _FINGERPRINT_VERSION,
            "mode": self.mode,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": _canonical(t.parameters)}
                for t in self.tools
            ],
        }
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def to_openai(self) -> list[dict[str, Any]]:
        """The OpenAI tool list to give ``apply_chat_template``: original descriptions and parameters
        (fresh copies; the ``strings`` mode does not rewrite what the model is shown)."""
        return [tool.to_openai() for tool in self.tools]


# --------------------------------------------------------------------------------------------------
# Loading


def load_tools(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | Mapping[str, Any] | ToolSet,
    *,
    mode: ArgumentMode = "schema",
) -> ToolSet:
    """Validate and normalize a tool list.

    Parameters
    ----------
    source : str | os.PathLike | Sequence[Mapping] | Mapping | ToolSet
        A path to a JSON file (a ``str`` is always a path) holding a list of entries or
        ``{"tools": [...]}``; a list of entries; a mapping ``{"tools": [...]}`` or one entry; or a
        :class:`ToolSet` (returned as is when its mode is ``mode``, re-normalized from its sources
        otherwise). An entry is ``{"type": "function", "function": {"name", "description"?,
        "parameters"?, "strict"?}}`` or bare ``{"name", "description"?, "parameters"?}`` (``"type":
        "function"`` and ``"strict"`` allowed too). Missing, ``null`` or empty (``{}``) ``parameters`` means
        no arguments: ``{}`` is how vLLM's, SGLang's and CanIToolCall's glm/llama tool lists spell it.
    mode : {"schema", "strings"}, default: "schema"
        ``"schema"`` enforces each tool's JSON Schema; ``"strings"`` makes every declared argument a
        string (the seed harness's rule) and checks only the structure of ``parameters``.

    Returns
    -------
    ToolSet

    Raises
    ------
    ToolSchemaError
        On anything that cannot be compiled; the message says what, where, and how to fix it.
    """
    _check_mode(mode)
    if isinstance(source, ToolSet):
        if source.mode == mode:
            return source
        entries: Sequence[Any] = [tool.source for tool in source.tools]
    elif isinstance(source, str | os.PathLike):
        entries = _read_file(source)
    elif isinstance(source, bytes | bytearray):
        raise ToolSchemaError(
            "tool source is bytes; pass a path (str or Path), a list of entries, a mapping or a ToolSet "
            "(for JSON text, pass json.loads(text))"
        )
    elif isinstance(source, Mapping):
        entries = _unwrap_mapping(source, where="tool mapping")
    elif isinstance(source, Sequence):
        entries = source
    else:
        raise ToolSchemaError(
            f"tool source is a {type(source).__name__}; pass a path, a list of entries, a mapping or a ToolSet"
        )

    # Validation is the slow part (jsonschema meta-checks every schema: ~3 ms a tool), and
    # processors are built again and again for the same tools: remember recent results.
    try:
        # Key order is kept (property order shapes the grammar), so equal text means an equal tool list.
        memo_key: str | None = mode + "\0" + json.dumps(entries, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        memo_key = None  # not plain JSON data: the checks below will say what is wrong
    if memo_key is None:
        return _load_entries(entries, mode)
    if memo_key in _recent:
        _recent.move_to_end(memo_key)
        return _recent[memo_key]
    disk_key = hashlib.sha256((_FINGERPRINT_VERSION + "\0" + memo_key).encode()).hexdigest()
    toolset = _from_disk(disk_key, mode)
    if toolset is None:
        toolset = _load_entries(entries, mode)
        _to_disk(disk_key, toolset)
    _recent[memo_key] = toolset
    if len(_recent) > 64:
        _recent.popitem(last=False)
    return toolset


def _to_disk(key: str, toolset: ToolSet) -> None:
    from . import cache

    data = [[t.name, t.description, t.parameters, t.source] for t in toolset.tools]
    text = json.dumps(data, ensure_ascii=False).encode("utf-8")
    cache.save("tools", key, {"json": np.frombuffer(text, dtype=np.uint8)})


def _from_disk(key: str, mode: ArgumentMode) -> ToolSet | None:
    """A tool list validated by an earlier process (keyed by the exact input text), read back as is."""
    from . import cache

    entry = cache.load("tools", key, check=_check_cached_tools)
    if entry is None:
        return None
    try:
        data = json.loads(entry["json"].tobytes().decode("utf-8"))
        return ToolSet(tuple(Tool(n, d, p, src) for n, d, p, src in data), mode)
    except (ValueError, TypeError, ToolSchemaError):
        return None


def _check_cached_tools(entry: dict[str, np.ndarray]) -> str | None:
    if set(entry) != {"json"} or entry["json"].dtype != np.uint8 or entry["json"].ndim != 1:
        return "expected one uint8 array 'json'"
    return None


_recent: OrderedDict[str, ToolSet] = OrderedDict()


def _load_entries(entries: Sequence[Any], mode: ArgumentMode) -> ToolSet:
    tools: list[Tool] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        tool = _load_entry(entry, index, mode)
        if tool.name in first_index:
            raise ToolSchemaError(
                f"duplicate tool name: entries #{first_index[tool.name]} and #{index} are both named "
                f"{tool.name!r}; tool names must be unique (rename or drop one)",
                tool=tool.name,
            )
        first_index[tool.name] = index
        tools.append(tool)
    return ToolSet(tuple(tools), mode)


def _check_mode(mode: object) -> None:
    if mode not in ARGUMENT_MODES:
        raise ToolSchemaError(f"unknown argument mode {mode!r}; use one of {', '.join(map(repr, ARGUMENT_MODES))}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _read_file(path: str | os.PathLike[str]) -> list[Any]:
    file = Path(path)
    try:
        exists, is_dir = file.is_file(), file.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        exists, is_dir = False, False
    if not exists:
        what = "is a directory, not a file" if is_dir else "does not exist"
        hint = ""
        if isinstance(path, str) and path.lstrip()[:1] in ("[", "{"):
            hint = " (a str source is a path; for JSON text pass json.loads(text))"
        raise ToolSchemaError(f"tool file {str(file)!r} {what}{hint}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ToolSchemaError(
            f"tool file {str(file)!r} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except OSError as error:
        raise ToolSchemaError(f"tool file {str(file)!r} cannot be read: {error.strerror or error}") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise ToolSchemaError(f"tool file {file}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
    except ValueError as error:  # NaN / Infinity
        raise ToolSchemaError(f"tool file {str(file)!r}: not valid JSON: {error}") from None
    except RecursionError:
        raise ToolSchemaError(f"tool file {str(file)!r}: JSON nested too deeply to read") from None
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and "tools" in data:
        return _unwrap_mapping(data, where=f"tool file {str(file)!r}")
    raise ToolSchemaError(
        f"tool file {str(file)!r} holds a JSON {_json_type_name(data)}; "
        'it must hold a list of tools or {"tools": [...]}'
    )


def _unwrap_mapping(data: Mapping[str, Any], *, where: str) -> Sequence[Any]:
    if "tools" not in data:
        return [data]  # one entry
    extra = sorted(str(k) for k in data if k != "tools")
    if extra:
        raise ToolSchemaError(f'{where}: unknown key(s) {", ".join(map(repr, extra))} beside "tools"; remove them')
    tools = data["tools"]
    if not isinstance(tools, list | tuple):
        raise ToolSchemaError(f'{where}: "tools" is a JSON {_json_type_name(tools)}; it must be a list of tools')
    return tools


def _load_entry(entry: Any, index: int, mode: str) -> Tool:
    label = f"#{index}"
    if not isinstance(entry, Mapping):
        raise ToolSchemaError(
            f'tool entry #{index} is a JSON {_json_type_name(entry)}; an entry is an object: {{"type": "function", '
            f'"function": {{"name": ..., "parameters": ...}}}} or {{"name": ..., "parameters": ...}}',
            tool=label,
        )
    if "function" in entry:
        allowed, fn = _ENTRY_KEYS_OPENAI, entry["function"]
        if not isinstance(fn, Mapping):
            raise ToolSchemaError(
                f'"function" is a JSON {_json_type_name(fn)}; it must be an object with "name" and optional '
                '"description", "parameters"',
                tool=_entry_label(None, index),
            )
        fn_unknown = [k for k in fn if k not in _FUNCTION_KEYS]
    else:
        allowed, fn, fn_unknown = _ENTRY_KEYS_BARE, entry, []
    raw_name = fn.get("name")
    label = _entry_label(raw_name, index)
    unknown = [k for k in entry if k not in allowed]
    if unknown or fn_unknown:
        where = "entry" if unknown else '"function" object'
        keys = ", ".join(repr(k) for k in (unknown or fn_unknown))
        known = ", ".join(repr(k) for k in sorted(allowed if unknown else _FUNCTION_KEYS))
        raise ToolSchemaError(
            f"unknown key(s) {keys} in the tool {where} #{index}; allowed keys: {known} "
            '(an entry is {"type": "function", "function": {...}} or bare {"name", "description", "parameters"})',
            tool=label,
        )
    if "type" in entry and entry["type"] != "function":
        raise ToolSchemaError(
            f'tool entry #{index} has "type": {entry["type"]!r}; only "function" tools can be called',
            tool=label,
        )
    _check_name(raw_name, index, label)
    name: str = raw_name
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise ToolSchemaError(f'"description" is a JSON {_json_type_name(description)}; it must be a string', tool=name)
    if description is not None:
        _check_text(description, "", tool=name, what="the tool's description")
    if "strict" in fn and not isinstance(fn["strict"], bool | None):
        raise ToolSchemaError(
            f'"strict" is a JSON {_json_type_name(fn["strict"])}; it must be true or false', tool=name
        )

    try:
        source = _copy_entry(entry, name)
        raw_params = source.get("function", source).get("parameters")
        normalize = _normalize_strings if mode == "strings" else _normalize_schema
        parameters = normalize(raw_params, name)
    except RecursionError:
        raise ToolSchemaError(
            f"the parameters schema nests too deeply to read (keep it under {MAX_SCHEMA_DEPTH} levels)", tool=name
        ) from None
    return Tool(name=name, description=description, parameters=parameters, source=source)


def _entry_label(name: Any, index: int) -> str:
    return name if isinstance(name, str) and name else f"#{index}"


def _check_name(name: Any, index: int, label: str) -> None:
    if name is None:
        raise ToolSchemaError(f'tool entry #{index} has no "name"; every tool needs one', tool=label)
    if not isinstance(name, str):
        raise ToolSchemaError(f'"name" is a JSON {_json_type_name(name)}; it must be a string', tool=label)
    if not name:
        raise ToolSchemaError(f"tool entry #{index} has an empty name; every tool needs a non-empty name", tool=label)
    if not TOOL_NAME_PATTERN.fullmatch(name):
        raise ToolSchemaError(
            f"the tool-call formats cannot carry this name: a tool name must match "
            f"^{TOOL_NAME_PATTERN.pattern}$ (ASCII letters, digits, '_', '.', ':', '-'; first a letter or '_'; "
            "at most 128 characters); rename the tool",
            tool=label,
        )


# --------------------------------------------------------------------------------------------------
# Schemas


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(text: str, pointer: str, *, tool: str | None, what: str) -> None:
    """Refuse a lone surrogate: it is no Unicode text, and would fail later as a raw UnicodeEncodeError."""
    found = _SURROGATE.search(text)
    if found is None:
        return
    shown = json.dumps(text if len(text) <= 60 else text[:60] + "...")  # ASCII: the surrogate as an escape
    raise ToolSchemaError(
        f"{what} {shown} contains a lone surrogate (U+{ord(found.group()):04X} at character {found.start()}): "
        "half of a UTF-16 pair, which is not Unicode text and cannot be encoded as UTF-8; fix or remove it",
        tool=tool,
        pointer=pointer,
    )


def _plain(value: Any, pointer: str, *, tool: str | None = None) -> Any:
    """A deep copy of ``value`` as plain JSON data (dict/list/str/int/float/bool/None), or an error."""
    if isinstance(value, str):
        _check_text(value, pointer, tool=tool, what="string")
        return value
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolSchemaError(f"{value!r} is not a JSON number; use a finite number", tool=tool, pointer=pointer)
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ToolSchemaError(
                    f"key {key!r} is a {type(key).__name__}; JSON object keys are strings", tool=tool, pointer=pointer
                )
            _check_text(key, pointer, tool=tool, what="key")  # the pointer of the object: the key cannot be shown
            out[key] = _plain(item, f"{pointer}/{_escape(key)}", tool=tool)
        return out
    if isinstance(value, list):
        return [_plain(item, f"{pointer}/{i}", tool=tool) for i, item in enumerate(value)]
    raise ToolSchemaError(
        f"a {type(value).__name__} is not JSON data; use dict, list, str, int, float, bool or None",
        tool=tool,
        pointer=pointer,
    )


def _copy_entry(entry: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """A plain deep copy of an entry; pointers of errors inside ``parameters`` are relative to it."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "function":
            out[key] = _copy_entry(value, tool)
        else:  # the pointer is "" for "parameters" itself, so pointers inside it are relative to it
            out[key] = _plain(value, "", tool=tool)
    return out


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _check_argument_name(name: str, pointer: str, tool: str) -> None:
    bad = (
        not name
        or any(ch in "<>=" for ch in name)
        or any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in name)
    )
    if bad:
        raise ToolSchemaError(
            f"argument name {name!r} cannot be carried by the tool-call formats (qwen-xml writes "
            "<parameter=NAME>): a name must be non-empty and contain no control characters, newlines, "
            "'<', '>' or '='; rename the property",
            tool=tool,
            pointer=pointer,
            keyword="properties",
        )


def _check_required(required: Any, properties: Mapping[str, Any] | None, pointer: str, tool: str) -> list[str]:
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolSchemaError(
            f"required is a JSON {_json_type_name(required)} with non-string items; it must be a list of property names"
            if isinstance(required, list)
            else f"required is a JSON {_json_type_name(required)}; it must be a list of property names",
            tool=tool,
            pointer=f"{pointer}/required",
            keyword="required",
        )
    seen: set[str] = set()
    for i, name in enumerate(required):
        if name in seen:
            raise ToolSchemaError(
                f"required lists {name!r} twice; list each property once",
                tool=tool,
                pointer=f"{pointer}/required/{i}",
                keyword="required",
            )
        seen.add(name)
        if properties is None or name not in properties:
            declared = ", ".join(repr(p) for p in properties or ()) or "none"
            raise ToolSchemaError(
                f"required names {name!r}, which is not in properties (declared: {declared}); "
                "declare it or remove it from required",
                tool=tool,
                pointer=f"{pointer}/required/{i}",
                keyword="required",
            )
    return list(required)


def _check_object_parameters(params: Any, tool: str, ptr: str = "") -> None:
    if not isinstance(params, dict):
        raise ToolSchemaError(
            f'parameters is a JSON {_json_type_name(params)}; it must be an object schema {{"type": "object", '
            '"properties": {...}}} (omit parameters for a tool without arguments)',
            tool=tool,
            pointer=ptr,
        )
    if params.get("type") != "object":
        got = f"{params['type']!r}" if "type" in params else "missing"
        raise ToolSchemaError(
            f'parameters is not an object schema: its "type" must be "object" (got {got}); arguments are always a '
            'JSON object: use {"type": "object", "properties": {...}, "required": [...]}',
            tool=tool,
            pointer=f"{ptr}/type",
            keyword="type",
        )


def _normalize_strings(params: Any, tool: str) -> dict[str, Any]:
    """The ``strings`` mode: every declared property becomes ``{"type": "string"}``."""
    if params is None or params == {}:
        return _empty_parameters()
    _check_object_parameters(params, tool)
    if "$ref" in params:
        raise _schema_error(
            tool, "", "$ref", "the strings mode reads the top-level properties directly: inline the top-level $ref"
        )
    properties = params.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSchemaError(
            f"properties is a JSON {_json_type_name(properties)}; it must be an object mapping names to schemas",
            tool=tool,
            pointer="/properties",
            keyword="properties",
        )
    for name in properties:
        _check_argument_name(name, f"/properties/{_escape(name)}", tool)
    required = _check_required(params.get("required", []), properties, "", tool)
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in properties},
        "required": required,
        "additionalProperties": False,
    }


def _normalize_schema(params: Any, tool: str) -> dict[str, Any]:
    """The ``schema`` mode: check every keyword, inline ``$ref``, drop annotations."""
    return _Normalizer(tool, params).run()


def _empty_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def _schema_error(tool: str, pointer: str, keyword: str, message: str) -> ToolSchemaError:
    return ToolSchemaError(message, tool=tool, pointer=f"{pointer}/{_escape(keyword)}", keyword=keyword)


_META_CHECK = os.environ.get("TOOLGRAMMAR_META_CHECK", "") == "1"
"""Also check every normalized schema against JSON Schema's meta-schema (``TOOLGRAMMAR_META_CHECK=1``).

Off by default: the normalizer emits only keywords it has checked itself, and the meta-check cost
about 4 ms a tool (Draft 2020-12's dynamic references), most of a cold compile of a large tool list.
The tests run with it on, so a normalizer gap would show there."""


class _Normalizer:
    """Checks one tool's parameters (``schema`` mode) and builds the normalized copy."""

    def __init__(self, tool: str, root: Any):
        self.tool = tool
        self.root = root
        self.nodes = 0

    def run(self) -> dict[str, Any]:
        if self.root is None or self.root == {}:
            return _empty_parameters()
        normalized = self.node(self.root, "", ancestors=(), top=True)
        if _META_CHECK:
            try:
                jsonschema.Draft202012Validator.check_schema(normalized)
            except jsonschema.exceptions.SchemaError as error:  # a safety net: the checks above catch all
                pointer = "".join(f"/{_escape(str(p))}" for p in error.path)
                raise ToolSchemaError(f"invalid schema: {error.message}", tool=self.tool, pointer=pointer) from None
        self.check_definitions(self.root, "")
        return normalized

    def check_definitions(self, schema: Any, ptr: str) -> None:
        """Every ``$defs``/``definitions`` entry must be a valid JSON Schema, used or not.

        Used ones were checked above as they were inlined; an unused one is dropped from the normalized
        schema, but an invalid one (``{"anyOf": []}``) means the tool list is broken, so it is refused
        rather than silently ignored. Only schema positions are walked, never enum or const data.
        """
        if not isinstance(schema, dict):
            return
        for defs in ("$defs", "definitions"):
            entries = schema.get(defs)
            for name, sub in entries.items() if isinstance(entries, dict) else ():
                sub_ptr = f"{ptr}/{defs}/{_escape(name)}"
                try:
                    jsonschema.Draft202012Validator.check_schema(sub)
                except jsonschema.exceptions.SchemaError as error:
                    where = sub_ptr + "".join(f"/{_escape(str(p))}" for p in error.path)
                    raise ToolSchemaError(
                        f"invalid schema in {defs} entry {name!r} (checked even when no $ref uses it): "
                        f"{error.message}; fix or remove the entry",
                        tool=self.tool,
                        pointer=where,
                        keyword=defs,
                    ) from None
                self.check_definitions(sub, sub_ptr)
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                self.check_definitions(sub, f"{ptr}/properties/{_escape(name)}")
        for keyword in ("items", "additionalProperties"):
            self.check_definitions(schema.get(keyword), f"{ptr}/{keyword}")
        branches = schema.get("anyOf")
        if isinstance(branches, list):
            for i, branch in enumerate(branches):
                self.check_definitions(branch, f"{ptr}/anyOf/{i}")

    # The pointer is always the node's location in the *original* parameters (inside a $defs entry when
    # reached through $ref), so the message points at the text the author has to change.
    def node(self, schema: Any, ptr: str, *, ancestors: tuple[str, ...], top: bool = False) -> Any:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise ToolSchemaError(
                f"the schema grows past {MAX_SCHEMA_NODES} nodes once every $ref is inlined; simplify it",
                tool=self.tool,
                pointer=ptr,
                keyword="$ref",
            )
        if len(ancestors) >= MAX_SCHEMA_DEPTH:
            raise ToolSchemaError(
                f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it", tool=self.tool, pointer=ptr
            )
        if schema is True and not top:
            return {}
        if not isinstance(schema, dict):
            if top:
                _check_object_parameters(schema, self.tool, ptr)
            what = (
                "false (it matches nothing; remove the property instead)"
                if schema is False
                else (f"a JSON {_json_type_name(schema)}")
            )
            raise ToolSchemaError(f"a schema must be a JSON object; this one is {what}", tool=self.tool, pointer=ptr)

        for keyword in schema:
            if keyword not in SUPPORTED_KEYWORDS and keyword not in ANNOTATION_KEYWORDS:
                hint = _KEYWORD_HINTS.get(keyword)
                raise _schema_error(
                    self.tool,
                    ptr,
                    keyword,
                    f"unsupported keyword {keyword!r}: the grammar does not enforce it"
                    + (f" ({hint})" if hint else "")
                    + ", and a constraint is never dropped silently. Remove it or rewrite the schema with the "
                    f"supported keywords: {', '.join(sorted(SUPPORTED_KEYWORDS))} (annotations, dropped: "
                    f"{', '.join(sorted(ANNOTATION_KEYWORDS))})",
                )
        for defs in ("$defs", "definitions"):
            if defs in schema and not isinstance(schema[defs], dict):
                raise _schema_error(
                    self.tool,
                    ptr,
                    defs,
                    f"{defs} is a JSON {_json_type_name(schema[defs])}; it must map names to schemas",
                )
        here = (*ancestors, ptr)

        if "$ref" in schema:
            return self.ref(schema, ptr, here, top)
        if top:
            self.check_top(schema, ptr)
        types = self.types(schema, ptr)
        if "anyOf" in schema:
            return self.any_of(schema, ptr, here)

        for keyword in _OBJECT_KEYWORDS:
            if keyword in schema and "object" not in types:
                raise self.misplaced(keyword, "object", types, ptr)
        for keyword in _ARRAY_KEYWORDS:
            if keyword in schema and "array" not in types:
                raise self.misplaced(keyword, "array", types, ptr)

        out: dict[str, Any] = {}
        for keyword, value in schema.items():
            if keyword in ANNOTATION_KEYWORDS or keyword in ("$defs", "definitions"):
                continue
            if keyword == "properties":
                out[keyword] = self.properties(value, ptr, here, top)
            elif keyword == "items":
                if isinstance(value, list):
                    raise _schema_error(
                        self.tool,
                        ptr,
                        "items",
                        "items is a list (tuple validation), which is not supported: give one schema for every item",
                    )
                out[keyword] = self.node(value, f"{ptr}/items", ancestors=here)
            elif keyword == "additionalProperties":
                out[keyword] = self.additional_properties(value, schema, ptr, here, top)
            elif keyword in ("minItems", "maxItems"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise _schema_error(
                        self.tool, ptr, keyword, f"{keyword} must be a non-negative integer, got {json.dumps(value)}"
                    )
                out[keyword] = value
            elif keyword == "enum":
                if not isinstance(value, list) or not value:
                    raise _schema_error(
                        self.tool,
                        ptr,
                        "enum",
                        "enum is empty, so no value could ever be generated; list the allowed values or remove enum"
                        if isinstance(value, list)
                        else f"enum is a JSON {_json_type_name(value)}; it must be a non-empty list of values",
                    )
                out[keyword] = value
            else:  # type, const, required: checked below or above
                out[keyword] = value

        if "minItems" in out and "maxItems" in out and out["minItems"] > out["maxItems"]:
            raise _schema_error(
                self.tool,
                ptr,
                "minItems",
                f"minItems {out['minItems']} is greater than maxItems {out['maxItems']}: no array satisfies both",
            )
        if "object" in types:
            if top:
                properties = out.get("properties", {})
                required = _check_required(schema.get("required", []), properties, ptr, self.tool)
                out = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
            else:
                if "properties" not in out and "additionalProperties" not in out:
                    out["additionalProperties"] = {}  # bare {"type": "object"}: any object, a map of any values
                if "properties" not in out and out["additionalProperties"] is not False:  # a map node
                    if "required" in schema:
                        _check_required(schema["required"], None, ptr, self.tool)  # only [] passes
                else:  # a record node
                    out.setdefault("properties", {})
                    out["required"] = _check_required(schema.get("required", []), out["properties"], ptr, self.tool)
        if "enum" in schema and "const" in schema:
            raise _schema_error(self.tool, ptr, "const", "enum and const on the same node: keep one of them")
        self.check_literals(out, ptr)
        return out

    def check_top(self, schema: dict[str, Any], ptr: str) -> None:
        _check_object_parameters(schema, self.tool, ptr)
        extra = [k for k in schema if k not in _TOP_LEVEL_KEYWORDS | ANNOTATION_KEYWORDS | {"$defs", "definitions"}]
        if extra:
            raise _schema_error(
                self.tool,
                ptr,
                extra[0],
                f"{extra[0]} is not supported at the top level of parameters: the arguments object takes only "
                '"properties", "required" and "additionalProperties": false',
            )
        extra_args = schema.get("additionalProperties", False)
        if extra_args is not False:
            raise _schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties {'true' if extra_args is True else 'as a schema'} at the top level of "
                "parameters is not supported: the strict parser rejects unknown arguments, so every argument "
                "must be declared in properties; remove it or set it to false",
            )

    def types(self, schema: dict[str, Any], ptr: str) -> tuple[str, ...]:
        if "type" not in schema:
            return ()
        value = schema["type"]
        names = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise _schema_error(self.tool, ptr, "type", "type is an empty list; name at least one type")
        for name in names:
            if not isinstance(name, str) or name not in JSON_TYPES:
                hint = ""
                if isinstance(name, str) and name in _TYPE_HINTS:
                    hint = f" (did you mean {_TYPE_HINTS[name]!r}?)"
                raise _schema_error(
                    self.tool,
                    ptr,
                    "type",
                    f"unknown type {json.dumps(name)}{hint}: JSON Schema types are {', '.join(JSON_TYPES)}",
                )
        if len(set(names)) != len(names):
            raise _schema_error(self.tool, ptr, "type", f"type lists a name twice: {json.dumps(value)}")
        return tuple(names)

    def misplaced(self, keyword: str, kind: str, types: tuple[str, ...], ptr: str) -> ToolSchemaError:
        if types:
            got = json.dumps(list(types) if len(types) > 1 else types[0])
            return _schema_error(
                self.tool,
                ptr,
                keyword,
                f"{keyword} applies to {kind}s, but this node's type is {got}: "
                f"add {kind!r} to type or remove {keyword}",
            )
        return _schema_error(
            self.tool,
            ptr,
            keyword,
            f'{keyword} applies to {kind}s, but this node has no "type": add "type": "{kind}"',
        )

    def ref(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool) -> Any:
        ref = schema["$ref"]
        siblings = [k for k in schema if k not in ANNOTATION_KEYWORDS and k not in _REF_KEYWORDS]
        if siblings:
            raise _schema_error(
                self.tool,
                ptr,
                siblings[0],
                f"{siblings[0]} beside $ref is not supported together: move it into the referenced schema",
            )
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise _schema_error(
                self.tool,
                ptr,
                "$ref",
                f"$ref {json.dumps(ref)} is not local: only references inside this tool's parameters "
                '("#/$defs/Name", "#/definitions/Name") are supported; inline the external schema',
            )
        target_ptr = "" if ref == "#" else "/" + "/".join(_escape(_unescape(unquote(t))) for t in ref[2:].split("/"))
        target = self.resolve(target_ptr, ref, ptr)
        if target_ptr in here:
            raise _schema_error(
                self.tool,
                ptr,
                "$ref",
                f"recursive schema: $ref {ref!r} refers back to {target_ptr or 'the parameters root'}, which "
                "contains this $ref; the grammar must be regular, so a schema cannot contain itself. Unroll the "
                "recursion to a fixed depth (copy the definition a few levels deep, the last one without the $ref)",
            )
        return self.node(target, target_ptr, ancestors=here, top=top)

    def resolve(self, target_ptr: str, ref: str, ptr: str) -> Any:
        node: Any = self.root
        for token in target_ptr.split("/")[1:]:
            key = _unescape(token)
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                defs = [
                    f"#/{d}/{_escape(n)}"
                    for d in ("$defs", "definitions")
                    if isinstance(self.root.get(d), dict)
                    for n in self.root[d]
                ]
                raise _schema_error(
                    self.tool,
                    ptr,
                    "$ref",
                    f"$ref {ref!r} does not resolve: nothing at {target_ptr} in this tool's parameters "
                    f"(definitions here: {', '.join(defs) or 'none'})",
                )
        return node

    def any_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...]) -> dict[str, Any]:
        siblings = [k for k in schema if k not in ANNOTATION_KEYWORDS and k not in ("anyOf", "$defs", "definitions")]
        if siblings:
            raise _schema_error(
                self.tool,
                ptr,
                siblings[0],
                f"{siblings[0]} beside anyOf is not supported together: move it into each anyOf branch",
            )
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise _schema_error(self.tool, ptr, "anyOf", "anyOf must be a non-empty list of schemas")
        return {"anyOf": [self.node(b, f"{ptr}/anyOf/{i}", ancestors=here) for i, b in enumerate(branches)]}

    def properties(self, value: Any, ptr: str, here: tuple[str, ...], top: bool) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _schema_error(
                self.tool,
                ptr,
                "properties",
                f"properties is a JSON {_json_type_name(value)}; it must be an object mapping names to schemas",
            )
        out: dict[str, Any] = {}
        for name, sub in value.items():
            sub_ptr = f"{ptr}/properties/{_escape(name)}"
            if top:  # argument names are markup in qwen-xml; nested keys are JSON strings and may be anything
                _check_argument_name(name, sub_ptr, self.tool)
            out[name] = self.node(sub, sub_ptr, ancestors=here)
        return out

    def additional_properties(
        self, value: Any, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool
    ) -> Any:
        if value is False:
            return False
        if top:  # check_top already rejected anything else
            return False
        if "properties" in schema:
            raise _schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties {'true' if value is True else 'as a schema'} together with properties is not "
                "supported: an object either declares its properties (and gets exactly those) or is a map "
                "(additionalProperties schema, no properties); use false, or drop properties for a map",
            )
        if value is not True and not isinstance(value, dict):
            raise _schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties is a JSON {_json_type_name(value)}; it must be false or a schema",
            )
        return self.node(value, f"{ptr}/additionalProperties", ancestors=here)

    def check_literals(self, out: dict[str, Any], ptr: str) -> None:
        if "enum" not in out and "const" not in out:
            return
        rest = {k: v for k, v in out.items() if k not in ("enum", "const")}
        validator = jsonschema.Draft202012Validator(rest)
        literals = [("const", None, out["const"])] if "const" in out else []
        literals += [("enum", i, v) for i, v in enumerate(out.get("enum", ()))]
        for keyword, index, value in literals:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                where = f"{ptr}/{keyword}" + ("" if index is None else f"/{index}")
                label = keyword if index is None else f"enum value #{index}"
                raise ToolSchemaError(
                    f"{label} {json.dumps(value, ensure_ascii=False)} does not fit its own node: {error.message}; "
                    f"fix the value or the node's type",
                    tool=self.tool,
                    pointer=where,
                    keyword=keyword,
                )


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _canonical(schema: Any) -> Any:
    """Schema nodes with sorted keywords; property order and literal values kept as they are."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for keyword in sorted(schema):
        value = schema[keyword]
        if keyword == "properties":
            out[keyword] = [[name, _canonical(sub)] for name, sub in value.items()]
        elif keyword in ("items", "additionalProperties"):
            out[keyword] = _canonical(value)
        elif keyword == "anyOf":
            out[keyword] = [_canonical(branch) for branch in value]
        else:
            out[keyword] = value
    return out


def _canonical_json(schema: Any) -> str:
    return json.dumps(_canonical(schema), ensure_ascii=False, separators=(",", ":"))
