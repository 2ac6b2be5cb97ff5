"""Grammar pieces of the ``hermes`` format.

One block: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from toolgrammar.automata.lazy import schema_tail_key
from toolgrammar.automata.nodes import Node, dispatch, lit, seq
from toolgrammar.values.json_grammar import SchemaContext, arguments_node

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, str], markers: Markers) -> Node:
    """One block for any of ``tools`` (or only ``options.tool_choice`` when it names a tool).

    ``block`` is the ``[block]`` table of ``format.toml`` (this folder).

    Canonical spelling: ``{"name": "NAME", "arguments": ARGS}`` with the chat template's separators,
    newline after the opener and before the closer. ``escape_markers`` keeps the closing marker out of
    every string value (the model must write ``<\\/tool_call>``), so regex-based downstream parsers
    such as vLLM's ``hermes`` never cut a value short.
    """
    ws = options.json_whitespace()
    avoid = (markers.block_close,) if options.escape_markers else ()
    wrap_ws = ws.ws()
    before_args = seq(ws.item_sep(), lit(json.dumps(block["arguments_key"])), ws.key_sep())
    after_args = seq(wrap_ws, lit("}"))
    branches = []
    for tool in options.selected_tools(tools):
        ctx = SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name)
        args = arguments_node(tool, ctx)
        # The name decides the rest: the engine compiles a tool's arguments when a call reaches them,
        # once per distinct schema and options (``tail_key``), whatever list the tool comes in.
        tail = seq(before_args, args, after_args)
        branches.append((json.dumps(tool.name, ensure_ascii=False), tail, tail_key("hermes", options, tool)))
    call = seq(lit("{"), wrap_ws, lit(json.dumps(block["name_key"])), ws.key_sep(), dispatch(branches))
    return seq(lit(block["open"]), call, lit(block["close"]))


def tail_key(fmt: str, options: GrammarOptions, tool: Tool) -> str:
    """What a tool's tail depends on: the format, the options that shape JSON values, the arguments schema."""
    return schema_tail_key([fmt, options.whitespace, options.max_whitespace, options.escape_markers], tool.schema_json)
