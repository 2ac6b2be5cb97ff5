"""The ``mistral-think-text`` format (Magistral 2506: tokenizer v11, reasoning as plain-text ``<think>``).

Calls as in ``mistral`` (``[TOOL_CALLS]NAME[ARGS]{json}``); the reasoning markers are ``<think>`` and
``</think>`` written as ordinary text. Described in ``format.toml`` (this folder); the block reader and
grammar are the ``mistral`` format's.
"""

from __future__ import annotations

from typing import Any, ClassVar

from toolgrammar.formats.markers import Markers
from toolgrammar.formats.mistral import MistralFormat
from toolgrammar.formats.spec import format_spec, markers_of


class MistralThinkTextFormat(MistralFormat):
    """``mistral`` calls with plain-text ``<think>`` reasoning."""

    name: ClassVar[str] = "mistral-think-text"
    markers: ClassVar[Markers] = markers_of(__name__)
    block: ClassVar[dict[str, Any]] = format_spec(__name__)["block"]
    canitoolcall_families: ClassVar[dict[str, str]] = {}

    def fixture_format(self, repo: str) -> str | None:
        return None


__all__ = ["MistralThinkTextFormat"]
