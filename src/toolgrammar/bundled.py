"""The data shipped inside the package: the seed tools, the bundled tasks, the example repository.

Ground level, so that any layer may name the bundled tools (the golden exports are built from them, the
side-by-side mode runs on them) without importing the layer that uses them most.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled_tools_path() -> Path:
    """The five seed tools (``read_file``, ``list_files``, ``grep``, ``write_file``, ``run_tests``)."""
    return Path(str(resources.files("toolgrammar") / "data" / "tools.json"))


def bundled_tasks_path() -> Path:
    """The bundled coding-agent tasks over the example repository (44 of them)."""
    return Path(str(resources.files("toolgrammar") / "data" / "tasks.jsonl"))


__all__ = ["bundled_tasks_path", "bundled_tools_path"]
