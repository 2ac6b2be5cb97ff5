"""Tool lists in: loading, checking and normalizing tool schemas (the ground layer, blind to the automata).

:func:`load_tools` turns a tool list into a :class:`ToolSet` whose schemas are normalized; every other
layer reads those, never the originals. The layer also holds what the value grammars are built from,
decided here without building anything: the language of a node's string keywords
(:func:`string_language`, over :mod:`~toolgrammar.schema.patterns`) and the texts numeric bounds allow
(:mod:`~toolgrammar.schema.bounds`). The modules, bottom up:

- :mod:`~toolgrammar.schema.report` (pointers, errors, lenient notes), :mod:`~toolgrammar.schema.keywords`
  (the keywords, type names and limits), :mod:`~toolgrammar.schema.copies` (plain copies of JSON data);
- :mod:`~toolgrammar.schema.patterns`, :mod:`~toolgrammar.schema.string_formats`,
  :mod:`~toolgrammar.schema.string_keywords`, :mod:`~toolgrammar.schema.format_checker` (strings) and
  :mod:`~toolgrammar.schema.bounds` (numbers);
- :mod:`~toolgrammar.schema.toolset` (:class:`Tool`, :class:`ToolSet`, the fingerprint),
  :mod:`~toolgrammar.schema.arguments` (the arguments object, the ``strings`` mode);
- the normalizer, :mod:`~toolgrammar.schema.normalize`, with its fast path (:mod:`~toolgrammar.schema.plain`),
  ``allOf`` merging (:mod:`~toolgrammar.schema.merge`), disjointness for ``oneOf``
  (:mod:`~toolgrammar.schema.disjoint`) and lenient reading (:mod:`~toolgrammar.schema.lenient`);
- :mod:`~toolgrammar.schema.entries` (one entry), :mod:`~toolgrammar.schema.sources` (files and mappings) and
  :mod:`~toolgrammar.schema.loading` (:func:`load_tools` and its caches).

This module re-exports the names other layers use, each imported on first use: a module that needs only
the string languages does not load ``jsonschema`` or numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolgrammar.lazy_exports import lazy_getattr

_EXPORTS: dict[str, tuple[str, ...]] = {
    "bounds": (
        "MAX_FLOAT_INT",
        "MAX_FLOAT_INT_DIGITS",
        "Bounds",
        "DecimalSpan",
        "IntegerPlan",
        "Magnitudes",
        "integer_plan",
        "magnitudes",
        "number_plan",
    ),
    "entries": ("TOOL_NAME_PATTERN",),
    "format_checker": ("FORMAT_CHECKER",),
    "keywords": (
        "ANNOTATION_KEYWORDS",
        "JSON_TYPES",
        "LENIENT_TYPE_NAMES",
        "MAX_SCHEMA_DEPTH",
        "MAX_SCHEMA_NODES",
        "SUPPORTED_KEYWORDS",
    ),
    "loading": ("clear_recent", "load_tools", "load_tools_lenient"),
    "patterns": (
        "ANY",
        "Cat",
        "CharSet",
        "Chars",
        "Or",
        "Rep",
        "Rx",
        "StringSchemaError",
        "chars_of",
        "charset",
        "complement",
        "contains",
        "difference",
        "intersect",
        "union",
    ),
    "string_formats": ("FORMATS",),
    "string_keywords": ("string_language",),
    "toolset": ("ARGUMENT_MODES", "ArgumentMode", "Tool", "ToolSet"),
}
_LAZY = {name: f"toolgrammar.schema.{module}" for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "ANNOTATION_KEYWORDS",
    "ANY",
    "ARGUMENT_MODES",
    "FORMATS",
    "FORMAT_CHECKER",
    "JSON_TYPES",
    "LENIENT_TYPE_NAMES",
    "MAX_FLOAT_INT",
    "MAX_FLOAT_INT_DIGITS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "SUPPORTED_KEYWORDS",
    "TOOL_NAME_PATTERN",
    "ArgumentMode",
    "Bounds",
    "Cat",
    "CharSet",
    "Chars",
    "DecimalSpan",
    "IntegerPlan",
    "Magnitudes",
    "Or",
    "Rep",
    "Rx",
    "StringSchemaError",
    "Tool",
    "ToolSet",
    "chars_of",
    "charset",
    "clear_recent",
    "complement",
    "contains",
    "difference",
    "integer_plan",
    "intersect",
    "load_tools",
    "load_tools_lenient",
    "magnitudes",
    "number_plan",
    "string_language",
    "union",
]


__getattr__ = lazy_getattr("toolgrammar.schema", _LAZY, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # pragma: no cover
    from toolgrammar.schema.bounds import (
        MAX_FLOAT_INT,
        MAX_FLOAT_INT_DIGITS,
        Bounds,
        DecimalSpan,
        IntegerPlan,
        Magnitudes,
        integer_plan,
        magnitudes,
        number_plan,
    )
    from toolgrammar.schema.entries import TOOL_NAME_PATTERN
    from toolgrammar.schema.format_checker import FORMAT_CHECKER
    from toolgrammar.schema.keywords import (
        ANNOTATION_KEYWORDS,
        JSON_TYPES,
        LENIENT_TYPE_NAMES,
        MAX_SCHEMA_DEPTH,
        MAX_SCHEMA_NODES,
        SUPPORTED_KEYWORDS,
    )
    from toolgrammar.schema.loading import clear_recent, load_tools, load_tools_lenient
    from toolgrammar.schema.patterns import (
        ANY,
        Cat,
        Chars,
        CharSet,
        Or,
        Rep,
        Rx,
        StringSchemaError,
        chars_of,
        charset,
        complement,
        contains,
        difference,
        intersect,
        union,
    )
    from toolgrammar.schema.string_formats import FORMATS
    from toolgrammar.schema.string_keywords import string_language
    from toolgrammar.schema.toolset import ARGUMENT_MODES, ArgumentMode, Tool, ToolSet
