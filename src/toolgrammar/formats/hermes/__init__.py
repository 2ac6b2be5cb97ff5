"""The ``hermes`` format (Qwen3, Qwen3-2507, Qwen2.5).

``<tool_call>\\n{"name": "NAME", "arguments": {...}}\\n</tool_call>``, blocks separated by ``\\n``,
optional reasoning first as ``<think>\\n...\\n</think>\\n\\n``. The chat template renders JSON with
``json.dumps`` default separators and ``ensure_ascii=False``: that canonical spelling is what the
model was trained on, so it is the grammar's default.

Grammar pieces live in :mod:`.grammar`, the block reader in :mod:`.parser`; this class joins them.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.hermes.grammar import block_grammar
from toolgrammar.formats.hermes.parser import HermesBlocks
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_NAME = re.compile(r'"name"\s*:\s*"([^"\\\n]*)"')


class HermesFormat(ToolCallFormat):
    """``<tool_call>`` blocks holding one JSON object ``{"name", "arguments"}``."""

    name: ClassVar[str] = "hermes"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, str]] = format_spec(__name__)["block"]
    parse_modes: ClassVar[tuple[str, ...]] = ("strict", "seed")
    canitoolcall_families: ClassVar[dict[str, str]] = {"qwen3-hermes": "strict"}

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.block, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        return (self.block["close"],)

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        b = self.block
        body = json.dumps({b["name_key"]: name, b["arguments_key"]: arguments}, ensure_ascii=False)
        return f"{b['open']}{body}{b['close']}"

    def block_reader(self, mode: str = "strict") -> HermesBlocks:
        """``mode``: ``"strict"`` (structure-aware block ends) or ``"seed"`` (the seed harness's regex)."""
        return HermesBlocks(mode, self.markers)
