"""Grammar pieces of the ``kimi`` (K2) format: one section holding one call, or several under
``parallel_tool_calls``, each ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>``
with ARGS the canonical JSON object of the tool's schema (:func:`~toolgrammar.json_grammar.object_node`).

IDX is any decimal index without leading zeros (the template counts the conversation's calls from 0;
a regular grammar cannot count, and the parser ignores it). Every section can close after any complete
call, so the token budget can always end a started block.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from ...automaton import Node, alt, chars, dispatch, lit, repeat, seq, star
from ...errors import GrammarError
from ...json_grammar import SchemaContext, object_node
from .parser import k2_markup

if TYPE_CHECKING:
    from ...grammar import GrammarOptions
    from ...tools import ToolSet
    from ..base import Markers

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
        args = object_node(tool.parameters, SchemaContext(ws=ws, string_avoid=avoid, tool=tool.name))
        tail = seq(index_node(), lit(m.argument_open), args, lit(m.call_close))
        branches.append((tool.name + m.id_sep, tail, _tail_key(options, tool.parameters)))
    call = seq(lit(m.call_open + m.id_prefix), dispatch(branches))
    calls = seq(call, star(call)) if options.parallel_tool_calls else call
    return seq(lit(markers.block_open), calls, lit(markers.block_close))


def _tail_key(options: GrammarOptions, parameters: object) -> str:
    shape = [options.whitespace, options.max_whitespace, options.escape_markers]
    text = json.dumps(["kimi", shape, parameters], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


__all__ = ["MAX_INDEX_DIGITS", "block_grammar", "index_node"]
