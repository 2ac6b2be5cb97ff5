"""Grammar pieces of the ``llama4-pythonic`` format: the call list of a turn as one block.

::

    [NAME(KEY=VALUE, ...), NAME(...)]
    <|python_start|>[NAME(KEY=VALUE, ...), ...]<|python_end|>

One call, or several joined by ``", "`` under ``parallel_tool_calls`` (the block holds every call of the
turn); the bare list (Meta's spelling) or the same list between ``<|python_start|>`` and ``<|python_end|>``.
The tool name picks the arguments (:func:`~toolgrammar.automata.nodes.dispatch`: each tool compiles when a walk
first reaches it). The dispatch starts after the name's first character: content may hold ``[`` (not ``[``
and a letter or ``_``), so right after ``[`` the turn may still be content, and only ``[`` plus a name
character is surely a call. Names are grouped by that character, one dispatch per group; past
:data:`~toolgrammar.automata.holes.MAX_DISPATCHES` groups, the smallest ones are compiled with the turn.

Keyword arguments in the schema's property order, required ones present, optional ones skippable,
joined by ``", "``; ``VALUE`` is a Python literal typed by its schema, as ``repr`` writes it
(:func:`~toolgrammar.formats.llama4_pythonic.parser.render_value`):

- ``string``: ``'...'`` or ``"..."``; inside, any character but the quote, ``\\``, the control characters
  (U+0000-U+001F, U+007F-U+009F) and U+2028/U+2029 as itself, or an escape: ``\\\\``, ``\\'``, ``\\"``,
  ``\\n``, ``\\r``, ``\\t``, ``\\xhh`` (controls and U+0080-U+00FF), ``\\uhhhh`` (U+0100 and up, no
  surrogate), ``\\Uhhhhhhhh`` (U+10000 and up), lowercase hex. That is every string ``repr`` writes
  (single quotes unless the text has a ``'`` and no ``"``) and the same text in the other quotes. With
  ``pattern``, ``format``, ``minLength``/``maxLength``: each allowed character as itself, or escaped as
  ``repr`` escapes it when it is one of those excluded above;
- ``integer`` / ``number``: JSON number syntax (:mod:`toolgrammar.values.json_grammar`, bounds exact), which
  Python reads as the same value (``7``, ``-2.5``, ``1e-05``, ``1e+21``: ``repr``'s spelling too);
- ``boolean``: ``True`` / ``False``; ``null``: ``None``;
- ``object``: ``{'KEY': VALUE, ...}``, declared properties in schema order; a map (``additionalProperties``
  only) with any string keys; ``array``: ``[ITEM, ...]`` within ``minItems``/``maxItems``;
- ``enum`` / ``const``: each value as ``repr`` writes it (refused when it would not read back as itself);
  ``anyOf`` and type lists: the union; ``{}``: any JSON-compatible literal nested at most
  :data:`ANY_DEPTH` containers deep.

``whitespace="flexible"`` allows the bounded JSON whitespace between items, keys and values and around
the call separator (Python reads it the same inside brackets). ``escape_markers=True`` keeps every
marker of the format out of string values. The parser (:mod:`.parser`) reads every text this grammar
allows as the same calls (``ast.literal_eval``), so a masked generation never fails to parse.
"""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.holes import MAX_DISPATCHES
from toolgrammar.automata.nodes import (
    Members,
    Node,
    alt,
    avoiding,
    chars,
    dispatch,
    lit,
    opt,
    repeat,
    seq,
    shared,
    star,
)
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats.hermes.grammar import tail_key as json_tail_key
from toolgrammar.formats.llama4_pythonic.parser import json_problem, render_value
from toolgrammar.schema import (
    ANY,
    Cat,
    Chars,
    CharSet,
    Or,
    Rep,
    Rx,
    StringSchemaError,
    chars_of,
    charset,
    difference,
    intersect,
    string_language,
    union,
)
from toolgrammar.values.json_grammar import (
    SchemaContext,
    Whitespace,
    check_size,
    finite_number,
    integer_value,
    number_value,
)
from toolgrammar.values.strings import charset_node, counted

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

