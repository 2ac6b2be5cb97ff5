"""Tool lists for the cold-start benchmark (``bench/cold_start.py``, issue 12): three shapes, any size.

Every generator is deterministic: the same ``(n, salt)`` gives the same tools and the same call. The
``salt`` goes into every tool name (``tool_17_op_<salt>``), so a new salt per repetition makes a tool list
that no engine has compiled before, even in a process that compiled the same shape a moment ago.

- ``simple``: each tool has two string arguments, the first required.
- ``nested``: each tool has an integer ``id``, an enum of 3 strings, a number, a boolean, a nested object
  ``{host: string, port: integer, tags: array of strings (maxItems 4)}`` (``host`` required) and an array
  (maxItems 3) of ``{key: string, value: string | null}`` objects (``key`` required); ``id`` and the
  nested object are required.
- ``varied``: real-world shapes, cycled: enums (strings and integers), ``anyOf`` (scalar or object,
  nullable), ``$defs``/``$ref`` (used twice, and as array items), an object with 20 optional
  properties, arrays with ``minItems``/``maxItems``, nested arrays, a string-keyed map and a ``const``.

Every tool's last top-level property carries the tool's index (``output_17``), so that no two tools of a
list have the same arguments schema: templates are cycled, and a list of identical schemas would measure a
cache (toolgrammar keeps one grammar tree per arguments schema, for the tools a server sees again in other
lists), not a cold compile. Parts below the top level (the varied set's ``$defs``, the nested set's objects)
still repeat across the tools of one template, as real tool lists repeat some parts.

Every object is closed (``additionalProperties: false``; toolgrammar's default, written out so that
xgrammar and llguidance build the same language). Properties of a call come in schema order.

:func:`toolset` returns a :class:`ColdToolSet`: a ``common.ToolSet`` whose ``body_schema`` (what the
xgrammar and llguidance runners of ``anchors.py`` compile) hoists each tool's ``$defs`` to the root of the
block schema, renamed per tool, so that ``#/$defs/...`` references still resolve there.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common import ToolSet

SHAPES = ("simple", "nested", "varied")
SIZES = (1, 5, 20, 50, 100, 200)
"""Tool counts of the ``simple`` and ``nested`` series."""
VARIED_SIZES = SIZES
"""Tool counts of the ``varied`` series (tools cycle through :data:`VARIED` templates)."""


def _fn(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def _obj(properties: dict[str, Any], required: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _str(description: str | None = None) -> dict[str, Any]:
    return {"type": "string", **({"description": description} if description else {})}


# ------------------------------------------------------------------------------------------ simple


_WORDS = (
    "path", "query", "target", "message", "label", "branch", "region", "pattern", "title", "owner",
    "channel", "locale", "reason", "source", "summary", "comment", "format", "scope", "mode", "filter",
)  # fmt: skip


def simple_tool(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two string arguments, the first required; the arguments of a call to it."""
    a, b = _WORDS[i % len(_WORDS)], _WORDS[(i * 7 + 3) % len(_WORDS)]
    if a == b:
        b = _WORDS[(i + 1) % len(_WORDS)]
    params = _obj({a: _str(f"The {a} to act on."), b: _str(f"Optional {b}.")}, [a])
    args = {a: f"release notes for build {i}", b: "keep it short"}
    return _fn(f"tool_{i}_op_{salt}", f"Operation {i} on a {a}.", params), args


# ------------------------------------------------------------------------------------------ nested


