"""JSON values as byte-level grammar trees, driven by a normalized tool schema.

The input is a schema normalized by :mod:`toolgrammar.schema.normalize` (refs inlined, only supported keywords
left), so this module never guesses: each keyword it meets is one it enforces. The spelling is the
chat template's by default (``json.dumps`` separators ``", "`` and ``": "``, ``ensure_ascii=False``):
that is what Qwen models were trained to write. ``Whitespace.flexible(k)`` allows up to ``k``
whitespace characters at each place JSON allows them; never an unbounded run, because free
whitespace "led to pathological behaviors, especially for small models" (outlines#484), and an
unbounded loop could never be forced to close within a token budget anyway.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from toolgrammar import caches
from toolgrammar.automata.nodes import (
    Members,
    Node,
    alt,
    avoiding,
    chars,
    group,
    lit,
    opt,
    repeat,
    seq,
    shared,
    star,
    utf8_char,
)
from toolgrammar.automata.size import MAX_ESTIMATED_SIZE, estimate_size
from toolgrammar.errors import GrammarError, SchemaTooLargeError, ToolSchemaError
from toolgrammar.schema import Bounds, StringSchemaError, string_language
from toolgrammar.values.numbers import integer_node, number_node
from toolgrammar.values.strings import constrained_text

if TYPE_CHECKING:
    from toolgrammar.schema import Tool


@dataclass(frozen=True)
class Whitespace:
    """Where whitespace may appear inside JSON, and how much."""

    item_separator: str = ", "
    """Between array items and object members (canonical: ``", "``)."""
    key_separator: str = ": "
    """Between a key and its value (canonical: ``": "``)."""
    max_extra: int = 0
    """Flexible mode: up to this many extra whitespace characters at each JSON whitespace position."""

    @classmethod
    def canonical(cls) -> Whitespace:
        return cls()

    @classmethod
    def flexible(cls, max_extra: int = 2) -> Whitespace:
        if not 0 < max_extra <= 16:
            raise GrammarError(f"flexible whitespace needs 1 <= max_whitespace <= 16, got {max_extra}")
        return cls(",", ":", max_extra)

    # The nodes are built once per spelling (every member of every tool asks for them; nodes are immutable
    # and the compilers take shared parts).
    def ws(self) -> Node:
        return _ws_node(self.max_extra)

    def item_sep(self) -> Node:
        return _sep_node(self.item_separator, self.max_extra)

    def key_sep(self) -> Node:
        return _sep_node(self.key_separator, self.max_extra)


@lru_cache(maxsize=32)
def _ws_node(max_extra: int) -> Node:
    if max_extra == 0:
        return lit("")
    return repeat(chars(" \t\n\r", r"[ \t\n\r]"), 0, max_extra)


@lru_cache(maxsize=64)
def _sep_node(separator: str, max_extra: int) -> Node:
    return seq(_ws_node(max_extra), lit(separator), _ws_node(max_extra))


_STRING_CHAR_REGEX = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'


@lru_cache(maxsize=1)
def string_char() -> Node:
    """One JSON string character: any character but ``"``, ``\\`` and controls, or an escape."""
    hexd = chars("0123456789abcdefABCDEF", "[0-9a-fA-F]")
    return group(
        alt(
            utf8_char(exclude_ascii='"\\', ascii_only_printable=True),
            seq(lit("\\"), chars('"\\/bfnrt', r'["\\/bfnrt]')),
            seq(lit("\\u"), hexd, hexd, hexd, hexd),
        ),
        regex=_STRING_CHAR_REGEX,
    )


@lru_cache(maxsize=64)
def json_string(avoid: tuple[str, ...] = ()) -> Node:
    """A JSON string literal. ``avoid`` lists raw substrings the string text may not contain."""
    body = star(string_char())
    if avoid:
        body = avoiding(body, *avoid)
    return seq(lit('"'), body, lit('"'))


_DIGIT = chars("0123456789", "[0-9]")
_DIGIT19 = chars("123456789", "[1-9]")


@lru_cache(maxsize=1)
def json_integer() -> Node:
    return seq(opt(lit("-")), alt(lit("0"), seq(_DIGIT19, star(_DIGIT))))


MAX_FLOAT_INT_DIGITS = 17
"""Most integer digits of a number written with a fraction or exponent. ``json.dumps`` (``repr``)
never writes more than 17 significant digits before it switches to the exponent form, so every
canonical float fits; with an exponent of at most two digits the value stays below 1e117, so
``float()`` never overflows to infinity (which no JSON text carries). A bound is needed at all
because the grammar is regular; it is kept small because each allowed digit is an automaton state.
Integers without fraction or exponent are unbounded: they are read as exact ints."""

MAX_SHORT_INT_DIGITS = 8
"""Most integer digits of a number with a positive three-digit exponent (100 to 299): below 1e308."""


