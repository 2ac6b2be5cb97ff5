"""One tool entry checked and normalized: its shape, its name, its description, a plain copy, its parameters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.arguments import normalize_strings
from toolgrammar.schema.copies import check_text, copy_entry, copy_of_text
from toolgrammar.schema.keywords import MAX_SCHEMA_DEPTH
from toolgrammar.schema.normalize import Normalizer
from toolgrammar.schema.report import json_type_name
from toolgrammar.schema.toolset import Tool

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
"""A tool name both formats carry verbatim (hermes: inside a JSON string; qwen-xml: ``<function=NAME>``).
Matched with ``fullmatch`` (a ``$`` would let a trailing newline through)."""

_ENTRY_KEYS_OPENAI = frozenset({"type", "function"})
_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
_ENTRY_KEYS_BARE = _FUNCTION_KEYS | {"type"}


def load_entry(
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
            f'tool entry #{index} is a JSON {json_type_name(entry)}; an entry is an object: {{"type": "function", '
            f'"function": {{"name": ..., "parameters": ...}}}} or {{"name": ..., "parameters": ...}}',
            tool=label,
        )
    if "function" in entry:
        allowed, fn = _ENTRY_KEYS_OPENAI, entry["function"]
        if not isinstance(fn, Mapping):
            raise ToolSchemaError(
                f'"function" is a JSON {json_type_name(fn)}; it must be an object with "name" and optional '
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
        raise ToolSchemaError(f'"description" is a JSON {json_type_name(description)}; it must be a string', tool=name)
    if description is not None:
        check_text(description, "", tool=name, what="the tool's description")
    if "strict" in fn and not isinstance(fn["strict"], bool | None):
        raise ToolSchemaError(f'"strict" is a JSON {json_type_name(fn["strict"])}; it must be true or false', tool=name)

    try:
        source = copy_of_text(entry, text) if text is not None else None
        if source is None:
            source = copy_entry(entry, name)
        raw_params = source.get("function", source).get("parameters")
        sink = notes if notes is not None else []
        if mode == "strings":
            parameters = normalize_strings(raw_params, name, lenient, sink)
        else:
            normalizer = Normalizer(name, raw_params, lenient=lenient, notes=sink)
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
        raise ToolSchemaError(f'"name" is a JSON {json_type_name(name)}; it must be a string', tool=label)
    if not name:
        raise ToolSchemaError(f"tool entry #{index} has an empty name; every tool needs a non-empty name", tool=label)
    if not TOOL_NAME_PATTERN.fullmatch(name):
        raise ToolSchemaError(
            f"the tool-call formats cannot carry this name: a tool name must match "
            f"^{TOOL_NAME_PATTERN.pattern}$ (ASCII letters, digits, '_', '.', ':', '-'; first a letter or '_'; "
            "at most 128 characters); rename the tool",
            tool=label,
        )


__all__ = ["TOOL_NAME_PATTERN", "load_entry"]
