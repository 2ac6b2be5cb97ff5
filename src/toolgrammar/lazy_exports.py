"""Names a package re-exports from its modules, imported on first use: one mechanism for every package that
keeps its import light (``toolgrammar`` itself, :mod:`toolgrammar.schema`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, modules: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``modules`` maps each re-exported name to the module that
    defines it; the first lookup imports that module and keeps the value in ``namespace`` (the package's
    globals), so later lookups cost nothing."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__


__all__ = ["lazy_getattr"]
