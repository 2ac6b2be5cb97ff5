"""The on-disk cache of compiled grammars (``$TOOLGRAMMAR_CACHE``, default ``~/.cache/toolgrammar``).

Entries are numpy ``.npz`` files named by a content key (sha256 of everything they depend on:
tools, options, grammar version, and for token-level data the vocabulary). Set
``TOOLGRAMMAR_CACHE=off`` to disable.

A cache must never change what a grammar allows, so nothing read from it is trusted:

- every entry stores a format version and a SHA-256 digest over its kind, its key and every array
  (name, dtype, shape, bytes); :func:`load` recomputes it, and the caller's ``check`` then verifies
  shapes and ranges. An entry that is unreadable (truncated, not a zip, not an ``.npz``), whose digest
  does not match, or that fails ``check`` is ignored with a warning naming the file, and the caller
  rebuilds it (overwriting the bad entry); an entry of an older format version (an older toolgrammar
  wrote it) is rebuilt silently: an upgrade is not damage;
- writes go to a temporary file in the same folder, then ``os.replace``: a reader never sees half an
  entry, and a failed write removes its temporary file. A read-only or full disk costs the cache only.

Each kind keeps at most :data:`MAX_ENTRIES` entries, the least recently used removed first.

The digest detects damage and edits by anything that does not recompute it; it is not a signature
against someone who can write to the cache folder (they could as well edit the installed code).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

FORMAT_VERSION = 2
"""Bumped whenever the entry layout changes; entries of any other version are rebuilt."""

_VERSION = "__version__"
_DIGEST = "__digest__"

Check = Callable[[dict[str, np.ndarray]], str | None]
"""A caller's verification of a loaded entry: ``None`` when usable, else why not (for the warning)."""


def cache_root() -> Path | None:
    """The cache folder, or ``None`` when caching is off."""
    value = os.environ.get("TOOLGRAMMAR_CACHE", "")
    if value.lower() in ("off", "0", "false", "none"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "toolgrammar"


def digest(kind: str, key: str, arrays: dict[str, np.ndarray], version: int = FORMAT_VERSION) -> np.ndarray:
    """The SHA-256 of an entry's content, as the uint8 array stored beside it."""
    h = hashlib.sha256()
    for part in (f"toolgrammar-cache/{version}", kind, key):
        h.update(part.encode())
        h.update(b"\0")
    for name in sorted(arrays):
        array = np.asarray(arrays[name])
        h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        h.update(array.tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


def load(kind: str, key: str, check: Check | None = None) -> dict[str, np.ndarray] | None:
    """A verified entry, or ``None`` (a miss, or a bad entry: warned about, to be rebuilt)."""
    root = cache_root()
    if root is None:
        return None
    path = root / kind / f"{key}.npz"
    arrays = load_file(path, kind, key, check)
    if arrays is not None:
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last entry of its kind to go (see MAX_ENTRIES)
    return arrays


def load_file(path: Path, kind: str, key: str, check: Check | None = None) -> dict[str, np.ndarray] | None:
    """:func:`load` of the entry at ``path`` (a cache entry, or one shipped in the package), verified alike."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        return None
    except Exception as error:  # BadZipFile, a pickled or truncated member, EOF, permissions...
        return _ignored(path, f"unreadable ({type(error).__name__}: {error})")
    if _older_version(arrays):
        return None  # written by an older toolgrammar: not damage, a silent miss (rebuilt and overwritten)
    problem = _verify(kind, key, arrays)
    if problem is None:
        arrays = {k: v for k, v in arrays.items() if k not in (_VERSION, _DIGEST)}
        try:
            problem = check(arrays) if check is not None else None
        except Exception as error:  # a check that trips over a malformed entry: still a bad entry
            problem = f"{type(error).__name__}: {error}"
    if problem is not None:
        return _ignored(path, problem)
    return arrays


def _older_version(arrays: dict[str, np.ndarray]) -> bool:
    version = arrays.get(_VERSION)
    return (
        version is not None and version.shape == () and version.dtype.kind in "iu" and 0 < int(version) < FORMAT_VERSION
    )


def _verify(kind: str, key: str, arrays: dict[str, np.ndarray]) -> str | None:
    version = arrays.get(_VERSION)
    if version is None or version.shape != () or version.dtype.kind not in "iu":
        return "no format version"
    if int(version) != FORMAT_VERSION:
        return f"format version {int(version)}, expected {FORMAT_VERSION}"
    stored = arrays.get(_DIGEST)
    payload = {k: v for k, v in arrays.items() if k not in (_VERSION, _DIGEST)}
    if stored is None or stored.dtype != np.uint8 or not np.array_equal(stored, digest(kind, key, payload)):
        return "content hash does not match (damaged or edited)"
    return None


def _ignored(path: Path, reason: str) -> None:
    warnings.warn(f"toolgrammar cache: ignoring {path}: {reason}; rebuilding it", RuntimeWarning, stacklevel=3)
    return None


def stamped(kind: str, key: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` with the format version and the digest :func:`load_file` verifies: an entry as stored."""
    return {**arrays, _VERSION: np.int64(FORMAT_VERSION), _DIGEST: digest(kind, key, arrays)}


def save(kind: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an entry atomically; a read-only or full disk only costs the cache, never the caller."""
    root = cache_root()
    if root is None:
        return
    folder = root / kind
    entry = stamped(kind, key, arrays)
    tmp: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key[:16]}-", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **entry)
        os.replace(tmp, folder / f"{key}.npz")
        tmp = None
    except OSError:
        return
    finally:
        if tmp is not None:  # the write failed (or was interrupted): leave no temporary file behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _bound(folder)


MAX_ENTRIES = 1024
"""Entries kept per kind: past this, a save removes the least recently used ones (by modification time,
which a hit renews). Most entries are per configuration, not per tool list (turn skeletons that do not
ship); those per tool list (a validated list the careful normalizer read, a large turn's budget bound)
would otherwise grow with every new list a server sees."""


def _bound(folder: Path) -> None:
    try:
        entries = [(e.stat().st_mtime_ns, e.path) for e in os.scandir(folder) if e.name.endswith(".npz")]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort()
    for _, path in entries[: len(entries) - MAX_ENTRIES]:
        with contextlib.suppress(OSError):  # another process removed it first, or the folder is read-only
            os.unlink(path)
