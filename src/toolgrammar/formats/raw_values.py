"""Raw-text argument values typed by the tool schema: the grammar side, shared by the XML-ish formats.

Formats such as ``glm`` write each argument's value between two tags as *raw text*: a string as it
is, anything else as JSON (the chat templates' ``v | tojson if v is not string else v``). The tool
schema says how to read a value back: :func:`toolgrammar.formats.qwen_xml.parser.convert_value`
(the one reader, imported by every such format). This module is the matching writer: the grammar of
one value, built from the same shared pieces (:mod:`toolgrammar.values.strings` for constrained raw
strings, :mod:`toolgrammar.values.json_grammar` for numbers, objects and arrays), such that every text it
allows reads back through ``convert_value`` as a schema-valid value.

``lead`` is markup written right before the value that the value's own guard must see (qwen-xml's
``"\\n"`` after ``<parameter=KEY>``); ``avoid`` lists the raw substrings the value may not contain
(the format's value terminator, and with ``escape_markers`` every tag). JSON values (objects and
arrays) keep ``ctx.string_avoid`` out of their strings, which is where such a substring could occur.

``booleans`` and ``nulls`` are the spellings a template writes for ``true``/``false`` and ``null``
(JSON by default; qwen-xml's Coder templates also write Python's ``True``/``False``/``None``).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Node, alt, avoiding, group, lit, seq, star, utf8_char
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats.qwen_xml.parser import convert_value
from toolgrammar.formats.qwen_xml.render import render_value
from toolgrammar.schema import StringSchemaError, string_language
from toolgrammar.values.json_grammar import SchemaContext, integer_value, number_value, schema_node
from toolgrammar.values.strings import constrained_text

if TYPE_CHECKING:
    from collections.abc import Sequence


def raw_text(avoid: Sequence[str], lead: str = "") -> Node:
    """``lead`` + any text, such that the two together contain none of ``avoid``.

    Its regex (:func:`~toolgrammar.automata.regex.to_regex`) is a tempered token that tests every start
    position, the lead's included.
    """
    words = tuple(avoid)
    body = seq(lit(lead), star(utf8_char())) if lead else star(utf8_char())
    if not words:
        return body
    guard = "|".join(re.escape(w) for w in words)
    head = "".join(f"(?!{guard}){re.escape(c)}" for c in lead)
    return group(avoiding(body, *words), regex=rf"{head}(?:(?!{guard})[\s\S])*")


def raw_value_node(
    schema: dict[str, Any],
    ctx: SchemaContext,
    avoid: tuple[str, ...],
    pointer: str,
    *,
    lead: str = "",
    booleans: tuple[str, ...] = ("true", "false"),
    nulls: tuple[str, ...] = ("null",),
    format_name: str = "this format",
) -> Node:
    """``lead`` + one value for a parameter whose (normalized) schema is ``schema`` (module docstring).

    ``string``: raw text (with ``pattern``/``format``/length keywords: the strings they allow, as
    written); ``integer``/``number``: JSON numbers within the bounds; ``boolean``/``null``: the
    ``booleans``/``nulls`` spellings; ``object``/``array``: JSON from the schema; ``enum``/``const``:
    each value as the template writes it (refused when it would not read back as itself); ``anyOf``
    and type lists: the union; no type: any raw text.
    """
    if not schema:
        return raw_text(avoid, lead)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return alt(*(_literal(v, schema, ctx, avoid, pointer, lead, format_name) for v in values))
    if "anyOf" in schema:
        base = {k: v for k, v in schema.items() if k != "anyOf"}
        return alt(
            *(
                raw_value_node(
                    {**base, **sub},
                    ctx,
                    avoid,
                    f"{pointer}/anyOf/{i}",
                    lead=lead,
                    booleans=booleans,
                    nulls=nulls,
                    format_name=format_name,
                )
                for i, sub in enumerate(schema["anyOf"])
            )
        )
    types = schema.get("type")
    if types is None:
        return raw_text(avoid, lead)
    return alt(
        *(
            _typed(schema, t, ctx, avoid, pointer, lead, booleans, nulls)
            for t in ([types] if isinstance(types, str) else types)
        )
    )


def _typed(
    schema: dict[str, Any],
    type_: str,
    ctx: SchemaContext,
    avoid: tuple[str, ...],
    pointer: str,
    lead: str,
    booleans: tuple[str, ...],
    nulls: tuple[str, ...],
) -> Node:
    if type_ == "string":
        try:
            rx = string_language(schema)
        except StringSchemaError as error:  # the normalizer refuses these first
            raise ToolSchemaError(str(error), tool=ctx.tool or None, pointer=pointer, keyword=error.keyword) from None
        if rx is None:
            return raw_text(avoid, lead)
        # The raw text is the decoded string itself: the pattern, format and length apply to it as written.
        return constrained_text(rx, "raw", avoid, lead=lead)
    if type_ == "integer":
        return seq(lit(lead), integer_value(schema, ctx, pointer))
    if type_ == "number":
        return seq(lit(lead), number_value(schema, ctx, pointer))
    if type_ == "boolean":
        return seq(lit(lead), alt(*(lit(b) for b in booleans)))
    if type_ == "null":
        return seq(lit(lead), alt(*(lit(n) for n in nulls)))
    if type_ in ("object", "array"):
        return seq(lit(lead), schema_node({**schema, "type": type_}, ctx, pointer))
    raise GrammarError(f"tool {ctx.tool!r}: unknown type {type_!r} at {pointer}")


def _literal(
    value: Any,
    schema: dict[str, Any],
    ctx: SchemaContext,
    avoid: tuple[str, ...],
    pointer: str,
    lead: str,
    format_name: str,
) -> Node:
    """One enum/const value as the template writes it; refused when it would not read back as itself."""
    text = render_value(value)
    back = convert_value(text, schema)
    same = json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True) and type(back) is type(value)
    carried = not any(w in lead + text for w in avoid)
    if not (same and carried):
        why = f"it reads back as {back!r}" if not same else "its text would end the value early (or holds a tag)"
        raise GrammarError(
            f"tool {ctx.tool!r}, at {pointer}: the enum/const value {value!r} cannot be written as a {format_name} "
            f"argument: {why}"
        )
    return lit(lead + text)


__all__ = ["raw_text", "raw_value_node"]
