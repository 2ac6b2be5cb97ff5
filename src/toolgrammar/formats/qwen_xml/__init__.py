"""The ``qwen-xml`` format (Qwen3-Coder, Qwen3.5 and later).

``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>``,
blocks separated by ``\\n``, optional reasoning first as in Qwen3 (Qwen3.5+ generation prompts
pre-open it with ``<think>\\n``). Values are raw text: the chat template writes a string as it is and
anything else as JSON (``tojson``: ``json.dumps`` with its default separators and
``ensure_ascii=False`` in transformers' template environment), one ``\\n`` on each side. The tool
schema says how to read a value back (:func:`.parser.convert_value`).

Grammar pieces live in :mod:`.grammar`, the block reader in :mod:`.parser`; this class joins them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.qwen_xml.grammar import block_grammar
from toolgrammar.formats.qwen_xml.parser import QwenXmlBlocks
from toolgrammar.formats.qwen_xml.render import DEFAULT_MARKERS, render_call, render_value

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_FORBIDDEN_IN_NAMES = ("<", ">", "\n", "\r")
_FUNCTION_NAME = re.compile(r"<function=([^>\n]*)>")


class QwenXmlFormat(ToolCallFormat):
    """``<tool_call>`` blocks holding ``<function=NAME>`` with one ``<parameter=KEY>`` per argument."""

    name: ClassVar[str] = "qwen-xml"
    markers: ClassVar[Markers] = DEFAULT_MARKERS
    call_end: ClassVar[str] = "</function>\n"
    parse_modes: ClassVar[tuple[str, ...]] = ("strict", "lenient")
    canitoolcall_families: ClassVar[dict[str, str]] = {"qwen3-xml": "lenient"}
    """CanIToolCall's qwen3-xml fixtures expect what servers recover (a bare ``<function=``...)."""
    think_avoid: ClassVar[tuple[str, ...]] = ("</think>", "<tool_call>")
    """What reasoning text may not contain: this parser ends the reasoning at either (a ``<tool_call>``
    inside an unclosed ``<think>`` is a call, as in llama.cpp and vLLM)."""
    free_text_avoid: ClassVar[tuple[str, ...]] = ("<tool_call>", "\n<function=")
    """What content may not contain: this parser opens a block at either (a line that starts with
    ``<function=`` is a call whose ``<tool_call>`` was forgotten)."""
    free_text_not_prefixed: ClassVar[str] = "<function="
    """What a run of content may not start with (after ``</think>``, after a block): a bare block."""

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return render_call(name, arguments, markers=self.markers)

    def block_reader(self, mode: str = "strict") -> QwenXmlBlocks:
        """``mode`` is ``"strict"`` (errors for every markup fault) or ``"lenient"`` (reads a bare
        ``<function=`` and a missing ``</parameter>`` as llama.cpp and vLLM do)."""
        return QwenXmlBlocks(mode, self.markers)

    def block_name(self, raw: str) -> str | None:
        match = _FUNCTION_NAME.search(raw)
        return match.group(1) if match else None

    def check_tools(self, tools: ToolSet) -> None:
        """Tool names and parameter keys are written inside ``<function=...>`` / ``<parameter=...>``."""
        for tool in tools:
            if any(c in tool.name for c in _FORBIDDEN_IN_NAMES) or not tool.name:
                raise ToolSchemaError(
                    f"qwen-xml writes the tool name inside <function=NAME>: {tool.name!r} cannot contain "
                    "'<', '>' or a line break",
                    tool=tool.name,
                )
            for key in tool.parameters.get("properties", {}):
                if any(c in key for c in _FORBIDDEN_IN_NAMES) or not key:
                    raise ToolSchemaError(
                        f"qwen-xml writes each argument name inside <parameter=NAME>: {key!r} cannot be empty or "
                        "contain '<', '>' or a line break; rename the property",
                        tool=tool.name,
                        pointer=f"/properties/{key}",
                        keyword="properties",
                    )


__all__ = ["QwenXmlFormat", "render_call", "render_value"]
