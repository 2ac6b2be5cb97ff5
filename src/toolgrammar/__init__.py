"""toolgrammar: every tool call valid, and the numbers on what constraining costs and hides.

Import boundaries: ``tools``, ``turn``, ``formats``, ``automaton``, ``grammar`` and ``parser`` import
no torch, transformers or vLLM (a test enforces it); ``engine`` needs numpy only; ``hf`` and ``vllm``
import their frameworks.
"""

from __future__ import annotations

__version__ = "0.1.0"
