"""Tools + format + policy -> the grammar of a whole assistant turn.

The turn is: optional reasoning, free text, then tool-call blocks separated by the format's
separator, then the end of the turn::

    turn     := reasoning? content
    reasoning:= "<think>" THINK "</think>" | THINK "</think>"   (the latter when the prompt pre-opened it)
    content  := FREE (block (sep block)*)? END                  tool_choice="auto"
              | block (sep block)* END                          tool_choice="required" (call first)
              | FREE block (sep block)* END                     tool_choice="required", prose_first=True
              | block_of(NAME) END                              tool_choice=NAME
              | FREE END                                        tool_choice="none"

``required`` means what OpenAI and vLLM mean: the turn *is* the call(s), after the reasoning when
reasoning is on. ``prose_first=True`` keeps the earlier variant (free text, then at least one block,
which the token budget forces at the end when the model never opens one); measured on the bundled
tasks it chooses the expected tool far less often (README, "Which policy").

``FREE`` is any text (control tokens included) that does not contain the block opener; the
opener, whether written as its single added token or spelled in pieces, starts a block. ``THINK``
is any text without ``</think>``. Free regions are marked *safe*: a turn may be cut there by the
token budget without leaving a block open. The block itself comes from the format
(:meth:`~toolgrammar.formats.base.ToolCallFormat.block_grammar`). Where the separator is a newline
(``hermes``, ``qwen-xml``), one newline may also follow the last block before ``END``: the parser
reads no content in it, and a model that writes it meaning to stop is not held to another call.

This module imports no torch or transformers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.nodes import (
    ANY_TEXT_SYMBOL,
    END,
    Node,
    alt,
    avoiding,
    group,
    lit,
    not_prefixed,
    repeat,
    seq,
    star,
)
from toolgrammar.automata.portable_regex import to_portable_regex
from toolgrammar.automata.regex import to_regex
from toolgrammar.automata.size import lazy_repeats_in
from toolgrammar.automata.skeleton import Skeleton, compile_skeleton
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.options import GrammarOptions, options_from_kwargs
from toolgrammar.schema import Tool, ToolSet, load_tools
from toolgrammar.turn import policy

if TYPE_CHECKING:
    from toolgrammar.formats.base import ToolCallFormat
    from toolgrammar.schema import Tool


@dataclass(frozen=True, eq=False)
class TurnGrammar:
    """The compiled grammar of a turn: the expression tree, its DFA, and what it was built from."""

    tools: ToolSet
    options: GrammarOptions
    skeleton: Skeleton
    """The automaton without the tools' arguments: what the engine starts from (:mod:`toolgrammar.automata.lazy`)."""
    from_cache: bool = False
    """Whether the skeleton was read (from this process's memory, the package or the on-disk cache) rather
    than compiled by this call."""

    @cached_property
    def literals(self) -> tuple[str, ...]:
        """Literal strings of the grammar: markers, and each call rendered with no and with empty arguments
        (the engine takes the pieces it needs for its budget bound per tool, as tails are built)."""
        return _literals(self.tools, self.options, self.format)

    @property
    def format(self) -> ToolCallFormat:
        return get_format(self.options.format)

    @cached_property
    def node(self) -> Node:
        """The expression tree (rebuilt on demand when the automaton came from the cache)."""
        return turn_node(self.tools, self.options, self.format)

    @cached_property
    def dfa(self) -> DFA:
        """The whole automaton, every tool's arguments compiled (the engine builds only what a turn visits).

        Refused (:class:`~toolgrammar.errors.GrammarError`) when an array is built an item at a time
        (:data:`~toolgrammar.automata.size.LAZY_REPEAT_FROM`): built whole, it is what the size estimate exists to
        keep from compiling."""
        lazy = lazy_repeats_in(self.node)
        if lazy:
            raise GrammarError(
                f"the whole automaton of this grammar is not built: {len(lazy)} array(s) of its tools (up to "
                f"{max(r.hi or 0 for r in lazy) + 1} items) are built an item at a time, as a walk reaches them, "
                "and whole would be too large; use the engine (TokenGrammar, the logits processors), which builds "
                "only what a turn visits"
            )
        return compile_dfa(self.node)

    @cached_property
    def fingerprint(self) -> str:
        return grammar_key(self.tools, self.options)

    def to_regex(self, *, lookahead: bool = True) -> str:
        """The turn as a Python regular expression over its text (``$`` marks the end of the turn).

        Free text, reasoning and ``escape_markers`` strings are spelled with lookaheads, which
        DFA-based engines (outlines-core, xgrammar) refuse; ``lookahead=False`` spells the same
        language without any (longer; the end of the turn is the end of a full match), see
        :mod:`toolgrammar.automata.portable_regex`.
        """
        if not lookahead:
            return to_portable_regex(self.node)
        return to_regex(self.node)

    def forced_text(self) -> str:
        """The text every turn of this grammar starts with: the bytes it allows one at a time from the start.

        ``""`` under ``auto``; under call-first ``required`` (reasoning disabled) the opening of every
        block up to where the tools' names diverge (hermes: ``<tool_call>\\n{"name": "``). A harness
        that forces a call pre-fills exactly this; the side-by-side mode gives it to its free side.
        """
        t, accepting = self.dfa.transitions, self.dfa.accepting
        state, out = self.dfa.start, bytearray()
        while not accepting[state] and len(out) < 4096:
            allowed = np.flatnonzero(t[state] >= 0)
            if len(allowed) != 1 or allowed[0] > 0xFF:
                break
            out.append(int(allowed[0]))
            state = int(t[state, allowed[0]])
        while out:  # whole characters only
            try:
                return out.decode("utf-8")
            except UnicodeDecodeError:
                out.pop()
        return ""

    def block_regex(self, *, lookahead: bool = True) -> str:
        """One block as a regular expression (opener through closer), for engines that take a regex.

        ``lookahead=False``: the same language with no lookahead (see :meth:`to_regex`).
        """
        block = self.format.block_grammar(self.tools, self.options)
        if not lookahead:
            return to_portable_regex(block)
        return to_regex(block)


