"""Helpers for testing grammars and processors, public so users can test their own tool sets.

- :mod:`toolgrammar.testing.grammar_walks`: :func:`accepts`, :func:`check_grammar`, :func:`random_walk`,
  :func:`replay` (no tokenizer, no torch).
- :mod:`toolgrammar.testing.dispatch`: the torch operations a step dispatches and the reads of the device it
  makes, counted on the CPU (imported on its own: it needs torch).
- :mod:`toolgrammar.testing.vllm_server`: a tiny model on disk and a vLLM OpenAI server started and stopped
  (imported on its own: it needs vLLM's client libraries).
"""

from toolgrammar.testing.grammar_walks import (
    Replay,
    Walk,
    accepts,
    allowed_ids,
    check_grammar,
    is_allowed,
    random_walk,
    replay,
)

__all__ = ["Replay", "Walk", "accepts", "allowed_ids", "check_grammar", "is_allowed", "random_walk", "replay"]