ANY_DEPTH = 3
"""Nesting allowed inside a value whose schema is ``{}`` (as
:data:`toolgrammar.values.json_grammar.ANY_VALUE_DEPTH`)."""

QUOTES = ("'", '"')
ESCAPED: CharSet = charset((0, 0x1F), (0x7F, 0x9F), (0x2028, 0x2029), (0x5C, 0x5C))
"""Characters a string value never holds as themselves: the controls (``repr`` escapes them; a raw line
break ends a Python string), the line separators the parser's offsets would split at, and ``\\``."""

_HEX = chars("0123456789abcdef", "[0-9a-f]")
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x5C: "\\\\", 0x27: "\\'", 0x22: '\\"'}


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any], markers: Markers) -> Node:
    """The call list: one call for any of ``tools`` (only ``options.tool_choice`` when it names one), or
    several under ``options.parallel_tool_calls``; bare or between ``<|python_start|>`` / ``<|python_end|>``."""
    selected = options.selected_tools(tools)
    if not selected:
        raise GrammarError("the llama4-pythonic block grammar needs at least one tool")
    ws = options.json_whitespace()
    avoid = tuple(markers.leak) if options.escape_markers else ()
    groups: dict[str, list[tuple[str, Node, str]]] = {}
    for tool in selected:
        ctx = SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name)
        tail = seq(arguments(tool.parameters, ctx), lit(")"))
        groups.setdefault(tool.name[0], []).append((tool.name[1:] + "(", tail, tail_key(options, tool)))
    lazy = set(sorted(groups, key=lambda c: (-len(groups[c]), c))[:MAX_DISPATCHES])
    call = alt(
        *(
            seq(lit(c), dispatch(branches) if c in lazy else alt(*(seq(lit(k), t) for k, t, _ in branches)))
            for c, branches in groups.items()
        )
    )
    sep = lit(markers.call_separator) if ws.max_extra == 0 else ws.item_sep()
    calls = seq(call, star(seq(sep, call))) if options.parallel_tool_calls else call
    opened, closed = block["list_open"], block["list_close"]
    return alt(
        seq(lit(opened), calls, lit(closed)),
        seq(lit(markers.block_open + opened), calls, lit(closed + markers.block_close)),
    )


def tail_key(options: GrammarOptions, tool: Tool) -> str:
    return json_tail_key("llama4-pythonic", options, tool)


def arguments(schema: dict[str, Any], ctx: SchemaContext) -> Node:
    """The keyword arguments of a call (without its parentheses), in the schema's property order."""
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    items = [
        (seq(lit(key + "="), value_node(sub, ctx, f"/properties/{_escape_pointer(key)}")), key in required)
        for key, sub in props.items()
    ]
    return check_size(Members(tuple(items), ctx.ws.item_sep()) if items else lit(""), schema, ctx, "")


