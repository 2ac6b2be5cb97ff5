"""toolgrammar: every tool call valid, and the numbers on what constraining costs and hides.

Public API (everything else is internal)::

    from toolgrammar import load_tools, compile_turn, parse_turn, ToolCallLogitsProcessor

- :func:`load_tools` validates and normalizes a tool list (the one place schemas are read).
- :func:`compile_turn` compiles tools + format + policy into the grammar of a whole turn.
- :func:`parse_turn` / :class:`TurnStreamParser` judge a turn strictly (reasoning, content, calls);
  :func:`find_other_shape_calls` judges the calls a turn wrote as fenced or bare JSON instead.
- :class:`ToolCallLogitsProcessor` masks logits in ``model.generate`` (transformers);
  :func:`generate_turn` does a whole turn with it (chat template, generate, decode, parse), the
  token budget given once.
- :func:`run_compare` runs free and constrained sampling side by side (the ``compare`` command).
- ``toolgrammar.hf``, ``toolgrammar.vllm`` and ``toolgrammar.outlines`` are the integrations' public paths.

The package is built in layers, each importing only the layers beneath it (``docs/architecture.md``
draws them; ``lint-imports`` checks them with the contracts in ``pyproject.toml``), bottom up:
the ground modules (``errors``, ``cache``, ``caches``, ``packages``, ``native``, ``bundled``);
``schema``, ``automata`` and ``vocab``, side by side and blind to each other; ``values`` (JSON Schema
lowered to automata); ``formats``; ``turn``; ``runtime``; ``integrations``; ``evaluate``; ``cli`` and
``testing``. Everything below ``runtime``'s torch-facing modules imports no torch, transformers or vLLM;
the names here are resolved lazily, so ``import toolgrammar`` imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolgrammar.lazy_exports import lazy_getattr

__version__ = "0.1.0"

_LAZY = {
    "load_tools": "toolgrammar.schema.loading",
    "Tool": "toolgrammar.schema.toolset",
    "ToolSet": "toolgrammar.schema.toolset",
    "compile_turn": "toolgrammar.turn.grammar",
    "GrammarOptions": "toolgrammar.turn.grammar",
    "TurnGrammar": "toolgrammar.turn.grammar",
    "parse_turn": "toolgrammar.turn.parser",
    "TurnStreamParser": "toolgrammar.turn.parser",
    "TurnParse": "toolgrammar.formats.calls",
    "ToolCall": "toolgrammar.formats.calls",
    "CallError": "toolgrammar.formats.calls",
    "ERROR_KINDS": "toolgrammar.formats.calls",
    "ToolCallLogitsProcessor": "toolgrammar.integrations.hf",
    "TokenBudgetWarning": "toolgrammar.errors",
    "generate_turn": "toolgrammar.integrations.hf_generate",
    "generate_turns": "toolgrammar.integrations.hf_generate",
    "GeneratedTurn": "toolgrammar.integrations.generated_turn",
    "find_other_shape_calls": "toolgrammar.evaluate.other_shapes",
    "OtherShapeCall": "toolgrammar.evaluate.other_shapes",
    "run_compare": "toolgrammar.evaluate.compare",
    "CompareConfig": "toolgrammar.evaluate.compare",
    "Vocabulary": "toolgrammar.vocab",
    "ToolgrammarError": "toolgrammar.errors",
    "ToolSchemaError": "toolgrammar.errors",
    "GrammarError": "toolgrammar.errors",
    "TokenizerError": "toolgrammar.errors",
    "ProcessorError": "toolgrammar.errors",
}

__all__ = [
    "ERROR_KINDS",
    "CallError",
    "CompareConfig",
    "GeneratedTurn",
    "GrammarError",
    "GrammarOptions",
    "OtherShapeCall",
    "ProcessorError",
    "TokenBudgetWarning",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ToolCallLogitsProcessor",
    "ToolSchemaError",
    "ToolSet",
    "ToolgrammarError",
    "TurnGrammar",
    "TurnParse",
    "TurnStreamParser",
    "Vocabulary",
    "__version__",
    "compile_turn",
    "find_other_shape_calls",
    "generate_turn",
    "generate_turns",
    "load_tools",
    "parse_turn",
    "run_compare",
]


__getattr__ = lazy_getattr("toolgrammar", _LAZY, globals())


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from toolgrammar.errors import (
        GrammarError,
        ProcessorError,
        TokenBudgetWarning,
        TokenizerError,
        ToolgrammarError,
        ToolSchemaError,
    )
    from toolgrammar.evaluate.compare import CompareConfig, run_compare
    from toolgrammar.evaluate.other_shapes import OtherShapeCall, find_other_shape_calls
    from toolgrammar.formats.calls import ERROR_KINDS, CallError, ToolCall, TurnParse
    from toolgrammar.integrations.hf import ToolCallLogitsProcessor
    from toolgrammar.integrations.hf_generate import GeneratedTurn, generate_turn, generate_turns
    from toolgrammar.schema import Tool, ToolSet, load_tools
    from toolgrammar.turn.grammar import GrammarOptions, TurnGrammar, compile_turn
    from toolgrammar.turn.parser import TurnStreamParser, parse_turn
    from toolgrammar.vocab import Vocabulary
