"""Tool-call formats, registered by name.

Each format lives in its own subpackage with its grammar pieces and its parser side by side, so the
two are built from one description of the format (DESIGN.md invariant 5). Formats are resolved
lazily by name; an out-of-tree format can be named as ``package.module:Class``.
"""

from __future__ import annotations

import importlib

from toolgrammar.errors import GrammarError
from toolgrammar.formats.base import ToolCallFormat

FORMATS: dict[str, str] = {
    "hermes": "toolgrammar.formats.hermes:HermesFormat",
    "qwen-xml": "toolgrammar.formats.qwen_xml:QwenXmlFormat",
    "gpt-oss": "toolgrammar.formats.gpt_oss:GptOssFormat",
    "gemma4": "toolgrammar.formats.gemma4:Gemma4Format",
    "glm": "toolgrammar.formats.glm:GlmFormat",
    "glm45": "toolgrammar.formats.glm:Glm45Format",
    "llama3-json": "toolgrammar.formats.llama3_json:Llama3JsonFormat",
    "llama4-pythonic": "toolgrammar.formats.llama4_pythonic:Llama4PythonicFormat",
    "mistral": "toolgrammar.formats.mistral:MistralFormat",
    "mistral-v3": "toolgrammar.formats.mistral_v3:MistralV3Format",
    "mistral-think-text": "toolgrammar.formats.mistral_think_text:MistralThinkTextFormat",
    "deepseek": "toolgrammar.formats.deepseek:DeepSeekFormat",
    "deepseek-v3": "toolgrammar.formats.deepseek:DeepSeekV3Format",
    "deepseek-v3.1": "toolgrammar.formats.deepseek:DeepSeekV31Format",
    "deepseek-v3.2": "toolgrammar.formats.deepseek:DeepSeekV32Format",
    "deepseek-v4": "toolgrammar.formats.deepseek:DeepSeekV4Format",
    "deepseek-v4.1": "toolgrammar.formats.deepseek:DeepSeekV41Format",
    "kimi": "toolgrammar.formats.kimi:KimiFormat",
    "kimi-k3": "toolgrammar.formats.kimi:KimiK3Format",
}
"""Built-in formats: name -> ``module:Class``. Resolved on first use. Adding a format is one line here."""

FORMAT_HELP = f"Tool-call format: {', '.join(repr(name) for name in FORMATS)} (or package.module:Class)."
"""The ``--format`` help of every command."""

_cache: dict[str, ToolCallFormat] = {}


def register_format(name: str, spec: str) -> None:
    """Register an out-of-tree format under ``name`` (``spec``: ``package.module:Class``).

    A server does this when it starts; requests may then name it. A request can only *select* a
    registered format: it never names code to import (:func:`registered_format`).
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise GrammarError(f"a format name is a non-empty string without ':', got {name!r}")
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise GrammarError(f"format {name!r}: spec must be 'package.module:Class', got {spec!r}")
    FORMATS[name] = spec
    _cache.pop(name, None)


def registered_format(name: object, *, where: str = "a request") -> str:
    """``name`` if it is a registered format; else a :class:`GrammarError` (nothing is imported).

    For input that arrives as data (a server request): it may select among the formats registered
    when the process started, never name a module to import.
    """
    if not isinstance(name, str) or name not in FORMATS:
        raise GrammarError(
            f"{where} may only name a registered format ({', '.join(sorted(FORMATS))}), got {name!r}; "
            "register others when the server starts: toolgrammar.formats.register_format(name, 'module:Class')"
        )
    return name


def get_format(name: str | ToolCallFormat) -> ToolCallFormat:
    """Return the format called ``name`` (a registered name or ``package.module:Class``)."""
    if isinstance(name, ToolCallFormat):
        return name
    if name in _cache:
        return _cache[name]
    spec = FORMATS.get(name, name if ":" in name else None)
    if spec is None:
        raise GrammarError(f"unknown format {name!r}; known: {', '.join(FORMATS)} (or pass package.module:Class)")
    module_name, _, class_name = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise GrammarError(f"cannot load format {name!r} from {spec!r}: {error}") from error
    fmt = cls()
    _cache[name] = fmt
    return fmt
