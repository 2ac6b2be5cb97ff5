"""Gemma 4's object notation, from ``format.toml``'s ``[block]``: its spellings, and a value as the template
writes it (:func:`render_value`), which the grammar (:mod:`.grammar`) generates and the parser (:mod:`.parser`)
reads back."""

from __future__ import annotations

from typing import Any

from toolgrammar.formats.spec import format_spec

_SPEC: dict[str, str] = format_spec("toolgrammar.formats.gemma4")["block"]
CALL_PREFIX: str = _SPEC["call_prefix"]
"""What opens a call, before its name (``call:``)."""
QUOTE: str = _SPEC["quote"]
"""What opens and closes a string (``<|"|>``); the text between is never escaped."""
ITEM_SEP: str = _SPEC["item_separator"]
KEY_SEP: str = _SPEC["key_separator"]
KEY_FORBIDDEN = ("{", "}", "[", "]", ",", ":", QUOTE, "\n")
"""What a bare key may not contain (the template writes it as it is)."""


def dictsort(keys: Any) -> list[str]:
    """Keys in Jinja ``dictsort`` order: case-insensitive (ties keep the input order)."""
    return sorted(keys, key=str.lower)


def render_value(value: Any) -> str:
    """One value as the Gemma 4 template writes it."""
    if isinstance(value, str):
        return f"{QUOTE}{value}{QUOTE}"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        return "{" + ITEM_SEP.join(f"{k}{KEY_SEP}{render_value(value[k])}" for k in dictsort(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ITEM_SEP.join(render_value(v) for v in value) + "]"
    raise TypeError(f"gemma4 cannot write a {type(value).__name__} value")


__all__ = ["CALL_PREFIX", "ITEM_SEP", "KEY_FORBIDDEN", "KEY_SEP", "QUOTE", "dictsort", "render_value"]
