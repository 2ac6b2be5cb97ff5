"""The turn policy: what a whole assistant turn may look like, decided once, lowered to two targets.

:func:`turn_policy` reads the grammar options (``tool_choice``, ``prose_first``,
``parallel_tool_calls``, ``after_calls``, ``reasoning``) and the format (its markers, what its
parser reads as markup in free text and in reasoning, its block grammar) and writes the turn as a
small tree of immutable parts. Every decision about the turn's shape is made there and nowhere else.
Two lowerings turn the same tree into their target, part by part, and decide nothing:

- :func:`toolgrammar.turn.grammar.turn_node`: the engine's expression tree (:mod:`toolgrammar.automata.automaton`);
- :func:`toolgrammar.turn.structural_tag.turn_structural_tag`: an xgrammar structural tag (JSON).

The parts (:data:`Part`):

=====================  ===========================================================================
:class:`FreeText`      text that avoids the words the parser reads as markup, may be barred from
                       starting with one word, is *safe* or not (may the token budget cut the
                       turn there without leaving a block open), and may be wrapped in a channel
                       (Kimi K3's ``<|open|>response<|sep|>`` ... ``<|close|>response<|sep|>``)
:class:`Reasoning`     the reasoning part: its opener (``None``: the prompt opened it), the words its
                       text avoids, its closer, what follows the closer, whether the turn may end
                       inside it, and what follows it unclosed where a block opener also ends it
:class:`Blocks`        one or more tool-call blocks (the format's block grammar, a node), joined by
                       the separator when parallel calls are allowed
:class:`Sequence`      parts one after the other
:class:`OneOf`         alternatives; ``OneOf((x, END))`` is "x, or the turn ends here" (a tag's
                       ``optional``)
:class:`Newlines`      a bounded run of ``"\\n"`` (what the chat template writes after ``</think>``)
:class:`End`           the end of the turn; it closes every branch it appears in (a format may
                       write a closer right before it: Kimi K3's ``<|close|>message<|sep|>``)
:class:`NotStartingWith`  a part, minus the texts that start with a word
=====================  ===========================================================================

A part object that appears in several places of the tree is *one* sub-expression: a lowering
lowers it once and reuses the result (the turn's calls after the content and straight after the
reasoning are one node; the block node inside is one object, so the engine compiles each tool
dispatch once). Separate regions are separate objects, even when equal.

A lowering subclasses :class:`Lowering`, which has one abstract method per part type: a part type
added here fails every target that does not lower it, and the tests check that both targets visit
every part of the policies of a grid of options.

This module imports no torch, transformers, vLLM or xgrammar.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

from toolgrammar.errors import GrammarError

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.base import ToolCallFormat
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet


@dataclass(frozen=True)
class FreeText:
    """Free text: any text, control tokens included, minus what the format's parser reads as markup."""

    avoid: tuple[str, ...]
    """Words the text may not contain (the block opener, and whatever else opens markup in this format)."""
    not_prefixed: str | None
    """A word the text may not start with (a parser that reads a bare block there), or ``None``."""
    safe: bool
    """Whether the token budget may cut the turn inside this text (it cannot leave a block open here)."""
    wrapper: tuple[str, str] | None = None
    """``(open, close)``: the format writes the text as ``open TEXT close`` (Kimi K3's response channel), and
    an empty run may be left out altogether; :attr:`avoid` lists ``close``. ``open`` is ``""`` where the
    generation prompt has opened it (then ``close`` must follow). ``None``: the text is bare."""


@dataclass(frozen=True)
class Reasoning:
    """The reasoning part of a turn, and what may follow it."""

    opener: str | None
    """What opens the reasoning; ``None`` when the generation prompt already opened it (``reasoning="prefilled"``)."""
    avoid: tuple[str, ...]
    """Words the reasoning text may not contain (the closer among them: it ends the reasoning)."""
    closer: str
    """What closes the reasoning."""
    then: Part
    """What follows the closer."""
    may_stop: bool
    """Whether the turn may end (or be cut by the budget) inside the reasoning; its text is then safe."""
    ends_at_block: bool
    """The format's parser also ends the reasoning at a block opener (which :attr:`avoid` then lists)."""
    unclosed_then: Part | None
    """What may follow the reasoning text without the closer: the turn's blocks, where :attr:`ends_at_block`
    and the turn has blocks; else ``None``."""