GRAMMAR_VERSION = "11"
"""Bumped whenever a change to the compiler changes what a grammar accepts or how its automaton is
numbered (it keys the disk cache, which holds automata and their per-state tables). 10: composed
automata (:mod:`toolgrammar.automata.compose`), minimal automata numbered breadth-first. 11: arrays spelled with
the separator before each further item, long ones built an item at a time
(:func:`toolgrammar.automata.holes.lazy_repeats`:
a skeleton may hold their holes)."""


def grammar_key(tools: ToolSet, options: GrammarOptions) -> str:
    h = hashlib.sha256()
    for part in (GRAMMAR_VERSION, tools.fingerprint, options.key):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_turn(tools: object, *, mode: str = "schema", cache: bool = True, **options: object) -> TurnGrammar:
    """Compile a tool list (anything :func:`~toolgrammar.schema.loading.load_tools` takes) into a turn grammar.

    The automaton is the turn's skeleton (:func:`~toolgrammar.automata.skeleton.compile_skeleton`), which depends on
    the format and options, not on the tool list: taken from this process's memory, the package's shipped
    skeletons or the on-disk cache where one was compiled before (see :mod:`toolgrammar.cache`;
    ``cache=False`` neither reads nor writes the disk). The tools' names and arguments join it as a turn
    reaches them (:mod:`toolgrammar.automata.lazy`).
    """
    opts = options_from_kwargs(**options)
    toolset = tools if isinstance(tools, ToolSet) else load_tools(tools, mode=mode)  # type: ignore[arg-type]
    fmt = get_format(opts.format)
    fmt.check_tools(toolset)
    node = turn_node(toolset, opts, fmt)
    skeleton = compile_skeleton(node, disk=cache)
    grammar = TurnGrammar(tools=toolset, options=opts, skeleton=skeleton, from_cache=not skeleton.compiled)
    grammar.__dict__["node"] = node  # already built: keep it
    return grammar


