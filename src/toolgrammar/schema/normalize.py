"""The normalizer: one tool's parameters checked keyword by keyword and rewritten as the normalized schema.

Every later stage (grammar, parser, processors) reads the *normalized* schemas and never the originals, so a
constraint is either enforced or rejected here with a :class:`~toolgrammar.errors.ToolSchemaError` that names
the tool, the JSON pointer of the offending node (relative to the tool's ``parameters``) and the keyword.
Nothing is dropped silently except the annotation keywords
(:data:`~toolgrammar.schema.keywords.ANNOTATION_KEYWORDS`), which constrain nothing.

The normalized schema (what the value grammars and the parsers rely on)
-------------------------------------------------------------------------
- Every ``$ref`` is inlined (a deep copy per use); ``$defs``/``definitions`` and annotations are gone.
- The top level is exactly ``{"type": "object", "properties": {...}, "required": [...],
  "additionalProperties": False}``: the strict parser rejects unknown arguments, so the grammar never
  generates one. Missing, ``null`` and ``{}`` parameters all mean "no arguments" (``{}`` is how vLLM's and
  SGLang's tests, and CanIToolCall's glm/llama fixtures, spell it); anything else must say
  ``"type": "object"``.
- Every nested node whose ``type`` includes ``"object"`` is either a *record* node, with
  ``"properties"`` (maybe ``{}``) and ``"required"`` (maybe ``[]``), whose keys are exactly the declared
  properties; or a *map* node, with an ``"additionalProperties"`` schema and no ``"properties"``: any
  string keys, each value valid against that schema. A bare ``{"type": "object"}`` (no properties, no
  additionalProperties) means "any object" in JSON Schema and real outputs use it that way (CanIToolCall's
  ``nested-json-deep`` fills ``"when": {"type": "object"}`` with three keys), so it becomes the map node
  ``"additionalProperties": {}``; ``additionalProperties: true`` becomes ``{}`` as well.
- A ``true`` sub-schema becomes ``{}`` (any JSON value); ``type`` stays a string or a list; keyword and
  property order follow the original schema; nothing else changes.
- An ``anyOf`` node has no other constraining keyword, and an ``enum``/``const`` value always satisfies
  the rest of its node (checked with ``jsonschema``, formats included), so the grammar can emit the
  literals as they are. Siblings of an ``anyOf`` are distributed into its branches.
- No ``allOf`` is left: its branches are merged into one node (types intersected, properties and
  ``required`` united, the tighter bounds kept, a property that a closed branch forbids left out),
  distributed over the branches of an ``anyOf``/``oneOf`` among them; what cannot be merged (two
  different patterns, two formats) is refused, and branches no value satisfies are dropped.
- No ``oneOf`` is left: one whose branches provably exclude each other (by type, by const/enum
  values, by a required property whose schemas exclude each other, by numeric ranges that do not
  meet) is the same as ``anyOf`` and becomes one; any other is refused (``lenient=True``: read as
  ``anyOf``, with a warning).
- String keywords (``pattern``, ``format``, ``minLength``, ``maxLength``) and numeric bounds stay as
  they are: :mod:`~toolgrammar.schema.string_keywords`, :mod:`~toolgrammar.schema.string_formats` and
  :mod:`~toolgrammar.schema.bounds` say what the grammar makes of them, and they are checked here to be
  enforceable (a pattern the grammar reads, a known format, a non-empty range the grammar can write).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any
from urllib.parse import unquote

import jsonschema
import jsonschema.exceptions

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.arguments import check_argument_name, check_object_parameters, check_required, empty_parameters
from toolgrammar.schema.bounds import Bounds, integer_plan, number_plan
from toolgrammar.schema.copies import NotPlain
from toolgrammar.schema.disjoint import disjoint
from toolgrammar.schema.format_checker import FORMAT_CHECKER
from toolgrammar.schema.keywords import (
    ANNOTATION_KEYWORDS,
    ARRAY_KEYWORDS,
    KEYWORD_HINTS,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    NUMBER_KEYWORDS,
    OBJECT_KEYWORDS,
    REF_KEYWORDS,
    STRING_KEYWORDS,
    SUPPORTED_KEYWORDS,
    TOP_LEVEL_KEYWORDS,
    declared_types,
)
from toolgrammar.schema.lenient import clean
from toolgrammar.schema.merge import merge_parts
from toolgrammar.schema.patterns import StringSchemaError
from toolgrammar.schema.plain import plain_parameters
from toolgrammar.schema.report import (
    Unsatisfiable,
    add_note,
    escape_token,
    json_type_name,
    schema_error,
    unescape_token,
)
from toolgrammar.schema.string_formats import FORMATS
from toolgrammar.schema.string_keywords import string_language

_META_CHECK = os.environ.get("TOOLGRAMMAR_META_CHECK", "") == "1"
"""Also check every normalized schema against JSON Schema's meta-schema (``TOOLGRAMMAR_META_CHECK=1``).

