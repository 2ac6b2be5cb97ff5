"""The options of the grammar: one frozen record, the same keyword names in every entry point.

A format reads them when it builds its block (:meth:`~toolgrammar.formats.base.ToolCallFormat.block_grammar`:
which tools a block may call, JSON whitespace, ``escape_markers``, ``parallel_tool_calls``); the turn layer
reads the rest (its grammar module re-exports :class:`GrammarOptions`, as ``toolgrammar.GrammarOptions``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from toolgrammar.errors import GrammarError
from toolgrammar.values.json_grammar import Whitespace

if TYPE_CHECKING:
    from toolgrammar.schema import Tool, ToolSet

Reasoning = Literal["enabled", "disabled", "prefilled"]
"""``enabled``: the turn may open with ``<think>``. ``disabled``: no reasoning part.
``prefilled``: the generation prompt already opened ``<think>``; the turn starts inside it."""


def reasoning_after(
    prompt: str, think_open: str, think_close: str, *, enable_thinking: object = None, template: str | None = None
) -> Reasoning:
    """The ``reasoning`` option that continues a rendered generation prompt.

    A prompt that ends by opening the reasoning part (``think_open``: Qwen3.5, GLM-4.7 and DeepSeek-V3.1 with
    thinking on) gives ``"prefilled"``; one that ends by closing it (an empty ``<think></think>``, or a bare
    ``</think>``), ``enable_thinking=False``, or a ``template`` that never writes either marker (the model line
    has no reasoning part: DeepSeek-V3) gives ``"disabled"``; anything else ``"enabled"`` (the turn may open
    one). A format without reasoning markers: ``"enabled"`` (there is nothing to open).
    """
    if not think_open:
        return "enabled"
    tail = prompt.rstrip()
    if tail.endswith(think_open):
        return "prefilled"
    if tail.endswith(think_close) or (enable_thinking is not None and not enable_thinking):
        return "disabled"
    if template is not None and think_open not in template and (not think_close or think_close not in template):
        return "disabled"
    return "enabled"


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


__all__ = ["AfterCalls", "GrammarOptions", "Reasoning", "WhitespaceMode", "options_from_kwargs", "reasoning_after"]
