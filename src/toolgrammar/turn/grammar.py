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
import json
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from toolgrammar.automata.automaton import (
    ANY_TEXT_SYMBOL,
    DEAD,
    DFA,
    END,
    N_SYMBOLS,
    Node,
    Skeleton,
    alt,
    avoiding,
    compile_dfa,
    compile_skeleton,
    group,
    lazy_repeats_in,
    lit,
    not_prefixed,
    repeat,
    seq,
    star,
    to_regex,
)
from toolgrammar.automata.portable_regex import to_portable_regex
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.schema.tools import Tool, ToolSet, load_tools
from toolgrammar.turn import policy
from toolgrammar.values.json_grammar import Whitespace

if TYPE_CHECKING:
    from toolgrammar.formats.base import ToolCallFormat
    from toolgrammar.schema.tools import Tool

Reasoning = Literal["enabled", "disabled", "prefilled"]
"""``enabled``: the turn may open with ``<think>``. ``disabled``: no reasoning part.
``prefilled``: the generation prompt already opened ``<think>``; the turn starts inside it."""

WhitespaceMode = Literal["canonical", "flexible"]
AfterCalls = Literal["end", "text"]


@dataclass(frozen=True)
class GrammarOptions:
    """Every option of the grammar, with the same keyword names in every entry point."""

    format: str = "hermes"
    """Tool-call format: ``hermes`` or ``qwen-xml`` (or ``package.module:Class``)."""
    tool_choice: str = "auto"
    """``auto`` | ``required`` (no end of turn before a call) | ``none`` (no call) | a tool name (that call, now)."""
    parallel_tool_calls: bool = True
    """Whether more than one block may follow."""
    reasoning: Reasoning = "enabled"
    """See :data:`Reasoning`."""
    whitespace: WhitespaceMode = "canonical"
    """``canonical``: the chat template's ``json.dumps`` spelling. ``flexible``: bounded extra whitespace."""
    max_whitespace: int = 2
    """With ``whitespace="flexible"``: most whitespace characters at any one JSON whitespace position."""
    escape_markers: bool = False
    """Forbid the raw closing marker inside string values (the model must write ``<\\/tool_call>``)."""
    after_calls: AfterCalls = "end"
    """What may follow the last block: ``end`` of turn, or free ``text`` (which cannot open another block)."""
    prose_first: bool = False
    """With ``tool_choice="required"`` only: free text may come before the first block (the budget forces
    the block at the end if the model never opens one). Default: the turn opens with the call."""

    def __post_init__(self) -> None:
        # Types first: a string "no" is truthy, so parallel_tool_calls="no" would silently mean True.
        for name in ("parallel_tool_calls", "escape_markers"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise GrammarError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
        if not isinstance(self.max_whitespace, int) or isinstance(self.max_whitespace, bool):
            raise GrammarError(
                f"max_whitespace must be an integer, got {self.max_whitespace!r} ({type(self.max_whitespace).__name__})"
            )
        for name in ("format", "reasoning", "whitespace", "after_calls"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise GrammarError(f"{name} must be a string, got {value!r} ({type(value).__name__})")
        if self.reasoning not in ("enabled", "disabled", "prefilled"):
            raise GrammarError(f"reasoning must be 'enabled', 'disabled' or 'prefilled', got {self.reasoning!r}")
        if self.whitespace not in ("canonical", "flexible"):
            raise GrammarError(f"whitespace must be 'canonical' or 'flexible', got {self.whitespace!r}")
        if self.after_calls not in ("end", "text"):
            raise GrammarError(f"after_calls must be 'end' or 'text', got {self.after_calls!r}")
        if not isinstance(self.tool_choice, str) or not self.tool_choice:
            raise GrammarError(
                f"tool_choice must be 'auto', 'required', 'none' or a tool name, got {self.tool_choice!r}"
            )
        if not isinstance(self.prose_first, bool):
            raise GrammarError(f"prose_first must be True or False, got {self.prose_first!r}")
        if self.prose_first and self.tool_choice != "required":
            raise GrammarError(
                f"prose_first=True applies to tool_choice='required' only (got tool_choice={self.tool_choice!r}): "
                "under 'auto' text before a call is always allowed, a named tool is called straight away"
            )

    @property
    def named_tool(self) -> str | None:
        return None if self.tool_choice in ("auto", "required", "none") else self.tool_choice

    def json_whitespace(self) -> Whitespace:
        if self.whitespace == "canonical":
            return Whitespace.canonical()
        return Whitespace.flexible(self.max_whitespace)

    def selected_tools(self, tools: ToolSet) -> list[Tool]:
        """The tools a block may call under this policy."""
        if self.named_tool is None:
            return list(tools)
        if self.named_tool not in tools:
            raise GrammarError(
                f"tool_choice names {self.named_tool!r}, which is not among the tools: {', '.join(tools.names)}"
            )
        return [tools[self.named_tool]]

    @property
    def key(self) -> str:
        """Stable text of the options, for cache keys."""
        return json.dumps(asdict(self), sort_keys=True)


def options_from_kwargs(**kwargs: object) -> GrammarOptions:
    """Build options from keyword arguments, rejecting unknown names with the list of known ones."""
    known = set(GrammarOptions.__dataclass_fields__)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise GrammarError(f"unknown grammar option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return GrammarOptions(**kwargs)  # type: ignore[arg-type]


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
        (:data:`~toolgrammar.automata.automaton.LAZY_REPEAT_FROM`): built whole, it is what the size estimate exists to
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
the separator before each further item, long ones built an item at a time (:func:`toolgrammar.automata.lazy.lazy_repeats`:
a skeleton may hold their holes)."""


def grammar_key(tools: ToolSet, options: GrammarOptions) -> str:
    h = hashlib.sha256()
    for part in (GRAMMAR_VERSION, tools.fingerprint, options.key):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_turn(tools: object, *, mode: str = "schema", cache: bool = True, **options: object) -> TurnGrammar:
    """Compile a tool list (anything :func:`~toolgrammar.schema.tools.load_tools` takes) into a turn grammar.

    The automaton is the turn's skeleton (:func:`~toolgrammar.automata.automaton.compile_skeleton`), which depends on
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


def _check_cached_dfa(entry: dict[str, np.ndarray]) -> str | None:
    """Why a cached automaton cannot be used as it is (shapes, dtypes, ranges), or ``None``.

    The entry's content hash already matched; this guards the arrays' layout so that an entry
    written by another version, or crafted, is rebuilt instead of indexing out of range.
    """
    names = {"transitions", "accepting", "safe", "start", "points"}
    if set(entry) != names:
        return f"arrays {sorted(entry)}, expected {sorted(names)}"
    t, accepting, safe, start = entry["transitions"], entry["accepting"], entry["safe"], entry["start"]
    if t.ndim != 2 or t.shape[1] != N_SYMBOLS or t.shape[0] < 1 or t.dtype != np.int32:
        return f"transitions of shape {t.shape} and dtype {t.dtype}, expected (n, {N_SYMBOLS}) int32"
    n = t.shape[0]
    for name, array in (("accepting", accepting), ("safe", safe)):
        if array.shape != (n,) or array.dtype != np.bool_:
            return f"{name} of shape {array.shape} and dtype {array.dtype}, expected ({n},) bool"
    if start.shape != () or start.dtype.kind not in "iu" or not 0 <= int(start) < n:
        return f"start state {start!r} is not one of the {n} states"
    if int(t.min()) < DEAD or int(t.max()) >= n:
        return f"transitions lead outside the {n} states"
    points = entry["points"]
    if points.ndim != 2 or points.shape[1] != 3 or points.dtype.kind not in "iu":
        return f"dispatch points of shape {points.shape}, expected (k, 3) integers"
    if len(points) and (int(points[:, :2].min()) < 0 or int(points[:, :2].max()) >= n or int(points[:, 2].min()) < 0):
        return f"dispatch points outside the {n} states"
    return None


def turn_node(tools: ToolSet, options: GrammarOptions, fmt: ToolCallFormat) -> Node:
    """The expression tree of a whole turn (see the module docstring for its shape).

    The turn's shape is decided by :func:`~toolgrammar.turn.policy.turn_policy` (the one place the options
    and the format's markup are read); this lowers it to automaton nodes. The format says what its
    parser reads as markup in free text and in reasoning
    (:attr:`~toolgrammar.formats.base.ToolCallFormat.free_text_avoid` and friends), so the free
    regions exclude exactly what would change the parse.
    """
    return _NodeLowering()(policy.turn_policy(tools, options, fmt).turn)


class _NodeLowering(policy.Lowering[Node]):
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
