"""The ``gemma4`` format (Google Gemma 4).

``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, calls back to back, optional reasoning first as
``<|channel>thought\\n...<channel|>``. Values in Gemma 4's object notation (``format.toml``): bare keys
in Jinja ``dictsort`` order (case-insensitive), strings between ``<|"|>`` tokens, never escaped,
numbers as Python's ``str()``, ``true``/``false``/``null``. :func:`render_call` is the template's
spelling; the grammar (:mod:`.grammar`) generates exactly it, the parser (:mod:`.parser`) reads it
back (and tolerates whitespace between items).

No Gemma 4 tokenizer ships on PyPI: :meth:`Gemma4Format.fixture_vocabulary` is ``None``, so the
conformance adapter runs the text strategies only, and the grammar is tested at the byte level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.gemma4.grammar import block_grammar
from toolgrammar.formats.gemma4.notation import CALL_PREFIX, KEY_FORBIDDEN, QUOTE, dictsort, render_value
from toolgrammar.formats.gemma4.parser import Gemma4Blocks, block_name
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import markers_of

if TYPE_CHECKING:
    from toolgrammar.automata.nodes import Node
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import Tool, ToolSet


class Gemma4Format(ToolCallFormat):
    """``<|tool_call>call:NAME{...}<tool_call|>`` blocks in Gemma 4's object notation."""

    name: ClassVar[str] = "gemma4"
    markers: ClassVar[Markers] = markers_of(__name__)
    canitoolcall_families: ClassVar[dict[str, str]] = {"gemma4": "strict"}

    def block_grammar(self, tools: ToolSet, options: GrammarOptions) -> Node:
        return block_grammar(tools, options, self.markers)

    def render_call(self, tool: Tool | str, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return f"{self.markers.block_open}{CALL_PREFIX}{name}{render_value(arguments)}{self.markers.block_close}"

    def block_reader(self, mode: str = "strict") -> Gemma4Blocks:
        return Gemma4Blocks(mode, self.markers)

    def budget_literals(self) -> tuple[str, ...]:
        return ("}" + self.markers.block_close, QUOTE)

    def block_name(self, raw: str) -> str | None:
        return block_name(raw)

    def closed_cut_block(self, text: str) -> str:
        return text + self.markers.block_close

    def check_tools(self, tools: ToolSet) -> None:
        """Names are written between ``call:`` and ``{``; keys bare before ``:``."""
        for tool in tools:
            if not tool.name or any(c in tool.name for c in " \t\r\n<{"):
                raise ToolSchemaError(
                    f"gemma4 writes the tool name as 'call:NAME{{': {tool.name!r} cannot be empty or contain "
                    "whitespace, '<' or '{'",
                    tool=tool.name,
                )
            _check_keys(tool.parameters, tool.name, "")


def _check_keys(schema: Any, tool: str, pointer: str) -> None:
    if not isinstance(schema, dict):
        return
    for key, sub in (schema.get("properties") or {}).items():
        if not key.strip() or key != key.strip() or any(w in key for w in KEY_FORBIDDEN):
            raise ToolSchemaError(
                f"gemma4 writes keys bare before ':': {key!r} cannot be empty, start or end with whitespace, or "
                f"contain any of {' '.join(KEY_FORBIDDEN[:-1])} or a line break; rename the property",
                tool=tool,
                pointer=f"{pointer}/properties/{key}",
                keyword="properties",
            )
        _check_keys(sub, tool, f"{pointer}/properties/{key}")
    for word in ("items", "additionalProperties"):
        _check_keys(schema.get(word), tool, f"{pointer}/{word}")
    for i, sub in enumerate(schema.get("anyOf") or ()):
        _check_keys(sub, tool, f"{pointer}/anyOf/{i}")


__all__ = ["Gemma4Format", "dictsort", "render_value"]