def nested_tool(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The nested shape (see the module docstring); the arguments of a call to it."""
    modes = [f"fast{i % 7}", f"safe{i % 5}", f"full{i % 3}"]
    target = _obj(
        {
            "host": _str("Host name."),
            "port": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        },
        ["host"],
    )
    label = _obj({"key": {"type": "string"}, "value": {"type": ["string", "null"]}}, ["key"])
    params = _obj(
        {
            "id": {"type": "integer", "description": "Record id."},
            "mode": {"enum": modes},
            "ratio": {"type": "number"},
            "dry_run": {"type": "boolean"},
            "target": target,
            "labels": {"type": "array", "items": label, "maxItems": 3},
        },
        ["id", "target"],
    )
    args = {
        "id": 4000 + i,
        "mode": modes[1],
        "ratio": 0.75,
        "dry_run": False,
        "target": {"host": "db-primary.internal", "port": 5432, "tags": ["eu", "primary"]},
        "labels": [{"key": "team", "value": "infra"}, {"key": "ticket", "value": None}],
    }
    return _fn(f"tool_{i}_sync_{salt}", f"Synchronise record set {i}.", params), args


# ------------------------------------------------------------------------------------------ varied


def _enums(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = _obj(
        {
            "level": {"enum": ["trace", "debug", "info", "warning", "error", "critical"]},
            "component": {
                "type": "string",
                "enum": ["api", "auth", "billing", "cache", "db", "mailer", "queue", "scheduler", "search"],
            },
            "verbosity": {"enum": [0, 1, 2, 3]},
            "output": {"enum": ["json", "text", None]},
        },
        ["level", "component"],
    )
    args = {"level": "warning", "component": "billing", "verbosity": 2, "output": None}
    return _fn(f"set_log_level_{i}_{salt}", "Change a component's log level.", params), args


def _any_of(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    person = _obj({"email": _str(), "name": _str()}, ["email"])
    params = _obj(
        {
            "recipient": {"anyOf": [{"type": "string"}, person]},
            "priority": {"anyOf": [{"type": "integer"}, {"enum": ["low", "normal", "high"]}]},
            "payload": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]},
            "thread": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        ["recipient", "payload"],
    )
    args = {"recipient": {"email": "ana@example.com", "name": "Ana"}, "priority": "high", "payload": 12.5}
    return _fn(f"notify_{i}_{salt}", "Send a notification.", params), args


def _defs_refs(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = _obj(
        {
            "customer": {"type": "string"},
            "shipping": {"$ref": "#/$defs/Address"},
            "billing": {"$ref": "#/$defs/Address"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1, "maxItems": 10},
            "gift": {"type": "boolean"},
        },
        ["customer", "shipping", "items"],
    )
    params["$defs"] = {
        "Address": _obj(
            {
                "street": _str(),
                "city": _str(),
                "zip": _str(),
                "country": {"enum": ["DE", "FR", "ES", "IT", "NL", "PT"]},
            },
            ["street", "city", "country"],
        ),
        "Item": _obj({"sku": _str(), "qty": {"type": "integer"}, "price": {"type": "number"}}, ["sku", "qty"]),
    }
    args = {
        "customer": "c-1042",
        "shipping": {"street": "Calle Mayor 5", "city": "Madrid", "zip": "28013", "country": "ES"},
        "items": [{"sku": "A-17", "qty": 2, "price": 9.99}, {"sku": "B-3", "qty": 1}],
    }
    return _fn(f"create_order_{i}_{salt}", "Place an order.", params), args


_OPTIONAL = (
    ("display_name", {"type": "string"}),
    ("bio", {"type": "string"}),
    ("age", {"type": "integer"}),
    ("height_cm", {"type": "number"}),
    ("newsletter", {"type": "boolean"}),
    ("theme", {"enum": ["light", "dark", "system"]}),
    ("language", {"type": "string"}),
    ("timezone", {"type": "string"}),
    ("phone", {"type": "string"}),
    ("website", {"type": "string"}),
    ("company", {"type": "string"}),
    ("job_title", {"type": "string"}),
    ("two_factor", {"type": "boolean"}),
    ("quota_mb", {"type": "integer"}),
    ("score", {"type": "number"}),
    ("status", {"enum": ["active", "away", "busy", "offline"]}),
    ("avatar_url", {"type": "string"}),
    ("nickname", {"type": ["string", "null"]}),
    ("country", {"type": "string"}),
    ("notes", {"type": "string"}),
)


def _optional_heavy(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = _obj({"user_id": {"type": "integer"}, **dict(copy.deepcopy(_OPTIONAL))}, ["user_id"])
    args = {"user_id": 77, "display_name": "Bo", "newsletter": True, "theme": "dark", "status": "away", "notes": "-"}
    return _fn(f"update_profile_{i}_{salt}", "Update a user profile (20 optional fields).", params), args


def _arrays(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = _obj(
        {
            "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 50},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 5},
            "weights": {"type": "array", "items": {"type": "number"}, "maxItems": 8},
            "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3},
        },
        ["ids", "tags"],
    )
    args = {"ids": [3, 14, 15, 92], "tags": ["urgent", "q3"], "flags": [True, False, True]}
    return _fn(f"batch_tag_{i}_{salt}", "Tag records in bulk.", params), args


def _nested_arrays(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    point = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
    # maxItems 10: toolgrammar refuses 100 (and 20) here with SchemaTooLargeError: bounded repetitions are
    # unrolled in its automaton (100 [x, y] pairs: 251,357 states estimated; 4 series of 20: 38,093; limit 12,000).
    series = _obj(
        {"label": _str(), "points": {"type": "array", "items": point, "maxItems": 10}},
        ["label", "points"],
    )
    params = _obj(
        {
            "title": _str(),
            "series": {"type": "array", "items": series, "minItems": 1, "maxItems": 4},
            "grid": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
                "maxItems": 4,
            },
        },
        ["series"],
    )
    args = {
        "title": "latency",
        "series": [{"label": "p50", "points": [[1, 2.5], [2, 2.25]]}],
        "grid": [[1, 0], [0, 1]],
    }
    return _fn(f"plot_series_{i}_{salt}", "Plot data series.", params), args


def _map_const(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = _obj(
        {
            "api_version": {"const": 2},
            "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
            "url": _str(),
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "timeout_s": {"type": ["number", "null"]},
            "body": {"anyOf": [{"type": "string"}, _obj({"json": _str()}, ["json"])]},
        },
        ["api_version", "method", "url"],
    )
    args = {
        "api_version": 2,
        "method": "POST",
        "url": "https://api.example.com/v1/jobs",
        "headers": {"Accept": "application/json"},
        "timeout_s": 2.5,
    }
    return _fn(f"http_request_{i}_{salt}", "Make an HTTP request.", params), args


VARIED: tuple[Callable[[int, str], tuple[dict[str, Any], dict[str, Any]]], ...] = (
    _enums,
    _any_of,
    _defs_refs,
    _optional_heavy,
    _arrays,
    _nested_arrays,
    _map_const,
)


def varied_tool(i: int, salt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tool ``i`` of the varied series (the templates, cycled)."""
    return VARIED[i % len(VARIED)](i, salt)


GENERATORS: dict[str, Callable[[int, str], tuple[dict[str, Any], dict[str, Any]]]] = {
    "simple": simple_tool,
    "nested": nested_tool,
    "varied": varied_tool,
}


# ------------------------------------------------------------------------------------------ the tool set


def _close(schema: Any) -> Any:
    """Every object schema closed (``additionalProperties: false`` unless it says otherwise), recursively."""
    if isinstance(schema, list):
        return [_close(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _close(v) if k in ("items", "anyOf", "additionalProperties") else v for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: _close(v) for k, v in schema["properties"].items()}
    if "$defs" in schema:
        out["$defs"] = {k: _close(v) for k, v in schema["$defs"].items()}
    if schema.get("type") == "object":
        out.setdefault("additionalProperties", False)
    return out


def _rename_refs(schema: Any, prefix: str) -> Any:
    if isinstance(schema, list):
        return [_rename_refs(s, prefix) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
            out[k] = "#/$defs/" + prefix + v[len("#/$defs/") :]
        elif k in ("properties", "$defs"):
            out[k] = {name: _rename_refs(sub, prefix) for name, sub in v.items()}
        else:
            out[k] = _rename_refs(v, prefix)
    return out


@dataclass(frozen=True)
class ColdToolSet(ToolSet):
    """A generated tool list, its shape, and the call the walk replays (to the *last* tool)."""

    shape: str = ""
    salt: str = ""

    @property
    def schema_bytes(self) -> int:
        """Total size of the tool list, compact JSON (the x axis of the growth fit)."""
        return len(json.dumps(self.tools, separators=(",", ":"), ensure_ascii=False).encode())

    @property
    def body_schema(self) -> dict[str, Any]:
        """Any tool's ``{"name": NAME, "arguments": ARGS}``, with every tool's ``$defs`` at the root."""
        branches, defs = [], {}
        for j, t in enumerate(self.tools):
            params = copy.deepcopy(t["function"].get("parameters") or {"type": "object"})
            prefix = f"t{j}_"
            params = _close(_rename_refs(params, prefix))
            for name, sub in (params.pop("$defs", None) or {}).items():
                defs[prefix + name] = sub
            branches.append(
                {
                    "type": "object",
                    "properties": {"name": {"const": t["function"]["name"]}, "arguments": params},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
            )
        out: dict[str, Any] = {"anyOf": branches}
        if defs:
            out["$defs"] = defs
        return out


def toolset(shape: str, n: int, salt: str = "s0") -> ColdToolSet:
    """``n`` tools of ``shape`` (names carry ``salt``) and a canonical call of the last one."""
    if shape not in GENERATORS:
        raise ValueError(f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    if n < 1:
        raise ValueError("n must be at least 1")
    gen = GENERATORS[shape]
    tools, args = [], {}
    for i in range(n):
        tool, args = gen(i, salt)
        args = _own_schema(tool, args, i)
        tools.append(tool)
    call = {"name": tools[-1]["function"]["name"], "arguments": args}
    return ColdToolSet(f"{shape} x{n}", tools, call, shape=shape, salt=salt)


def _own_schema(tool: dict[str, Any], args: dict[str, Any], i: int) -> dict[str, Any]:
    """The tool's last top-level property renamed ``<name>_<i>`` (in ``required`` and in ``args`` too, in place):
    no two tools of a list have the same arguments schema, so a list is as many schemas as tools (toolgrammar
    keeps a tree per schema; copies would measure that cache), and the schema keeps its shape and size."""
    params = tool["function"]["parameters"]
    old = list(params["properties"])[-1]
    new = f"{old}_{i}"
    params["properties"] = {new if k == old else k: v for k, v in params["properties"].items()}
    params["required"] = [new if k == old else k for k in params.get("required", [])]
    return {new if k == old else k: v for k, v in args.items()}


def check(ts: ToolSet) -> None:
    """The call is valid against its tool's schema (jsonschema), and the block schema accepts it."""
    import jsonschema

    fn = next(t["function"] for t in ts.tools if t["function"]["name"] == ts.call["name"])
    jsonschema.validate(ts.call["arguments"], fn["parameters"])
    jsonschema.validate(ts.call, ts.body_schema)


if __name__ == "__main__":  # a quick look: sizes of every series
    for shape in SHAPES:
        for n in SIZES if shape != "varied" else VARIED_SIZES:
            ts = toolset(shape, n)
            check(ts)
            print(f"{shape:7} {n:4} tools {ts.schema_bytes:8,} bytes  call {len(ts.block_text)} chars")
