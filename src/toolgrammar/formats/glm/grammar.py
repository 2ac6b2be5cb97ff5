"""Grammar pieces of the ``glm`` format: one block, exactly as one variant's chat template writes it.

::

    <tool_call>NAME{after_name}
    <arg_key>KEY</arg_key>{after_key}<arg_value>VALUE</arg_value>{after_value}     one per argument:
    ...                                                                          declared order, required
    </tool_call>                                                                 ones present

with the variant's spelling (:class:`Spelling`, from ``format.toml``): ``""`` everywhere for
GLM-4.7/5.x, ``"\\n"`` everywhere for GLM-4.5/4.6.

``VALUE`` by the parameter's schema (:func:`toolgrammar.formats.raw_values.raw_value_node`, the
writer that matches qwen-xml's ``convert_value``): a string as raw text, anything else as JSON
(``tojson``: default separators, ``ensure_ascii=False``), booleans ``true``/``false`` and ``null``
as JSON (the GLM templates never write Python literals). No value contains ``</arg_value>``, where
the parser ends a value; ``</arg_value>`` cannot straddle the end of a value either (it has no
border: its only ``<`` is its first character), so the parser's value is exactly the generated
one. ``escape_markers=True`` also keeps every tag (:data:`MARKUP`) out of string values, for
downstream parsers that split on them with regular expressions.

The name decides the rest: a :func:`~toolgrammar.automata.nodes.dispatch` whose keys are
``NAME{after_name}<`` (prefix-free: names hold no ``<``), so the engine compiles a tool's arguments
only when a call reaches them. Every piece after the name starts with ``<`` (a tag), so each
argument is written with the ``<`` of the *next* tag at its end and the tail ends with
``/tool_call>``: the same bytes, cut where the dispatch needs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Members, Node, dispatch, lit, seq
from toolgrammar.errors import GrammarError
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.formats.raw_values import raw_value_node
from toolgrammar.values.json_grammar import SchemaContext, check_size

if TYPE_CHECKING:
    from toolgrammar.formats.glm.parser import Tags
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet


@dataclass(frozen=True)
class Spelling:
    """The whitespace one variant's chat template writes (``[variants.*]`` of ``format.toml``)."""

    variant: str
    after_name: str
    after_key: str
    after_value: str
    call_separator: str


def markup(markers: Markers, tags: Tags) -> tuple[str, ...]:
    """The format's tags, kept out of string values with ``escape_markers=True``."""
    return (markers.block_open, markers.block_close, tags.key_open, tags.key_close, tags.value_open, tags.value_close)


def block_grammar(tools: ToolSet, options: GrammarOptions, markers: Markers, tags: Tags, spelling: Spelling) -> Node:
    """One block for any of ``tools`` (or only ``options.tool_choice`` when it names a tool)."""
    avoid = (tags.value_close, *(markup(markers, tags) if options.escape_markers else ()))
    avoid = tuple(dict.fromkeys(avoid))
    ws = options.json_whitespace()
    open_, close = markers.block_open, markers.block_close
    if not close.startswith("<") or not all(t.startswith("<") for t in (tags.key_open, tags.value_open)):
        raise GrammarError("the glm block grammar needs tags that start with '<'")
    branches = []
    for tool in options.selected_tools(tools):
        ctx = SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name)
        props: dict[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", ()))
        members = []
        for key, schema in props.items():
            value = raw_value_node(schema, ctx, avoid, f"/properties/{key}", format_name="glm")
            head = f"{tags.key_open[1:]}{key}{tags.key_close}{spelling.after_key}{tags.value_open}"
            members.append((seq(lit(head), value, lit(f"{tags.value_close}{spelling.after_value}<")), key in required))
        body = Members(tuple(members), lit("")) if members else lit("")
        tail = check_size(seq(body, lit(close[1:])), tool.parameters, ctx, "")
        cache = tail_key(f"glm/{json.dumps([spelling.after_key, spelling.after_value])}", options, tool)
        branches.append((f"{tool.name}{spelling.after_name}<", tail, cache))
    if not branches:
        raise GrammarError("the glm block grammar needs at least one tool")
    return seq(lit(open_), dispatch(branches))


__all__ = ["Spelling", "block_grammar", "markup"]
