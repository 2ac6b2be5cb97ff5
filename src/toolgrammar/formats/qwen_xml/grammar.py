"""Grammar pieces of the ``qwen-xml`` format: one block, exactly as the chat template writes it.

::

    <tool_call>\\n<function=NAME>\\n
    <parameter=KEY>\\nVALUE\\n</parameter>\\n      one per argument: declared order, required ones
    ...                                         present, optional ones skippable
    </function>\\n</tool_call>

``VALUE`` by the parameter's schema, always something :func:`.parser.convert_value` reads back as a
schema-valid value:

- ``string``: raw text (with ``pattern``, ``format``, ``minLength``/``maxLength``: the decoded
  string those keywords allow, written as it is), any characters, such that ``"\\n" + VALUE`` contains none of
  :data:`.parser.VALUE_FORBIDDEN` (so the parser's value end is exactly the ``\\n</parameter>``
  that follows). Markers elsewhere in the text are fine: ``</tool_call>``, ``<tool_call>``, an
  inline ``</parameter>`` all survive.
- ``integer``: a JSON integer (any length: the parser keeps it exact). ``number``: a JSON integer,
  or a JSON number with a fraction or exponent whose magnitude stays finite (:func:`finite_number`:
  exponents up to +299). With bounds, the numbers :mod:`toolgrammar.schema.bounds` allows.
- ``boolean``: ``true``/``false``, and the ``True``/``False`` the Qwen3-Coder-30B and Qwen3.5
  templates write. ``null``: ``null``, and the templates' ``None``.
- ``object`` / ``array``: canonical JSON from :mod:`toolgrammar.values.json_grammar` (its strings also
  avoid the forbidden strings; JSON text holds no raw newline, so the rest cannot occur).
- ``enum`` / ``const``: each value as the template writes it (a string raw, the rest as JSON);
  ``anyOf`` and type lists: the union of the branches.

``escape_markers=True`` additionally keeps every tag of the format (:data:`MARKUP`) out of string
values, for downstream parsers that split on them with regular expressions.

The turn around the blocks is the turn layer's; this format's parser needs two more
things from it, named here: reasoning ends at the first ``<tool_call>`` too
(``QwenXmlFormat.think_avoid``), and a line of free text that starts with ``<function=`` is read as
a block whose opener was forgotten (``QwenXmlFormat.free_text_avoid`` and
``free_text_not_prefixed``).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Members, Node, alt, avoiding, dispatch, group, lit, seq, star, utf8_char
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.formats.qwen_xml.parser import (
    FUNCTION_CLOSE,
    FUNCTION_OPEN,
    PARAMETER_CLOSE,
    PARAMETER_OPEN,
    VALUE_FORBIDDEN,
    convert_value,
)
from toolgrammar.formats.qwen_xml.render import render_value
from toolgrammar.schema import StringSchemaError, string_language
from toolgrammar.values.json_grammar import (
    MAX_FLOAT_INT_DIGITS,
    MAX_SHORT_INT_DIGITS,
    SchemaContext,
    check_size,
    finite_number,
    integer_value,
    number_value,
    schema_node,
)
from toolgrammar.values.strings import constrained_text

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet

MARKUP: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    FUNCTION_OPEN,
    FUNCTION_CLOSE,
    PARAMETER_OPEN,
    PARAMETER_CLOSE,
)
"""The format's tags, kept out of string values with ``escape_markers=True``."""


_JSON_STRING_AVOID = tuple(w for w in VALUE_FORBIDDEN if not w.startswith("\n"))
"""The forbidden strings a JSON value can contain at all (inside its strings: they hold no raw newline)."""


