"""The DeepSeek formats: V3/R1, V3.1, V3.2 (DSML), V4 (DSML), V4.1 (DSML).

A turn holds at most one *section* (the block), and the section holds every call of the turn
(``block_holds_calls``). The five sub-formats and their exact spellings are in ``format.toml``
(this folder); :mod:`.render` writes them, :mod:`.grammar` generates them and :mod:`.parser` reads
them. Reasoning is ``<think>`` ... ``</think>`` (thinking prompts end with ``<think>``, so the turn
starts inside it); the turn ends at ``<｜end▁of▁sentence｜>``.

Registered formats (one per sub-format's grammar; they share one strict parser, which reads the
sections of all five, so free text avoids every section opener):

========================  ======================  ===========================================
format                    models                  section
========================  ======================  ===========================================
``deepseek-v3``           V3, V3-0324, R1         ``<｜tool▁calls▁begin｜>`` + ``function`` calls
``deepseek-v3.1``         V3.1, V3.1-Terminus     ``<｜tool▁calls▁begin｜>`` + ``NAME<｜tool▁sep｜>``
``deepseek-v3.2``         V3.2                    ``<｜DSML｜function_calls>``
``deepseek-v4``           V4-Flash, V4-Pro        ``<｜DSML｜tool_calls>``
``deepseek-v4.1``         V4.1-Flash              ``<｜DSML｜ calls>``
``deepseek``              the newest (V4.1)       as ``deepseek-v4.1``; declares CanIToolCall's
                                                  ``deepseek`` family and picks the sub-format of each
                                                  fixture by its tokenizer pin (:meth:`fixture_format`)
========================  ======================  ===========================================
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import TokenizerError, ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.deepseek.grammar import block_grammar
from toolgrammar.formats.deepseek.parser import DeepSeekBlocks
from toolgrammar.formats.deepseek.render import render_section
from toolgrammar.formats.deepseek.shape import (
    PACKAGE,
    Variant,
    section_openers,
    tokenizer_pins,
    variant_markers,
    variants,
)
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import markers_of
from toolgrammar.packages import package_file
from toolgrammar.vocab import Vocabulary

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

FORMAT_NAMES: dict[str, str] = {
    "v3": "deepseek-v3",
    "v31": "deepseek-v3.1",
    "v32": "deepseek-v3.2",
    "v4": "deepseek-v4",
    "v41": "deepseek-v4.1",
}
"""Sub-format key (CanIToolCall's ``x-deepseek-*`` tag) -> registered format name."""

_NAME = re.compile(
    r'(?:<｜tool▁sep｜>([^\n<]+)\n```|<｜tool▁call▁begin｜>([^<\n{]+)<｜tool▁sep｜>|invoke name="([^"<>\n]*)")'
)


class DeepSeekV41Format(ToolCallFormat):
    """DeepSeek-V4.1: a ``<｜DSML｜ calls>`` section (the other DeepSeek sub-formats subclass it, setting
    :attr:`variant_key`)."""

    name: ClassVar[str] = "deepseek-v4.1"
    variant_key: ClassVar[str] = "v41"
    markers: ClassVar[Markers] = variant_markers(variants()["v41"])
    block_holds_calls: ClassVar[bool] = True
    free_text_avoid: ClassVar[tuple[str, ...]] = section_openers()
    """Every sub-format's section opener: the one parser reads a section of any of them."""

    @property
    def variant(self) -> Variant:
        return variants()[self.variant_key]

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.variant)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return render_section(self.variant, [(name, arguments)])

    def canonical_calls(self, calls: list[ToolCall]) -> str:
        """All the calls in one section, as the template writes them."""
        return render_section(self.variant, [(c.name, c.arguments) for c in calls])

    def block_reader(self, mode: str = "strict") -> DeepSeekBlocks:
        return DeepSeekBlocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        v = self.variant
        if v.kind == "v3":
            return (v.fence_close + v.call_close + v.section_close, v.call_close + v.call_separator + v.call_open)
        if v.kind == "v31":
            return (v.call_close + v.section_close, v.call_close + v.call_open)
        return (v.param_close + "\n" + v.call_close + "\n" + v.section_close, '">\n' + v.param_open)

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return next((g for g in match.groups() if g), None) if match else None

    def closed_cut_block(self, text: str) -> str:
        """The cut section closed as the template closes one (an open DSML value or call closed first)."""
        v = self.variant
        if v.dsml:
            tail = text[text.rfind(v.section_open) :]
            if tail.rfind(v.param_open) > tail.rfind(v.param_close):
                text += v.param_close
            if tail.rfind(v.call_open) > tail.rfind(v.call_close):
                text += "\n" + v.call_close
            return text + "\n" + v.section_close
        tail = text[text.rfind(v.section_open) :]
        if tail.rfind(v.call_open) > tail.rfind(v.call_close):
            text += (v.fence_close if v.kind == "v3" else "") + v.call_close
        return text + v.section_close

    def check_tools(self, tools: ToolSet) -> None:
        """Names (and DSML parameter keys) are written inside markup that they must not end."""
        forbidden = ('"', "<", ">", "\n", "\r", "｜")
        for tool in tools:
            if not tool.name or any(c in tool.name for c in forbidden) or tool.name[0] in "{ \t":
                raise ToolSchemaError(
                    f"{self.name} writes the tool name inside its call markup: {tool.name!r} cannot be empty, "
                    "start with '{' or whitespace, or contain '\"', '<', '>', '｜' or a line break",
                    tool=tool.name,
                )
            if not self.variant.dsml:
                continue
            for key in tool.parameters.get("properties", {}):
                if not key or any(c in key for c in forbidden):
                    raise ToolSchemaError(
                        f'{self.name} writes each argument name inside <｜DSML｜parameter name="...">: {key!r} '
                        "cannot be empty or contain '\"', '<', '>', '｜' or a line break; rename the property",
                        tool=tool.name,
                        pointer=f"/properties/{key}",
                        keyword="properties",
                    )

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        pin = _pin(repo)
        return None if pin is None else _vocabulary(*pin[1:])