@lru_cache(maxsize=1)
def finite_number() -> Node:
    """A JSON number that ``float()`` reads as a finite value.

    Integers (no fraction, no exponent) are unbounded: they are read as exact ints. With a fraction
    or an exponent: up to :data:`MAX_FLOAT_INT_DIGITS` integer digits with a negative exponent or a
    positive one of at most two digits, or up to :data:`MAX_SHORT_INT_DIGITS` integer digits with a
    positive exponent of 100 to 299 (``json.dumps(1e200)`` is ``1e+200``). Everything stays below
    1e308, so no reading overflows to infinity, which no JSON text can carry.
    """
    digit = chars("0123456789", "[0-9]")
    nonzero = chars("123456789", "[1-9]")
    sign = opt(lit("-"))

    def int_part(max_digits: int) -> Node:
        return alt(lit("0"), seq(nonzero, repeat(digit, 0, max_digits - 1)))

    frac = seq(lit("."), repeat(digit, 1, None))
    e = chars("eE", "[eE]")
    small_exp = alt(seq(e, lit("-"), repeat(digit, 1, None)), seq(e, opt(lit("+")), repeat(digit, 1, 2)))
    big_exp = seq(e, opt(lit("+")), chars("12", "[12]"), digit, digit)
    long_form = seq(sign, int_part(MAX_FLOAT_INT_DIGITS), alt(seq(frac, opt(small_exp)), small_exp))
    short_form = seq(sign, int_part(MAX_SHORT_INT_DIGITS), opt(frac), big_exp)
    return alt(json_integer(), long_form, short_form)


def json_number() -> Node:
    """A JSON number whose value is finite when read (:func:`finite_number`)."""
    return finite_number()


def json_literal(value: Any, ws: Whitespace) -> Node:
    """Exactly ``value``, spelled as the chat template spells it."""
    if type(value) is str:  # keys and most enum values: json.dumps's own string encoder, without an encoder object
        return lit(encode_basestring(value))
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(ws.item_separator, ws.key_separator))
    except (TypeError, ValueError) as error:
        raise GrammarError(f"enum/const value {value!r} is not JSON: {error}") from error
    return lit(text)


@dataclass(frozen=True)
class SchemaContext:
    """Options that shape every value of a schema."""

    ws: Whitespace
    string_avoid: tuple[str, ...] = ()
    """Raw substrings no string value may contain (``escape_markers=True`` puts ``</tool_call>`` here)."""
    tool: str = ""
    """The tool being compiled, for error messages."""


ANY_VALUE_DEPTH = 3
"""Nesting allowed inside a value whose schema is ``{}`` (any JSON). A regular grammar cannot
count brackets, so free-form JSON is bounded: scalars at depth 0, containers of depth-1 values above."""


@lru_cache(maxsize=64)
def any_value(ctx: SchemaContext, depth: int = ANY_VALUE_DEPTH) -> Node:
    """Any JSON value nested at most ``depth`` containers deep (the grammar of the schema ``{}``)."""
    ws = ctx.ws
    scalars = [json_string(ctx.string_avoid), json_number(), lit("true"), lit("false"), lit("null")]
    if depth <= 0:
        return alt(*scalars)
    inner = shared(any_value(ctx, depth - 1))
    array = seq(lit("["), ws.ws(), opt(seq(inner, star(seq(ws.item_sep(), inner)))), ws.ws(), lit("]"))
    member = seq(json_string(ctx.string_avoid), ws.key_sep(), inner)
    obj = seq(lit("{"), ws.ws(), opt(seq(member, star(seq(ws.item_sep(), member)))), ws.ws(), lit("}"))
    return shared(alt(*scalars, array, obj))


MAX_CACHED_PARTS = 4096
"""Grammar trees of object and array schemas kept process-wide (least recently used out; a few KB each)."""

_parts: OrderedDict[tuple[Whitespace, tuple[str, ...], str], Node] = OrderedDict()
_parts_lock = threading.Lock()


def schema_node(schema: dict[str, Any], ctx: SchemaContext, pointer: str = "") -> Node:
    """The grammar of JSON values valid against a normalized ``schema`` (refused when too large to compile).

    The tree of an object or array schema is built once per spelling and kept (:data:`MAX_CACHED_PARTS`):
    tool lists repeat their parts (one address type, one list of labels, a ``$ref`` inlined at each use), and
    a tree is immutable and independent of where it is used (the pointer only names a refusal, which is
    never kept)."""
    if not ("properties" in schema or "items" in schema or "additionalProperties" in schema or "anyOf" in schema):
        return check_size(_schema_node(schema, ctx, pointer), schema, ctx, pointer)
    key = (ctx.ws, ctx.string_avoid, json.dumps(schema, ensure_ascii=False, separators=(",", ":")))
    return _kept_part(key, lambda: check_size(_schema_node(schema, ctx, pointer), schema, ctx, pointer))