def turn_node(tools: ToolSet, options: GrammarOptions, fmt: ToolCallFormat) -> Node:
    """The expression tree of a whole turn (see the module docstring for its shape).

    The turn's shape is decided by :func:`~toolgrammar.turn.policy.turn_policy` (the one place the options
    and the format's markup are read); this lowers it to automaton nodes. The format says what its
    parser reads as markup in free text and in reasoning
    (:attr:`~toolgrammar.formats.base.ToolCallFormat.free_text_avoid` and friends), so the free
    regions exclude exactly what would change the parse.
    """
    return NodeLowering()(policy.turn_policy(tools, options, fmt).turn)


class NodeLowering(policy.Lowering[Node]):
    """A turn policy as automaton nodes. Free regions are safe groups; blocks are an unsafe group."""

    def free_text(self, part: policy.FreeText) -> Node:
        text = free_text_node(part)
        if part.wrapper is None:
            return text
        opener, closer = part.wrapper
        if not opener:  # the prompt opened the wrapper: the text, then its closer
            return seq(text, lit(closer))
        return alt(seq(lit(opener), text, lit(closer)), lit(""))  # an empty run may be left out

    def reasoning(self, part: policy.Reasoning) -> Node:
        think = group(avoiding(star(ANY_TEXT_SYMBOL), *part.avoid), safe=part.may_stop)
        endings = [seq(lit(part.closer), self(part.then))]
        if part.unclosed_then is not None:
            endings.append(self(part.unclosed_then))
        if part.may_stop:
            endings.append(END)
        body = seq(think, alt(*endings))
        return body if part.opener is None else seq(lit(part.opener), body)

    def blocks(self, part: policy.Blocks) -> Node:
        block = part.block
        blocks = seq(block, star(seq(lit(part.separator), block))) if part.parallel else block
        return group(blocks, safe=False)

    def sequence(self, part: policy.Sequence) -> Node:
        return seq(*(self(item) for item in part.items))

    def one_of(self, part: policy.OneOf) -> Node:
        return alt(*(self(item) for item in part.items))

    def newlines(self, part: policy.Newlines) -> Node:
        return repeat(lit("\n"), part.lo, part.hi)

    def end(self, part: policy.End) -> Node:
        return END if part.before is None else seq(alt(lit(part.before), lit("")), END)

    def not_starting_with(self, part: policy.NotStartingWith) -> Node:
        return not_prefixed(self(part.item), part.word)


def free_text_node(part: policy.FreeText) -> Node:
    """The text of a :class:`~toolgrammar.turn.policy.FreeText`, without its wrapper: a group, safe as the part is."""
    text: Node = avoiding(star(ANY_TEXT_SYMBOL), *part.avoid)
    if part.not_prefixed:
        text = not_prefixed(text, part.not_prefixed)
    return group(text, safe=part.safe)


def _literals(tools: ToolSet, options: GrammarOptions, fmt: ToolCallFormat) -> tuple[str, ...]:
    """The literal skeleton of the grammar: markers, and each call rendered with no and with empty arguments."""
    m = fmt.markers
    out = {m.block_open, m.block_close, m.think_open, m.think_close, m.call_separator}
    for tool in options.selected_tools(tools) if options.tool_choice != "none" else []:
        out.update(tool_literals(tool, fmt))
    return tuple(sorted(out))


def tool_literals(tool: Tool, fmt: ToolCallFormat) -> tuple[str, ...]:
    """One tool's call rendered with no and with empty arguments, its name and its keys: the pieces
    whose tokens the budget bound walks (a tokenizer spells them with tokens that cross their joins)."""
    keys = list(tool.parameters.get("properties", {}))
    return (fmt.render_call(tool, {}), fmt.render_call(tool, dict.fromkeys(keys, "")), tool.name, *keys)


__all__ = [
    "GrammarOptions",
    "TurnGrammar",
    "compile_turn",
    "options_from_kwargs",
    "turn_node",
]