def _pin(repo: str) -> tuple[str, str, str, str] | None:
    return next((pin for prefix, pin in tokenizer_pins() if repo.startswith(prefix)), None)


@cache
def _vocabulary(dist: str, module: str, file: str) -> Vocabulary:
    """A DeepSeek vocabulary from an installed package's file, never importing the package (a ``.zip``
    holding ``tokenizer.json`` is unpacked once per process into a temporary folder)."""
    path = package_file(module, dist, *file.split("/"))
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("tokenizer.json")]
            if len(names) != 1:
                raise TokenizerError(f"{str(path)!r} holds {len(names)} tokenizer.json files, expected one")
            target = Path(tempfile.mkdtemp(prefix="toolgrammar-deepseek-")) / "tokenizer.json"
            target.write_bytes(archive.read(names[0]))
        path = target
    markers = markers_of(PACKAGE)
    vocab = Vocabulary.from_tokenizer_json(path, eos_tokens=markers.end_of_turn, name=f"{module}/{file}")
    # V3.2's tokenizer.json flags the DSML prefix ``｜DSML｜`` special; it is markup the parser reads as
    # text, so the engine must see its bytes (a control token would slip through free text unchecked).
    markup = "".join(markers.leak)
    text = frozenset(i for i in vocab.special_ids if i not in vocab.eos_ids and vocab.token_bytes[i].decode() in markup)
    if not text:
        return vocab
    return dataclasses.replace(vocab, special_ids=vocab.special_ids - text)


class DeepSeekFormat(DeepSeekV41Format):
    """``deepseek``: the newest sub-format (V4.1), and CanIToolCall's ``deepseek`` family."""

    name: ClassVar[str] = "deepseek"
    canitoolcall_families: ClassVar[dict[str, str]] = {"deepseek": "strict"}

    def fixture_format(self, repo: str) -> str | None:
        pin = _pin(repo)
        return None if pin is None or pin[0] == self.variant_key else FORMAT_NAMES[pin[0]]


class DeepSeekV4Format(DeepSeekV41Format):
    """DeepSeek-V4: a ``<｜DSML｜tool_calls>`` section of ``invoke``/``parameter`` elements."""

    name: ClassVar[str] = "deepseek-v4"
    variant_key: ClassVar[str] = "v4"
    markers: ClassVar[Markers] = variant_markers(variants()["v4"])


class DeepSeekV32Format(DeepSeekV41Format):
    """DeepSeek-V3.2: a ``<｜DSML｜function_calls>`` section of ``invoke``/``parameter`` elements."""

    name: ClassVar[str] = "deepseek-v3.2"
    variant_key: ClassVar[str] = "v32"
    markers: ClassVar[Markers] = variant_markers(variants()["v32"])


class DeepSeekV31Format(DeepSeekV41Format):
    """DeepSeek-V3.1: ``NAME<｜tool▁sep｜>{json}`` calls in a ``<｜tool▁calls▁begin｜>`` section."""

    name: ClassVar[str] = "deepseek-v3.1"
    variant_key: ClassVar[str] = "v31"
    markers: ClassVar[Markers] = variant_markers(variants()["v31"])


class DeepSeekV3Format(DeepSeekV41Format):
    """DeepSeek-V3 and R1: ``function<｜tool▁sep｜>NAME`` and a fenced JSON block per call, in one section."""

    name: ClassVar[str] = "deepseek-v3"
    variant_key: ClassVar[str] = "v3"
    markers: ClassVar[Markers] = variant_markers(variants()["v3"])


__all__ = [
    "FORMAT_NAMES",
    "DeepSeekFormat",
    "DeepSeekV3Format",
    "DeepSeekV4Format",
    "DeepSeekV31Format",
    "DeepSeekV32Format",
    "DeepSeekV41Format",
]
