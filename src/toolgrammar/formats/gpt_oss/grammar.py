"""Grammar pieces of the ``gpt-oss`` format: one call message, from the recipient to its arguments.

::

    " to=functions." NAME "<|channel|>commentary" CT "<|message|>" ARGS     recipient in the role header
    " to=functions." NAME CT' "<|message|>" ARGS                            the rest of a header whose
                                                                            "<|channel|>commentary" came first

``CT`` is one of ``format.toml``'s content types (`` <|constrain|>json`` first, the canonical one);
``CT'`` is a non-empty one starting with a space, or ``<|constrain|>json`` / nothing after ``<|``.
``ARGS`` is the tool's arguments as JSON (:func:`toolgrammar.values.json_grammar.arguments_node`, the chat
template's ``json.dumps`` spelling by default). The stop token ``<|call|>`` that ends the call is the
end of the turn, not part of the block. The turn around it (the turn layer's policy): the analysis
message as reasoning (``<|channel|>analysis<|message|>`` ... ``<|end|><|start|>assistant``), then free
text that avoids `` to=`` (the ``final`` or ``commentary`` messages, headers included: the parser drops
headers without a recipient), then the call.

The name is keyed with the character after it (``<`` or a space: names hold neither,
``GptOssFormat.check_tools``), so the dispatch keys are prefix-free even when one name is a prefix of
another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Node, alt, dispatch, lit, seq
from toolgrammar.formats.hermes.grammar import tail_key as json_tail_key
from toolgrammar.values.json_grammar import SchemaContext, arguments_node

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any], markers: Markers) -> Node:
    """One call message for any of ``tools`` (or only ``options.tool_choice`` when it names a tool)."""
    ws = options.json_whitespace()
    avoid = tuple(block["message_ends"]) if options.escape_markers else ()
    types: list[str] = list(block["content_types"])
    role_first = seq(lit(CHANNEL[1:] + block["channel"]), alt(*(lit(t) for t in types)), lit(MESSAGE))
    after_lt = alt(role_first, *(lit(t[1:] + MESSAGE) for t in types if t.startswith("<")), lit(MESSAGE[1:]))
    after_space = alt(*(lit(t[1:] + MESSAGE) for t in types if t.startswith(" ")))
    branches = []
    for tool in options.selected_tools(tools):
        ctx = SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name)
        args = arguments_node(tool, ctx)
        for first, rest in (("<", after_lt), (" ", after_space)):
            tail = seq(rest, args)
            branches.append((tool.name + first, tail, tail_key(first, options, tool)))
    return seq(lit(markers.block_open), dispatch(branches))


def tail_key(first: str, options: GrammarOptions, tool: Tool) -> str:
    """What a tool's tail depends on: the format, the header branch, the JSON options, the arguments schema."""
    return json_tail_key(f"gpt-oss/{first}", options, tool)


__all__ = ["block_grammar", "tail_key"]
