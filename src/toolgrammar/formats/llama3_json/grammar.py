"""Grammar pieces of the ``llama3-json`` format.

One call: ``{"name": "NAME", "parameters": ARGS}`` as the chat template renders it, either bare or after
``<|python_tag|>``. The object starts exactly with ``{"name"`` (the parser's bare opener) in every
whitespace mode; elsewhere JSON whitespace follows ``options.whitespace``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Node, alt, dispatch, lit, seq
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.values.json_grammar import SchemaContext, arguments_node

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet


def call_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any]) -> Node:
    """The JSON object of one call for any selected tool (the name decides the rest)."""
    ws = options.json_whitespace()
    branches = []
    key = block["arguments_keys"][0]
    for tool in options.selected_tools(tools):
        args = arguments_node(tool, SchemaContext(ws=ws, string_avoid=(), tool=tool.name))
        tail = seq(ws.item_sep(), lit(json.dumps(key)), ws.key_sep(), args, ws.ws(), lit("}"))
        branches.append((json.dumps(tool.name, ensure_ascii=False), tail, tail_key("llama3-json", options, tool)))
    return seq(lit(block["bare_open"]), ws.key_sep(), dispatch(branches))


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any], markers: Markers) -> Node:
    """One block: the call, bare (the template's spelling) or after ``<|python_tag|>``."""
    call = call_grammar(tools, options, block)
    return alt(call, seq(lit(markers.block_open), call))
