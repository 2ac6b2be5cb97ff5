"""``lenient=True``: dirty real-world schemas read as JSON Schema means them (type names mapped, vendor keywords,
annotations and contradictions dropped), each change reported."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema

from toolgrammar.schema.keywords import (
    ARRAY_KEYWORDS,
    JSON_TYPES,
    LENIENT_TYPE_NAMES,
    NUMBER_KEYWORDS,
    OBJECT_KEYWORDS,
    STRING_KEYWORDS,
)
from toolgrammar.schema.report import escape_token
from toolgrammar.schema.string_formats import FORMATS

_JSON_SCHEMA_VOCABULARY = frozenset(jsonschema.Draft202012Validator.VALIDATORS) | {
    "$schema", "$id", "$defs", "definitions", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title",
    "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding",
    "contentMediaType", "contentSchema",
}  # fmt: skip
"""Every keyword Draft 2020-12 defines: ``lenient=True`` drops any other (JSON Schema ignores them too)."""

_LENIENT_ANNOTATIONS = frozenset({"contentEncoding", "contentMediaType", "contentSchema", "$anchor", "$dynamicAnchor"})
"""Draft 2020-12 keywords that only annotate: ``lenient=True`` drops them (strict refuses them)."""

Note = Callable[[str, str], None]
"""Told each change: the pointer and what was done (:meth:`~toolgrammar.schema.normalize.Normalizer.note`)."""


def clean(schema: dict[str, Any], ptr: str, note: Note) -> dict[str, Any]:
    """``lenient=True``: a copy of ``schema`` with dirty spellings mapped and non-constraints dropped, each
    change told to ``note`` (the pointer, what was done)."""
    out: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword == "type":
            mapped = _lenient_type(value, ptr, note)
            if mapped is not None:
                out[keyword] = mapped
        elif keyword == "nullable" or (keyword in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool)):
            continue  # below
        elif keyword == "optional":
            note(f"{ptr}/optional", "BFCL's optional flag dropped (required decides what is required)")
        elif keyword == "format" and isinstance(value, str) and value not in FORMATS:
            note(f"{ptr}/format", f"format {value!r} dropped: the grammar does not enforce it")
        elif keyword in _LENIENT_ANNOTATIONS:
            note(f"{ptr}/{escape_token(keyword)}", f"annotation {keyword!r} dropped")
        elif keyword not in _JSON_SCHEMA_VOCABULARY:
            note(
                f"{ptr}/{escape_token(keyword)}",
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
            note(f"{ptr}/nullable", 'nullable: true read as "null" added to type')
        else:
            note(f"{ptr}/nullable", f"nullable: {json.dumps(schema['nullable'])} dropped")
    for keyword, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = schema.get(keyword)
        if isinstance(value, bool):
            if value and bound in out:
                out[keyword] = out.pop(bound)
                note(f"{ptr}/{keyword}", f"draft 4's {keyword}: true read as {keyword}: {out[keyword]}")
            else:
                note(f"{ptr}/{keyword}", f"draft 4's {keyword}: {json.dumps(value)} dropped")
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
                note(
                    f"{ptr}/properties/{escape_token(name)}/required",
                    f"draft 3's required: {json.dumps(sub['required'])} read as the object's required list",
                )
                sub = {k: v for k, v in sub.items() if k != "required"}
            lifted[name] = sub
        out["properties"] = lifted
        if required or "required" in out:
            out["required"] = required
    _clean_contradictions(out, ptr, note)
    return out


def _clean_contradictions(out: dict[str, Any], ptr: str, note: Note) -> None:
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
        (OBJECT_KEYWORDS, "object", "object" in types),
        (ARRAY_KEYWORDS, "array", "array" in types),
        (STRING_KEYWORDS, "string", "string" in types),
        (NUMBER_KEYWORDS, "number", bool({"number", "integer"} & types)),
    ):
        for keyword in keywords:
            if keyword in out and not fits:
                del out[keyword]
                note(
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
                note(f"{ptr}/enum", f"enum values {shown} dropped: not of type {json.dumps(names)}")
            else:
                del out["enum"]
                note(f"{ptr}/enum", f"enum {shown} dropped: no value is of type {json.dumps(names)}")
    required = out.get("required")
    if "object" in types and isinstance(required, list):
        props = out.get("properties")
        declared = props if isinstance(props, dict) else {}
        undeclared = [r for r in required if isinstance(r, str) and r not in declared]
        if undeclared:
            out["required"] = [r for r in required if not (isinstance(r, str) and r not in declared)]
            note(
                f"{ptr}/required",
                f"required names {json.dumps(undeclared, ensure_ascii=False)} dropped: no property declares them",
            )


def _lenient_type(value: Any, ptr: str, note: Note) -> Any:
    names = value if isinstance(value, list) else [value]
    mapped: list[Any] = []
    for name in names:
        if isinstance(name, str) and name not in JSON_TYPES and name in LENIENT_TYPE_NAMES:
            target = LENIENT_TYPE_NAMES[name]
            if target is None:
                note(f"{ptr}/type", f"type {json.dumps(name)} read as any value (type dropped)")
                return None
            note(f"{ptr}/type", f"type {json.dumps(name)} read as {json.dumps(target)}")
            name = target
        if name not in mapped:
            mapped.append(name)
    return mapped if isinstance(value, list) else mapped[0]


__all__ = ["Note", "clean"]
