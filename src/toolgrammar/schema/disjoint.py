"""Whether two normalized schemas exclude each other (what ``oneOf`` needs to be ``anyOf``), and JSON equality
of ``enum``/``const`` values."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from toolgrammar.schema.bounds import Bounds
from toolgrammar.schema.format_checker import FORMAT_CHECKER
from toolgrammar.schema.report import json_type_name


def same_value(a: Any, b: Any) -> bool:
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
            json_type_name(v) if not (isinstance(v, int) and not isinstance(v, bool)) else "integer" for v in literals
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


def disjoint(a: Any, b: Any) -> bool:
    """Whether no value can satisfy both normalized schemas, by what is easy to prove (else False)."""
    if isinstance(a, dict) and "anyOf" in a:
        return all(disjoint(x, b) for x in a["anyOf"])
    if isinstance(b, dict) and "anyOf" in b:
        return all(disjoint(a, x) for x in b["anyOf"])
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
    return any(disjoint(pa[name], pb[name]) for name in both if name in pa and name in pb)


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


__all__ = ["disjoint", "same_value"]