def block_grammar(tools: ToolSet, options: GrammarOptions, markers: Markers) -> Node:
    """One block for any of ``tools`` (or only ``options.tool_choice`` when it names a tool)."""
    markup = (markers.block_open, markers.block_close, *MARKUP[2:]) if options.escape_markers else ()
    string_avoid = VALUE_FORBIDDEN + markup
    ctx = SchemaContext(ws=options.json_whitespace(), string_avoid=_JSON_STRING_AVOID + markup)
    close = lit(f"{FUNCTION_CLOSE}\n{markers.block_close}")
    branches = []
    for tool in options.selected_tools(tools):
        ctx_tool = SchemaContext(ws=ctx.ws, string_avoid=ctx.string_avoid, tool=tool.name)
        props: dict[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", ()))
        members = []
        for key, schema in props.items():
            value = value_node(schema, ctx_tool, string_avoid, f"/properties/{key}")
            members.append((seq(lit(f"{PARAMETER_OPEN}{key}>"), value, lit(f"\n{PARAMETER_CLOSE}\n")), key in required))
        body = check_size(Members(tuple(members), lit("")) if members else lit(""), tool.parameters, ctx_tool, "")
        # The name decides the rest, closing tags included (a parameter and the closer both open with "<",
        # so the tail must end where the block does): compiled when a call reaches it, once per schema.
        # Its key is the JSON formats' (format, JSON whitespace, escaped markers, schema): the same inputs shape it.
        branches.append((f"{tool.name}>\n", seq(body, close), tail_key("qwen-xml", options, tool)))
    if not branches:
        raise GrammarError("the qwen-xml block grammar needs at least one tool")
    return seq(lit(f"{markers.block_open}\n{FUNCTION_OPEN}"), dispatch(branches))


@lru_cache(maxsize=64)
def text_value(avoid: tuple[str, ...]) -> Node:
    """``"\\n"`` + raw text such that the two together contain none of ``avoid``.

    One node per ``avoid``, shared by every string parameter of every tool (its size estimate and guarded
    automaton are then computed once, not once per parameter).

    Its regex (:func:`~toolgrammar.automata.regex.to_regex`) is a tempered token that tests every start
    position, the leading newline's included; the lookahead may see past the value, which changes
    nothing here because no forbidden string can straddle a value and the ``\\n</parameter>`` after it.
    """
    guard = "|".join(re.escape(w) for w in avoid)
    regex = rf"(?!{guard})\n(?:(?!{guard})[\s\S])*"
    return group(avoiding(seq(lit("\n"), star(utf8_char())), *avoid), regex=regex)


def value_node(schema: dict[str, Any], ctx: SchemaContext, string_avoid: tuple[str, ...], pointer: str) -> Node:
    """``"\\n"`` + VALUE for one parameter (see the module docstring)."""
    if not schema:
        return text_value(string_avoid)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return alt(*(_literal(v, schema, ctx, string_avoid, pointer) for v in values))
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        return alt(
            *(
                value_node({**base, **sub}, ctx, string_avoid, f"{pointer}/anyOf/{i}")
                for i, sub in enumerate(schema["anyOf"])
            )
        )
    types = schema.get("type")
    if types is None:
        return text_value(string_avoid)
    nodes = [_typed(schema, t, ctx, string_avoid, pointer) for t in ([types] if isinstance(types, str) else types)]
    return alt(*nodes)


def _typed(schema: dict[str, Any], type_: str, ctx: SchemaContext, string_avoid: tuple[str, ...], pointer: str) -> Node:
    if type_ == "string":
        try:
            rx = string_language(schema)
        except StringSchemaError as error:  # the normalizer refuses these first
            raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
        if rx is None:
            return text_value(string_avoid)
        # The raw text is the decoded string itself: the pattern, format and length apply to it as written.
        return constrained_text(rx, "raw", string_avoid, lead="\n")
    if type_ == "integer":
        return seq(lit("\n"), integer_value(schema, ctx, pointer))
    if type_ == "number":
        return seq(lit("\n"), number_value(schema, ctx, pointer))
    if type_ == "boolean":
        return seq(lit("\n"), alt(lit("true"), lit("false"), lit("True"), lit("False")))
    if type_ == "null":
        return seq(lit("\n"), alt(lit("null"), lit("None")))
    if type_ in ("object", "array"):
        return seq(lit("\n"), schema_node({**schema, "type": type_}, ctx, pointer))
    raise GrammarError(f"tool {ctx.tool!r}: unknown type {type_!r} at {pointer}")


def _literal(
    value: Any, schema: dict[str, Any], ctx: SchemaContext, string_avoid: tuple[str, ...], pointer: str
) -> Node:
    """One enum/const value as the template writes it; refused when it would not read back as itself."""
    text = render_value(value)
    back = convert_value(text, schema)
    same = json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True) and type(back) is type(value)
    carried = not any(w in "\n" + text for w in string_avoid)
    if not (same and carried):
        why = f"it reads back as {back!r}" if not same else "its text would end the value early (or holds a tag)"
        raise GrammarError(
            f"tool {ctx.tool!r}, at {pointer}: the enum/const value {value!r} cannot be written as a qwen-xml "
            f"parameter: {why}"
        )
    return lit("\n" + text)


__all__ = [
    "MARKUP",
    "MAX_FLOAT_INT_DIGITS",
    "MAX_SHORT_INT_DIGITS",
    "block_grammar",
    "finite_number",
    "text_value",
    "value_node",
]
