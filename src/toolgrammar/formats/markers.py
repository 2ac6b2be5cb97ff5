"""The literal markers of a tool-call format (``[markers]`` of its ``format.toml``).

Every layer of a format reads them: the block grammar writes them, the block reader and the turn reader
(:mod:`toolgrammar.formats.reader`) look for them, and :class:`~toolgrammar.formats.base.ToolCallFormat`
carries them (:mod:`toolgrammar.formats.base` re-exports :class:`Markers`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Markers:
    """The literal markers of a format. Each one is a single added token in Qwen vocabularies."""

    block_open: str = "<tool_call>"
    """Opens a tool-call block; the trigger the engine watches in free text."""
    block_close: str = "</tool_call>"
    """Closes a tool-call block."""
    think_open: str = "<think>"
    """Opens the reasoning part."""
    think_close: str = "</think>"
    """Closes the reasoning part."""
    call_separator: str = "\n"
    """What the chat template writes between two consecutive blocks."""
    leak: tuple[str, ...] = (
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
    )
    """Markup that must never leak into content, reasoning, names or arguments."""
    end_of_turn: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
    """The tokens that end an assistant turn in this format's models (generation stops at any of them)."""


__all__ = ["Markers"]
