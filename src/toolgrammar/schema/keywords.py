"""What a tool schema may say: its keywords (by kind of value), its type names (and those lenient loading
maps), and its limits.

Tables, and :func:`declared_types`, the check of a node's ``type``; shared by the normalizer, the fast path,
``allOf`` merging, lenient loading and the strings mode.
"""

from __future__ import annotations

import json
from typing import Any

from toolgrammar.schema.report import schema_error

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

MAX_SCHEMA_DEPTH = 64
"""Deepest schema nesting accepted (after ``$ref`` inlining); deeper input gets a clear error, not a
``RecursionError``."""

MAX_SCHEMA_NODES = 20_000
"""Most schema nodes one tool may have once every ``$ref`` is inlined: a chain of definitions that each
use the previous one twice doubles at every step, and a grammar that large is a mistake, not a tool."""

OBJECT_KEYWORDS = ("properties", "required", "additionalProperties")
"""The keywords of each kind of value: a keyword applies to its kind only."""
ARRAY_KEYWORDS = ("items", "minItems", "maxItems")
STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
REF_KEYWORDS = ("$ref", "$defs", "definitions")
"""The keywords of references and their definitions."""
TOP_LEVEL_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
"""The constraining keywords the parameters' top level may hold (the arguments object)."""

KEYWORD_HINTS: dict[str, str] = {
    "not": "the grammar cannot generate 'anything but' a schema",
    "nullable": 'OpenAPI\'s nullable is not JSON Schema: use "type": ["T", "null"] or anyOf with {"type": "null"}',
    "prefixItems": "tuple arrays are not supported: use one items schema",
    "if": "conditional schemas are not supported",
    "then": "conditional schemas are not supported",
    "else": "conditional schemas are not supported",
}
for _kw in ("contentEncoding", "contentMediaType", "contentSchema"):
    KEYWORD_HINTS[_kw] = "content annotations are not enforced: describe the content in 'description' instead"
KEYWORD_HINTS["multipleOf"] = "multipleOf is not enforced: use enum for a small set, or describe the step"
for _kw in ("uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems"):
    KEYWORD_HINTS[_kw] = "this array constraint is not enforced"
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
    KEYWORD_HINTS[_kw] = "this object constraint is not enforced"
TYPE_HINTS = {"int": "integer", "float": "number", "double": "number", "str": "string", "bool": "boolean"}
TYPE_HINTS |= {"dict": "object", "list": "array", "none": "null", "None": "null", "map": "object"}

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


def declared_types(tool: str, schema: dict[str, Any], ptr: str) -> tuple[str, ...]:
    """The type names ``schema`` declares (``()``: no ``type``), or an error naming the one at fault."""
    if "type" not in schema:
        return ()
    value = schema["type"]
    names = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        raise schema_error(tool, ptr, "type", "type is an empty list; name at least one type")
    for name in names:
        if not isinstance(name, str) or name not in JSON_TYPES:
            hint = ""
            if isinstance(name, str) and name in TYPE_HINTS:
                hint = f" (did you mean {TYPE_HINTS[name]!r}?)"
            raise schema_error(
                tool,
                ptr,
                "type",
                f"unknown type {json.dumps(name)}{hint}: JSON Schema types are {', '.join(JSON_TYPES)}",
            )
    if len(set(names)) != len(names):
        raise schema_error(tool, ptr, "type", f"type lists a name twice: {json.dumps(value)}")
    return tuple(names)


__all__ = [
    "ANNOTATION_KEYWORDS",
    "ARRAY_KEYWORDS",
    "JSON_TYPES",
    "KEYWORD_HINTS",
    "LENIENT_TYPE_NAMES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "NUMBER_KEYWORDS",
    "OBJECT_KEYWORDS",
    "REF_KEYWORDS",
    "STRING_KEYWORDS",
    "SUPPORTED_KEYWORDS",
    "TOP_LEVEL_KEYWORDS",
    "TYPE_HINTS",
    "declared_types",
]