@dataclass(frozen=True)
class Blocks:
    """One or more tool-call blocks. (Zero or more is ``OneOf((Sequence((blocks, ...)), END))``.)"""

    block: Node
    """One whole block, opener through closer inclusive: the format's block grammar."""
    opener: str
    """The block opener (the first characters of :attr:`block`)."""
    closer: str
    """The block closer (the last characters of :attr:`block`)."""
    separator: str
    """What goes between two blocks."""
    parallel: bool
    """Whether more than one block may follow (joined by :attr:`separator`)."""


@dataclass(frozen=True)
class Sequence:
    """Parts one after the other."""

    items: tuple[Part, ...]


@dataclass(frozen=True)
class OneOf:
    """Alternatives: exactly one of the parts."""

    items: tuple[Part, ...]


@dataclass(frozen=True)
class Newlines:
    """``lo`` to ``hi`` newline characters."""

    lo: int
    hi: int


@dataclass(frozen=True)
class End:
    """The end of the turn. It is the last part of every branch it appears in."""

    before: str | None = None
    """What the format may write right before the end of the turn (Kimi K3's ``<|close|>message<|sep|>``),
    or ``None``."""


@dataclass(frozen=True)
class NotStartingWith:
    """The texts of :attr:`item` that do not start with :attr:`word`."""

    item: Part
    word: str


Part: TypeAlias = FreeText | Reasoning | Blocks | Sequence | OneOf | Newlines | End | NotStartingWith
"""One part of a turn policy."""

END = End()
"""The end of the turn (one object: every branch ends at the same place)."""


@dataclass(frozen=True)
class TurnPolicy:
    """The whole turn, as :func:`turn_policy` decided it."""

    format: str
    """The format's name (for messages)."""
    text: FreeText
    """The format's free text (safe). Every :class:`FreeText` of :attr:`turn` is a copy of it, safe or
    not; a target that cannot say it refuses the format, whether or not this turn holds free text."""
    turn: Part
    """The whole turn."""

    def parts(self) -> Iterator[Part]:
        """Every distinct part object of :attr:`turn`, each once, parents before their children."""
        seen: set[int] = set()
        stack: list[Part] = [self.turn]
        while stack:
            part = stack.pop()
            if id(part) in seen:
                continue
            seen.add(id(part))
            yield part
            stack.extend(reversed(list(children(part))))


def children(part: Part) -> Iterator[Part]:
    """The parts directly inside ``part`` (read from its fields, so a new field is never missed)."""
    for f in dataclasses.fields(part):  # type: ignore[arg-type]
        value = getattr(part, f.name)
        values = value if isinstance(value, tuple) else (value,)
        yield from (v for v in values if isinstance(v, PART_TYPES))


PART_TYPES = (FreeText, Reasoning, Blocks, Sequence, OneOf, Newlines, End, NotStartingWith)
"""Every part type (what :data:`Part` names), in the order :class:`Lowering` lists their methods."""