def _kept_part(key: tuple[Whitespace, tuple[str, ...], str], build: Callable[[], Node]) -> Node:
    """The tree kept under ``key``, or ``build()``'s, kept (least recently used out)."""
    with _parts_lock:
        node = _parts.get(key)
        if node is not None:
            _parts.move_to_end(key)
            return node
    node = build()
    with _parts_lock:
        _parts[key] = node
        if len(_parts) > MAX_CACHED_PARTS:
            _parts.popitem(last=False)
    return node


def arguments_node(tool: Tool, ctx: SchemaContext) -> Node:
    """The grammar of ``tool``'s arguments object (its normalized ``parameters``), refused when too large.

    Kept with the schema trees (:data:`MAX_CACHED_PARTS`), keyed by the tool's canonical schema text
    (:attr:`~toolgrammar.schema.toolset.Tool.schema_json`, computed once per loaded tool): a server sees a new tool
    list on every request, but mostly tools it has seen before, and a tool's tree does not depend on its
    name or its list (the name only labels a refusal, which is never kept)."""
    key = (ctx.ws, ctx.string_avoid, "\0arguments\0" + tool.schema_json)
    return _kept_part(key, lambda: object_node(tool.parameters, ctx))


def clear_part_cache() -> None:
    """Forget the trees :func:`schema_node` kept, and the free-form values :func:`any_value` built."""
    with _parts_lock:
        _parts.clear()
    any_value.cache_clear()


caches.register("values.parts", clear_part_cache)


