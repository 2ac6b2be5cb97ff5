"""How the schema layer says where and why: JSON pointer tokens, JSON type names, errors and lenient notes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgrammar.errors import ToolSchemaError


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json_type_name(value: Any) -> str:
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


def unescape_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def schema_error(tool: str, pointer: str, keyword: str, message: str) -> ToolSchemaError:
    return ToolSchemaError(message, tool=tool, pointer=f"{pointer}/{escape_token(keyword)}", keyword=keyword)


def add_note(notes: list[str] | None, tool: str, pointer: str, what: str) -> None:
    """Record one lenient rewrite or drop (emitted as a ToolSchemaWarning by load_tools)."""
    if notes is None:
        return
    text = f"tool {tool!r}, at {pointer or '/'}: {what} (lenient=True)"
    if text not in notes:
        notes.append(text)


class Unsatisfiable(ToolSchemaError):
    """A node that no value satisfies (``allOf`` branches that exclude each other, an empty range).

    A :class:`ToolSchemaError` like any other, except where ``allOf`` is distributed over the
    branches of an ``anyOf``/``oneOf``: there a branch no value satisfies is dropped (it matches
    nothing, so leaving it out changes nothing)."""


__all__ = ["Unsatisfiable", "add_note", "escape_token", "json_type_name", "schema_error", "unescape_token"]
