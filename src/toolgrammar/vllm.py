"""The vLLM route, as it is imported: ``from toolgrammar.vllm import structured_outputs, extra_args``.

A stable public path (and the ``vllm.logits_processors`` entry point's module); the code lives in
:mod:`toolgrammar.integrations.vllm`. The test server helpers are in :mod:`toolgrammar.testing.vllm_server`.
"""

from toolgrammar.integrations.vllm import (
    ENTRY_POINT,
    EXTRA_ARGS_KEY,
    VllmToolCallLogitsProcessor,
    extra_args,
    processor_stats,
    request_spec,
    structural_tag,
    structured_outputs,
    turn_structural_tag,
    xgrammar_regex,
)

__all__ = [
    "ENTRY_POINT",
    "EXTRA_ARGS_KEY",
    "VllmToolCallLogitsProcessor",
    "extra_args",
    "processor_stats",
    "request_spec",
    "structural_tag",
    "structured_outputs",
    "turn_structural_tag",
    "xgrammar_regex",
]
