"""Grammar pieces of the ``gemma4`` format: one block, exactly as the chat template writes it.

::

    <|tool_call>call:NAME{KEY:VALUE,...}<tool_call|>

Members in Jinja ``dictsort`` order (case-insensitive: :func:`~toolgrammar.formats.gemma4.dictsort`),
required ones present, optional ones skippable, joined by ``,`` with no spaces; ``VALUE`` by its schema:

- ``string``: ``<|"|>`` + raw text + ``<|"|>``: any characters but ``<|"|>`` (with ``pattern``, ``format``,
  ``minLength``/``maxLength``: the strings those allow, written as they are);
- ``integer`` / ``number``: JSON number syntax (:mod:`toolgrammar.values.json_grammar`: bounds exact), which is
  also how Python's ``str()`` writes them (``1e-05``, ``1e+21``); ``boolean``: ``true``/``false``;
  ``null``: ``null``;
- ``object``: nested members the same way; a map (``additionalProperties`` only) with bare keys too
  (:func:`bare_key`: no markup characters, no surrounding whitespace); ``array``: ``[`` items joined by
  ``,`` ``]``;
- ``enum`` / ``const``: each value as :func:`~toolgrammar.formats.gemma4.render_value` writes it;
  ``anyOf`` and type lists: the union; ``{}``: any value nested at most two containers deep.

``escape_markers=True`` also keeps every marker of the format out of string values. The parser
(:mod:`.parser`) reads back every value this grammar writes with the type it was written as.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgrammar.automata.lazy import schema_tail_key
from toolgrammar.automata.nodes import (
    Members,
    Node,
    alt,
    avoiding,
    dispatch,
    lit,
    opt,
    repeat,
    seq,
    shared,
    star,
    utf8_char,
)
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats.gemma4.notation import CALL_PREFIX, ITEM_SEP, KEY_SEP, QUOTE, dictsort, render_value
from toolgrammar.schema import StringSchemaError, string_language
from toolgrammar.values.json_grammar import SchemaContext, check_size, finite_number, integer_value, number_value
from toolgrammar.values.strings import constrained_text

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

ANY_DEPTH = 2


def block_grammar(tools: ToolSet, options: GrammarOptions, markers: Markers) -> Node:
    """One block for any of ``tools`` (or only ``options.tool_choice`` when it names a tool)."""
    avoid = (QUOTE, *markers.leak) if options.escape_markers else (QUOTE,)
    branches = []
    for tool in options.selected_tools(tools):
        ctx = SchemaContext(ws=options.json_whitespace(), string_avoid=avoid, tool=tool.name)
        body = members(tool.parameters, ctx, "")
        tail = seq(body, lit("}" + markers.block_close))
        branches.append((tool.name + "{", tail, tail_key(options, tool)))
    if not branches:
        raise GrammarError("the gemma4 block grammar needs at least one tool")
    return seq(lit(markers.block_open + CALL_PREFIX), dispatch(branches))


def tail_key(options: GrammarOptions, tool: Tool) -> str:
    return schema_tail_key(["gemma4", options.escape_markers], tool.schema_json)


def members(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """The members of an object (without its braces), in ``dictsort`` order."""
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    items = [
        (seq(lit(key + KEY_SEP), value_node(props[key], ctx, f"{pointer}/properties/{key}")), key in required)
        for key in dictsort(props)
    ]
    return check_size(Members(tuple(items), lit(ITEM_SEP)) if items else lit(""), schema, ctx, pointer)


def bare_key() -> Node:
    """A key the template writes bare and the parser reads back as itself: characters other than
    whitespace and ``{}[],:<``, single spaces allowed between them."""
    char = utf8_char(exclude_ascii=" \t\r\n{}[],:<", ascii_only_printable=True)
    return seq(char, star(seq(opt(lit(" ")), char)))


def string_node(ctx: SchemaContext) -> Node:
    return seq(lit(QUOTE), avoiding(star(utf8_char()), *ctx.string_avoid), lit(QUOTE))


def value_node(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    if not schema:
        return any_value(ctx, ANY_DEPTH)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return alt(*(_literal(v, ctx, pointer) for v in values))
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        return alt(*(value_node({**base, **s}, ctx, f"{pointer}/anyOf/{i}") for i, s in enumerate(schema["anyOf"])))
    types = schema.get("type")
    if types is None:
        return any_value(ctx, ANY_DEPTH)
    return alt(*(_typed(schema, t, ctx, pointer) for t in ([types] if isinstance(types, str) else types)))


def _typed(schema: dict[str, Any], type_: str, ctx: SchemaContext, pointer: str) -> Node:
    if type_ == "string":
        try:
            rx = string_language(schema)
        except StringSchemaError as error:
            raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
        if rx is None:
            return string_node(ctx)
        return seq(lit(QUOTE), constrained_text(rx, "raw", ctx.string_avoid), lit(QUOTE))
    if type_ == "integer":
        return integer_value(schema, ctx, pointer)
    if type_ == "number":
        return number_value(schema, ctx, pointer)
    if type_ == "boolean":
        return alt(lit("true"), lit("false"))
    if type_ == "null":
        return lit("null")
    if type_ == "object":
        extra = schema.get("additionalProperties", False)
        if not schema.get("properties") and isinstance(extra, dict):
            value = value_node(extra, ctx, f"{pointer}/additionalProperties")
            member = seq(bare_key(), lit(KEY_SEP), value)
            return seq(lit("{"), opt(seq(member, star(seq(lit(ITEM_SEP), member)))), lit("}"))
        return seq(lit("{"), members(schema, ctx, pointer), lit("}"))
    if type_ == "array":
        item = value_node(schema.get("items", {}), ctx, f"{pointer}/items")
        lo, hi = int(schema.get("minItems", 0)), schema.get("maxItems")
        if hi is not None and int(hi) == 0:
            return lit("[]")
        rest = repeat(seq(lit(ITEM_SEP), item), max(lo - 1, 0), None if hi is None else int(hi) - 1)
        body = seq(item, rest)
        return seq(lit("["), body if lo else opt(body), lit("]"))
    raise GrammarError(f"tool {ctx.tool!r}: unknown type {type_!r} at {pointer or '/'}")


def any_value(ctx: SchemaContext, depth: int) -> Node:
    scalars = [string_node(ctx), finite_number(), lit("true"), lit("false"), lit("null")]
    if depth <= 0:
        return alt(*scalars)
    inner = shared(any_value(ctx, depth - 1))
    array = seq(lit("["), opt(seq(inner, star(seq(lit(ITEM_SEP), inner)))), lit("]"))
    member = seq(bare_key(), lit(KEY_SEP), inner)
    obj = seq(lit("{"), opt(seq(member, star(seq(lit(ITEM_SEP), member)))), lit("}"))
    return shared(alt(*scalars, array, obj))


def _literal(value: Any, ctx: SchemaContext, pointer: str) -> Node:
    try:
        text = render_value(value)
    except TypeError as error:
        raise GrammarError(f"tool {ctx.tool!r}, at {pointer}: enum/const value {value!r}: {error}") from None
    if isinstance(value, str) and any(w in value for w in ctx.string_avoid):
        raise GrammarError(f"tool {ctx.tool!r}, at {pointer}: the enum/const value {value!r} holds a marker")
    return lit(text)


__all__ = ["bare_key", "block_grammar", "members", "tail_key", "value_node"]
