"""The Mistral vocabularies, read from ``mistral-common``'s data files without importing the package.

- ``tekken_240911.json`` (tokenizer v11 / v13: Mistral Small 3.x, Devstral, Ministral 3, Magistral):
  byte-level, ids 0..999 are control tokens, an ordinary token's id is its rank + 1000, 131,072 ids.
  The file names the control tokens 0..19 only (mistral-common's defaults); the tool and reasoning ones
  later tokenizers add are listed here (:data:`TEKKEN_CONTROL`).
- ``mistral_instruct_tokenizer_240323.model.v3`` (Mistral-7B-Instruct-v0.3): sentencepiece, 32,768 ids,
  read from its protobuf (pieces, types): ``▁`` is a space, ``<0xNN>`` pieces are bytes.

The tool-call and reasoning markers are text in these vocabularies (the grammar writes them), the other
control tokens are control tokens; ``</s>`` ends the turn.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

from toolgrammar.errors import TokenizerError
from toolgrammar.packages import package_file
from toolgrammar.vocab import Vocabulary

PIP = "mistral-common==1.13.1"
TEKKEN_FILE = ("data", "tekken_240911.json")
SENTENCEPIECE_V3_FILE = ("data", "mistral_instruct_tokenizer_240323.model.v3")

TEKKEN_CONTROL: dict[int, str] = {
    0: "<unk>",
    1: "<s>",
    2: "</s>",
    3: "[INST]",
    4: "[/INST]",
    5: "[AVAILABLE_TOOLS]",
    6: "[/AVAILABLE_TOOLS]",
    7: "[TOOL_RESULTS]",
    8: "[/TOOL_RESULTS]",
    9: "[TOOL_CALLS]",
    10: "[IMG]",
    11: "<pad>",
    12: "[IMG_BREAK]",
    13: "[IMG_END]",
    14: "[PREFIX]",
    15: "[MIDDLE]",
    16: "[SUFFIX]",
    17: "[SYSTEM_PROMPT]",
    18: "[/SYSTEM_PROMPT]",
    19: "[TOOL_CONTENT]",
    32: "[ARGS]",
    33: "[CALL_ID]",
    34: "[THINK]",
    35: "[/THINK]",
}
"""Control token id -> text (0..19 from mistral-common's defaults; 32..35 as the v11 / v13 tekken files of
Mistral Small 3.2 and Magistral 2509 define them, checked against the fixtures' ids)."""

MARKERS = frozenset({"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"})
"""Control tokens the grammar writes: text (their literal bytes) in these vocabularies."""

EOS = ("</s>",)


@cache
def tekken_vocabulary() -> Vocabulary:
    """The tekken v11/v13 vocabulary (131,072 ids), built once per process."""
    return _tekken(package_file("mistral_common", PIP, *TEKKEN_FILE), "mistral-tekken-131k")


def _tekken(path: Path, name: str) -> Vocabulary:
    data = json.loads(path.read_text(encoding="utf-8"))
    config = data["config"]
    n_special = int(config["default_num_special_tokens"])
    size = int(config["default_vocab_size"])
    table = [b""] * size
    special: set[int] = set(range(n_special))
    for entry in data["vocab"][: size - n_special]:
        table[int(entry["rank"]) + n_special] = base64.b64decode(entry["token_bytes"])
    for i, text in TEKKEN_CONTROL.items():
        table[i] = text.encode("utf-8")
        if text in MARKERS:
            special.discard(i)
    eos = {i for i, text in TEKKEN_CONTROL.items() if text in EOS}
    return Vocabulary(name, tuple(table), frozenset(special), frozenset(eos), frozenset(range(n_special)))


def _varint(data: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = data[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _fields(data: bytes):  # type: ignore[no-untyped-def]
    """(field number, wire type, value) of one protobuf message (varint, 64-bit, bytes, 32-bit)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i : i + n], i + n
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@cache
def sentencepiece_v3_vocabulary() -> Vocabulary:
    """Mistral-7B-Instruct-v0.3's sentencepiece vocabulary (32,768 ids), built once per process.

    A piece's bytes: ``▁`` -> a space (so the first word of a turn carries a leading space, as the
    model writes it), ``<0xNN>`` byte pieces -> that byte, control and unknown pieces -> their text.
    """
    return _sentencepiece(package_file("mistral_common", PIP, *SENTENCEPIECE_V3_FILE), "mistral-v3-32k")


def _sentencepiece(path: Path, name: str) -> Vocabulary:
    table: list[bytes] = []
    special: set[int] = set()
    added: set[int] = set()
    for number, _, value in _fields(path.read_bytes()):
        if number != 1:
            continue
        piece, kind = "", NORMAL
        for n, _, v in _fields(value):  # type: ignore[arg-type]
            if n == 1:
                piece = v.decode("utf-8")  # type: ignore[union-attr]
            elif n == 3:
                kind = int(v)  # type: ignore[arg-type]
        i = len(table)
        if kind == BYTE:
            table.append(bytes([int(piece[3:5], 16)]))
        elif kind in (CONTROL, UNKNOWN):
            table.append(piece.encode("utf-8"))
            added.add(i)
            if piece not in MARKERS:
                special.add(i)
        else:
            table.append(piece.replace("\u2581", " ").encode("utf-8"))
            if kind == USER_DEFINED:
                added.add(i)
    eos = {i for i, b in enumerate(table) if b.decode("utf-8", "replace") in EOS and i in added}
    return Vocabulary(name, tuple(table), frozenset(special), frozenset(eos), frozenset(added))


def is_mistral_common_tokenizer(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` is vLLM's ``MistralTokenizer`` (``--tokenizer-mode mistral``), which wraps
    mistral-common's own tokenizer rather than a transformers one."""
    return bool(getattr(tokenizer, "IS_MISTRAL_TOKENIZER", False)) and hasattr(tokenizer, "instruct")


def mistral_common_vocabulary(tokenizer: Any) -> Vocabulary:
    """The vocabulary of vLLM's ``MistralTokenizer``, read from the file mistral-common loaded (a tekken
    ``.json`` or a sentencepiece ``.model``), as :func:`tekken_vocabulary` and
    :func:`sentencepiece_v3_vocabulary` read mistral-common's bundled copies (built once per file)."""
    inner = tokenizer.instruct.tokenizer
    path = Path(getattr(inner, "file_path", "") or "")
    if not path.is_file():
        raise TokenizerError(f"cannot find the file of mistral-common tokenizer {type(inner).__name__}")
    return mistral_file_vocabulary(str(path.resolve()))


@cache
def mistral_file_vocabulary(path: str) -> Vocabulary:
    """The vocabulary of a mistral-common tokenizer file: tekken (``.json``) or sentencepiece (anything else)."""
    tekken = path.endswith(".json")
    bundled = {
        package_file("mistral_common", PIP, *TEKKEN_FILE).resolve(): tekken_vocabulary,
        package_file("mistral_common", PIP, *SENTENCEPIECE_V3_FILE).resolve(): sentencepiece_v3_vocabulary,
    }
    for file, read in bundled.items():
        if Path(path).read_bytes() == file.read_bytes():
            return read()
    name = f"mistral-{'tekken' if tekken else 'spm'}-{Path(path).name}"
    return _tekken(Path(path), name) if tekken else _sentencepiece(Path(path), name)


__all__ = [
    "MARKERS",
    "TEKKEN_CONTROL",
    "is_mistral_common_tokenizer",
    "mistral_common_vocabulary",
    "mistral_file_vocabulary",
    "sentencepiece_v3_vocabulary",
    "tekken_vocabulary",
]
