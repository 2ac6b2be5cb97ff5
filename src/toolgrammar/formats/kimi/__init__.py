"""The Kimi formats: ``kimi`` (K2: K2-Instruct, K2-Thinking, K2.5, K2.6) and ``kimi-k3`` (K3 "XTML").

``kimi``: a turn holds at most one section (the block) holding every call of the turn::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
    ...<|tool_calls_section_end|>

IDX counts the calls (the grammar allows any decimal index; the parser reads the name from the id and
ignores the index). Reasoning is ``<think>`` ... ``</think>`` (K2-Thinking / K2.6 prompts open it).

``kimi-k3``: channels ``<|open|>think<|sep|>`` (reasoning), ``<|open|>response<|sep|>`` (content) and
``<|open|>tools<|sep|>`` (the calls), each closed by ``<|close|>NAME<|sep|>``, and the turn by
``<|close|>message<|sep|>``. The strict parser reads it (:class:`.parser.KimiK3Blocks`); the grammar
(:func:`.grammar.k3_block_grammar`) writes the tools channel, and the shared turn policy the rest from
:attr:`KimiK3Format.content_wrapper` (the response channel around the content; the prompt opened it
when ``reasoning="disabled"``, as K3's thinking=False prompt does) and :attr:`KimiK3Format.turn_close`.

No Kimi tokenizer ships on PyPI (they are tiktoken files loaded with ``trust_remote_code``):
:meth:`fixture_vocabulary` is ``None``, so CanIToolCall's token strategies do not run for this family;
the grammar is tested at the byte level.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.kimi.grammar import block_grammar, k3_block_grammar, xml_attr
from toolgrammar.formats.kimi.parser import PACKAGE, KimiBlocks, KimiK3Blocks, k2_markup, k3_markup
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_K2_NAME = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?([^\s:<>]+):")
_K3_NAME = re.compile(r'<\|open\|>call tool="([^"<>\n]*)"')


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_k2(calls: list[tuple[str, dict[str, Any]]], markers: Markers, first_index: int = 0) -> str:
    """A K2 section holding ``calls`` as the chat template writes it (ids ``functions.NAME:IDX``)."""
    m = k2_markup()
    body = "".join(
        f"{m.call_open}{m.id_prefix}{name}{m.id_sep}{first_index + i}{m.argument_open}{_dumps(args)}{m.call_close}"
        for i, (name, args) in enumerate(calls)
    )
    return f"{markers.block_open}{body}{markers.block_close}"


def _k3_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array"


def render_k3(calls: list[tuple[str, dict[str, Any]]], markers: Markers) -> str:
    """A K3 tools channel holding ``calls`` as the chat template writes it (indices from 1)."""
    m = k3_markup()
    parts = [markers.block_open]
    for i, (name, args) in enumerate(calls, start=1):
        parts.append(f'{m.call_open}{xml_attr(name)}{m.call_index}{i}"{m.sep}')
        for key, value in args.items():
            text = value if isinstance(value, str) else _dumps(value)
            parts.append(
                f'{m.argument_open}{xml_attr(key)}{m.argument_type}{_k3_type(value)}"{m.sep}{text}{m.argument_close}'
            )
        parts.append(m.call_close)
    parts.append(markers.block_close)
    return "".join(parts)


class KimiFormat(ToolCallFormat):
    """Kimi K2: one ``<|tool_calls_section_begin|>`` section per turn, calls with ``functions.NAME:IDX`` ids."""

    name: ClassVar[str] = "kimi"
    markers: ClassVar[Markers] = markers_of(__name__)
    block_holds_calls: ClassVar[bool] = True
    canitoolcall_families: ClassVar[dict[str, str]] = {"kimi": "strict"}

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return render_k2([(name, arguments)], self.markers)

    def canonical_calls(self, calls: list[ToolCall]) -> str:
        return render_k2([(c.name, c.arguments) for c in calls], self.markers)

    def block_reader(self, mode: str = "strict") -> KimiBlocks:
        return KimiBlocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        m = k2_markup()
        return (m.call_close + self.markers.block_close, m.call_close + m.call_open + m.id_prefix)

    def block_name(self, raw: str) -> str | None:
        match = _K2_NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        m = k2_markup()
        tail = text[text.rfind(self.markers.block_open) :]
        if tail.rfind(m.call_open) > tail.rfind(m.call_close):
            text += m.call_close
        return text + self.markers.block_close

    def check_tools(self, tools: ToolSet) -> None:
        """A tool name is written inside the call id ``functions.NAME:IDX``."""
        for tool in tools:
            if not tool.name or any(c in tool.name for c in ':<>"') or any(c.isspace() for c in tool.name):
                raise ToolSchemaError(
                    f"kimi writes the tool name inside the call id functions.NAME:IDX: {tool.name!r} cannot be empty "
                    "or contain ':', '<', '>', '\"' or whitespace",
                    tool=tool.name,
                )

    def fixture_format(self, repo: str) -> str | None:
        return "kimi-k3" if repo.startswith(K3_REPOS) else None


K3_REPOS: tuple[str, ...] = tuple(format_spec(PACKAGE).get("k3_repos", ("moonshotai/Kimi-K3",)))
"""Tokenizer repos whose fixtures are K3 XTML (``kimi``'s CanIToolCall family holds both)."""


_K3 = k3_markup()
_K3_MARKERS = Markers(
    **{k: tuple(v) if isinstance(v, list) else v for k, v in format_spec(PACKAGE)["k3"]["markers"].items()}
)


class KimiK3Format(KimiFormat):
    """Kimi K3 XTML: channels for reasoning, content (the response) and calls (the tools); see the module docstring."""

    name: ClassVar[str] = "kimi-k3"
    markers: ClassVar[Markers] = _K3_MARKERS
    canitoolcall_families: ClassVar[dict[str, str]] = {}
    content_wrapper: ClassVar[tuple[str, str] | None] = (_K3.response_open, _K3.response_close)
    turn_close: ClassVar[str | None] = _K3.message_close
    free_text_avoid: ClassVar[tuple[str, ...] | None] = (
        _K3_MARKERS.block_open,
        _K3.response_open,
        _K3.response_close,
        _K3.message_close,
        _K3_MARKERS.think_open,
        _K3_MARKERS.think_close,
    )
    """The channel markup the block reader reads in content (and the think channel's, which would read as reasoning)."""
    think_avoid: ClassVar[tuple[str, ...] | None] = (_K3_MARKERS.think_close, _K3.response_open)
    """The response channel's opener ends the reasoning too (the reader's ``reasoning_enders``)."""

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return k3_block_grammar(tools, options, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return render_k3([(name, arguments)], self.markers)

    def canonical_calls(self, calls: list[ToolCall]) -> str:
        return render_k3([(c.name, c.arguments) for c in calls], self.markers)

    def block_reader(self, mode: str = "strict") -> KimiK3Blocks:  # type: ignore[override]
        return KimiK3Blocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        m = k3_markup()
        types = ("string", "number", "boolean", "null", "object", "array")
        return (
            m.argument_close + m.call_close + self.markers.block_close + m.message_close,
            m.argument_close + m.argument_open,
            m.call_close + m.call_open,
            m.response_close + self.markers.block_open + m.call_open,
            *(f'{m.argument_type}{t}"{m.sep}' for t in types),
        )

    def block_name(self, raw: str) -> str | None:
        match = _K3_NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        return text + self.markers.block_close

    def check_tools(self, tools: ToolSet) -> None:
        """Names and keys are XML-escaped attributes: any non-empty text."""
        for tool in tools:
            if not tool.name:
                raise ToolSchemaError("kimi-k3 needs a non-empty tool name", tool=tool.name)

    def fixture_format(self, repo: str) -> str | None:
        return None


__all__ = ["K3_REPOS", "KimiFormat", "KimiK3Format", "render_k2", "render_k3"]
