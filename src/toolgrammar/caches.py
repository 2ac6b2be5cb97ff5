"""Process-wide caches, in one registry with one :func:`clear`.

Each module that keeps a cache in memory registers a function that empties it, under a dotted name
(``"automata.parts"``, ``"schema.recent_tools"``...) and a scope: ``"compiled"`` for what the process
compiled from tool lists (grammars, tails, skeletons, schema trees, validated tool lists), and
``"tokenizer"`` for what it learned about a tokenizer (token tables' text exits). :func:`clear` empties a
scope (or the caches under a name prefix), so a test or a benchmark gets what a new process knows without
reaching into the modules. The disk cache is not here: see :mod:`toolgrammar.cache`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

Scope = Literal["compiled", "tokenizer"]

_registry: dict[str, tuple[Scope, Callable[[], None]]] = {}
_lock = threading.Lock()


def register(name: str, clear_cache: Callable[[], None], *, scope: Scope = "compiled") -> None:
    """Register ``clear_cache`` (a function that empties one cache) under ``name``; a name registered again
    replaces the earlier function (a module reloaded in a test)."""
    if scope not in ("compiled", "tokenizer"):
        raise ValueError(f"scope must be 'compiled' or 'tokenizer', got {scope!r}")
    with _lock:
        _registry[name] = (scope, clear_cache)


def clear(*prefixes: str, scope: Scope | None = "compiled", keep: tuple[str, ...] = ()) -> list[str]:
    """Empty the registered caches of ``scope`` (every scope with ``scope=None``) whose names start with one of
    ``prefixes`` (all of them when none is given), except those under a name in ``keep``; returns the names
    emptied."""
    with _lock:
        chosen = [
            (name, fn)
            for name, (sc, fn) in _registry.items()
            if (scope is None or sc == scope)
            and (not prefixes or any(_under(name, p) for p in prefixes))
            and not any(_under(name, k) for k in keep)
        ]
    for _name, fn in chosen:
        fn()
    return [name for name, _ in chosen]


def registered() -> dict[str, Scope]:
    """Every registered cache's name and scope."""
    with _lock:
        return {name: sc for name, (sc, _fn) in sorted(_registry.items())}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


__all__ = ["Scope", "clear", "register", "registered"]
