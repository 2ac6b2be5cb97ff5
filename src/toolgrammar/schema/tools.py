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
  the rest of its node (checked with ``jsonschema``, formats included), so the grammar can emit the
  literals as they are. Siblings of an ``anyOf`` are distributed into its branches.
- No ``allOf`` is left: its branches are merged into one node (types intersected, properties and
  ``required`` united, the tighter bounds kept, a property that a closed branch forbids left out),
  distributed over the branches of an ``anyOf``/``oneOf`` among them; what cannot be merged (two
  different patterns, two formats) is refused, and branches no value satisfies are dropped.
- No ``oneOf`` is left: one whose branches provably exclude each other (by type, by const/enum
  values, by a required property whose schemas exclude each other, by numeric ranges that do not
  meet) is the same as ``anyOf`` and becomes one; any other is refused (``lenient=True``: read as
  ``anyOf``, with a warning).
- String keywords (``pattern``, ``format``, ``minLength``, ``maxLength``) and numeric bounds stay as
  they are: ``schema_strings``, ``schema_formats`` and ``schema_numbers`` say what the grammar
  makes of them, and they are checked here to be enforceable (a pattern the grammar reads, a known
  format, a non-empty range).

This module imports the standard library, ``jsonschema``, numpy (for its cache entries) and the
pure-Python grammar pieces it checks schemas with: no torch, no transformers.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import threading
import warnings
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

from toolgrammar.automata.automaton import lit
from toolgrammar.errors import ToolSchemaError, ToolSchemaWarning
from toolgrammar.schema.numbers import Bounds, integer_node, number_node
from toolgrammar.schema.string_formats import FORMAT_CHECKER, FORMATS
from toolgrammar.schema.strings import StringSchemaError, string_language

__all__ = [
    "ANNOTATION_KEYWORDS",
    "ARGUMENT_MODES",
    "JSON_TYPES",
    "LENIENT_TYPE_NAMES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "SUPPORTED_KEYWORDS",
    "TOOL_NAME_PATTERN",
    "ArgumentMode",
    "Tool",
    "ToolSet",
    "load_tools",
    "load_tools_lenient",
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
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
    }
)
"""The schema keywords the grammar enforces (``$ref``/``$defs``/``definitions`` are resolved here,
``allOf`` is merged into one node, ``oneOf`` becomes ``anyOf`` when its branches are disjoint)."""

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
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_REF_KEYWORDS = ("$ref", "$defs", "definitions")
_ENTRY_KEYS_OPENAI = frozenset({"type", "function"})
_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
_ENTRY_KEYS_BARE = _FUNCTION_KEYS | {"type"}
_TOP_LEVEL_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_FINGERPRINT_VERSION = "toolgrammar.schema.tools/1"

_KEYWORD_HINTS: dict[str, str] = {
    "not": "the grammar cannot generate 'anything but' a schema",
    "nullable": 'OpenAPI\'s nullable is not JSON Schema: use "type": ["T", "null"] or anyOf with {"type": "null"}',
    "prefixItems": "tuple arrays are not supported: use one items schema",
    "if": "conditional schemas are not supported",
    "then": "conditional schemas are not supported",
    "else": "conditional schemas are not supported",
}
for _kw in ("contentEncoding", "contentMediaType", "contentSchema"):
    _KEYWORD_HINTS[_kw] = "content annotations are not enforced: describe the content in 'description' instead"
_KEYWORD_HINTS["multipleOf"] = "multipleOf is not enforced: use enum for a small set, or describe the step"
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

LENIENT_TYPE_NAMES: dict[str, str | None] = {
    **dict.fromkeys(("String", "str", "char", "Character", "text"), "string"),
    **dict.fromkeys(
        ("int", "Integer", "long", "Long", "short", "Short", "byte", "Byte", "Bigint", "BigInt"), "integer"
    ),
    **dict.fromkeys(("float", "Float", "double", "Double", "Number", "decimal"), "number"),
    **dict.fromkeys(("bool", "Boolean"), "boolean"),
    **dict.fromkeys(("dict", "Dict", "HashMap", "Map", "map", "Object"), "object"),
    **dict.fromkeys(("list", "List", "tuple", "Tuple", "ArrayList", "Array", "Set", "set"), "array"),
    **dict.fromkeys(("None", "none", "NoneType", "Null"), "null"),
    **dict.fromkeys(("any", "Any"), None),
}
"""``lenient=True``: type names of dirty real-world schemas (BFCL's Java and JavaScript categories,
Python names) and the JSON type each one is read as; ``None`` drops ``type`` (any value)."""

_JSON_SCHEMA_VOCABULARY = frozenset(jsonschema.Draft202012Validator.VALIDATORS) | {
    "$schema", "$id", "$defs", "definitions", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title",
    "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding",
    "contentMediaType", "contentSchema",
}  # fmt: skip
"""Every keyword Draft 2020-12 defines: ``lenient=True`` drops any other (JSON Schema ignores them too)."""

_LENIENT_ANNOTATIONS = frozenset({"contentEncoding", "contentMediaType", "contentSchema", "$anchor", "$dynamicAnchor"})
"""Draft 2020-12 keywords that only annotate: ``lenient=True`` drops them (strict refuses them)."""


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
        return hash((self.name, self.schema_json))

    @cached_property
    def schema_json(self) -> str:
        """:attr:`parameters` as canonical JSON: keywords sorted inside each schema node, the order of
        properties, enum values and lists kept (the grammar depends on them), compact separators."""
        return _canonical_json(self.parameters)

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
        # The text of {"version", "mode", "tools": [{"name", "description", "parameters"}]} in canonical JSON,
        # spelled around each tool's own canonical text rather than encoding every schema a second time.
        text = _canonical_text
        parts = [
            f'{{"name":{text(t.name)},"description":{text(t.description)},"parameters":{t.schema_json}}}'
            for t in self.tools
        ]
        payload = f'{{"version":{text(_FINGERPRINT_VERSION)},"mode":{text(self.mode)},"tools":[{",".join(parts)}]}}'
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

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
    lenient: bool = False,
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
    lenient : bool, default: False
        Read dirty real-world schemas (BFCL's Java/JavaScript type names, OpenAPI's ``nullable``,
        vendor keywords) instead of refusing them: each rewrite and each dropped keyword is reported
        with :class:`~toolgrammar.errors.ToolSchemaWarning` (``warnings.warn``) naming the tool, the
        pointer and what was done. What it maps: the type names of :data:`LENIENT_TYPE_NAMES`;
        ``nullable: true`` (``null`` added to ``type``); draft 4's boolean ``exclusiveMinimum`` /
        ``exclusiveMaximum``; a property's draft 3 boolean ``required`` (into its object's
        ``required``); a ``oneOf`` whose branches may overlap (read as ``anyOf``). What it drops:
        BFCL's ``optional`` flag (``required`` decides), an unknown ``format``, Draft 2020-12's
        content annotations (``contentEncoding``...), and every keyword JSON Schema does not define
        (``example``, ``x-...``, ``discriminator``...). Constraints JSON Schema defines and the
        grammar cannot enforce (``multipleOf``, ``not``, ``uniqueItems``...) are still refused: the
        normalized schema, which the strict parser judges with, never loses one silently. Unused
        ``$defs`` entries are not checked (dirty input often holds dirty definitions nothing uses).

    Returns
    -------
    ToolSet

    Raises
    ------
    ToolSchemaError
        On anything that cannot be compiled; the message says what, where, and how to fix it.
    """
    _check_mode(mode)
    if not isinstance(lenient, bool):
        raise ToolSchemaError(f"lenient must be True or False, got {lenient!r}")
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

    # Processors are built again and again for the same tools: remember recent results (and, for lists the
    # careful normalizer had to read, keep them on disk for the next process), and the tools themselves, which
    # come back in other lists.
    try:
        # Key order is kept (property order shapes the grammar), so equal text means an equal tool (list).
        texts: list[str] | None = [_ENTRY_TEXT.encode(entry) for entry in entries]
    except (TypeError, ValueError, RecursionError):
        texts = None  # not plain JSON data: the checks below will say what is wrong
    if texts is None:
        return _load_uncached(entries, mode, lenient)
    memo_key = mode + ("\0lenient" if lenient else "") + "\0[" + ", ".join(texts) + "]"  # json.dumps(entries)
    with _recent_lock:
        remembered = _recent.get(memo_key)
        if remembered is not None:
            _recent.move_to_end(memo_key)
    if remembered is not None and _same_entries(remembered[0], entries):
        _warn(remembered[1])  # a lenient load warns every time, cached or not
        return remembered[0]
    if remembered is not None:  # equal text, other data (an int key, a tuple): validated without the caches
        return _load_uncached(entries, mode, lenient)
    notes = []
    if lenient:  # not on disk: its warnings are part of the result
        toolset = _load_entries(entries, mode, lenient, notes)
    else:
        disk_key = hashlib.sha256((_FINGERPRINT_VERSION + "\0" + memo_key).encode()).hexdigest()
        toolset = _from_disk(disk_key, mode)
        if toolset is not None and not _same_entries(toolset, entries):
            return _load_uncached(entries, mode, lenient)
        if toolset is None:
            careful: list[str] = []
            toolset = _load_entries(entries, mode, lenient, notes, careful, texts)
            # A list of plain schemas is read again faster than its entry is written and read back
            # (200 nested tools: 15 ms to validate, 7 ms to write, 5 ms to read).
            if careful:
                _to_disk(disk_key, toolset)
    with _recent_lock:
        _recent[memo_key] = (toolset, tuple(notes))
        if len(_recent) > MAX_RECENT_LISTS:
            _recent.popitem(last=False)
    _warn(notes)
    return toolset


def load_tools_lenient(source: Any, *, mode: ArgumentMode = "schema") -> tuple[ToolSet, list[str]]:
    """``load_tools(source, mode=mode, lenient=True)`` with its reports returned instead of warned.

    Returns the tool set and one note per rewrite or dropped keyword (the :class:`ToolSchemaWarning`
    messages, in order); any other warning is passed on. For callers that log or show the notes
    themselves (the vLLM server, the BFCL suite). Uses :func:`warnings.catch_warnings`, which is
    process-wide: a warning another thread raises meanwhile may land among these and be passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toolset = load_tools(source, mode=mode, lenient=True)
    notes = []
    for warning in caught:
        if issubclass(warning.category, ToolSchemaWarning):
            notes.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return toolset, notes


