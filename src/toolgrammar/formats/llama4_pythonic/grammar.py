"""Grammar pieces of the ``llama4-pythonic`` format: not written yet.

The parser reads Python-literal values; a grammar needs a schema-typed Python-literal value grammar (quoted
strings with Python escapes, ``True`` / ``False`` / ``None``, dicts and lists), which
:mod:`toolgrammar.json_grammar` does not provide. Until it exists, compiling this format is a clear error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import GrammarError

if TYPE_CHECKING:
    from ...automaton import Node
    from ...grammar import GrammarOptions
    from ...tools import ToolSet
    from ..base import Markers


def block_grammar(tools: ToolSet, options: GrammarOptions, block: dict[str, Any], markers: Markers) -> Node:
    raise GrammarError(
        "llama4-pythonic has a strict parser but no grammar yet (schema-typed Python literals); "
        "constrain Llama 4 with another format or parse only"
    )
