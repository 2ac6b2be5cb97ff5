"""Grammar pieces of the DeepSeek formats: one section (the block) holding one call, or several under
``parallel_tool_calls``, exactly as :mod:`.render` writes them (canonical spelling only).

- V3: ``function<｜tool▁sep｜>NAME\\n```json\\n`` + the arguments object
  (:func:`~toolgrammar.values.json_grammar.arguments_node`, the template's separators) +
  ``\\n```<｜tool▁call▁end｜>``; calls joined by ``\\n``.
- V3.1: ``NAME<｜tool▁sep｜>`` + the arguments object + ``<｜tool▁call▁end｜>``; calls back to back.
- DSML (V3.2, V4, V4.1): ``<P invoke name="NAME">\\n``, the parameters in declared order (required ones
  present, optional ones skippable) joined by ``\\n``, then ``\\n</P invoke>``; calls joined by ``\\n``,
  the section's markers on their own lines. A parameter's value by its schema: a string branch is
  ``string="true">`` + raw text (its ``pattern``/``format``/length as written) that never contains
  ``</P parameter>``; any other type is ``string="false">`` + canonical JSON of that type; ``enum`` /
  ``const`` values as the encoder writes them; ``anyOf`` and type lists are the union of their branches.

The parser (:mod:`.parser`) reads every one of these back as the same call; what it accepts beyond them
(whitespace between markers, V3.1 calls in a V3 section, a self-closing ``invoke``) the grammar never writes.
Every section can close: each call is finite and the section closer may follow any complete call, so
the token budget can always end a started block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Members, Node, alt, avoiding, dispatch, lit, seq, star, utf8_char
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats.deepseek.render import dumps
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.schema import StringSchemaError, string_language
from toolgrammar.values.json_grammar import SchemaContext, arguments_node, check_size, schema_node
from toolgrammar.values.strings import constrained_text

if TYPE_CHECKING:
    from toolgrammar.formats.deepseek.shape import Variant
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet


def block_grammar(tools: ToolSet, options: GrammarOptions, v: Variant) -> Node:
    """The section: one call for any of ``tools`` (only ``options.tool_choice`` when it names one), or
    several joined by the variant's separator when ``options.parallel_tool_calls``."""
    selected = options.selected_tools(tools)
    if not selected:
        raise GrammarError("the deepseek block grammar needs at least one tool")
    branches = [
        (_name_key(v, t.name), _tail(v, t, options), tail_key(f"deepseek-{v.key}", options, t)) for t in selected
    ]
    call = seq(lit(v.call_open + (v.call_type + v.tool_sep if v.kind == "v3" else "")), dispatch(branches))
    calls = seq(call, star(seq(lit(v.call_separator), call))) if options.parallel_tool_calls else call
    if v.dsml:
        return seq(lit(v.section_open + "\n"), calls, lit("\n" + v.section_close))
    return seq(lit(v.section_open), calls, lit(v.section_close))


def _name_key(v: Variant, name: str) -> str:
    """What follows the call opener up to the arguments: the name and the markup that ends it (prefix-free)."""
    if v.kind == "v3":
        return name + v.fence_open
    if v.kind == "v31":
        return name + v.tool_sep
    return name + '">\n'


def _tail(v: Variant, tool: Tool, options: GrammarOptions) -> Node:
    ws = options.json_whitespace()
    if not v.dsml:
        avoid = (v.call_close,) if options.escape_markers else ()
        args = arguments_node(tool, SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name))
        return seq(args, lit(v.fence_close + v.call_close if v.kind == "v3" else v.call_close))
    markup = (
        (v.section_open, v.section_close, v.call_open, v.call_close, v.param_open) if options.escape_markers else ()
    )
    text_avoid = (v.param_close, *markup)
    # JSON strings too: the parser ends a value at the first closing tag, wherever it stands.
    ctx = SchemaContext(ws=ws, string_avoid=text_avoid, tool=tool.name)
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", ()))
    members = []
    for key, schema in props.items():
        value = value_node(schema, ctx, text_avoid, v, f"/properties/{key}")
        members.append((seq(lit(f"{v.param_open}{key}"), value, lit(v.param_close)), key in required))
    body = Members(tuple(members), lit("\n")) if members else lit("")
    return check_size(seq(body, lit("\n" + v.call_close)), tool.parameters, ctx, "")


STRING = '" string="true">'
JSON = '" string="false">'


def text_value(avoid: tuple[str, ...]) -> Node:
    """Raw text containing none of ``avoid``."""
    return avoiding(star(utf8_char()), *avoid)


def value_node(schema: dict[str, Any], ctx: SchemaContext, avoid: tuple[str, ...], v: Variant, pointer: str) -> Node:
    """``" string="..."`` + VALUE for one DSML parameter (see the module docstring)."""
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return alt(*(_literal(value, avoid, ctx, pointer) for value in values))
    if "anyOf" in schema:
        base = {k: val for k, val in schema.items() if k != "anyOf"}
        return alt(
            *(
                value_node({**base, **sub}, ctx, avoid, v, f"{pointer}/anyOf/{i}")
                for i, sub in enumerate(schema["anyOf"])
            )
        )
    types = schema.get("type")
    if types is None:  # any value: a string raw, anything else as JSON
        return alt(seq(lit(STRING), text_value(avoid)), seq(lit(JSON), schema_node(schema, ctx, pointer)))
    nodes = []
    for t in [types] if isinstance(types, str) else types:
        if t == "string":
            nodes.append(seq(lit(STRING), _string(schema, ctx, avoid, pointer)))
        else:
            nodes.append(seq(lit(JSON), schema_node({**schema, "type": t}, ctx, pointer)))
    return alt(*nodes)


def _string(schema: dict[str, Any], ctx: SchemaContext, avoid: tuple[str, ...], pointer: str) -> Node:
    try:
        rx = string_language(schema)
    except StringSchemaError as error:  # the normalizer refuses these first
        raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
    if rx is None:
        return text_value(avoid)
    return constrained_text(rx, "raw", avoid)


def _literal(value: Any, avoid: tuple[str, ...], ctx: SchemaContext, pointer: str) -> Node:
    if isinstance(value, str):
        if any(w in value for w in avoid):
            raise GrammarError(
                f"tool {ctx.tool!r}, at {pointer}: the enum/const value {value!r} cannot be written as a DSML "
                "parameter: it holds the parameter's closing tag"
            )
        return lit(STRING + value)
    return lit(JSON + dumps(value))


__all__ = ["block_grammar", "text_value", "value_node"]