def _load_uncached(entries: Sequence[Any], mode: ArgumentMode, lenient: bool) -> ToolSet:
    notes: list[str] = []
    toolset = _load_entries(entries, mode, lenient, notes)
    _warn(notes, stacklevel=4)
    return toolset


def _same_entries(toolset: ToolSet, entries: Sequence[Any]) -> bool:
    """Whether ``entries`` are the data ``toolset`` was loaded from, not only the same JSON text.

    The caches are keyed by JSON text, and ``json`` writes an ``int`` key as a string and a tuple as a list,
    which loading refuses: such an entry must get its error, whatever was loaded before from the same text.
    Equality tells them apart (``{1: x} != {"1": x}``, ``(a,) != [a]``) where the text cannot."""
    return all(tool.source == entry for tool, entry in zip(toolset.tools, entries, strict=True))


def _warn(notes: Sequence[str], stacklevel: int = 3) -> None:
    for note in notes:
        # stacklevel 3: the warning points at the caller of load_tools.
        warnings.warn(note, ToolSchemaWarning, stacklevel=stacklevel)


def _to_disk(key: str, toolset: ToolSet) -> None:
    from toolgrammar import cache

    data = [[t.name, t.description, t.parameters, t.source] for t in toolset.tools]
    text = json.dumps(data, ensure_ascii=False).encode("utf-8")
    cache.save("tools", key, {"json": np.frombuffer(text, dtype=np.uint8)})


def _from_disk(key: str, mode: ArgumentMode) -> ToolSet | None:
    """A tool list validated by an earlier process (keyed by the exact input text), read back as is."""
    from toolgrammar import cache

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


MAX_RECENT_LISTS = 64
"""Loaded tool lists kept process-wide by their entries' JSON text (least recently used out)."""

_recent: OrderedDict[str, tuple[ToolSet, tuple[str, ...]]] = OrderedDict()
"""Each remembered list with its lenient warnings (given again each time it is served), kept together so
that no reader finds one without the other."""
_recent_lock = threading.Lock()


def _load_entries(
    entries: Sequence[Any],
    mode: ArgumentMode,
    lenient: bool,
    notes: list[str],
    careful: list[str] | None = None,
    texts: Sequence[str] | None = None,
) -> ToolSet:
    """The tool set; ``careful`` (when given) receives the names of the tools the fast path did not read.

    ``texts`` (each entry as JSON text, strict loads only) names the entries: a tool loaded before from the
    same text is reused (:data:`MAX_RECENT_TOOLS`), with whether the careful path read it."""
    tools: list[Tool] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if texts is not None and careful is not None:
            tool = _recent_tool(entry, texts[index], index, mode, careful)
        else:
            tool = _load_entry(entry, index, mode, lenient, notes, careful)
        if tool.name in first_index:
            raise ToolSchemaError(
                f"duplicate tool name: entries #{first_index[tool.name]} and #{index} are both named "
                f"{tool.name!r}; tool names must be unique (rename or drop one)",
                tool=tool.name,
            )
        first_index[tool.name] = index
        tools.append(tool)
    return ToolSet(tuple(tools), mode)


_ENTRY_TEXT = json.JSONEncoder(allow_nan=False)
"""``json.dumps(entry, allow_nan=False)``, without a new encoder per entry."""

MAX_RECENT_TOOLS = 2048
"""Validated tools kept process-wide by their entry's JSON text (strict loads; least recently used out)."""

_recent_tools: OrderedDict[tuple[str, str], tuple[Tool, bool]] = OrderedDict()
_recent_tools_lock = threading.Lock()


def _recent_tool(entry: Any, text: str, index: int, mode: ArgumentMode, careful: list[str]) -> Tool:
    """:func:`_load_entry` (strict) of an entry whose JSON text is ``text``, reused when loaded before."""
    key = (mode, text)
    with _recent_tools_lock:
        got = _recent_tools.get(key)
        if got is not None:
            _recent_tools.move_to_end(key)
    if got is not None and got[0].source != entry:  # equal text, other data: see _same_entries
        return _load_entry(entry, index, mode, False, [], careful)
    if got is None:
        mark: list[str] = []
        got = (_load_entry(entry, index, mode, False, [], mark, text), bool(mark))
        with _recent_tools_lock:
            _recent_tools[key] = got
            if len(_recent_tools) > MAX_RECENT_TOOLS:
                _recent_tools.popitem(last=False)
    tool, was_careful = got
    if was_careful:
        careful.append(tool.name)
    return tool


def clear_recent() -> None:
    """Forget the tool lists and tools :func:`load_tools` remembers (in memory; the disk cache stays)."""
    with _recent_lock:
        _recent.clear()
    with _recent_tools_lock:
        _recent_tools.clear()


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


def _load_entry(
    entry: Any,
    index: int,
    mode: str,
    lenient: bool = False,
    notes: list[str] | None = None,
    careful: list[str] | None = None,
    text: str | None = None,
) -> Tool:
    """One entry validated and normalized; ``text``, the entry as JSON text where the caller has it, is read back
    as the entry's copy (the C decoder copies plain data several times faster than a walk in Python)."""
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
        source = _copy_of_text(entry, text) if text is not None else None
        if source is None:
            source = _copy_entry(entry, name)
        raw_params = source.get("function", source).get("parameters")
        sink = notes if notes is not None else []
        if mode == "strings":
            parameters = _normalize_strings(raw_params, name, lenient, sink)
        else:
            normalizer = _Normalizer(name, raw_params, lenient=lenient, notes=sink)
            parameters = normalizer.run()
            if careful is not None and not normalizer.plain:
                careful.append(name)
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


