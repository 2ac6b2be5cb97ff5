"""Plain copies of JSON data: the deep copy that checks every value (with the pointer of what it refuses),
the fast copy that declines instead, and an entry read back from its JSON text."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.report import escape_token

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, pointer: str, *, tool: str | None, what: str) -> None:
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


def plain_data(value: Any, pointer: str, *, tool: str | None = None) -> Any:
    """A deep copy of ``value`` as plain JSON data (dict/list/str/int/float/bool/None), or an error."""
    if isinstance(value, str):
        check_text(value, pointer, tool=tool, what="string")
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
            check_text(key, pointer, tool=tool, what="key")  # the pointer of the object: the key cannot be shown
            out[key] = plain_data(item, f"{pointer}/{escape_token(key)}", tool=tool)
        return out
    if isinstance(value, list):
        return [plain_data(item, f"{pointer}/{i}", tool=tool) for i, item in enumerate(value)]
    raise ToolSchemaError(
        f"a {type(value).__name__} is not JSON data; use dict, list, str, int, float, bool or None",
        tool=tool,
        pointer=pointer,
    )


class NotPlain(Exception):
    """Raised by :func:`_plain_copy` where :func:`plain_data` has an error to explain."""


def _plain_copy(value: Any) -> Any:
    """:func:`plain_data` without pointers: the copy, or :class:`NotPlain` where ``plain_data`` would refuse.

    Most entries are plain JSON; building a pointer string per node was a third of loading a large tool list,
    so the pointers are built only when something is wrong (``plain_data`` runs again for the message).
    """
    kind = type(value)
    if kind is str:
        if _SURROGATE.search(value) is not None:
            raise NotPlain
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str or _SURROGATE.search(key) is not None:
                raise NotPlain
            out[key] = _plain_copy(item)
        return out
    if kind is list:
        return [_plain_copy(item) for item in value]
    if value is None or kind is bool or kind is int:
        return value
    if kind is float and math.isfinite(value):
        return value
    raise NotPlain  # subclasses, mappings, tuples, NaN: the careful path decides


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""Where ASCII JSON text may hold a surrogate (half of a pair, or a lone one, which loading refuses)."""


def copy_of_text(entry: Any, text: str) -> dict[str, Any] | None:
    """``text`` (``entry`` as ASCII JSON) read back, when that is a plain copy of ``entry``; else None.

    Equal to ``entry`` means plain (``json`` writes an int key as a string and a tuple as a list, and the copy
    would then differ); text with a surrogate escape is left to :func:`copy_entry`, which refuses lone ones."""
    if _ESCAPED_SURROGATE.search(text) is not None:
        return None
    copy = json.loads(text)
    return copy if type(copy) is dict and copy == entry else None


def copy_entry(entry: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """A plain deep copy of an entry; pointers of errors inside ``parameters`` are relative to it."""
    if type(entry) is dict:
        try:
            return _plain_copy(entry)
        except NotPlain:
            pass
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "function":
            out[key] = copy_entry(value, tool)
        else:  # the pointer is "" for "parameters" itself, so pointers inside it are relative to it
            out[key] = plain_data(value, "", tool=tool)
    return out


__all__ = ["NotPlain", "check_text", "copy_entry", "copy_of_text", "plain_data"]
