"""A GBNF grammar as llama.cpp's own grammar sampler holds it: the judge the llama.cpp tests share."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import llama_cpp


class LlamaGrammar:
    """A GBNF grammar as llama.cpp's grammar sampler holds it, over a loaded model's vocabulary."""

    def __init__(self, llm: Any, gbnf: str) -> None:
        self.llm = llm
        self.vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self.sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode("utf-8"), b"root")
        self.end = llama_cpp.llama_vocab_eos(self.vocab)

    @property
    def loaded(self) -> bool:
        return bool(self.sampler)

    def close(self) -> None:
        if self.sampler:
            llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None

    def _allows(self, sampler: Any, token: int) -> bool:
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        array = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
        return not math.isinf(data[0].logit)

    def matches(self, text: str) -> bool:
        """Whether llama.cpp lets the whole text through and then lets the turn end."""
        sampler = llama_cpp.llama_sampler_clone(self.sampler)
        try:
            for token in self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True):
                if not self._allows(sampler, token):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return self._allows(sampler, self.end)
        finally:
            llama_cpp.llama_sampler_free(sampler)
