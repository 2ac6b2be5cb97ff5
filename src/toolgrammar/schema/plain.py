"""The fast path of the normalizer: the plain schemas most tools have, read without pointers.

:func:`plain_parameters` returns what :meth:`~toolgrammar.schema.normalize.Normalizer.node` returns for such a
schema, or raises :class:`~toolgrammar.schema.copies.NotPlain` so that the careful path reads it (and
explains every error).
"""

from __future__ import annotations

import re
from typing import Any

from toolgrammar.schema.arguments import BAD_ARGUMENT_CHARACTER
from toolgrammar.schema.copies import NotPlain
from toolgrammar.schema.keywords import (
    ANNOTATION_KEYWORDS,
    JSON_TYPES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    TOP_LEVEL_KEYWORDS,
)

_PLAIN_KEYWORDS = (
    frozenset(
        {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems"}
    )
    | ANNOTATION_KEYWORDS
)
"""The keywords :func:`plain_parameters` reads itself beside ``anyOf`` and ``$ref`` (alone on their node);
every other one takes the careful path."""
_PLAIN_TOP_KEYWORDS = TOP_LEVEL_KEYWORDS | ANNOTATION_KEYWORDS | {"$defs", "definitions"}
_PLAIN_REF = re.compile(r"#/(\$defs|definitions)/([A-Za-z0-9_.-]+)")
"""A ``$ref`` the fast path resolves itself: a definition at the root, named without escapes."""
_PLAIN_TYPES = frozenset(JSON_TYPES)
_PLAIN_LITERAL_TYPES: dict[type, frozenset[str]] = {
    str: frozenset({"string"}),
    bool: frozenset({"boolean"}),
    type(None): frozenset({"null"}),
    int: frozenset({"integer", "number"}),
    float: frozenset({"number"}),
}
"""The JSON types a literal of each Python type surely satisfies (``1.0`` as an integer is left to jsonschema)."""


class _PlainWalk:
    """What one :func:`plain_parameters` call carries down the tree: the nodes left, the root's definitions,
    the definitions being inlined (a ``$ref`` back into one is recursion: the careful path explains it),
    and the pointers of those inlined (:attr:`~toolgrammar.schema.normalize.Normalizer.inlined`)."""

    __slots__ = ("budget", "defs", "inlined", "open")

    def __init__(self, root: dict[str, Any], inlined: set[str]):
        self.budget = MAX_SCHEMA_NODES - 1
        self.defs = {k: root[k] for k in ("$defs", "definitions") if k in root}
        self.open: list[str] = []
        self.inlined = inlined


def plain_parameters(root: Any, inlined: set[str] | None = None) -> dict[str, Any]:
    """:meth:`~toolgrammar.schema.normalize.Normalizer.node` of a tool's parameters for the plain schemas most
    tools have, without pointers.

    Plain: objects, arrays and scalars described by ``type``, ``properties``, ``required``,
    ``additionalProperties``, ``items``, ``minItems``/``maxItems``, ``enum`` and ``const`` (scalar values of the
    node's own types), ``anyOf`` alone on its node, and ``$ref`` alone on its node naming an entry of the
    root's ``$defs``/``definitions``, annotations aside. Building pointers, ancestor tuples and a jsonschema
    validator per ``enum`` was most of loading a large tool list; anything else, and anything wrong, raises
    :class:`~toolgrammar.schema.copies.NotPlain` so the careful path reads the whole tool again (it decides,
    and explains every error).
    ``inlined`` receives the pointers of the definitions a ``$ref`` inlined (the careful path's
    :attr:`~toolgrammar.schema.normalize.Normalizer.inlined`). A test checks that both return the same schema or
    the fast one declines.
    """
    if type(root) is not dict or root.get("type") != "object" or not root.keys() <= _PLAIN_TOP_KEYWORDS:
        raise NotPlain
    if root.get("additionalProperties", False) is not False:
        raise NotPlain
    props = root.get("properties", {})
    if type(props) is not dict:
        raise NotPlain
    walk = _PlainWalk(root, set() if inlined is None else inlined)
    if not all(type(d) is dict for d in walk.defs.values()):
        raise NotPlain
    properties = {}
    for name, sub in props.items():
        if not name or BAD_ARGUMENT_CHARACTER.search(name) is not None:
            raise NotPlain
        properties[name] = _plain_node(sub, 1, walk)
    required = root.get("required", [])
    _plain_required(required, properties)
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _plain_required(required: Any, properties: dict[str, Any] | None) -> None:
    if type(required) is not list or not all(type(name) is str for name in required):
        raise NotPlain
    if required and (
        properties is None or len(set(required)) != len(required) or not properties.keys() >= set(required)
    ):
        raise NotPlain


_PLAIN_ANY_OF = frozenset({"anyOf"}) | ANNOTATION_KEYWORDS
_PLAIN_REF_NODE = frozenset({"$ref"}) | ANNOTATION_KEYWORDS


def _plain_any_of(schema: dict[str, Any], depth: int, walk: _PlainWalk) -> dict[str, Any]:
    """``anyOf`` alone on its node (siblings are distributed into the branches: the careful path's job)."""
    branches = schema["anyOf"]
    if not schema.keys() <= _PLAIN_ANY_OF or type(branches) is not list or not branches:
        raise NotPlain
    return {"anyOf": [_plain_node(branch, depth + 1, walk) for branch in branches]}


def _plain_ref(schema: dict[str, Any], depth: int, walk: _PlainWalk) -> Any:
    """``$ref`` alone on its node, to a root definition: the definition, inlined."""
    ref = schema["$ref"]
    found = _PLAIN_REF.fullmatch(ref) if schema.keys() <= _PLAIN_REF_NODE and type(ref) is str else None
    if found is None:
        raise NotPlain
    where, name = found.groups()
    target_ptr = f"/{where}/{name}"
    defs = walk.defs.get(where)
    if defs is None or name not in defs or target_ptr in walk.open:
        raise NotPlain
    walk.open.append(target_ptr)
    normalized = _plain_node(defs[name], depth + 1, walk)
    walk.open.pop()
    walk.inlined.add(target_ptr)
    return normalized


def _plain_node(schema: Any, depth: int, walk: _PlainWalk) -> Any:
    """One node below the top (see :func:`plain_parameters`)."""
    walk.budget -= 1
    if walk.budget < 0 or depth >= MAX_SCHEMA_DEPTH:
        raise NotPlain
    if schema is True:
        return {}
    if type(schema) is not dict:
        raise NotPlain
    if not schema.keys() <= _PLAIN_KEYWORDS:
        if "anyOf" in schema:
            return _plain_any_of(schema, depth, walk)
        if "$ref" in schema:
            return _plain_ref(schema, depth, walk)
        raise NotPlain
    value = schema.get("type")
    if value is None:
        if "type" in schema:
            raise NotPlain
        types: tuple[str, ...] = ()
    elif type(value) is str:
        if value not in _PLAIN_TYPES:
            raise NotPlain
        types = (value,)
    elif type(value) is list:
        types = tuple(value)
        if not types or not all(type(t) is str and t in _PLAIN_TYPES for t in types) or len(set(types)) != len(types):
            raise NotPlain
    else:
        raise NotPlain
    is_object = "object" in types
    if not is_object and ("properties" in schema or "required" in schema or "additionalProperties" in schema):
        raise NotPlain
    if "array" not in types and ("items" in schema or "minItems" in schema or "maxItems" in schema):
        raise NotPlain
    out: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword == "properties":
            if type(value) is not dict:
                raise NotPlain
            out[keyword] = {name: _plain_node(sub, depth + 1, walk) for name, sub in value.items()}
        elif keyword == "items":
            out[keyword] = _plain_node(value, depth + 1, walk)
        elif keyword == "additionalProperties":
            if value is False:
                out[keyword] = False
            elif "properties" in schema:
                raise NotPlain
            else:
                out[keyword] = _plain_node(value, depth + 1, walk)
        elif keyword == "minItems" or keyword == "maxItems":
            if type(value) is not int or value < 0:
                raise NotPlain
            out[keyword] = value
        elif keyword == "enum" or keyword == "const":
            literals = value if keyword == "enum" else [value]
            if type(literals) is not list or not literals or ("enum" in schema and "const" in schema):
                raise NotPlain
            for literal in literals:  # a value of the node's own types; anything else goes to jsonschema
                allowed = _PLAIN_LITERAL_TYPES.get(type(literal))
                if allowed is None or (types and allowed.isdisjoint(types)):
                    raise NotPlain
            out[keyword] = value
        elif keyword not in ANNOTATION_KEYWORDS:  # type, required
            out[keyword] = value
    if out.get("minItems", 0) > out.get("maxItems", out.get("minItems", 0)):
        raise NotPlain
    if is_object:
        if "properties" not in out and "additionalProperties" not in out:
            out["additionalProperties"] = {}
        if "properties" not in out and out["additionalProperties"] is not False:  # a map node
            if "required" in schema:
                _plain_required(schema["required"], None)
        else:  # a record node
            out.setdefault("properties", {})
            _plain_required(schema.get("required", []), out["properties"])
            out["required"] = list(schema.get("required", []))
    return out


__all__ = ["plain_parameters"]