Off by default: the normalizer emits only keywords it has checked itself, and the meta-check cost
about 4 ms a tool (Draft 2020-12's dynamic references), most of a cold compile of a large tool list.
The tests run with it on, so a normalizer gap would show there."""


_MAX_DISTRIBUTED = 64
"""Most branches the distribution of ``allOf`` over ``anyOf``/``oneOf`` may produce."""


def _holds_definitions(value: Any) -> bool:
    """Whether any object inside ``value`` has a ``$defs`` or ``definitions`` key (data included: a cheap
    test, without the pointers :meth:`Normalizer.check_definitions` builds, that lets most schemas skip it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "$defs" in item or "definitions" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class Normalizer:
    """Checks one tool's parameters (``schema`` mode) and builds the normalized copy (module docstring).

    :meth:`run` reads the plain schemas most tools have on the fast path
    (:func:`~toolgrammar.schema.plain.plain_parameters`) and everything else node by node (:meth:`node`).
    """

    def __init__(self, tool: str, root: Any, *, lenient: bool = False, notes: list[str] | None = None):
        self.tool = tool
        self.root = root
        self.nodes = 0
        self.lenient = lenient
        self.notes: list[str] = notes if notes is not None else []
        self.inlined: set[str] = set()
        """Pointers of the schemas a ``$ref`` inlined whole (checked keyword by keyword as they were)."""
        self.plain = False
        """Whether :meth:`run` read the schema on the fast path (:func:`~toolgrammar.schema.plain.plain_parameters`)."""

    def run(self) -> dict[str, Any]:
        if self.root is None or self.root == {}:
            self.plain = True
            return empty_parameters()
        normalized = None
        if not self.lenient:
            with contextlib.suppress(NotPlain):
                inlined: set[str] = set()
                normalized = plain_parameters(self.root, inlined)
                self.inlined |= inlined
                self.plain = True
        if normalized is None:
            normalized = self.node(self.root, "", ancestors=(), top=True)
        if _META_CHECK:
            try:
                jsonschema.Draft202012Validator.check_schema(normalized)
            except jsonschema.exceptions.SchemaError as error:  # a safety net: the checks above catch all
                pointer = "".join(f"/{escape_token(str(p))}" for p in error.path)
                raise ToolSchemaError(f"invalid schema: {error.message}", tool=self.tool, pointer=pointer) from None
        # Lenient input is dirty: its definitions are read as used. The fast path takes definitions only at the
        # root (anywhere else it declines), so a schema it read needs no search for them.
        if self.lenient:
            return normalized
        at_root = "$defs" in self.root or "definitions" in self.root
        if at_root if self.plain else _holds_definitions(self.root):
            self.check_definitions(self.root, "")
        return normalized

    def check_definitions(self, schema: Any, ptr: str) -> None:
        """Every ``$defs``/``definitions`` entry must be a valid JSON Schema, used or not.

        Used ones were checked above as they were inlined (and are not checked again: the meta-schema
        check cost milliseconds per entry); an unused one is dropped from the normalized schema, but an
        invalid one (``{"anyOf": []}``) means the tool list is broken, so it is refused rather than
        silently ignored. Only schema positions are walked, never enum or const data.
        """
        if not isinstance(schema, dict):
            return
        for defs in ("$defs", "definitions"):
            entries = schema.get(defs)
            for name, sub in entries.items() if isinstance(entries, dict) else ():
                sub_ptr = f"{ptr}/{defs}/{escape_token(name)}"
                try:
                    if sub_ptr not in self.inlined:
                        jsonschema.Draft202012Validator.check_schema(sub)
                except jsonschema.exceptions.SchemaError as error:
                    where = sub_ptr + "".join(f"/{escape_token(str(p))}" for p in error.path)
                    raise ToolSchemaError(
                        f"invalid schema in {defs} entry {name!r} (checked even when no $ref uses it): "
                        f"{error.message}; fix or remove the entry",
                        tool=self.tool,
                        pointer=where,
                        keyword=defs,
                    ) from None
                self.check_definitions(sub, sub_ptr)
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                self.check_definitions(sub, f"{ptr}/properties/{escape_token(name)}")
        for keyword in ("items", "additionalProperties"):
            self.check_definitions(schema.get(keyword), f"{ptr}/{keyword}")
        for keyword in ("anyOf", "oneOf", "allOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list):
                for i, branch in enumerate(branches):
                    self.check_definitions(branch, f"{ptr}/{keyword}/{i}")

    def note(self, ptr: str, what: str) -> None:
        add_note(self.notes, self.tool, ptr, what)

    def count(self, ptr: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise ToolSchemaError(
                f"the schema grows past {MAX_SCHEMA_NODES} nodes once every $ref is inlined; simplify it",
                tool=self.tool,
                pointer=ptr,
                keyword="$ref",
            )

    # The pointer is always the node's location in the *original* parameters (inside a $defs entry when
    # reached through $ref), so the message points at the text the author has to change. A node merged
    # from allOf branches has no place of its own: its errors point at the node that holds the allOf.
    def node(
        self, schema: Any, ptr: str, *, ancestors: tuple[str, ...], top: bool = False, merged: bool = False
    ) -> Any:
        self.count(ptr)
        if len(ancestors) >= MAX_SCHEMA_DEPTH:
            raise ToolSchemaError(
                f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it", tool=self.tool, pointer=ptr
            )
        if schema is True and not top:
            return {}
        if not isinstance(schema, dict):
            if top:
                check_object_parameters(schema, self.tool, ptr)
            what = (
                "false (it matches nothing; remove the property instead)"
                if schema is False
                else (f"a JSON {json_type_name(schema)}")
            )
            raise ToolSchemaError(f"a schema must be a JSON object; this one is {what}", tool=self.tool, pointer=ptr)
        if self.lenient:
            schema = clean(schema, ptr, self.note)

        for keyword in schema:
            if keyword not in SUPPORTED_KEYWORDS and keyword not in ANNOTATION_KEYWORDS:
                hint = KEYWORD_HINTS.get(keyword)
                raise schema_error(
                    self.tool,
                    ptr,
                    keyword,
                    f"unsupported keyword {keyword!r}: the grammar does not enforce it"
                    + (f" ({hint})" if hint else "")
                    + ", and a constraint is never dropped silently. Remove it or rewrite the schema with the "
                    f"supported keywords: {', '.join(sorted(SUPPORTED_KEYWORDS))} (annotations, dropped: "
                    f"{', '.join(sorted(ANNOTATION_KEYWORDS))})",
                )
        for defs in ("$defs", "definitions"):
            if defs in schema and not isinstance(schema[defs], dict):
                raise schema_error(
                    self.tool,
                    ptr,
                    defs,
                    f"{defs} is a JSON {json_type_name(schema[defs])}; it must map names to schemas",
                )
        here = (*ancestors, ptr)

        if "$ref" in schema:
            return self.ref(schema, ptr, here, top)
        if "allOf" in schema:
            return self.all_of(schema, ptr, here, top)
        choices = [k for k in ("anyOf", "oneOf") if k in schema]
        if choices and not top:
            siblings = [
                k
                for k in schema
                if k not in ANNOTATION_KEYWORDS and k not in ("anyOf", "oneOf", "$defs", "definitions")
            ]
            if siblings or len(choices) == 2:
                # The siblings hold in every branch: distribute them (allOf of the node and its choices).
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return self.all_of({**rest, "allOf": [{k: schema[k]} for k in choices]}, ptr, here, top)
            if "anyOf" in schema:
                return self.any_of(schema, ptr, here)
            return self.one_of(schema, ptr, here)
        if top:
            self.check_top(schema, ptr)
        types = declared_types(self.tool, schema, ptr)

        for keyword in OBJECT_KEYWORDS:
            if keyword in schema and "object" not in types:
                raise self.misplaced(keyword, "object", types, ptr)
        for keyword in ARRAY_KEYWORDS:
            if keyword in schema and "array" not in types:
                raise self.misplaced(keyword, "array", types, ptr)
        for keyword in STRING_KEYWORDS:
            if keyword in schema and "string" not in types:
                raise self.misplaced(keyword, "string", types, ptr)
        for keyword in NUMBER_KEYWORDS:
            if keyword in schema and not {"number", "integer"} & set(types):
                raise self.misplaced(keyword, "number", types, ptr)

        out: dict[str, Any] = {}
        for keyword, value in schema.items():
            if keyword in ANNOTATION_KEYWORDS or keyword in ("$defs", "definitions"):
                continue
            if keyword == "properties":
                out[keyword] = self.properties(value, ptr, here, top)
            elif keyword == "items":
                if isinstance(value, list):
                    raise schema_error(
                        self.tool,
                        ptr,
                        "items",
                        "items is a list (tuple validation), which is not supported: give one schema for every item",
                    )
                out[keyword] = self.node(value, f"{ptr}/items", ancestors=here)
            elif keyword == "additionalProperties":
                out[keyword] = self.additional_properties(value, schema, ptr, here, top)
            elif keyword in ("minItems", "maxItems", "minLength", "maxLength"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise schema_error(
                        self.tool, ptr, keyword, f"{keyword} must be a non-negative integer, got {json.dumps(value)}"
                    )
                out[keyword] = value
            elif keyword in NUMBER_KEYWORDS:
                if not isinstance(value, int | float) or isinstance(value, bool):
                    hint = ""
                    if isinstance(value, bool) and keyword.startswith("exclusive"):
                        bound = "minimum" if keyword == "exclusiveMinimum" else "maximum"
                        hint = (
                            f" (draft 4's boolean form: write {keyword}: <number> instead of {bound}, or load "
                            "with lenient=True)"
                        )
                    raise schema_error(
                        self.tool, ptr, keyword, f"{keyword} must be a number, got {json.dumps(value)}{hint}"
                    )
                out[keyword] = value
            elif keyword in ("pattern", "format"):
                if not isinstance(value, str):
                    raise schema_error(self.tool, ptr, keyword, f"{keyword} must be a string, got {json.dumps(value)}")
                out[keyword] = value
            elif keyword == "enum":
                if not isinstance(value, list) or not value:
                    raise schema_error(
                        self.tool,
                        ptr,
                        "enum",
                        "enum is empty, so no value could ever be generated; list the allowed values or remove enum"
                        if isinstance(value, list)
                        else f"enum is a JSON {json_type_name(value)}; it must be a non-empty list of values",
                    )
                out[keyword] = value
            else:  # type, const, required: checked below or above
                out[keyword] = value

        for lo_key, hi_key in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if lo_key in out and hi_key in out and out[lo_key] > out[hi_key]:
                what = "array" if lo_key == "minItems" else "string"
                raise Unsatisfiable(
                    f"{lo_key} {out[lo_key]} is greater than {hi_key} {out[hi_key]}: no {what} satisfies both",
                    tool=self.tool,
                    pointer=f"{ptr}/{lo_key}",
                    keyword=lo_key,
                )
        if "string" in types:
            self.check_string(out, ptr)
        if {"number", "integer"} & set(types):
            self.check_bounds(out, types, ptr)
        if "object" in types:
            if top:
                properties = out.get("properties", {})
                required = check_required(schema.get("required", []), properties, ptr, self.tool)
                out = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
            else:
                if "properties" not in out and "additionalProperties" not in out:
                    out["additionalProperties"] = {}  # bare {"type": "object"}: any object, a map of any values
                if "properties" not in out and out["additionalProperties"] is not False:  # a map node
                    if "required" in schema:
                        check_required(schema["required"], None, ptr, self.tool)  # only [] passes
                else:  # a record node
                    out.setdefault("properties", {})
                    out["required"] = check_required(schema.get("required", []), out["properties"], ptr, self.tool)
        if "enum" in schema and "const" in schema:
            raise schema_error(self.tool, ptr, "const", "enum and const on the same node: keep one of them")
        self.check_literals(out, ptr, merged=merged)
        return out

    # -- strings and numbers --------------------------------------------------------------------------

    def check_string(self, out: dict[str, Any], ptr: str) -> None:
        """``pattern``/``format``/``minLength``/``maxLength`` the grammar can enforce together (or an error)."""
        fmt = out.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise schema_error(
                self.tool,
                ptr,
                "format",
                f"format {fmt!r} is not enforced by the grammar, and a constraint is never dropped silently; "
                f"supported formats: {', '.join(FORMATS)}. Remove it (describe the format in 'description'), "
                "use a pattern, or load with lenient=True (unknown formats are dropped with a warning)",
            )
        try:
            string_language(out)
        except StringSchemaError as error:
            cls = Unsatisfiable if "no string" in str(error) else ToolSchemaError
            raise cls(str(error), tool=self.tool, pointer=f"{ptr}/{error.keyword}", keyword=error.keyword) from None

    def check_bounds(self, out: dict[str, Any], types: tuple[str, ...], ptr: str) -> None:
        """Numeric bounds that some value satisfies, and that the grammar can write (or an error).

        What the grammar can write is decided by :func:`~toolgrammar.schema.bounds.number_plan` and
        :func:`~toolgrammar.schema.bounds.integer_plan`, the plans the value grammars are built from.
        """
        if not any(k in out for k in NUMBER_KEYWORDS):
            return
        bounds = Bounds(out)
        keyword = next(k for k in NUMBER_KEYWORDS if k in out)
        if "number" in types:
            if not bounds.has_number():
                raise Unsatisfiable(
                    "the bounds exclude every number (the lower one is above the upper one)",
                    tool=self.tool,
                    pointer=f"{ptr}/{keyword}",
                    keyword=keyword,
                )
            plan: Callable[[], object] = partial(number_plan, bounds)
        else:
            lo, hi = bounds.integer_range()
            if lo is not None and hi is not None and lo > hi:
                raise Unsatisfiable(
                    "the bounds exclude every integer", tool=self.tool, pointer=f"{ptr}/{keyword}", keyword=keyword
                )
            plan = partial(integer_plan, lo, hi)
        try:
            plan()
        except ValueError as error:
            raise schema_error(self.tool, ptr, keyword, str(error)) from None

    # -- allOf, anyOf, oneOf ----------------------------------------------------------------------

    def all_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool) -> Any:
        """One node out of the node and its ``allOf`` branches (see :func:`~toolgrammar.schema.merge.merge_parts`),
        normalized."""
        branches = schema["allOf"]
        if not isinstance(branches, list) or not branches:
            raise schema_error(self.tool, ptr, "allOf", "allOf must be a non-empty list of schemas")
        visited: list[str] = []  # the targets of the $refs inlined on the way (recursion check, depth)
        parts = [({k: v for k, v in schema.items() if k != "allOf"}, ptr)]
        for i, branch in enumerate(branches):
            parts.extend(self.flatten(branch, f"{ptr}/allOf/{i}", here, visited, ()))
        merged, choices = merge_parts(self.tool, parts)
        ancestors = (*here[:-1], *dict.fromkeys(visited))
        if not choices:
            return self.node(merged, ptr, ancestors=ancestors, top=top, merged=True)
        if top:
            raise schema_error(
                self.tool,
                ptr,
                "allOf",
                "allOf brings an anyOf/oneOf to the top level of parameters, where the arguments must be one "
                "object schema; move the choice into a property",
            )
        return self.distribute(merged, choices, ptr, ancestors)

    def flatten(
        self, branch: Any, where: str, here: tuple[str, ...], visited: list[str], chain: tuple[str, ...]
    ) -> list[tuple[dict[str, Any], str]]:
        """An ``allOf`` branch as the schemas it consists of: ``$ref`` resolved, nested ``allOf`` opened."""
        self.count(where)
        if len(chain) > MAX_SCHEMA_DEPTH:
            raise ToolSchemaError(
                f"allOf and $ref nest deeper than {MAX_SCHEMA_DEPTH} levels; flatten them",
                tool=self.tool,
                pointer=where,
            )
        if branch is True:
            return []
        if not isinstance(branch, dict):
            what = (
                "false: no value satisfies it, so none satisfies the allOf"
                if branch is False
                else (f"a JSON {json_type_name(branch)}")
            )
            raise ToolSchemaError(
                f"an allOf branch must be a schema; this one is {what}", tool=self.tool, pointer=where
            )
        if self.lenient:
            branch = clean(branch, where, self.note)
        if "$ref" in branch:
            # Recursion is a $ref back into its own chain; two branches may well share a definition.
            target_ptr, target = self.resolve_ref(branch, where, here, chain)
            visited.append(target_ptr)
            return self.flatten(target, target_ptr, here, visited, (*chain, target_ptr))
        if "allOf" in branch:
            inner = branch["allOf"]
            if not isinstance(inner, list) or not inner:
                raise schema_error(self.tool, where, "allOf", "allOf must be a non-empty list of schemas")
            out = [({k: v for k, v in branch.items() if k != "allOf"}, where)]
            for i, sub in enumerate(inner):
                out.extend(self.flatten(sub, f"{where}/allOf/{i}", here, visited, (*chain, where)))
            return out
        return [(branch, where)]

    def distribute(
        self, rest: dict[str, Any], choices: list[tuple[str, list[Any]]], ptr: str, ancestors: tuple[str, ...]
    ) -> dict[str, Any]:
        """``allOf`` over ``anyOf``/``oneOf``: one branch per combination, each merged with ``rest``.

        ``A and (B or C)`` is ``(A and B) or (A and C)``; for ``oneOf`` the same holds with "exactly one"
        (a value of ``A`` matches exactly one of ``A and B``, ``A and C`` when it matches exactly one of
        ``B``, ``C``), so the result is a ``oneOf`` of the combinations. Combinations no value satisfies
        are dropped.
        """
        one_ofs = [branches for kind, branches in choices if kind == "oneOf"]
        any_ofs = [branches for kind, branches in choices if kind == "anyOf"]
        lists, extra = (one_ofs, [{"anyOf": b} for b in any_ofs]) if one_ofs else (any_ofs, [])
        total = math.prod(len(b) for b in lists)
        if total > _MAX_DISTRIBUTED:
            raise schema_error(
                self.tool,
                ptr,
                "allOf",
                f"allOf over anyOf/oneOf makes {total} combinations to check (limit {_MAX_DISTRIBUTED}); "
                "write the alternatives out with fewer branches",
            )
        branches: list[Any] = []
        for combo in itertools.product(*lists):
            try:
                got = self.node({"allOf": [rest, *combo, *extra]}, ptr, ancestors=ancestors, merged=True)
            except Unsatisfiable:
                continue
            branches.append(got)
        if not branches:
            raise Unsatisfiable(
                "no branch of the anyOf/oneOf is compatible with the rest of the node (its type, bounds or "
                "values): no value satisfies it",
                tool=self.tool,
                pointer=ptr,
                keyword="anyOf" if not one_ofs else "oneOf",
            )
        if one_ofs:
            self.check_disjoint(branches, ptr)
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def one_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...]) -> dict[str, Any]:
        """``oneOf`` whose branches exclude each other is ``anyOf`` (exactly one matches iff one does)."""
        branches = schema["oneOf"]
        if not isinstance(branches, list) or not branches:
            raise schema_error(self.tool, ptr, "oneOf", "oneOf must be a non-empty list of schemas")
        normalized = [self.node(b, f"{ptr}/oneOf/{i}", ancestors=here) for i, b in enumerate(branches)]
        self.check_disjoint(normalized, ptr)
        return {"anyOf": normalized}

    def check_disjoint(self, branches: list[Any], ptr: str) -> None:
        for i, j in itertools.combinations(range(len(branches)), 2):
            if disjoint(branches[i], branches[j]):
                continue
            if self.lenient:
                self.note(
                    f"{ptr}/oneOf",
                    f"oneOf branches #{i} and #{j} may both match one value: read as anyOf (a value matching "
                    "several branches is accepted, by the grammar and by the parser)",
                )
                return
            raise schema_error(
                self.tool,
                ptr,
                "oneOf",
                f"oneOf branches #{i} and #{j} may both match one value, and the grammar cannot enforce that "
                "exactly one branch matches: it takes oneOf only when the branches exclude each other (different "
                "types, different const/enum values, a required property whose values differ, numeric ranges "
                "that do not meet). Use anyOf if a value may match both, make the branches exclusive, or load "
                "with lenient=True (this oneOf is then read as anyOf, with a warning)",
            )

    def check_top(self, schema: dict[str, Any], ptr: str) -> None:
        check_object_parameters(schema, self.tool, ptr)
        extra = [k for k in schema if k not in TOP_LEVEL_KEYWORDS | ANNOTATION_KEYWORDS | {"$defs", "definitions"}]
        if extra:
            raise schema_error(
                self.tool,
                ptr,
                extra[0],
                f"{extra[0]} is not supported at the top level of parameters: the arguments object takes only "
                '"properties", "required" and "additionalProperties": false',
            )
        extra_args = schema.get("additionalProperties", False)
        if extra_args is not False:
            raise schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties {'true' if extra_args is True else 'as a schema'} at the top level of "
                "parameters is not supported: the strict parser rejects unknown arguments, so every argument "
                "must be declared in properties; remove it or set it to false",
            )

    def misplaced(self, keyword: str, kind: str, types: tuple[str, ...], ptr: str) -> ToolSchemaError:
        if types:
            got = json.dumps(list(types) if len(types) > 1 else types[0])
            return schema_error(
                self.tool,
                ptr,
                keyword,
                f"{keyword} applies to {kind}s, but this node's type is {got}: "
                f"add {kind!r} to type or remove {keyword}",
            )
        return schema_error(
            self.tool,
            ptr,
            keyword,
            f'{keyword} applies to {kind}s, but this node has no "type": add "type": "{kind}"',
        )

    def ref(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool) -> Any:
        target_ptr, target = self.resolve_ref(schema, ptr, here, ())
        normalized = self.node(target, target_ptr, ancestors=here, top=top)
        self.inlined.add(target_ptr)  # walked whole (allOf branches are merged, not walked: not counted)
        return normalized

    def resolve_ref(
        self, schema: dict[str, Any], ptr: str, here: tuple[str, ...], visited: Sequence[str]
    ) -> tuple[str, Any]:
        """The pointer and the schema a ``$ref`` names (checked: local, resolvable, not recursive)."""
        ref = schema["$ref"]
        siblings = [k for k in schema if k not in ANNOTATION_KEYWORDS and k not in REF_KEYWORDS]
        if siblings:
            raise schema_error(
                self.tool,
                ptr,
                siblings[0],
                f"{siblings[0]} beside $ref is not supported together: move it into the referenced schema, or "
                'write {"allOf": [{"$ref": ...}, {...}]}',
            )
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise schema_error(
                self.tool,
                ptr,
                "$ref",
                f"$ref {json.dumps(ref)} is not local: only references inside this tool's parameters "
                '("#/$defs/Name", "#/definitions/Name") are supported; inline the external schema',
            )
        target_ptr = (
            "" if ref == "#" else "/" + "/".join(escape_token(unescape_token(unquote(t))) for t in ref[2:].split("/"))
        )
        target = self.resolve(target_ptr, ref, ptr)
        if target_ptr in here or target_ptr in visited:
            raise schema_error(
                self.tool,
                ptr,
                "$ref",
                f"recursive schema: $ref {ref!r} refers back to {target_ptr or 'the parameters root'}, which "
                "contains this $ref; the grammar must be regular, so a schema cannot contain itself. Unroll the "
                "recursion to a fixed depth (copy the definition a few levels deep, the last one without the $ref)",
            )
        return target_ptr, target

    def resolve(self, target_ptr: str, ref: str, ptr: str) -> Any:
        node: Any = self.root
        for token in target_ptr.split("/")[1:]:
            key = unescape_token(token)
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                defs = [
                    f"#/{d}/{escape_token(n)}"
                    for d in ("$defs", "definitions")
                    if isinstance(self.root.get(d), dict)
                    for n in self.root[d]
                ]
                raise schema_error(
                    self.tool,
                    ptr,
                    "$ref",
                    f"$ref {ref!r} does not resolve: nothing at {target_ptr} in this tool's parameters "
                    f"(definitions here: {', '.join(defs) or 'none'})",
                )
        return node

    def any_of(self, schema: dict[str, Any], ptr: str, here: tuple[str, ...]) -> dict[str, Any]:
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise schema_error(self.tool, ptr, "anyOf", "anyOf must be a non-empty list of schemas")
        return {"anyOf": [self.node(b, f"{ptr}/anyOf/{i}", ancestors=here) for i, b in enumerate(branches)]}

    def properties(self, value: Any, ptr: str, here: tuple[str, ...], top: bool) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise schema_error(
                self.tool,
                ptr,
                "properties",
                f"properties is a JSON {json_type_name(value)}; it must be an object mapping names to schemas",
            )
        out: dict[str, Any] = {}
        for name, sub in value.items():
            sub_ptr = f"{ptr}/properties/{escape_token(name)}"
            if top:  # argument names are markup in qwen-xml; nested keys are JSON strings and may be anything
                check_argument_name(name, sub_ptr, self.tool)
            out[name] = self.node(sub, sub_ptr, ancestors=here)
        return out

    def additional_properties(
        self, value: Any, schema: dict[str, Any], ptr: str, here: tuple[str, ...], top: bool
    ) -> Any:
        if value is False:
            return False
        if top:  # check_top already rejected anything else
            return False
        if "properties" in schema:
            raise schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties {'true' if value is True else 'as a schema'} together with properties is not "
                "supported: an object either declares its properties (and gets exactly those) or is a map "
                "(additionalProperties schema, no properties); use false, or drop properties for a map",
            )
        if value is not True and not isinstance(value, dict):
            raise schema_error(
                self.tool,
                ptr,
                "additionalProperties",
                f"additionalProperties is a JSON {json_type_name(value)}; it must be false or a schema",
            )
        return self.node(value, f"{ptr}/additionalProperties", ancestors=here)

    def check_literals(self, out: dict[str, Any], ptr: str, *, merged: bool = False) -> None:
        """Every enum/const value must satisfy the rest of its node (formats checked as the parser does).

        In a node merged from ``allOf`` the enum is the intersection of several constraints: values
        that break another branch are dropped (they were never valid) instead of refused.
        """
        if "enum" not in out and "const" not in out:
            return
        rest = {k: v for k, v in out.items() if k not in ("enum", "const")}
        validator = jsonschema.Draft202012Validator(rest, format_checker=FORMAT_CHECKER)
        if merged and "enum" in out:
            kept = [v for v in out["enum"] if validator.is_valid(v)]
            if not kept:
                raise Unsatisfiable(
                    "allOf: no enum value satisfies the other branches", tool=self.tool, pointer=ptr, keyword="enum"
                )
            out["enum"] = kept
        literals = [("const", None, out["const"])] if "const" in out else []
        literals += [("enum", i, v) for i, v in enumerate(out.get("enum", ()))]
        for keyword, index, value in literals:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                where = f"{ptr}/{keyword}" + ("" if index is None else f"/{index}")
                label = keyword if index is None else f"enum value #{index}"
                raise (Unsatisfiable if merged else ToolSchemaError)(
                    f"{label} {json.dumps(value, ensure_ascii=False)} does not fit its own node: {error.message}; "
                    f"fix the value or the node's type",
                    tool=self.tool,
                    pointer=where,
                    keyword=keyword,
                )


__all__ = ["Normalizer"]