def value_node(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    """One Python literal valid against a normalized ``schema`` (module docstring)."""
    return check_size(_value(schema, ctx, pointer), schema, ctx, pointer)


def _value(schema: dict[str, Any], ctx: SchemaContext, pointer: str) -> Node:
    if not schema:
        return any_value(ctx, ANY_DEPTH)
    if "const" in schema:
        return literal(schema["const"], ctx, pointer, "const")
    if "enum" in schema:
        return alt(*(literal(v, ctx, pointer, "enum") for v in schema["enum"]))
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        return alt(*(value_node({**base, **s}, ctx, f"{pointer}/anyOf/{i}") for i, s in enumerate(schema["anyOf"])))
    types = schema.get("type")
    if types is None:
        if not set(schema) - {"additionalProperties", "properties", "required", "items"}:
            return any_value(ctx, ANY_DEPTH)
        raise GrammarError(
            f"tool {ctx.tool!r}, at {pointer or '/'}, keyword 'type': no type, enum, const or anyOf; the "
            "llama4-pythonic grammar cannot generate an unconstrained value here (give it a type)"
        )
    return alt(*(_typed(schema, t, ctx, pointer) for t in ([types] if isinstance(types, str) else types)))


def _typed(schema: dict[str, Any], type_: str, ctx: SchemaContext, pointer: str) -> Node:
    ws = ctx.ws
    if type_ == "string":
        try:
            rx = string_language(schema)
        except StringSchemaError as error:
            raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
        return string_node(rx, ctx.string_avoid)
    if type_ == "integer":
        return integer_value(schema, ctx, pointer)
    if type_ == "number":
        return number_value(schema, ctx, pointer)
    if type_ == "boolean":
        return alt(lit("True"), lit("False"))
    if type_ == "null":
        return lit("None")
    if type_ == "object":
        extra = schema.get("additionalProperties", False)
        if not schema.get("properties") and isinstance(extra, dict):
            value = value_node(extra, ctx, f"{pointer}/additionalProperties")
            member = seq(string_node(None, ctx.string_avoid), ws.key_sep(), value)
            return _bracketed("{", member, "}", ws)
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        members = [
            (
                seq(
                    lit(render_value(key)),
                    ws.key_sep(),
                    value_node(sub, ctx, f"{pointer}/properties/{_escape_pointer(key)}"),
                ),
                key in required,
            )
            for key, sub in props.items()
        ]
        body = Members(tuple(members), ws.item_sep()) if members else lit("")
        return seq(lit("{"), ws.ws(), body, ws.ws(), lit("}"))
    if type_ == "array":
        lo, hi = int(schema.get("minItems", 0)), schema.get("maxItems")
        if hi is not None and int(hi) == 0:
            return seq(lit("["), ws.ws(), lit("]"))
        item = value_node(schema.get("items", {}), ctx, f"{pointer}/items")
        rest = repeat(seq(ws.item_sep(), item), max(lo - 1, 0), None if hi is None else int(hi) - 1)
        body = seq(item, rest)
        return seq(lit("["), ws.ws(), body if lo else opt(body), ws.ws(), lit("]"))
    raise GrammarError(f"tool {ctx.tool!r}, at {pointer or '/'}, keyword 'type': unknown type {type_!r}")


def _bracketed(open_: str, item: Node, close: str, ws: Whitespace) -> Node:
    """``open_`` + items joined by the item separator (any number, none too) + ``close``."""
    return seq(lit(open_), ws.ws(), opt(seq(item, star(seq(ws.item_sep(), item)))), ws.ws(), lit(close))


@lru_cache(maxsize=64)
def any_value(ctx: SchemaContext, depth: int) -> Node:
    """Any JSON-compatible Python literal nested at most ``depth`` containers deep (the schema ``{}``)."""
    scalars = [string_node(None, ctx.string_avoid), finite_number(), lit("True"), lit("False"), lit("None")]
    if depth <= 0:
        return alt(*scalars)
    inner = shared(any_value(ctx, depth - 1))
    member = seq(string_node(None, ctx.string_avoid), ctx.ws.key_sep(), inner)
    return shared(alt(*scalars, _bracketed("[", inner, "]", ctx.ws), _bracketed("{", member, "}", ctx.ws)))


# --------------------------------------------------------------------------------------------------
# Strings


@lru_cache(maxsize=256)
def string_node(rx: Rx | None, avoid: tuple[str, ...] = ()) -> Node:
    """A Python string literal whose decoded text is in ``rx`` (any text when ``None``), in either quotes,
    holding none of ``avoid`` as raw text."""
    forms = []
    for quote in QUOTES:
        body = star(_any_char(quote)) if rx is None else _rx_node(rx, quote)
        if avoid:
            body = avoiding(body, *avoid)
        forms.append(seq(lit(quote), body, lit(quote)))
    return shared(alt(*forms))


@lru_cache(maxsize=2)
def _any_char(quote: str) -> Node:
    """One character of a string in ``quote``: as itself, or any escape that reads as one character."""
    raw = charset_node(difference(ANY, union(ESCAPED, chars_of(quote))), "raw")
    short = seq(lit("\\"), chars("\\'\"ntr", r"[\\'\"ntr]"))
    x = seq(lit("\\x"), alt(seq(chars("01", "[01]"), _HEX), lit("7f"), seq(chars("89abcdef", "[89a-f]"), _HEX)))
    u = seq(
        lit("\\u"),
        alt(
            seq(lit("0"), chars("123456789abcdef", "[1-9a-f]"), _HEX, _HEX),
            seq(chars("123456789abcef", "[1-9a-ce-f]"), _HEX, _HEX, _HEX),
            seq(lit("d"), chars("01234567", "[0-7]"), _HEX, _HEX),
        ),
    )
    big = seq(
        lit("\\U00"),
        alt(
            seq(lit("0"), chars("123456789abcdef", "[1-9a-f]"), _HEX, _HEX, _HEX, _HEX),
            seq(lit("10"), _HEX, _HEX, _HEX, _HEX),
        ),
    )
    return alt(raw, short, x, u, big)


def escape(cp: int) -> str:
    """How ``repr`` escapes the character ``cp`` inside a string literal."""
    if cp in _NAMED:
        return _NAMED[cp]
    if cp < 0x100:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


@lru_cache(maxsize=512)
def _charset_node(s: CharSet, quote: str) -> Node:
    """One character of ``s`` in a string in ``quote``: as itself, or escaped when it must be."""
    if s == ANY:
        return _any_char(quote)
    excluded = union(ESCAPED, chars_of(quote))
    plain = difference(s, excluded)
    parts: list[Node] = [charset_node(plain, "raw")] if plain else []
    parts += [lit(escape(cp)) for a, z in intersect(s, excluded) for cp in range(a, z + 1)]
    return alt(*parts)


def _rx_node(rx: Rx, quote: str) -> Node:
    if isinstance(rx, Chars):
        return _charset_node(rx.set, quote)
    if isinstance(rx, Cat):
        return seq(*(_rx_node(it, quote) for it in rx.items)) if rx.items else lit("")
    if isinstance(rx, Or):
        return alt(*(_rx_node(it, quote) for it in rx.items))
    if isinstance(rx, Rep):
        return counted(_rx_node(rx.item, quote), rx.lo, rx.hi)
    raise TypeError(rx)


# --------------------------------------------------------------------------------------------------
# Literals


def literal(value: Any, ctx: SchemaContext, pointer: str, keyword: str) -> Node:
    """One enum/const value as ``repr`` writes it; refused when it would not read back as itself."""
    where = f"tool {ctx.tool!r}, at {pointer or '/'}, keyword {keyword!r}"
    problem = json_problem(value)
    if problem:
        raise GrammarError(f"{where}: the value {value!r} is {problem}")
    text = render_value(value)
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError) as error:  # pragma: no cover - repr of JSON values always reads back
        raise GrammarError(f"{where}: the value {value!r} does not read back as a Python literal ({error})") from None
    same = json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True) and type(back) is type(value)
    if not same:  # pragma: no cover - the same, for every JSON value
        raise GrammarError(f"{where}: the value {value!r} reads back as {back!r}")
    if any(w in text for w in ctx.string_avoid):
        raise GrammarError(f"{where}: the value {value!r} holds a marker of the format (escape_markers=True)")
    return lit(text)


def _escape_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


__all__ = ["ANY_DEPTH", "any_value", "arguments", "block_grammar", "escape", "literal", "string_node", "value_node"]
