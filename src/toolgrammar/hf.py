"""The transformers route, as it is imported: ``from toolgrammar.hf import ToolCallLogitsProcessor``.

A stable public path; the code lives in :mod:`toolgrammar.integrations.hf`.
"""

from toolgrammar.integrations.hf import TokenBudgetWarning, ToolCallLogitsProcessor, vocabulary_of

__all__ = ["TokenBudgetWarning", "ToolCallLogitsProcessor", "vocabulary_of"]
