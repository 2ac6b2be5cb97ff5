"""The ``llama4-pythonic`` format (Llama 4 Scout / Maverick: pythonic tool calls).

``[get_weather(city='Paris'), get_time()]``: the calls of a turn as one Python list, optionally wrapped
in ``<|python_start|>`` ... ``<|python_end|>``; values are Python literals typed by the tool schema; no
reasoning. Described in ``format.toml`` (this folder); grammar pieces in :mod:`.grammar`, the block
reader in :mod:`.parser`.

The list is one block that holds every call of the turn (``block_holds_calls``): the grammar writes one
call, or several joined by ``", "`` under ``parallel_tool_calls``, each ``NAME(KEY=VALUE, ...)`` with the
keyword arguments in schema order and each value a Python literal as ``repr`` writes it (``'text'``,
``True``, ``None``, ``[1, 2]``, ``{'k': 1.5}``; strings in the other quotes are allowed too), bare or
wrapped. :meth:`render_call` / :meth:`canonical_calls` write the bare list with ``repr`` values, which
the grammar accepts and the parser reads back. No Llama 4 tokenizer ships on PyPI:
:meth:`fixture_vocabulary` is ``None`` (the conformance adapter runs the text strategies), and the
grammar is tested at the byte level.
"""

from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.llama4_pythonic.grammar import block_grammar
from toolgrammar.formats.llama4_pythonic.parser import PythonicBlocks, render_call
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")
_KEYWORDS = frozenset(keyword.kwlist)


class Llama4PythonicFormat(ToolCallFormat):
    """Llama 4 pythonic tool calls: one list of calls per turn."""

    name: ClassVar[str] = "llama4-pythonic"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    block_holds_calls: ClassVar[bool] = True
    free_text_avoid: ClassVar[tuple[str, ...]] = (
        "<|python_start|>",
        *(f"[{c}" for c in "_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
    )
    """What content may not contain: ``<|python_start|>``, and ``[`` before a letter or ``_`` (the parser reads
    ``[name(`` as a call list; the grammar keeps the simpler, stricter rule)."""

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.block, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        b = self.block
        return b["list_open"] + render_call(tool if isinstance(tool, str) else tool.name, arguments) + b["list_close"]

    def canonical_calls(self, calls: list[Any]) -> str:
        b = self.block
        return (
            b["list_open"]
            + self.markers.call_separator.join(render_call(c.name, c.arguments) for c in calls)
            + b["list_close"]
        )

    def block_reader(self, mode: str = "strict") -> PythonicBlocks:
        return PythonicBlocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        return (")" + self.block["list_close"], ")" + self.markers.call_separator)

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def closed_cut_block(self, text: str) -> str:
        return text  # the cut list is judged as it is (truncated)

    def check_tools(self, tools: ToolSet) -> None:
        """Names and argument names are Python identifiers in a pythonic call."""
        for tool in tools:
            if not _IDENTIFIER.fullmatch(tool.name) or tool.name in _KEYWORDS:
                raise ToolSchemaError(
                    f"llama4-pythonic writes a call as NAME(...): {tool.name!r} is not a Python identifier",
                    tool=tool.name,
                )
            for key in tool.parameters.get("properties", {}):
                if not _IDENTIFIER.fullmatch(key) or key in _KEYWORDS:
                    raise ToolSchemaError(
                        f"llama4-pythonic writes each argument as KEY=VALUE: {key!r} is not a Python identifier; "
                        "rename the property",
                        tool=tool.name,
                        pointer=f"/properties/{key}",
                        keyword="properties",
                    )


__all__ = ["Llama4PythonicFormat"]
