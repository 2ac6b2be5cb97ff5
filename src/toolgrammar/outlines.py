"""The outlines route, as it is imported: ``from toolgrammar.outlines import ToolCallProcessor``.

A stable public path; the code lives in :mod:`toolgrammar.integrations.outlines`.
"""

from toolgrammar.integrations.outlines import ToolCallGenerator, ToolCallProcessor, ToolPrompt, chat_prompt

__all__ = ["ToolCallGenerator", "ToolCallProcessor", "ToolPrompt", "chat_prompt"]
