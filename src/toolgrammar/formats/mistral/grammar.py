"""Grammar pieces of the Mistral formats.

``args`` shape: ``[TOOL_CALLS]NAME[ARGS]{...}``, one call per block, blocks back to back. ``array`` shape
(v3): ``[TOOL_CALLS] [{"name": "NAME", "arguments": {...}}, ...]``, every call of the turn in one block.
JSON as mistral-common writes it (``json.dumps`` default separators, ``ensure_ascii=False``) by default.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Node, dispatch, lit, seq, star
from toolgrammar.formats.hermes.grammar import tail_key
from toolgrammar.values.json_grammar import SchemaContext, arguments_node

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any], markers: Markers) -> Node:
    ws = options.json_whitespace()
    fmt = "mistral-" + block["shape"]
    branches = []
    for tool in options.selected_tools(tools):
        args = arguments_node(tool, SchemaContext(ws=ws, string_avoid=(), tool=tool.name))
        if block["shape"] == "args":
            # The key ends at [ARGS], so that no name is a prefix of another's key.
            branches.append((tool.name + block["args"], args, tail_key(fmt, options, tool)))
        else:
            tail = seq(ws.item_sep(), lit(json.dumps(block["arguments_key"])), ws.key_sep(), args, ws.ws(), lit("}"))
            branches.append((json.dumps(tool.name, ensure_ascii=False), tail, tail_key(fmt, options, tool)))
    if block["shape"] == "args":
        return seq(lit(markers.block_open), dispatch(branches))
    call = seq(lit("{"), ws.ws(), lit(json.dumps(block["name_key"])), ws.key_sep(), dispatch(branches))
    calls = seq(call, star(seq(ws.item_sep(), call))) if options.parallel_tool_calls else call
    return seq(lit(markers.block_open + block["array_open"]), ws.ws(), calls, ws.ws(), lit(block["array_close"]))