def turn_policy(tools: ToolSet, options: GrammarOptions, fmt: ToolCallFormat) -> TurnPolicy:
    """Decide the shape of a whole turn from the options and the format.

    See :mod:`toolgrammar.turn.grammar` for the shape in words. Raises :class:`GrammarError` for a policy
    that needs a call from an empty tool list (and whatever the format's block grammar raises).
    """
    m = fmt.markers
    choice = options.tool_choice
    if choice not in ("auto", "none") and not len(tools):
        raise GrammarError(f"tool_choice={choice!r} needs at least one tool, but the tool list is empty")
    cut_ok = choice in ("auto", "none")  # may the turn end (or be cut) before any call?
    avoid = tuple(fmt.free_text_avoid or (m.block_open,))
    wrapper = fmt.content_wrapper
    if wrapper is not None:  # the wrapper's closer ends the text
        avoid = tuple(dict.fromkeys((*avoid, wrapper[1])))
    text = FreeText(avoid=avoid, not_prefixed=fmt.free_text_not_prefixed or None, safe=True, wrapper=wrapper)
    # A format that writes a closer before the end of the turn ends every branch with it (one object still).
    end = End(fmt.turn_close) if fmt.turn_close else END

    def free(*, safe: bool, first: bool = False) -> FreeText:
        part = replace(text, safe=safe)  # a new object: each region of free text is its own part
        if first and wrapper is not None and options.reasoning == "disabled":
            # Without reasoning, the generation prompt has opened the wrapper (K3's thinking=False prompt).
            part = replace(part, wrapper=("", wrapper[1]))
        return part

    calls: Part | None = None  # the blocks and what follows them
    content: Part
    if choice == "none" or not len(tools):
        content = Sequence((free(safe=True, first=True), end))
    else:
        blocks = Blocks(
            block=fmt.block_grammar(tools, options),
            opener=m.block_open,
            closer=m.block_close,
            separator=m.call_separator,
            # A format whose block is a section holding all the turn's calls writes one block per turn.
            parallel=options.parallel_tool_calls and not fmt.block_holds_calls,
        )
        after: tuple[Part, ...] = (end,) if options.after_calls == "end" else (free(safe=True), end)
        if options.after_calls == "end" and m.call_separator == "\n" and not fmt.block_holds_calls:
            # A newline may end the calls too: the parser reads no content in it, and where the newline is
            # the separator, a model that writes one after its last block and means to stop would otherwise
            # be held to one more call.
            after = (Newlines(0, 1), end)
        calls = Sequence((blocks, *after))
        if choice == "auto":
            content = Sequence((free(safe=True, first=True), OneOf((calls, end))))
        elif choice == "required" and options.prose_first:
            content = Sequence((free(safe=False, first=True), calls))
        else:  # required (call first) or a named tool: the call, straight away
            content = calls

    if options.reasoning == "disabled":
        return TurnPolicy(format=fmt.name, text=text, turn=content)
    if not m.think_open:  # a format without reasoning markers (Llama): there is no reasoning part to enable
        if options.reasoning == "prefilled":
            raise GrammarError(f"format {fmt.name!r} has no reasoning markers: reasoning='prefilled' cannot apply")
        return TurnPolicy(format=fmt.name, text=text, turn=content)
    think_words = tuple(fmt.think_avoid or (m.think_close,))
    ends_at_block = m.block_open in think_words  # this format's parser ends the reasoning at a block opener too
    then = content
    if calls is not None and content is calls:
        # The call comes first, but the chat template writes "</think>\n\n" before the content.
        then = Sequence((Newlines(0, 2), calls))
    reasoning = Reasoning(
        opener=m.think_open if options.reasoning == "enabled" else None,
        avoid=think_words,
        closer=m.think_close,
        then=then,
        may_stop=cut_ok,
        ends_at_block=ends_at_block,
        unclosed_then=calls if ends_at_block else None,
    )
    if options.reasoning == "prefilled":
        return TurnPolicy(format=fmt.name, text=text, turn=reasoning)
    # Content that starts with the opener would be read as reasoning: keep the two branches apart.
    turn = OneOf((reasoning, NotStartingWith(content, m.think_open)))
    return TurnPolicy(format=fmt.name, text=text, turn=turn)


T = TypeVar("T")


class Lowering(ABC, Generic[T]):
    """A target of the turn policy: one method per part type; each part object is lowered once.

    Call the instance on a part to lower it (and, inside the methods, on a part's children). The
    methods decide nothing about the turn: they spell the part in the target, or refuse it.
    """

    def __init__(self) -> None:
        self._lowered: dict[int, tuple[Part, T]] = {}

    def __call__(self, part: Part) -> T:
        got = self._lowered.get(id(part))
        if got is not None:
            return got[1]
        method = _METHODS.get(type(part))
        if method is None:
            raise TypeError(f"not a part of a turn policy: {part!r}")
        out: T = getattr(self, method)(part)
        self._lowered[id(part)] = (part, out)  # the part is kept: its id stays its own
        return out

    @property
    def lowered(self) -> frozenset[int]:
        """The ids of the parts lowered so far."""
        return frozenset(self._lowered)

    @abstractmethod
    def free_text(self, part: FreeText) -> T: ...

    @abstractmethod
    def reasoning(self, part: Reasoning) -> T: ...

    @abstractmethod
    def blocks(self, part: Blocks) -> T: ...

    @abstractmethod
    def sequence(self, part: Sequence) -> T: ...

    @abstractmethod
    def one_of(self, part: OneOf) -> T: ...

    @abstractmethod
    def newlines(self, part: Newlines) -> T: ...

    @abstractmethod
    def end(self, part: End) -> T: ...

    @abstractmethod
    def not_starting_with(self, part: NotStartingWith) -> T: ...


_METHODS: dict[type, str] = dict(
    zip(
        PART_TYPES,
        ("free_text", "reasoning", "blocks", "sequence", "one_of", "newlines", "end", "not_starting_with"),
        strict=True,
    )
)
"""Part type -> the :class:`Lowering` method that lowers it."""


__all__ = [
    "END",
    "PART_TYPES",
    "Blocks",
    "End",
    "FreeText",
    "Lowering",
    "Newlines",
    "NotStartingWith",
    "OneOf",
    "Part",
    "Reasoning",
    "Sequence",
    "TurnPolicy",
    "children",
    "turn_policy",
]
