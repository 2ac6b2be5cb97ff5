"""``allOf`` merged: the schemas of a node and its ``allOf`` branches as one node (the normalizer checks it after)."""

from __future__ import annotations

import json
from typing import Any

from toolgrammar.schema.disjoint import same_value
from toolgrammar.schema.keywords import ANNOTATION_KEYWORDS, declared_types
from toolgrammar.schema.report import Unsatisfiable, json_type_name, schema_error


def merge_parts(
    tool: str, parts: list[tuple[dict[str, Any], str]]
) -> tuple[dict[str, Any], list[tuple[str, list[Any]]]]:
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
                    raise schema_error(tool, where, keyword, f"{keyword} must be a non-empty list of schemas")
                choices.append((keyword, value))
            elif keyword not in out:
                if keyword == "type":
                    declared_types(tool, {"type": value}, where)
                out[keyword] = value
            else:
                out[keyword] = _combine(tool, keyword, out[keyword], value, where)
        if "properties" in part or "additionalProperties" in part:
            props = part.get("properties", {})
            if not isinstance(props, dict):
                raise schema_error(
                    tool,
                    where,
                    "properties",
                    f"properties is a JSON {json_type_name(props)}; it must be an object mapping names to schemas",
                )
            extra = part.get("additionalProperties", True)
            if not isinstance(extra, bool | dict):
                raise schema_error(
                    tool,
                    where,
                    "additionalProperties",
                    f"additionalProperties is a JSON {json_type_name(extra)}; it must be false or a schema",
                )
            objects.append((props, extra, where, "properties" in part))
    if objects:
        _merge_objects(tool, out, objects)
    if "const" in out and "enum" in out:
        if not any(same_value(out["const"], v) for v in out["enum"]):
            raise Unsatisfiable(
                "allOf: the const value is not among the enum values of another branch",
                tool=tool,
                pointer=parts[0][1],
                keyword="const",
            )
        del out["enum"]
    return out, choices


def _combine(tool: str, keyword: str, a: Any, b: Any, where: str) -> Any:
    """Two values of one keyword in two ``allOf`` branches, as one (or an error at ``where``)."""
    if keyword == "type":
        ta = declared_types(tool, {"type": a}, where)
        tb = declared_types(tool, {"type": b}, where)
        common = [t for t in ta if t in tb or (t == "integer" and "number" in tb)]
        common += [t for t in tb if t == "integer" and "number" in ta and t not in common]
        if not common:
            raise Unsatisfiable(
                f"allOf: no value is both of type {json.dumps(a)} and of type {json.dumps(b)}",
                tool=tool,
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
                raise schema_error(tool, where, keyword, f"{keyword} must be a number, got {json.dumps(value)}")
        return max(a, b) if lower else min(a, b)
    if keyword == "enum" and isinstance(a, list) and isinstance(b, list):
        common = [v for v in a if any(same_value(v, w) for w in b)]
        if not common:
            raise Unsatisfiable(
                "allOf: the enum lists have no value in common",
                tool=tool,
                pointer=f"{where}/enum",
                keyword="enum",
            )
        return common
    if same_value(a, b):
        return a
    if keyword == "const":
        raise Unsatisfiable(
            f"allOf: two different const values ({json.dumps(a)} and {json.dumps(b)})",
            tool=tool,
            pointer=f"{where}/const",
            keyword="const",
        )
    hint = {
        "pattern": "write one pattern that means both (the grammar enforces one pattern per string)",
        "format": "a string is checked against one format",
    }.get(keyword, "merge the branches by hand")
    raise schema_error(
        tool,
        where,
        keyword,
        f"allOf: the branches give {keyword} two different values ({json.dumps(a)} and {json.dumps(b)}), "
        f"which cannot be merged into one node; {hint}",
    )


def _merge_objects(tool: str, out: dict[str, Any], objects: list[tuple[dict[str, Any], Any, str, bool]]) -> None:
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
                raise Unsatisfiable(
                    f"allOf: {name!r} is required, but the branch at {forbidden_by or '/'} allows no such "
                    "property (additionalProperties: false without it among its properties)",
                    tool=tool,
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


__all__ = ["merge_parts"]
