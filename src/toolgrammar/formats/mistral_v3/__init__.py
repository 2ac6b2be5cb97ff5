"""The ``mistral-v3`` format (mistral-common tokenizer v3: Mistral-7B-Instruct-v0.3).

``[TOOL_CALLS] [{"name": "NAME", "arguments": {...}}, ...]``: every call of the turn in one JSON array,
no closing marker, no reasoning. Described in ``format.toml`` (this folder); the block reader and
grammar are the ``mistral`` format's (:mod:`toolgrammar.formats.mistral`), in their ``array`` shape.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from toolgrammar.formats.markers import Markers
from toolgrammar.formats.mistral import MistralFormat
from toolgrammar.formats.spec import format_spec, markers_of

_NAME = re.compile(r'"name"\s*:\s*"([^"\\\n]*)"')


class MistralV3Format(MistralFormat):
    """Mistral v3 JSON-array tool calls."""

    name: ClassVar[str] = "mistral-v3"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    canitoolcall_families: ClassVar[dict[str, str]] = {}
    block_holds_calls: ClassVar[bool] = True

    def canonical_calls(self, calls: list[Any]) -> str:
        b = self.block
        items = [{b["name_key"]: c.name, b["arguments_key"]: c.arguments} for c in calls]
        return self.markers.block_open + b["array_open"][:-1] + json.dumps(items, ensure_ascii=False)

    def budget_literals(self) -> tuple[str, ...]:
        return ("}]", "}, {")

    def block_name(self, raw: str) -> str | None:
        match = _NAME.search(raw)
        return match.group(1) if match else None

    def check_tools(self, tools: Any) -> None:
        """Names are JSON strings here: any name will do."""

    def fixture_format(self, repo: str) -> str | None:
        return None


__all__ = ["MistralV3Format"]
