"""The optional C core: which vocabulary walks run in C, and the switch to turn it off.

``toolgrammar._native`` (``src/toolgrammar/_native.c``, built by ``pip install`` where a C compiler is
found) walks the token trie depth-first and skips every subtree the automaton rejects, and walks the
budget bound's token edges; :mod:`toolgrammar.runtime.token_table` and :mod:`toolgrammar.runtime.token_grammar` use it
when it is there and walks with numpy
when it is not. The compiler uses it for subset construction, the joins of composed parts, pruning
and minimization. Both give the same masks and the same automata, states numbered alike
(``tests/base/test_native.py`` checks it state by state), so the core changes how fast a compile or a first
visit is, never what it allows.

``TOOLGRAMMAR_NATIVE=0`` turns the core off: to compare the two, or to rule the core out when something
looks wrong. It is read when a token table is built (the mask walks keep that table's choice) and at
each automaton compile (subset construction, joins, pruning, minimization).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV = "TOOLGRAMMAR_NATIVE"


def _load() -> ModuleType | None:
    # An optional compiled extension (setup.py builds it where a C compiler is found); by name, so that
    # this ground module does not import the package it lives in.
    try:
        return importlib.import_module("toolgrammar._native")
    except ImportError:
        return None


_module = _load()


def built() -> bool:
    """Whether the C core was built with this install."""
    return _module is not None


def module() -> ModuleType | None:
    """The C core, or ``None`` where it was not built or ``TOOLGRAMMAR_NATIVE=0`` turns it off."""
    if os.environ.get(ENV, "1").strip().lower() in {"0", "false", "no", "off"}:
        return None
    return _module


def describe() -> str:
    """One line for reports and benchmarks: whether the first-visit walks run in C."""
    if _module is None:
        return "numpy walks (the C core was not built: no C compiler at install time)"
    if module() is None:
        return f"numpy walks ({ENV}=0)"
    return "C core (toolgrammar._native)"
