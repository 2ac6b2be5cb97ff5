"""The on-disk cache of compiled grammars (``$TOOLGRAMMAR_CACHE``, default ``~/.cache/toolgrammar``).

Entries are numpy ``.npz`` files named by a content key (sha256 of everything they depend on:
tools, options, grammar version, and for token-level data the vocabulary), written atomically, so a
stale or concurrent entry can never be read half-written. Set ``TOOLGRAMMAR_CACHE=off`` to disable.
A damaged entry is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def cache_root() -> Path | None:
    """The cache folder, or ``None`` when caching is off."""
    value = os.environ.get("TOOLGRAMMAR_CACHE", "")
    if value.lower() in ("off", "0", "false", "none"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "toolgrammar"


def load(kind: str, key: str) -> dict[str, np.ndarray] | None:
    root = cache_root()
    if root is None:
        return None
    path = root / kind / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError, EOFError):
        return None


def save(kind: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an entry; a read-only or full disk only costs the cache, never the caller."""
    root = cache_root()
    if root is None:
        return
    folder = root / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, folder / f"{key}.npz")
    except OSError:
        return
