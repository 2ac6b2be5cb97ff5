"""The ``gpt-oss`` format (OpenAI gpt-oss models: the harmony response format).

A turn (the generation prompt ends with ``<|start|>assistant``) is harmony messages:
``<|channel|>analysis<|message|>REASONING<|end|>``, then ``<|start|>assistant`` and either the answer
``<|channel|>final<|message|>TEXT`` (stop: ``<|return|>``) or a call
`` to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{ARGS}`` (stop: ``<|call|>``),
optionally after a ``commentary`` preamble message. Reasoning is the analysis message, content the
other messages' bodies, blocks the messages addressed to a recipient (:mod:`.parser`).

The grammar (:mod:`.grammar`) writes a call with the recipient in the role header, as openai-harmony and
the HF chat template render it; the parser also reads the recipient after the channel, as the harmony
docs show the model writing it. Both take their markers and spellings from ``format.toml``.
"""

from __future__ import annotations

import json
import re
import struct
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import TokenizerError, ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.gpt_oss.grammar import block_grammar
from toolgrammar.formats.gpt_oss.parser import GptOssBlocks
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import format_spec, markers_of
from toolgrammar.packages import package_file
from toolgrammar.vocab import Vocabulary

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_NAME = re.compile(r"to=functions\.([^\s<]+)")

VOCABULARY_PACKAGE = ("quicktok", "quicktok-v1==0.4.0")
"""``quicktok-v1`` (MIT, depends on numpy only) ships the o200k ranks and the harmony special tokens
as small binary tables (``quicktok/data/o200k.vocab``, ``o200k_harmony.special``); read, never imported."""

TEXT_MARKERS = ("<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>")
"""Harmony tokens that are markup *text* to the engine (the grammar spells them); the other harmony
specials (reserved ids, ``<|startoftext|>``...) are control tokens, and the stop tokens end the turn."""


class GptOssFormat(ToolCallFormat):
    """Harmony messages; a call is a ``commentary`` message addressed to ``functions.NAME``."""

    name: ClassVar[str] = "gpt-oss"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    canitoolcall_families: ClassVar[dict[str, str]] = {"gpt-oss": "strict"}
    free_text_avoid: ClassVar[tuple[str, ...]] = (" to=",)
    """What free text may not contain: a recipient (`` to=``) makes a header a call (or an error)."""

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.block, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        b = self.block
        args = json.dumps(arguments, ensure_ascii=False)
        return f"{self.markers.block_open}{name}<|channel|>{b['channel']}{b['content_types'][0]}<|message|>{args}"

    def block_reader(self, mode: str = "strict") -> GptOssBlocks:
        return GptOssBlocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        return ("}", "<|message|>{}")

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        return text  # a call message has no closing marker: the stop token that ends it is not text

    def check_tools(self, tools: ToolSet) -> None:
        """The name is written in the header, ended by ``<|channel|>``: no whitespace or ``<``."""
        for tool in tools:
            if not tool.name or re.search(r"[\s<]", tool.name):
                raise ToolSchemaError(
                    f"gpt-oss writes the tool name in the header ' to=functions.NAME<|channel|>': {tool.name!r} "
                    "cannot be empty or contain whitespace or '<'",
                    tool=tool.name,
                )

    def fixture_vocabulary(self, repo: str) -> Vocabulary | None:
        if repo.startswith("openai/gpt-oss-"):
            return harmony_vocabulary()
        return None


def _read_table(path: Any, *, special: bool) -> dict[int, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack_from("<I", data, 0)
    pos, out = 4, {}
    for _ in range(n):
        if special:
            i, length = struct.unpack_from("<IH", data, pos)
            pos += 6
            out[i] = data[pos : pos + length]
            pos += length
        else:
            (length,) = struct.unpack_from("<H", data, pos)
            pos += 2
            token = data[pos : pos + length]
            pos += length
            (rank,) = struct.unpack_from("<I", data, pos)
            pos += 4
            out[rank] = token
    if pos != len(data):
        raise TokenizerError(f"{path}: unexpected table layout ({pos} of {len(data)} bytes read)")
    return out


@cache
def harmony_vocabulary() -> Vocabulary:
    """o200k_harmony: the 199,998 o200k_base ranks plus the harmony special tokens, 201,088 ids.

    From ``quicktok-v1``'s data files (checked against every CanIToolCall gpt-oss fixture's ids in
    ``tests/formats/test_format_gpt_oss.py``). The markers of :data:`TEXT_MARKERS` are text; ``<|return|>``,
    ``<|call|>`` and ``<|endoftext|>`` end the turn; every other special id is a control token.
    """
    module, pip = VOCABULARY_PACKAGE
    ranks = _read_table(package_file(module, pip, "data", "o200k.vocab"), special=False)
    specials = _read_table(package_file(module, pip, "data", "o200k_harmony.special"), special=True)
    n = max(*ranks, *specials) + 1
    table = [b""] * n
    for i, token in ranks.items():
        table[i] = token
    for i, token in specials.items():
        table[i] = token
    text = {m.encode() for m in TEXT_MARKERS}
    eos = {i for i, t in specials.items() if t.decode() in GptOssFormat.markers.end_of_turn}
    holes = {i for i in range(n) if i not in ranks and i not in specials}
    control = {i for i, t in specials.items() if t not in text and i not in eos} | holes
    return Vocabulary("o200k-harmony-201088", tuple(table), frozenset(control), frozenset(eos), frozenset(specials))


__all__ = ["GptOssFormat", "harmony_vocabulary"]
