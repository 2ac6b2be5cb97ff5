"""Tool-call formats, registered by name.

Each format lives in its own subpackage with its grammar pieces and its parser side by side, so the
two are built from one description of the format (DESIGN.md invariant 5). Formats are resolved
lazily by name; an out-of-tree format can be named as ``package.module:Class``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import GrammarError

if TYPE_CHECKING:
    from .base import ToolCallFormat

FORMATS: dict[str, str] = {
    "hermes": "toolgrammar.formats.hermes:HermesFormat",
    "qwen-xml": "toolgrammar.formats.qwen_xml:QwenXmlFormat",
}
"""Built-in formats: name -> ``module:Class``. Resolved on first use."""

_cache: dict[str, ToolCallFormat] = {}


def get_format(name: str | ToolCallFormat) -> ToolCallFormat:
    """Return the format called ``name`` (a registered name or ``package.module:Class``)."""
    from .base import ToolCallFormat

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
