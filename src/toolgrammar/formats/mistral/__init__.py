"""The ``mistral`` format (mistral-common tokenizer v11 / v13+): ``[TOOL_CALLS]NAME[ARGS]{json}``.

Calls back to back, no closing marker (a call ends where its JSON ends; the generation stops at ``</s>``),
``[CALL_ID]ID`` after the name accepted (v11), reasoning in ``[THINK]``...``[/THINK]`` (v13-think).
Described in ``format.toml`` (this folder); grammar pieces in :mod:`.grammar`, the block reader in
:mod:`.parser`, which ``mistral-v3`` (the JSON-array shape of Mistral-7B-Instruct-v0.3) and
``mistral-think-text`` (Magistral 2506's plain-text ``<think>``) share with their own ``format.toml``.
The CanIToolCall ``mistral`` family is declared here; :meth:`fixture_format` hands those two variants'
fixtures to their formats.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.mistral.grammar import block_grammar
from toolgrammar.formats.mistral.parser import MistralBlocks, render_call
from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary, tekken_vocabulary
from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet
    from toolgrammar.vocab import Vocabulary

_NAME = re.compile(r"\[TOOL_CALLS\]\s*([^\[\]\s{]+)")
_FORBIDDEN_IN_NAMES = re.compile(r"[\[\]\s{}]")

V3_REPOS = ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mixtral-8x22B-Instruct-v0.1")
"""Tokenizer repos of the v3 (JSON array) shape, read by ``mistral-v3``."""
THINK_TEXT_REPOS = ("mistralai/Magistral-Small-2506", "mistralai/Magistral-Medium-2506")
"""Tokenizer repos whose models reason in plain-text ``<think>``, read by ``mistral-think-text``."""


class MistralFormat(ToolCallFormat):
    """``[TOOL_CALLS]NAME[ARGS]{json}`` calls, ``[THINK]`` reasoning."""

    name: ClassVar[str] = "mistral"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    canitoolcall_families: ClassVar[dict[str, str]] = {"mistral": "strict"}

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.block, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        return render_call(tool if isinstance(tool, str) else tool.name, arguments, self.markers, self.block)

    def block_reader(self, mode: str = "strict") -> MistralBlocks:
        return MistralBlocks(mode, self.markers, self.block)

    def budget_literals(self) -> tuple[str, ...]:
        return ("}" + self.markers.block_open, self.block["args"] + "{")

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        return text  # no closing marker: the cut call is judged as it is

    def check_tools(self, tools: ToolSet) -> None:
        """A name is written bare before ``[ARGS]``."""
        for tool in tools:
            if not tool.name or _FORBIDDEN_IN_NAMES.search(tool.name):
                raise ToolSchemaError(
                    f"{self.name} writes the tool name bare before [ARGS]: {tool.name!r} cannot be empty or contain "
                    "brackets, braces or whitespace",
                    tool=tool.name,
                )

    def fixture_format(self, repo: str) -> str | None:
        if repo in V3_REPOS:
            return "mistral-v3"
        if repo in THINK_TEXT_REPOS:
            return "mistral-think-text"
        return None

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        if repo in V3_REPOS:
            return sentencepiece_v3_vocabulary()
        if repo.startswith("mistralai/"):
            return tekken_vocabulary()
        return None


__all__ = ["THINK_TEXT_REPOS", "V3_REPOS", "MistralFormat"]
