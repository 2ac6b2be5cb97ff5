"""vLLM's ``vllm.general_plugins`` entry point: register toolgrammar's tool-call parsers by name.

vLLM calls :func:`register_tool_parsers` in each of its processes. It only records names
(``ToolParserManager.register_lazy_module``): :mod:`toolgrammar.integrations.vllm_tool_parser` is imported when a
server is started with ``--tool-call-parser toolgrammar_hermes`` (or ``toolgrammar_qwen_xml``).
"""

from __future__ import annotations

TOOL_PARSERS = {
    "toolgrammar_hermes": "ToolgrammarHermesToolParser",
    "toolgrammar_qwen_xml": "ToolgrammarQwenXmlToolParser",
}
"""``--tool-call-parser`` name -> class in :mod:`toolgrammar.integrations.vllm_tool_parser`."""


def register_tool_parsers() -> None:
    from vllm.tool_parsers import ToolParserManager

    for name, class_name in TOOL_PARSERS.items():
        ToolParserManager.register_lazy_module(name, "toolgrammar.integrations.vllm_tool_parser", class_name)
