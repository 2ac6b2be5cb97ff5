"""The llama.cpp route, as it is imported: ``from toolgrammar.llamacpp import generate_turn``.

A stable public path; the code lives in :mod:`toolgrammar.integrations.llamacpp` (no torch needed).
"""

from toolgrammar.integrations.llamacpp import LlamaToolCallProcessor, generate_turn, llama_vocabulary

__all__ = ["LlamaToolCallProcessor", "generate_turn", "llama_vocabulary"]