class _NotPlain(Exception):
    """Raised by :func:`_plain_copy` where :func:`_plain` has an error to explain."""


def _plain_copy(value: Any) -> Any:
    """:func:`_plain` without pointers: the copy, or :class:`_NotPlain` where ``_plain`` would refuse.

    Most entries are plain JSON; building a pointer string per node was a third of loading a large tool list,
    so the pointers are built only when something is wrong (``_plain`` runs again for the message).
    """
    kind = type(value)
    if kind is str:
        if _SURROGATE.search(value) is not None:
            raise _NotPlain
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str or _SURROGATE.search(key) is not None:
                raise _NotPlain
            out[key] = _plain_copy(item)
        return out
    if kind is list:
        return [_plain_copy(item) for item in value]
    if value is None or kind is bool or kind is int:
        return value
    if kind is float and math.isfinite(value):
        return value
    raise _NotPlain  # subclasses, mappings, tuples, NaN: the careful path decides


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""Where ASCII JSON text may hold a surrogate (half of a pair, or a lone one, which loading refuses)."""


def _copy_of_text(entry: Any, text: str) -> dict[str, Any] | None:
    """``text`` (``entry`` as ASCII JSON) read back, when that is a plain copy of ``entry``; else None.

    Equal to ``entry`` means plain (``json`` writes an int key as a string and a tuple as a list, and the copy
    would then differ); text with a surrogate escape is left to :func:`_copy_entry`, which refuses lone ones."""
    if _ESCAPED_SURROGATE.search(text) is not None:
        return None
    copy = json.loads(text)
    return copy if type(copy) is dict and copy == entry else None


def _copy_entry(entry: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """A plain deep copy of an entry; pointers of errors inside ``parameters`` are relative to it."""
    if type(entry) is dict:
        try:
            return _plain_copy(entry)
        except _NotPlain:
            pass
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


_BAD_ARGUMENT_CHARACTER = re.compile("[<>=\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Markup, and Unicode's categories Cc (U+0000-U+001F, U+007F-U+009F), Zl (U+2028) and Zp (U+2029)."""


def _check_argument_name(name: str, pointer: str, tool: str) -> None:
    if not name or _BAD_ARGUMENT_CHARACTER.search(name) is not None:
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


def _normalize_strings(params: Any, tool: str, lenient: bool = False, notes: list[str] | None = None) -> dict[str, Any]:
    """The ``strings`` mode: every declared property becomes ``{"type": "string"}``."""
    if params is None or params == {}:
        return _empty_parameters()
    if lenient and isinstance(params, dict) and LENIENT_TYPE_NAMES.get(params.get("type")) == "object":
        _note(notes, tool, "", f'type {json.dumps(params["type"])} read as "object"')
        params = {**params, "type": "object"}
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


def _note(notes: list[str] | None, tool: str, pointer: str, what: str) -> None:
    """Record one lenient rewrite or drop (emitted as a ToolSchemaWarning by load_tools)."""
    if notes is None:
        return
    text = f"tool {tool!r}, at {pointer or '/'}: {what} (lenient=True)"
    if text not in notes:
        notes.append(text)


def _empty_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def _schema_error(tool: str, pointer: str, keyword: str, message: str) -> ToolSchemaError:
    return ToolSchemaError(message, tool=tool, pointer=f"{pointer}/{_escape(keyword)}", keyword=keyword)


_META_CHECK = os.environ.get("TOOLGRAMMAR_META_CHECK", "") == "1"
"""Also check every normalized schema against JSON Schema's meta-schema (``TOOLGRAMMAR_META_CHECK=1``).

Off by default: the normalizer emits only keywords it has checked itself, and the meta-check cost
about 4 ms a tool (Draft 2020-12's dynamic references), most of a cold compile of a large tool list.
The tests run with it on, so a normalizer gap would show there."""


class _Unsatisfiable(ToolSchemaError):
    """A node that no value satisfies (``allOf`` branches that exclude each other, an empty range).

    A :class:`ToolSchemaError` like any other, except where ``allOf`` is distributed over the
    branches of an ``anyOf``/``oneOf``: there a branch no value satisfies is dropped (it matches
    nothing, so leaving it out changes nothing)."""


_MAX_DISTRIBUTED = 64
"""Most branches the distribution of ``allOf`` over ``anyOf``/``oneOf`` may produce."""