def _schema_node(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    if not schema:
        return any_value(ctx)
    if "const" in schema:
        return json_literal(schema["const"], ctx.ws)
    if "enum" in schema:
        return alt(*(json_literal(v, ctx.ws) for v in schema["enum"]))
    if "anyOf" in schema:
        branches = []
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        for i, sub in enumerate(schema["anyOf"]):
            merged = {**base, **sub} if base else sub
            branches.append(schema_node(merged, ctx, f"{pointer}/anyOf/{i}"))
        return alt(*branches)
    types = schema.get("type")
    if types is None and not (set(schema) - {"additionalProperties", "properties", "required", "items"}):
        return any_value(ctx)
    if types is None:
        raise GrammarError(
            f"tool {ctx.tool!r}: schema at {pointer or '/'} has no type, enum, const or anyOf; the grammar "
            "cannot generate an unconstrained JSON value (give it a type)"
        )
    if isinstance(types, list):
        return alt(*(_typed(schema, t, ctx, pointer) for t in types))
    return _typed(schema, types, ctx, pointer)


def _typed(schema: dict[str, Any], type_: str, ctx: SchemaContext, pointer: str) -> Node:
    if type_ == "string":
        return string_value(schema, ctx, pointer)
    if type_ == "integer":
        return integer_value(schema, ctx, pointer)
    if type_ == "number":
        return number_value(schema, ctx, pointer)
    if type_ == "boolean":
        return alt(lit("true"), lit("false"))
    if type_ == "null":
        return lit("null")
    if type_ == "array":
        return _array(schema, ctx, pointer)
    if type_ == "object":
        return object_node(schema, ctx, pointer)
    raise GrammarError(f"tool {ctx.tool!r}: unknown type {type_!r} at {pointer or '/'}")


def string_value(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """A JSON string valid against ``schema``'s ``pattern``/``format``/``minLength``/``maxLength``
    (:mod:`toolgrammar.schema.string_keywords`); any JSON string when it has none."""
    try:
        rx = string_language(schema)
    except StringSchemaError as error:  # the normalizer refuses these first; a hand-made schema may not
        raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
    if rx is None:
        return json_string(ctx.string_avoid)
    return seq(lit('"'), constrained_text(rx, "json", ctx.string_avoid), lit('"'))


def integer_value(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """A JSON integer within ``schema``'s bounds (:mod:`toolgrammar.schema.bounds`: exact)."""
    bounds = Bounds(schema)
    if not bounds.any:
        return json_integer()
    try:
        return integer_node(*bounds.integer_range())
    except ValueError as error:
        raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword="minimum") from None


def number_value(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """A JSON number within ``schema``'s bounds (:mod:`toolgrammar.schema.bounds` says what is exact)."""
    try:
        return number_node(Bounds(schema), json_number())
    except ValueError as error:
        raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword="minimum") from None


def _array(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    items = schema.get("items", {})
    lo = int(schema.get("minItems", 0))
    hi = schema.get("maxItems")
    hi = None if hi is None else int(hi)
    if hi == 0:
        return seq(lit("["), ctx.ws.ws(), lit("]"))
    item = schema_node(items, ctx, f"{pointer}/items")
    ws = ctx.ws
    # ``[ ws item (ws , ws item)* ws ]`` spelled ``[ ws item ws (, ws item ws)* ]``: the same language, with
    # each further item behind its separator's literal, where a long bounded repeat can be left unbuilt
    # until a walk reaches it (toolgrammar.automata.holes.lazy_repeats).
    further = seq(lit(ws.item_separator), ws.ws(), item, ws.ws())
    body = seq(item, ws.ws(), repeat(further, max(lo - 1, 0), None if hi is None else hi - 1))
    if lo == 0:
        body = alt(body, ws.ws())
    return seq(lit("["), ws.ws(), body, lit("]"))


def object_node(schema: dict[str, Any], ctx: SchemaContext, pointer: str = "") -> Node:
    """An object: declared properties in schema order, required ones present, optional ones skippable."""
    ws = ctx.ws
    props: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", False)
    if not props and isinstance(extra, dict):
        # A string-keyed map: {"k": V, ...}.
        value = schema_node(extra, ctx, f"{pointer}/additionalProperties")
        member = seq(json_string(ctx.string_avoid), ws.key_sep(), value)
        body = opt(seq(member, star(seq(ws.item_sep(), member))))
        return seq(lit("{"), ws.ws(), body, ws.ws(), lit("}"))
    required = set(schema.get("required", ()))
    members = []
    for key, sub in props.items():
        value = schema_node(sub, ctx, f"{pointer}/properties/{_escape_pointer(key)}")
        members.append((seq(json_literal(key, ws), ws.key_sep(), value), key in required))
    body = Members(tuple(members), ws.item_sep()) if members else lit("")
    return check_size(seq(lit("{"), ws.ws(), body, ws.ws(), lit("}")), schema, ctx, pointer)


def check_size(node: Node, schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """``node`` (the grammar of ``schema`` at ``pointer``), or :class:`SchemaTooLargeError` when its
    :func:`~toolgrammar.automata.size.estimate_size` is over :data:`~toolgrammar.automata.size.MAX_ESTIMATED_SIZE`.

    Called on every part as it is built, so the first refusal names the smallest part that is too
    large, before any automaton exists (estimates are memoized: the checks stay linear).
    """
    size = estimate_size(node)
    if size <= MAX_ESTIMATED_SIZE:
        return node
    keyword, remedy = _remedy(schema, size, ctx)
    raise SchemaTooLargeError(
        f"{'this part of the schema' if pointer else 'the arguments schema (/)'} is too large to compile: its "
        f"automaton is estimated at {size:,} states, "
        f"over the limit of {MAX_ESTIMATED_SIZE:,} (toolgrammar.automata.size.MAX_ESTIMATED_SIZE); {remedy}",
        tool=ctx.tool or None,
        pointer=pointer,
        keyword=keyword,
        estimate=size,
        limit=MAX_ESTIMATED_SIZE,
    )


def _remedy(schema: dict[str, Any], size: int, ctx: SchemaContext) -> tuple[str | None, str]:
    """The keyword at fault and what would make the part fit, for :func:`check_size`'s message."""
    strings = "or load the tools with mode='strings' (every argument a string)"
    if "anyOf" in schema:
        return "anyOf", f"use fewer anyOf branches or simpler ones, {strings}"
    if "enum" in schema:
        return "enum", "use fewer enum values"
    types = schema.get("type")
    if "string" in (types if isinstance(types, list) else [types]):
        for keyword in ("maxLength", "minLength", "pattern", "format"):
            if keyword in schema:
                if keyword in ("maxLength", "minLength"):
                    # Each counted character is a few automaton states per way to spell it (about 60 units).
                    return keyword, (
                        f"lower {keyword} (now {schema[keyword]}; each counted character costs about 60 of the "
                        f"{MAX_ESTIMATED_SIZE:,}), or drop it, {strings}"
                    )
                return keyword, f"simplify the {keyword}, {strings}"
    if types == "array":
        hi = schema.get("maxItems")
        if hi is None:
            return "items", f"simplify the items schema or flatten the nesting, {strings}"
        # The estimate grows about with maxItems^2 (estimate_size, bounded repeats): scale down.
        fit = max(1, int(int(hi) * (MAX_ESTIMATED_SIZE / size) ** 0.5))
        return "maxItems", (
            f"lower maxItems (now {hi}; about {fit} would fit), flatten the nesting (arrays inside arrays "
            f"multiply), {strings}"
        )
    if types == "object":
        props = schema.get("properties", {})
        optional = len(set(props) - set(schema.get("required", ())))
        if optional > 1:
            return "required", (
                f"mark fewer properties optional ({optional} of {len(props)} are: each can follow any earlier one, "
                "which the automaton pays for in states; list more of them in required), or split the tool "
                "into several"
            )
        return "properties", f"split the tool into several or simplify its properties, {strings}"
    return None, f"simplify this part, {strings}"


def _escape_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
