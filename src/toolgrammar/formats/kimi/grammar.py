"""Grammar pieces of the Kimi formats.

``kimi`` (K2): one section holding one call, or several under ``parallel_tool_calls``, each
``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>`` with ARGS the
canonical JSON object of the tool's schema (:func:`~toolgrammar.values.json_grammar.arguments_node`).

``kimi-k3`` (:func:`k3_block_grammar`): the tools channel ``<|open|>tools<|sep|>`` ... ``<|close|>tools<|sep|>``
holding one call (several under ``parallel_tool_calls``)
``<|open|>call tool="NAME" index="IDX"<|sep|>`` + arguments + ``<|close|>call<|sep|>``, one argument
``<|open|>argument key="KEY" type="T"<|sep|>VALUE<|close|>argument<|sep|>`` per property in declared order
(required ones present, optional ones skippable), NAME and KEY XML-escaped as the template writes them.
VALUE by the schema, as :mod:`toolgrammar.formats.raw_values` writes it: a string raw (``type="string"``),
anything else JSON (``number`` for integers and numbers, ``boolean``, ``null``, ``object``, ``array``);
an untyped schema takes a raw string. A value may not contain ``<|close|>argument<|sep|>`` followed by
(at most one space between) the next argument's opener or the call's closer
(:data:`K3_VALUE_FORBIDDEN`): that is where the strict parser ends a value, so the same text elsewhere
in a value stays in it (CanIToolCall's ``k3-control-marker-text-in-value``).

IDX is any decimal index without leading zeros (the templates count calls, K2 per conversation from 0,
K3 per message from 1; a regular grammar cannot count, and the parsers ignore it). Every section can
close after any complete call, so the token budget can always end a started block.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Members, Node, alt, chars, dispatch, lit, repeat, seq, star
from toolgrammar.errors import GrammarError
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.formats.kimi.parser import k2_markup, k3_markup
from toolgrammar.formats.raw_values import raw_text, raw_value_node
from toolgrammar.formats.sections import WHITESPACE
from toolgrammar.values.json_grammar import SchemaContext, arguments_node, check_size

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet

MAX_INDEX_DIGITS = 4
"""Digits of a call index the grammar allows (0..9999)."""


def index_node() -> Node:
    """A decimal call index: ``0``, or a non-zero digit and up to three more."""
    return alt(
        lit("0"), seq(chars("123456789", "[1-9]"), repeat(chars("0123456789", "[0-9]"), 0, MAX_INDEX_DIGITS - 1))
    )


def block_grammar(tools: ToolSet, options: GrammarOptions, markers: Markers) -> Node:
    m = k2_markup()
    selected = options.selected_tools(tools)
    if not selected:
        raise GrammarError("the kimi block grammar needs at least one tool")
    ws = options.json_whitespace()
    avoid = (m.call_close,) if options.escape_markers else ()
    branches = []
    for tool in selected:
        args = arguments_node(tool, SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name))
        tail = seq(index_node(), lit(m.argument_open), args, lit(m.call_close))
        branches.append((tool.name + m.id_sep, tail, tail_key("kimi", options, tool)))
    call = seq(lit(m.call_open + m.id_prefix), dispatch(branches))
    calls = seq(call, star(call)) if options.parallel_tool_calls else call
    return seq(lit(markers.block_open), calls, lit(markers.block_close))


def _k3_forbidden() -> tuple[str, ...]:
    m = k3_markup()
    ends = (m.argument_open, m.call_close)
    other_ws = tuple(w for w in WHITESPACE if w != " ")
    after = (*ends, *(" " + e for e in ends), *(" " + w for w in WHITESPACE), *other_ws)
    return tuple(m.argument_close + x for x in after)


K3_VALUE_FORBIDDEN: tuple[str, ...] = _k3_forbidden()
"""What a K3 value may not contain: ``<|close|>argument<|sep|>`` followed by the next argument's opener or
the call's closer, directly or after one space (where the strict parser ends a value), or followed by a
tab, carriage return or newline, or by a space and any whitespace (the parser skips any run of whitespace
there, which a list of words cannot say: those values are refused, soundly). A space and other text
(``<|close|>argument<|sep|> is how args end``) is allowed. The closer has no border (no proper prefix of
it is a suffix), so none of these can straddle a value and the closer after it."""

K3_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}
"""JSON Schema type -> the ``type`` attribute the K3 template writes (``object``/``array`` as they are)."""


def xml_attr(text: str) -> str:
    """An XML-escaped attribute value, as the K3 template writes names and keys."""
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def k3_block_grammar(tools: ToolSet, options: GrammarOptions, markers: Markers) -> Node:
    """One K3 tools channel for any of ``tools`` (or only ``options.tool_choice`` when it names a tool)."""
    m = k3_markup()
    selected = options.selected_tools(tools)
    if not selected:
        raise GrammarError("the kimi-k3 block grammar needs at least one tool")
    markup = (m.open, m.close, m.sep) if options.escape_markers else ()
    avoid = K3_VALUE_FORBIDDEN + markup
    # JSON strings hold no raw tab, carriage return or newline: only the forbidden words without them.
    json_avoid = tuple(w for w in K3_VALUE_FORBIDDEN if not any(c in w for c in "\t\r\n")) + markup
    ws = options.json_whitespace()
    branches = []
    for tool in selected:
        ctx = SchemaContext(ws=ws, string_avoid=json_avoid, tool=tool.name)
        props: dict[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", ()))
        members = []
        for key, schema in props.items():
            head = lit(m.argument_open + xml_attr(key) + m.argument_type)
            value = k3_value_node(schema, ctx, avoid, f"/properties/{key}")
            members.append((seq(head, value, lit(m.argument_close)), key in required))
        body = Members(tuple(members), lit("")) if members else lit("")
        tail = seq(index_node(), lit('"' + m.sep), check_size(body, tool.parameters, ctx, ""), lit(m.call_close))
        branches.append(seq(lit(xml_attr(tool.name) + m.call_index), tail))
    # An alternation, not a lazy dispatch: with a dispatch, budget walks over the byte vocabulary of the tests
    # ran out inside a call (the stub bound of a K3 tail undercounts; see the report), which this avoids.
    call = seq(lit(m.call_open), alt(*branches))
    calls = seq(call, star(call)) if options.parallel_tool_calls else call
    return seq(lit(markers.block_open), calls, lit(markers.block_close))


def k3_value_node(schema: dict[str, Any], ctx: SchemaContext, avoid: tuple[str, ...], pointer: str) -> Node:
    """``T"<|sep|>VALUE`` for one parameter: its ``type`` attribute's value, then the value (module docstring)."""
    sep = k3_markup().sep

    def typed(kind: str, value: Node) -> Node:
        return seq(lit(f'{kind}"{sep}'), value)

    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return alt(*(_k3_literal(v, avoid, ctx, pointer) for v in values))
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        subs = enumerate(schema["anyOf"])
        return alt(*(k3_value_node({**base, **sub}, ctx, avoid, f"{pointer}/anyOf/{i}") for i, sub in subs))
    types = schema.get("type")
    if types is None:
        return typed("string", raw_text(avoid))
    nodes = []
    for t in [types] if isinstance(types, str) else types:
        kind = K3_TYPES.get(t, t)
        nodes.append(typed(kind, raw_value_node({**schema, "type": t}, ctx, avoid, pointer, format_name="kimi-k3")))
    return alt(*nodes)


def _k3_literal(value: Any, avoid: tuple[str, ...], ctx: SchemaContext, pointer: str) -> Node:
    """One enum/const value as the template writes it (a string raw, anything else JSON)."""
    sep = k3_markup().sep
    if isinstance(value, str):
        kind, text = "string", value
    else:
        kind, text = _json_kind(value), json.dumps(value, ensure_ascii=False)
    if any(w in text for w in avoid):
        raise GrammarError(
            f"tool {ctx.tool!r}, at {pointer}: the enum/const value {value!r} cannot be written as a kimi-k3 argument: "
            "its text would end the value early (or holds a marker)"
        )
    return lit(f'{kind}"{sep}{text}')


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array"


__all__ = [
    "K3_TYPES",
    "K3_VALUE_FORBIDDEN",
    "MAX_INDEX_DIGITS",
    "block_grammar",
    "index_node",
    "k3_block_grammar",
    "k3_value_node",
    "xml_attr",
]