def _holds_definitions(value: Any) -> bool:
    """Whether any object inside ``value`` has a ``$defs`` or ``definitions`` key (data included: a cheap
    test, without the pointers :meth:`_Normalizer.check_definitions` builds, that lets most schemas skip it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "$defs" in item or "definitions" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


_PLAIN_KEYWORDS = (
    frozenset(
        {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems"}
    )
    | ANNOTATION_KEYWORDS
)
"""The keywords :func:`_plain_parameters` reads itself beside ``anyOf`` and ``$ref`` (alone on their node);
every other one takes the careful path."""
_PLAIN_TOP_KEYWORDS = _TOP_LEVEL_KEYWORDS | ANNOTATION_KEYWORDS | {"$defs", "definitions"}
_PLAIN_REF = re.compile(r"#/(\$defs|definitions)/([A-Za-z0-9_.-]+)")
"""A ``$ref`` the fast path resolves itself: a definition at the root, named without escapes."""
_PLAIN_TYPES = frozenset(JSON_TYPES)
_PLAIN_LITERAL_TYPES: dict[type, frozenset[str]] = {
    str: frozenset({"string"}),
    bool: frozenset({"boolean"}),
    type(None): frozenset({"null"}),
    int: frozenset({"integer", "number"}),
    float: frozenset({"number"}),
}
"""The JSON types a literal of each Python type surely satisfies (``1.0`` as an integer is left to jsonschema)."""


class _PlainWalk:
    """What one :func:`_plain_parameters` call carries down the tree: the nodes left, the root's definitions,
    the definitions being inlined (a ``$ref`` back into one is recursion: the careful path explains it),
    and the pointers of those inlined (:attr:`_Normalizer.inlined`)."""

    __slots__ = ("budget", "defs", "inlined", "open")

    def __init__(self, root: dict[str, Any], inlined: set[str]):
        self.budget = MAX_SCHEMA_NODES - 1
        self.defs = {k: root[k] for k in ("$defs", "definitions") if k in root}
        self.open: list[str] = []
        self.inlined = inlined


def _plain_parameters(root: Any, inlined: set[str] | None = None) -> dict[str, Any]:
    """:meth:`_Normalizer.node` of a tool's parameters for the plain schemas most tools have, without pointers.

    Plain: objects, arrays and scalars described by ``type``, ``properties``, ``required``,
    ``additionalProperties``, ``items``, ``minItems``/``maxItems``, ``enum`` and ``const`` (scalar values of the
    node's own types), ``anyOf`` alone on its node, and ``$ref`` alone on its node naming an entry of the
    root's ``$defs``/``definitions``, annotations aside. Building pointers, ancestor tuples and a jsonschema
    validator per ``enum`` was most of loading a large tool list; anything else, and anything wrong, raises
    :class:`_NotPlain` so the careful path reads the whole tool again (it decides, and explains every error).
    ``inlined`` receives the pointers of the definitions a ``$ref`` inlined (the careful path's
    :attr:`_Normalizer.inlined`). A test checks that both return the same schema or the fast one declines.
    """
    if type(root) is not dict or root.get("type") != "object" or not root.keys() <= _PLAIN_TOP_KEYWORDS:
        raise _NotPlain
    if root.get("additionalProperties", False) is not False:
        raise _NotPlain
    props = root.get("properties", {})
    if type(props) is not dict:
        raise _NotPlain
    walk = _PlainWalk(root, set() if inlined is None else inlined)
    if not all(type(d) is dict for d in walk.defs.values()):
        raise _NotPlain
    properties = {}
    for name, sub in props.items():
        if not name or _BAD_ARGUMENT_CHARACTER.search(name) is not None:
            raise _NotPlain
        properties[name] = _plain_node(sub, 1, walk)
    required = root.get("required", [])
    _plain_required(required, properties)
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _plain_required(required: Any, properties: dict[str, Any] | None) -> None:
    if type(required) is not list or not all(type(name) is str for name in required):
        raise _NotPlain
    if required and (
        properties is None or len(set(required)) != len(required) or not properties.keys() >= set(required)
    ):
        raise _NotPlain


_PLAIN_ANY_OF = frozenset({"anyOf"}) | ANNOTATION_KEYWORDS
_PLAIN_REF_NODE = frozenset({"$ref"}) | ANNOTATION_KEYWORDS


def _plain_any_of(schema: dict[str, Any], depth: int, walk: _PlainWalk) -> dict[str, Any]:
    """``anyOf`` alone on its node (siblings are distributed into the branches: the careful path's job)."""
    branches = schema["anyOf"]
    if not schema.keys() <= _PLAIN_ANY_OF or type(branches) is not list or not branches:
        raise _NotPlain
    return {"anyOf": [_plain_node(branch, depth + 1, walk) for branch in branches]}


def _plain_ref(schema: dict[str, Any], depth: int, walk: _PlainWalk) -> Any:
    """``$ref`` alone on its node, to a root definition: the definition, inlined."""
    ref = schema["$ref"]
    found = _PLAIN_REF.fullmatch(ref) if schema.keys() <= _PLAIN_REF_NODE and type(ref) is str else None
    if found is None:
        raise _NotPlain
    where, name = found.groups()
    target_ptr = f"/{where}/{name}"
    defs = walk.defs.get(where)
    if defs is None or name not in defs or target_ptr in walk.open:
        raise _NotPlain
    walk.open.append(target_ptr)
    normalized = _plain_node(defs[name], depth + 1, walk)
    walk.open.pop()
    walk.inlined.add(target_ptr)
    return normalized


def _plain_node(schema: Any, depth: int, walk: _PlainWalk) -> Any:
    """One node below the top (see :func:`_plain_parameters`)."""
    walk.budget -= 1
    if walk.budget < 0 or depth >= MAX_SCHEMA_DEPTH:
        raise _NotPlain
    if schema is True:
        return {}
    if type(schema) is not dict:
        raise _NotPlain
    if not schema.keys() <= _PLAIN_KEYWORDS:
        if "anyOf" in schema:
            return _plain_any_of(schema, depth, walk)
        if "$ref" in schema:
            return _plain_ref(schema, depth, walk)
        raise _NotPlain
    value = schema.get("type")
    if value is None:
        if "type" in schema:
            raise _NotPlain
        types: tuple[str, ...] = ()
    elif type(value) is str:
        if value not in _PLAIN_TYPES:
            raise _NotPlain
        types = (value,)
    elif type(value) is list:
        types = tuple(value)
        if not types or not all(type(t) is str and t in _PLAIN_TYPES for t in types) or len(set(types)) != len(types):
            raise _NotPlain
    else:
        raise _NotPlain
    is_object = "object" in types
    if not is_object and ("properties" in schema or "required" in schema or "additionalProperties" in schema):
        raise _NotPlain
    if "array" not in types and ("items" in schema or "minItems" in schema or "maxItems" in schema):
        raise _NotPlain
    out: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword == "properties":
            if type(value) is not dict:
                raise _NotPlain
            out[keyword] = {name: _plain_node(sub, depth + 1, walk) for name, sub in value.items()}
        elif keyword == "items":
            out[keyword] = _plain_node(value, depth + 1, walk)
        elif keyword == "additionalProperties":
            if value is False:
                out[keyword] = False
            elif "properties" in schema:
                raise _NotPlain
            else:
                out[keyword] = _plain_node(value, depth + 1, walk)
        elif keyword == "minItems" or keyword == "maxItems":
            if type(value) is not int or value < 0:
                raise _NotPlain
            out[keyword] = value
        elif keyword == "enum" or keyword == "const":
            literals = value if keyword == "enum" else [value]
            if type(literals) is not list or not literals or ("enum" in schema and "const" in schema):
                raise _NotPlain
            for literal in literals:  # a value of the node's own types; anything else goes to jsonschema
                allowed = _PLAIN_LITERAL_TYPES.get(type(literal))
                if allowed is None or (types and allowed.isdisjoint(types)):
                    raise _NotPlain
            out[keyword] = value
        elif keyword not in ANNOTATION_KEYWORDS:  # type, required
            out[keyword] = value
    if out.get("minItems", 0) > out.get("maxItems", out.get("minItems", 0)):
        raise _NotPlain
    if is_object:
        if "properties" not in out and "additionalProperties" not in out:
            out["additionalProperties"] = {}
        if "properties" not in out and out["additionalProperties"] is not False:  # a map node
            if "required" in schema:
                _plain_required(schema["required"], None)
        else:  # a record node
            out.setdefault("properties", {})
            _plain_required(schema.get("required", []), out["properties"])
            out["required"] = list(schema.get("required", []))
    return out


class _Normalizer:
    """Checks one tool's parameters (``schema`` mode) and builds the normalized copy."""

    def __init__(self, tool: str, root: Any, *, lenient: bool = False, notes: list[str] | None = None):
        self.tool = tool
        self.root = root
        self.nodes = 0
        self.lenient = lenient
        self.notes: list[str] = notes if notes is not None else []
        self.inlined: set[str] = set()
        """Pointers of the schemas a ``$ref`` inlined whole (checked keyword by keyword as they were)."""
        self.plain = False
        """Whether :meth:`run` read the schema on the fast path (:func:`_plain_parameters`)."""

    def run(self) -> dict[str, Any]:
        if self.root is None or self.root == {}:
            self.plain = True
            return _empty_parameters()
        normalized = None
        if not self.lenient:
            with contextlib.suppress(_NotPlain):
                inlined: set[str] = set()
                normalized = _plain_parameters(self.root, inlined)
                self.inlined |= inlined
                self.plain = True
        if normalized is None:
            normalized = self.node(self.root, "", ancestors=(), top=True)
        if _META_CHECK:
            try:
                jsonschema.Draft202012Validator.check_schema(normalized)
            except jsonschema.exceptions.SchemaError as error:  # a safety net: the checks above catch all
                pointer = "".join(f"/{_escape(str(p))}" for p in error.path)
                raise ToolSchemaError(f"invalid schema: {error.message}", tool=self.tool, pointer=pointer) from None
        # Lenient input is dirty: its definitions are read as used. The fast path takes definitions only at the
        # root (anywhere else it declines), so a schema it read needs no search for them.
        if self.lenient:
            return normalized
        at_root = "$defs" in self.root or "definitions" in self.root
        if at_root if self.plain else _holds_definitions(self.root):
            self.check_definitions(self.root, "")
        return normalized

    def check_definitions(self, schema: Any, ptr: str) -> None:
        """Every ``$defs``/``definitions`` entry must be a valid JSON Schema, used or not.

        Used ones were checked above as they were inlined (and are not checked again: the meta-schema
        check cost milliseconds per entry); an unused one is dropped from the normalized schema, but an
        invalid one (``{"anyOf": []}``) means the tool list is broken, so it is refused rather than
        silently ignored. Only schema positions are walked, never enum or const data.
        """
        if not isinstance(schema, dict):
            return
        for defs in ("$defs", "definitions"):
            entries = schema.get(defs)
            for name, sub in entries.items() if isinstance(entries, dict) else ():
                sub_ptr = f"{ptr}/{defs}/{_escape(name)}"
                try:
                    if sub_ptr not in self.inlined:
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
        for keyword in ("anyOf", "oneOf", "allOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list):
                for i, branch in enumerate(branches):
                    self.check_definitions(branch, f"{ptr}/{keyword}/{i}")

    def note(self, ptr: str, what: str) -> None:
        _note(self.notes, self.tool, ptr, what)

    def count(self, ptr: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise ToolSchemaError(
                f"the schema grows past {MAX_SCHEMA_NODES} nodes once every $ref is inlined; simplify it",
                tool=self.tool,
                pointer=ptr,
                keyword="$ref",
            )

    # The pointer is always the node's location in the *original* parameters (inside a $defs entry when
    # reached through $ref), so the message points at the text the author has to change. A node merged
    # from allOf branches has no place of its own: its errors point at the node that holds the allOf.
    def node(
        self, schema: Any, ptr: str, *, ancestors: tuple[str, ...], top: bool = False, merged: bool = False
    ) -> Any:
        self.count(ptr)
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
        if self.lenient:
            schema = self.clean(schema, ptr)

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
        if "allOf" in schema:
            return self.all_of(schema, ptr, here, top)
        choices = [k for k in ("anyOf", "oneOf") if k in schema]
        if choices and not top:
            siblings = [
                k
                for k in schema
                if k not in ANNOTATION_KEYWORDS and k not in ("anyOf", "oneOf", "$defs", "definitions")
            ]
            if siblings or len(choices) == 2:
                # The siblings hold in every branch: distribute them (allOf of the node and its choices).
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return self.all_of({**rest, "allOf": [{k: schema[k]} for k in choices]}, ptr, here, top)
            if "anyOf" in schema:
                return self.any_of(schema, ptr, here)
            return self.one_of(schema, ptr, here)
        if top:
            self.check_top(schema, ptr)
        types = self.types(schema, ptr)

        for keyword in _OBJECT_KEYWORDS:
            if keyword in schema and "object" not in types:
                raise self.misplaced(keyword, "object", types, ptr)
        for keyword in _ARRAY_KEYWORDS:
            if keyword in schema and "array" not in types:
                raise self.misplaced(keyword, "array", types, ptr)
        for keyword in _STRING_KEYWORDS:
            if keyword in schema and "string" not in types:
                raise self.misplaced(keyword, "string", types, ptr)
        for keyword in _NUMBER_KEYWORDS:
            if keyword in schema and not {"number", "integer"} & set(types):
                raise self.misplaced(keyword, "number", types, ptr)

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
            elif keyword in ("minItems", "maxItems", "minLength", "maxLength"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise _schema_error(
                        self.tool, ptr, keyword, f"{keyword} must be a non-negative integer, got {json.dumps(value)}"
                    )
                out[keyword] = value
            elif keyword in _NUMBER_KEYWORDS:
                if not isinstance(value, int | float) or isinstance(value, bool):
                    hint = ""
                    if isinstance(value, bool) and keyword.startswith("exclusive"):
                        bound = "minimum" if keyword == "exclusiveMinimum" else "maximum"
                        hint = (
                            f" (draft 4's boolean form: write {keyword}: <number> instead of {bound}, or load "
                            "with lenient=True)"
                        )
                    raise _schema_error(
                        self.tool, ptr, keyword, f"{keyword} must be a number, got {json.dumps(value)}{hint}"
                    )
                out[keyword] = value
            elif keyword in ("pattern", "format"):
                if not isinstance(value, str):
                    raise _schema_error(self.tool, ptr, keyword, f"{keyword} must be a string, got {json.dumps(value)}")
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

        for lo_key, hi_key in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if lo_key in out and hi_key in out and out[lo_key] > out[hi_key]:
                what = "array" if lo_key == "minItems" else "string"
                raise _Unsatisfiable(
                    f"{lo_key} {out[lo_key]} is greater than {hi_key} {out[hi_key]}: no {what} satisfies both",
                    tool=self.tool,
                    pointer=f"{ptr}/{lo_key}",
                    keyword=lo_key,
                )
        if "string" in types:
            self.check_string(out, ptr)
        if {"number", "integer"} & set(types):
            self.check_bounds(out, types, ptr)
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
        self.check_literals(out, ptr, merged=merged)
        return out

    # -- strings and numbers --------------------------------------------------------------------------

    def check_string(self, out: dict[str, Any], ptr: str) -> None:
        """``pattern``/``format``/``minLength``/``maxLength`` the grammar can enforce together (or an error)."""
        fmt = out.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise _schema_error(
                self.tool,
                ptr,
                "format",
                f"format {fmt!r} is not enforced by the grammar, and a constraint is never dropped silently; "
                f"supported formats: {', '.join(FORMATS)}. Remove it (describe the format in 'description'), "
                "use a pattern, or load with lenient=True (unknown formats are dropped with a warning)",
            )
        try:
            string_language(out)
        except StringSchemaError as error:
            cls = _Unsatisfiable if "no string" in str(error) else ToolSchemaError
            raise cls(str(error), tool=self.tool, pointer=f"{ptr}/{error.keyword}", keyword=error.keyword) from None

    def check_bounds(self, out: dict[str, Any], types: tuple[str, ...], ptr: str) -> None:
        """Numeric bounds that some value satisfies, and that the grammar can write (or an error)."""
        if not any(k in out for k in _NUMBER_KEYWORDS):
            return
        bounds = Bounds(out)
        keyword = next(k for k in _NUMBER_KEYWORDS if k in out)
        if "number" in types:
            if not bounds.has_number():
                raise _Unsatisfiable(
                    "the bounds exclude every number (the lower one is above the upper one)",
                    tool=self.tool,
                    pointer=f"{ptr}/{keyword}",
                    keyword=keyword,
                )
            build = lambda: number_node(bounds, lit("0"))  # noqa: E731 - built once, to surface what cannot be written
        else:
            lo, hi = bounds.integer_range()
            if lo is not None and hi is not None and lo > hi:
                raise _Unsatisfiable(
                    "the bounds exclude every integer", tool=self.tool, pointer=f"{ptr}/{keyword}", keyword=keyword
                )
            build = lambda: integer_node(lo, hi)  # noqa: E731
        try:
            build()
        except ValueError as error:
            raise _schema_error(self.tool, ptr, keyword, str(error)) from None

    # -- allOf, anyOf, oneOf ----------------------------------------------------------------------

    def all_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool) -> Any:
        """One node out of the node and its ``allOf`` branches (see :meth:`merge`), normalized."""
        branches = schema["allOf"]
        if not isinstance(branches, list) or not branches:
            raise _schema_error(self.tool, ptr, "allOf", "allOf must be a non-empty list of schemas")
        visited: list[str] = []  # the targets of the $refs inlined on the way (recursion check, depth)
        parts = [({k: v for k, v in schema.items() if k != "allOf"}, ptr)]
        for i, branch in enumerate(branches):
            parts.extend(self.flatten(branch, f"{ptr}/allOf/{i}", here, visited, ()))
        merged, choices = self.merge(parts)
        ancestors = (*here[:-1], *dict.fromkeys(visited))
        if not choices:
            return self.node(merged, ptr, ancestors=ancestors, top=top, merged=True)
        if top:
            raise _schema_error(
                self.tool,
                ptr,
                "allOf",
                "allOf brings an anyOf/oneOf to the top level of parameters, where the arguments must be one "
                "object schema; move the choice into a property",
            )
        return self.distribute(merged, choices, ptr, ancestors)

    def flatten(
        self, branch: Any, where: str, here: tuple[str, ...], visited: list[str], chain: tuple[str, ...]
    ) -> list[tuple[dict[str, Any], str]]:
        """An ``allOf`` branch as the schemas it consists of: ``$ref`` resolved, nested ``allOf`` opened."""
        self.count(where)
        if len(chain) > MAX_SCHEMA_DEPTH:
            raise ToolSchemaError(
                f"allOf and $ref nest deeper than {MAX_SCHEMA_DEPTH} levels; flatten them",
                tool=self.tool,
                pointer=where,
            )
        if branch is True:
            return []
        if not isinstance(branch, dict):
            what = (
                "false: no value satisfies it, so none satisfies the allOf"
                if branch is False
                else (f"a JSON {_json_type_name(branch)}")
            )
            raise ToolSchemaError(
                f"an allOf branch must be a schema; this one is {what}", tool=self.tool, pointer=where
            )
        if self.lenient:
            branch = self.clean(branch, where)
        if "$ref" in branch:
            # Recursion is a $ref back into its own chain; two branches may well share a definition.
            target_ptr, target = self.resolve_ref(branch, where, here, chain)
            visited.append(target_ptr)
            return self.flatten(target, target_ptr, here, visited, (*chain, target_ptr))
        if "allOf" in branch:
            inner = branch["allOf"]
            if not isinstance(inner, list) or not inner:
                raise _schema_error(self.tool, where, "allOf", "allOf must be a non-empty list of schemas")
            out = [({k: v for k, v in branch.items() if k != "allOf"}, where)]
            for i, sub in enumerate(inner):
                out.extend(self.flatten(sub, f"{where}/allOf/{i}", here, visited, (*chain, where)))
            return out
        return [(branch, where)]

    def merge(self, parts: list[tuple[dict[str, Any], str]]) -> tuple[dict[str, Any], list[tuple[str, list[Any]]]]:
        """The schemas of ``parts`` as one node, and the anyOf/oneOf lists among them (distributed later).

        ``type``: the types in common (``integer`` is a ``number``); ``properties`` and ``required``:
        all of them, a property in several parts holding all their schemas (``allOf``), and a name that
        a part forbids (``additionalProperties: false`` and not among its properties) left out;
        ``items``: all the schemas; lower bounds: the highest; upper bounds: the lowest; ``enum``: the
        values in every list; ``const``, ``pattern``, ``format``: one value (two different ones cannot
        be merged). The merged node is then checked like any other.
        """
        out: dict[str, Any] = {}
        choices: list[tuple[str, list[Any]]] = []
        objects: list[tuple[dict[str, Any], Any, str, bool]] = []
        for part, where in parts:
            for keyword, value in part.items():
                if keyword in ANNOTATION_KEYWORDS:
                    out.setdefault(keyword, value)
                elif keyword in ("$defs", "definitions", "properties", "additionalProperties"):
                    continue
                elif keyword in ("anyOf", "oneOf"):
                    if not isinstance(value, list) or not value:
                        raise _schema_error(self.tool, where, keyword, f"{keyword} must be a non-empty list of schemas")
                    choices.append((keyword, value))
                elif keyword not in out:
                    if keyword == "type":
                        self.types({"type": value}, where)
                    out[keyword] = value
                else:
                    out[keyword] = self.combine(keyword, out[keyword], value, where)
            if "properties" in part or "additionalProperties" in part:
                props = part.get("properties", {})
                if not isinstance(props, dict):
                    raise _schema_error(
                        self.tool,
                        where,
                        "properties",
                        f"properties is a JSON {_json_type_name(props)}; it must be an object mapping names to schemas",
                    )
                extra = part.get("additionalProperties", True)
                if not isinstance(extra, bool | dict):
                    raise _schema_error(
                        self.tool,
                        where,
                        "additionalProperties",
                        f"additionalProperties is a JSON {_json_type_name(extra)}; it must be false or a schema",
                    )
                objects.append((props, extra, where, "properties" in part))
        if objects:
            self.merge_objects(out, objects)
        if "const" in out and "enum" in out:
            if not any(_same_value(out["const"], v) for v in out["enum"]):
                raise _Unsatisfiable(
                    "allOf: the const value is not among the enum values of another branch",
                    tool=self.tool,
                    pointer=parts[0][1],
                    keyword="const",
                )
            del out["enum"]
        return out, choices

    def combine(self, keyword: str, a: Any, b: Any, where: str) -> Any:
        """Two values of one keyword in two ``allOf`` branches, as one (or an error at ``where``)."""
        if keyword == "type":
            ta = self.types({"type": a}, where)
            tb = self.types({"type": b}, where)
            common = [t for t in ta if t in tb or (t == "integer" and "number" in tb)]
            common += [t for t in tb if t == "integer" and "number" in ta and t not in common]
            if not common:
                raise _Unsatisfiable(
                    f"allOf: no value is both of type {json.dumps(a)} and of type {json.dumps(b)}",
                    tool=self.tool,
                    pointer=f"{where}/type",
                    keyword="type",
                )
            return common[0] if len(common) == 1 else common
        if keyword == "required":
            if not isinstance(a, list) or not isinstance(b, list):
                return b if not isinstance(b, list) else a  # the invalid one is reported by the node check
            return [*a, *(name for name in b if name not in a)]
        if keyword == "items":
            return b if a is True else a if b is True else {"allOf": [a, b]}
        lower = keyword in ("minItems", "minLength", "minimum", "exclusiveMinimum")
        upper = keyword in ("maxItems", "maxLength", "maximum", "exclusiveMaximum")
        if lower or upper:
            for value in (a, b):
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise _schema_error(
                        self.tool, where, keyword, f"{keyword} must be a number, got {json.dumps(value)}"
                    )
            return max(a, b) if lower else min(a, b)
        if keyword == "enum" and isinstance(a, list) and isinstance(b, list):
            common = [v for v in a if any(_same_value(v, w) for w in b)]
            if not common:
                raise _Unsatisfiable(
                    "allOf: the enum lists have no value in common",
                    tool=self.tool,
                    pointer=f"{where}/enum",
                    keyword="enum",
                )
            return common
        if _same_value(a, b):
            return a
        if keyword == "const":
            raise _Unsatisfiable(
                f"allOf: two different const values ({json.dumps(a)} and {json.dumps(b)})",
                tool=self.tool,
                pointer=f"{where}/const",
                keyword="const",
            )
        hint = {
            "pattern": "write one pattern that means both (the grammar enforces one pattern per string)",
            "format": "a string is checked against one format",
        }.get(keyword, "merge the branches by hand")
        raise _schema_error(
            self.tool,
            where,
            keyword,
            f"allOf: the branches give {keyword} two different values ({json.dumps(a)} and {json.dumps(b)}), "
            f"which cannot be merged into one node; {hint}",
        )

    def merge_objects(self, out: dict[str, Any], objects: list[tuple[dict[str, Any], Any, str, bool]]) -> None:
        """``properties``/``additionalProperties`` of the parts that speak about an object's keys, merged."""
        required = out.get("required", [])
        names: list[str] = []
        for props, _, _, _ in objects:
            names.extend(name for name in props if name not in names)
        merged_props: dict[str, Any] = {}
        for name in names:
            constraints: list[Any] = []
            forbidden_by = None
            for props, extra, where, _ in objects:
                if name in props:
                    constraints.append(props[name])
                elif extra is False:
                    forbidden_by = where
                    break
                elif isinstance(extra, dict):
                    constraints.append(extra)
            if forbidden_by is not None:
                if isinstance(required, list) and name in required:
                    raise _Unsatisfiable(
                        f"allOf: {name!r} is required, but the branch at {forbidden_by or '/'} allows no such "
                        "property (additionalProperties: false without it among its properties)",
                        tool=self.tool,
                        pointer=f"{forbidden_by}/additionalProperties",
                        keyword="additionalProperties",
                    )
                continue  # forbidden by one part: the merged object never has it
            kept = [c for c in constraints if c is not True]
            merged_props[name] = kept[0] if len(kept) == 1 else {"allOf": kept} if kept else {}
        if any(declared for _, _, _, declared in objects):
            out["properties"] = merged_props
        extras = [extra for _, extra, _, _ in objects if extra is not True]
        if any(extra is False for extra in extras):
            out["additionalProperties"] = False
        elif extras:
            out["additionalProperties"] = extras[0] if len(extras) == 1 else {"allOf": extras}

    def distribute(
        self, rest: dict[str, Any], choices: list[tuple[str, list[Any]]], ptr: str, ancestors: tuple[str, ...]
    ) -> dict[str, Any]:
        """``allOf`` over ``anyOf``/``oneOf``: one branch per combination, each merged with ``rest``.

        ``A and (B or C)`` is ``(A and B) or (A and C)``; for ``oneOf`` the same holds with "exactly one"
        (a value of ``A`` matches exactly one of ``A and B``, ``A and C`` when it matches exactly one of
        ``B``, ``C``), so the result is a ``oneOf`` of the combinations. Combinations no value satisfies
        are dropped.
        """
        one_ofs = [branches for kind, branches in choices if kind == "oneOf"]
        any_ofs = [branches for kind, branches in choices if kind == "anyOf"]
        lists, extra = (one_ofs, [{"anyOf": b} for b in any_ofs]) if one_ofs else (any_ofs, [])
        total = math.prod(len(b) for b in lists)
        if total > _MAX_DISTRIBUTED:
            raise _schema_error(
                self.tool,
                ptr,
                "allOf",
                f"allOf over anyOf/oneOf makes {total} combinations to check (limit {_MAX_DISTRIBUTED}); "
                "write the alternatives out with fewer branches",
            )
        branches: list[Any] = []
        for combo in itertools.product(*lists):
            try:
                got = self.node({"allOf": [rest, *combo, *extra]}, ptr, ancestors=ancestors, merged=True)
            except _Unsatisfiable:
                continue
            branches.append(got)
        if not branches:
            raise _Unsatisfiable(
                "no branch of the anyOf/oneOf is compatible with the rest of the node (its type, bounds or "
                "values): no value satisfies it",
                tool=self.tool,
                pointer=ptr,
                keyword="anyOf" if not one_ofs else "oneOf",
            )
        if one_ofs:
            self.check_disjoint(branches, ptr)
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def one_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...]) -> dict[str, Any]:
        """``oneOf`` whose branches exclude each other is ``anyOf`` (exactly one matches iff one does)."""
        branches = schema["oneOf"]
        if not isinstance(branches, list) or not branches:
            raise _schema_error(self.tool, ptr, "oneOf", "oneOf must be a non-empty list of schemas")
        normalized = [self.node(b, f"{ptr}/oneOf/{i}", ancestors=here) for i, b in enumerate(branches)]
        self.check_disjoint(normalized, ptr)
        return {"anyOf": normalized}

    def check_disjoint(self, branches: list[Any], ptr: str) -> None:
        for i, j in itertools.combinations(range(len(branches)), 2):
            if _disjoint(branches[i], branches[j]):
                continue
            if self.lenient:
                self.note(
                    f"{ptr}/oneOf",
                    f"oneOf branches #{i} and #{j} may both match one value: read as anyOf (a value matching "
                    "several branches is accepted, by the grammar and by the parser)",
                )
                return
            raise _schema_error(
                self.tool,
                ptr,
                "oneOf",
                f"oneOf branches #{i} and #{j} may both match one value, and the grammar cannot enforce that "
                "exactly one branch matches: it takes oneOf only when the branches exclude each other (different "
                "types, different const/enum values, a required property whose values differ, numeric ranges "
                "that do not meet). Use anyOf if a value may match both, make the branches exclusive, or load "
                "with lenient=True (this oneOf is then read as anyOf, with a warning)",
            )

    # -- lenient ----------------------------------------------------------------------------------

    def clean(self, schema: dict[str, Any], ptr: str) -> dict[str, Any]:
        """``lenient=True``: a copy of ``schema`` with dirty spellings mapped and non-constraints dropped."""
        out: dict[str, Any] = {}
        for keyword, value in schema.items():
            if keyword == "type":
                mapped = self.lenient_type(value, ptr)
                if mapped is not None:
                    out[keyword] = mapped
            elif keyword == "nullable" or (
                keyword in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool)
            ):
                continue  # below
            elif keyword == "optional":
                self.note(f"{ptr}/optional", "BFCL's optional flag dropped (required decides what is required)")
            elif keyword == "format" and isinstance(value, str) and value not in FORMATS:
                self.note(f"{ptr}/format", f"format {value!r} dropped: the grammar does not enforce it")
            elif keyword in _LENIENT_ANNOTATIONS:
                self.note(f"{ptr}/{_escape(keyword)}", f"annotation {keyword!r} dropped")
            elif keyword not in _JSON_SCHEMA_VOCABULARY:
                self.note(
                    f"{ptr}/{_escape(keyword)}",
                    f"keyword {keyword!r} dropped: JSON Schema does not define it (so it constrains nothing)",
                )
            else:
                out[keyword] = value
        if "nullable" in schema:
            names = out.get("type")
            if schema["nullable"] is True and names is not None:
                listed = names if isinstance(names, list) else [names]
                if "null" not in listed:
                    out["type"] = [*listed, "null"]
                self.note(f"{ptr}/nullable", 'nullable: true read as "null" added to type')
            else:
                self.note(f"{ptr}/nullable", f"nullable: {json.dumps(schema['nullable'])} dropped")
        for keyword, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            value = schema.get(keyword)
            if isinstance(value, bool):
                if value and bound in out:
                    out[keyword] = out.pop(bound)
                    self.note(f"{ptr}/{keyword}", f"draft 4's {keyword}: true read as {keyword}: {out[keyword]}")
                else:
                    self.note(f"{ptr}/{keyword}", f"draft 4's {keyword}: {json.dumps(value)} dropped")
        props = out.get("properties")
        if isinstance(props, dict) and any(
            isinstance(s, dict) and isinstance(s.get("required"), bool) for s in props.values()
        ):
            required = list(out["required"]) if isinstance(out.get("required"), list) else []
            lifted: dict[str, Any] = {}
            for name, sub in props.items():
                if isinstance(sub, dict) and isinstance(sub.get("required"), bool):
                    if sub["required"] and name not in required:
                        required.append(name)
                    self.note(
                        f"{ptr}/properties/{_escape(name)}/required",
                        f"draft 3's required: {json.dumps(sub['required'])} read as the object's required list",
                    )
                    sub = {k: v for k, v in sub.items() if k != "required"}
                lifted[name] = sub
            out["properties"] = lifted
            if required or "required" in out:
                out["required"] = required
        self.clean_contradictions(out, ptr)
        return out

    def clean_contradictions(self, out: dict[str, Any], ptr: str) -> None:
        """``lenient=True``: drop what contradicts the node's own ``type`` or ``properties``, with a note each.

        Strict loading refuses these as likely mistakes. Lenient loading reads them as JSON Schema does
        where that is harmless (a keyword for another type constrains nothing there) and drops what the
        grammar cannot build otherwise: ``enum`` values no value of the node's type can equal (the rest
        of the enum is kept; all of it dropped when none fits) and ``required`` names that no property
        declares (the grammar builds an object's keys from its properties).
        """
        names = out.get("type")
        listed = names if isinstance(names, list) else [names]
        if names is None or not all(isinstance(n, str) and n in JSON_TYPES for n in listed):
            return
        types = set(listed)
        for keywords, kind, fits in (
            (_OBJECT_KEYWORDS, "object", "object" in types),
            (_ARRAY_KEYWORDS, "array", "array" in types),
            (_STRING_KEYWORDS, "string", "string" in types),
            (_NUMBER_KEYWORDS, "number", bool({"number", "integer"} & types)),
        ):
            for keyword in keywords:
                if keyword in out and not fits:
                    del out[keyword]
                    self.note(
                        f"{ptr}/{keyword}",
                        f"{keyword} dropped: it applies to {kind}s, the type is {json.dumps(names)} "
                        "(JSON Schema ignores it there)",
                    )
        enum = out.get("enum")
        if isinstance(enum, list) and enum:
            of_type = jsonschema.Draft202012Validator({"type": names})
            kept = [v for v in enum if of_type.is_valid(v)]
            if len(kept) < len(enum):
                dropped = [v for v in enum if not of_type.is_valid(v)]
                shown = json.dumps(dropped, ensure_ascii=False)
                if kept:
                    out["enum"] = kept
                    self.note(f"{ptr}/enum", f"enum values {shown} dropped: not of type {json.dumps(names)}")
                else:
                    del out["enum"]
                    self.note(f"{ptr}/enum", f"enum {shown} dropped: no value is of type {json.dumps(names)}")
        required = out.get("required")
        if "object" in types and isinstance(required, list):
            props = out.get("properties")
            declared = props if isinstance(props, dict) else {}
            undeclared = [r for r in required if isinstance(r, str) and r not in declared]
            if undeclared:
                out["required"] = [r for r in required if not (isinstance(r, str) and r not in declared)]
                self.note(
                    f"{ptr}/required",
                    f"required names {json.dumps(undeclared, ensure_ascii=False)} dropped: no property declares them",
                )

    def lenient_type(self, value: Any, ptr: str) -> Any:
        names = value if isinstance(value, list) else [value]
        mapped: list[Any] = []
        for name in names:
            if isinstance(name, str) and name not in JSON_TYPES and name in LENIENT_TYPE_NAMES:
                target = LENIENT_TYPE_NAMES[name]
                if target is None:
                    self.note(f"{ptr}/type", f"type {json.dumps(name)} read as any value (type dropped)")
                    return None
                self.note(f"{ptr}/type", f"type {json.dumps(name)} read as {json.dumps(target)}")
                name = target
            if name not in mapped:
                mapped.append(name)
        return mapped if isinstance(value, list) else mapped[0]

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
        target_ptr, target = self.resolve_ref(schema, ptr, here, ())
        normalized = self.node(target, target_ptr, ancestors=here, top=top)
        self.inlined.add(target_ptr)  # walked whole (allOf branches are merged, not walked: not counted)
        return normalized

    def resolve_ref(
        self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], visited: Sequence[str]
    ) -> tuple[str, Any]:
        """The pointer and the schema a ``$ref`` names (checked: local, resolvable, not recursive)."""
        ref = schema["$ref"]
        siblings = [k for k in schema if k not in ANNOTATION_KEYWORDS and k not in _REF_KEYWORDS]
        if siblings:
            raise _schema_error(
                self.tool,
                ptr,
                siblings[0],
                f"{siblings[0]} beside $ref is not supported together: move it into the referenced schema, or "
                'write {"allOf": [{"$ref": ...}, {...}]}',
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
        if target_ptr in here or target_ptr in visited:
            raise _schema_error(
                self.tool,
                ptr,
                "$ref",
                f"recursive schema: $ref {ref!r} refers back to {target_ptr or 'the parameters root'}, which "
                "contains this $ref; the grammar must be regular, so a schema cannot contain itself. Unroll the "
                "recursion to a fixed depth (copy the definition a few levels deep, the last one without the $ref)",
            )
        return target_ptr, target

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

    def check_literals(self, out: dict[str, Any], ptr: str, *, merged: bool = False) -> None:
        """Every enum/const value must satisfy the rest of its node (formats checked as the parser does).

        In a node merged from ``allOf`` the enum is the intersection of several constraints: values
        that break another branch are dropped (they were never valid) instead of refused.
        """
        if "enum" not in out and "const" not in out:
            return
        rest = {k: v for k, v in out.items() if k not in ("enum", "const")}
        validator = jsonschema.Draft202012Validator(rest, format_checker=FORMAT_CHECKER)
        if merged and "enum" in out:
            kept = [v for v in out["enum"] if validator.is_valid(v)]
            if not kept:
                raise _Unsatisfiable(
                    "allOf: no enum value satisfies the other branches", tool=self.tool, pointer=ptr, keyword="enum"
                )
            out["enum"] = kept
        literals = [("const", None, out["const"])] if "const" in out else []
        literals += [("enum", i, v) for i, v in enumerate(out.get("enum", ()))]
        for keyword, index, value in literals:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                where = f"{ptr}/{keyword}" + ("" if index is None else f"/{index}")
                label = keyword if index is None else f"enum value #{index}"
                raise (_Unsatisfiable if merged else ToolSchemaError)(
                    f"{label} {json.dumps(value, ensure_ascii=False)} does not fit its own node: {error.message}; "
                    f"fix the value or the node's type",
                    tool=self.tool,
                    pointer=where,
                    keyword=keyword,
                )


def _same_value(a: Any, b: Any) -> bool:
    """JSON equality as ``enum``/``const`` mean it (``1`` and ``1.0`` equal, ``true`` and ``1`` not)."""
    return _canonical_value(a) == _canonical_value(b)


def _canonical_value(value: Any) -> str:
    def plain(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float):
            return ["number", float(v) if float(v) == v else v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v]

    return json.dumps(plain(value), sort_keys=True)


def _value_types(schema: Any) -> set[str] | None:
    """The JSON types of the values a normalized schema accepts (``None``: any)."""
    if not isinstance(schema, dict) or not schema:
        return None
    literals = [schema["const"]] if "const" in schema else schema.get("enum")
    if literals is not None:
        return {
            _json_type_name(v) if not (isinstance(v, int) and not isinstance(v, bool)) else "integer" for v in literals
        }
    if "anyOf" in schema:
        out: set[str] = set()
        for branch in schema["anyOf"]:
            got = _value_types(branch)
            if got is None:
                return None
            out |= got
        return out
    declared = schema.get("type")
    if declared is None:
        return None
    return set(declared) if isinstance(declared, list) else {declared}


def _disjoint(a: Any, b: Any) -> bool:
    """Whether no value can satisfy both normalized schemas, by what is easy to prove (else False)."""
    if isinstance(a, dict) and "anyOf" in a:
        return all(_disjoint(x, b) for x in a["anyOf"])
    if isinstance(b, dict) and "anyOf" in b:
        return all(_disjoint(a, x) for x in b["anyOf"])
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    for x, y in ((a, b), (b, a)):
        literals = [x["const"]] if "const" in x else x.get("enum")
        if literals is not None:
            other = jsonschema.Draft202012Validator(y, format_checker=FORMAT_CHECKER)
            return not any(other.is_valid(v) for v in literals)
    ta, tb = _value_types(a), _value_types(b)
    if ta is not None and tb is not None:
        # A number type holds the integers too (1.0 is an integer to JSON Schema, and 1 a number).
        wide_a = ta | ({"integer"} if "number" in ta else set()) | ({"number"} if "integer" in ta else set())
        if not wide_a & tb:
            return True
        common = ta & tb | (
            {"integer"} if ("number" in ta and "integer" in tb) or ("integer" in ta and "number" in tb) else set()
        )
        if common <= {"object"} and _records_disjoint(a, b):
            return True
        if common <= {"number", "integer"} and _ranges_disjoint(a, b):
            return True
    return False


def _records_disjoint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two record nodes that both require a property whose schemas exclude each other (a discriminator)."""
    pa, pb = a.get("properties"), b.get("properties")
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        return False
    both = set(a.get("required", ())) & set(b.get("required", ()))
    return any(_disjoint(pa[name], pb[name]) for name in both if name in pa and name in pb)


def _ranges_disjoint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two numeric nodes whose bounds do not meet."""
    ra, rb = Bounds(a), Bounds(b)
    for low, high in ((ra, rb), (rb, ra)):
        if (
            low.hi is not None
            and high.lo is not None
            and (low.hi < high.lo or (low.hi == high.lo and (low.hi_open or high.lo_open)))
        ):
            return True
    return False


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
    return _canonical_text(_canonical(schema))


def _canonical_text(canonical: Any) -> str:
    return json.dumps(canonical, ensure_ascii=False, separators=(",", ":"))
