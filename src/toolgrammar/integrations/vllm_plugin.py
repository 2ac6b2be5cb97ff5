"""vLLM's ``vllm.general_plugins`` entry point: register a toolgrammar tool-call parser per registered format.

vLLM calls :func:`register_tool_parsers` in each of its processes. It only records names
(``ToolParserManager.register_lazy_module``): :mod:`toolgrammar.integrations.vllm_tool_parser` is imported when a
server is started with ``--tool-call-parser toolgrammar_<format>``. The names are derived from the format
registry (:data:`toolgrammar.formats.FORMATS`): a format added there is served with no change here.
``toolgrammar formats`` lists them.
"""

from __future__ import annotations

from toolgrammar.formats import FORMATS

PARSER_PREFIX = "toolgrammar_"


def parser_name(format_name: str) -> str:
    """The ``--tool-call-parser`` name of a format: ``toolgrammar_`` and the format's name, ``-`` and ``.`` as ``_``."""
    return PARSER_PREFIX + format_name.replace("-", "_").replace(".", "_")


def parser_class_name(format_name: str) -> str:
    """The name of the format's parser class in :mod:`toolgrammar.integrations.vllm_tool_parser`."""
    words = format_name.replace(".", "-").split("-")
    return "Toolgrammar" + "".join(w[:1].upper() + w[1:] for w in words) + "ToolParser"


def tool_parsers() -> dict[str, tuple[str, str]]:
    """``--tool-call-parser`` name -> (format name, class name), one per registered format, in registry order."""
    return {parser_name(name): (name, parser_class_name(name)) for name in FORMATS}


TOOL_PARSERS = {name: class_name for name, (_, class_name) in tool_parsers().items()}
"""``--tool-call-parser`` name -> class in :mod:`toolgrammar.integrations.vllm_tool_parser` (the built-in formats)."""


def register_tool_parsers() -> None:
    from vllm.tool_parsers import ToolParserManager

    for name, (_, class_name) in tool_parsers().items():
        ToolParserManager.register_lazy_module(name, "toolgrammar.integrations.vllm_tool_parser", class_name)


__all__ = ["PARSER_PREFIX", "TOOL_PARSERS", "parser_class_name", "parser_name", "register_tool_parsers", "tool_parsers"]
