"""The arguments object every tool takes: argument names the formats can carry, ``required`` lists, the
parameters' top level, and the ``strings`` mode (every declared argument a string)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.keywords import LENIENT_TYPE_NAMES
from toolgrammar.schema.report import add_note, escape_token, json_type_name, schema_error

BAD_ARGUMENT_CHARACTER = re.compile("[<>=\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Markup, and Unicode's categories Cc (U+0000-U+001F, U+007F-U+009F), Zl (U+2028) and Zp (U+2029)."""


def check_argument_name(name: str, pointer: str, tool: str) -> None:
    if not name or BAD_ARGUMENT_CHARACTER.search(name) is not None:
        raise ToolSchemaError(
            f"argument name {name!r} cannot be carried by the tool-call formats (qwen-xml writes "
            "<parameter=NAME>): a name must be non-empty and contain no control characters, newlines, "
            "'<', '>' or '='; rename the property",
            tool=tool,
            pointer=pointer,
            keyword="properties",
        )


def check_required(required: Any, properties: Mapping[str, Any] | None, pointer: str, tool: str) -> list[str]:
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolSchemaError(
            f"required is a JSON {json_type_name(required)} with non-string items; it must be a list of property names"
            if isinstance(required, list)
            else f"required is a JSON {json_type_name(required)}; it must be a list of property names",
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


def check_object_parameters(params: Any, tool: str, ptr: str = "") -> None:
    if not isinstance(params, dict):
        raise ToolSchemaError(
            f'parameters is a JSON {json_type_name(params)}; it must be an object schema {{"type": "object", '
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


def normalize_strings(params: Any, tool: str, lenient: bool = False, notes: list[str] | None = None) -> dict[str, Any]:
    """The ``strings`` mode: every declared property becomes ``{"type": "string"}``."""
    if params is None or params == {}:
        return empty_parameters()
    if lenient and isinstance(params, dict) and LENIENT_TYPE_NAMES.get(params.get("type")) == "object":
        add_note(notes, tool, "", f'type {json.dumps(params["type"])} read as "object"')
        params = {**params, "type": "object"}
    check_object_parameters(params, tool)
    if "$ref" in params:
        raise schema_error(
            tool, "", "$ref", "the strings mode reads the top-level properties directly: inline the top-level $ref"
        )
    properties = params.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSchemaError(
            f"properties is a JSON {json_type_name(properties)}; it must be an object mapping names to schemas",
            tool=tool,
            pointer="/properties",
            keyword="properties",
        )
    for name in properties:
        check_argument_name(name, f"/properties/{escape_token(name)}", tool)
    required = check_required(params.get("required", []), properties, "", tool)
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in properties},
        "required": required,
        "additionalProperties": False,
    }


def empty_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


__all__ = [
    "BAD_ARGUMENT_CHARACTER",
    "check_argument_name",
    "check_object_parameters",
    "check_required",
    "empty_parameters",
    "normalize_strings",
]
