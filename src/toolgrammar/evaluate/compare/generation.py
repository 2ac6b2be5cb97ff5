"""Generation backends: what :func:`~toolgrammar.evaluate.compare.run_compare` drives, and the transformers one.

torch and transformers are imported only when an :class:`HFGenerator` is built or generates.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from toolgrammar.evaluate.compare.config import CompareConfig, CompareError
from toolgrammar.evaluate.relevance import RelevanceGate
from toolgrammar.formats import get_format
from toolgrammar.turn.grammar import compile_turn


@dataclass
class Generation:
    """One row of one ``generate`` call."""

    text: str
    """The assistant turn as text (end-of-turn token and padding removed)."""
    tokens: int
    """Tokens generated for this row (its end-of-turn token included)."""
    finish: Literal["stop", "length", "error"]
    """``stop``: the model ended the turn; ``length``: it hit ``max_new_tokens``; ``error``: the engine refused the
    request (llama-server's side only; ``processor_error`` says why)."""
    processor_error: str | None = None
    """Constrained rows: why the row left the grammar, when it did (always a bug)."""
    stop_closes: int = 0
    """Constrained rows: blocks closed where the model meant to stop (``close_on_stop``)."""


class Generator(Protocol):
    """What :func:`run_compare` drives; :class:`HFGenerator` is the real one, tests may pass their own.

    With a ``steer_gate`` other than ``"none"`` a generator also needs ``relevance(conversations, tools)`` (one
    :class:`~toolgrammar.evaluate.relevance.Relevance` per conversation) and a ``steer_rows`` keyword in
    ``generate`` (per prompt: whether steering may act on it); both are used only then. With ``llama_server``
    it needs ``llama_server_side()`` (:class:`~toolgrammar.evaluate.compare.llama_server.LlamaServerSide`), and
    ``close()`` is called when the run ends.
    """

    name: str
    source: str

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt text of a conversation (chat template, generation prompt added)."""
        ...

    def generate(
        self, prompts: list[str], *, constrained: bool, seed: int, on_step: Callable[[int], None] | None = None
    ) -> list[Generation]:
        """Generate one turn for every prompt, seeding the sampler with ``seed`` first."""
        ...


class HFGenerator:
    """A transformers model + tokenizer, free or through :class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor`.

    The processor is built once (its grammar compiled once) and ``reset()`` before every ``generate``.
    Rows are left-padded by hand (the shared tokenizer object is never mutated). The time spent inside
    the processor is measured, so the report can show the grammar's share of the cost.
    """

    def __init__(self, loaded: Any, tools: Any, config: CompareConfig):
        import torch

        self.torch = torch
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.name = loaded.name
        self.source = loaded.source
        self.tools = tools
        self.config = config
        tok = self.tokenizer
        ids = {tok.convert_tokens_to_ids(t) for t in get_format(config.format).markers.end_of_turn}
        if tok.eos_token_id is not None:
            ids.add(tok.eos_token_id)
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        unk = getattr(tok, "unk_token_id", None)
        self.eos_ids = sorted(i for i in ids if isinstance(i, int) and i >= 0 and i != unk)
        if not self.eos_ids:
            raise CompareError(f"model {self.name!r}: its tokenizer has no end-of-turn token")
        pad = tok.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self._processor: Any = None
        self._gate: Any = None
        self._prefix_key: tuple[int, ...] | None = None
        self._prefix_value: Any = None
        self.processor_seconds = 0.0

    def prepare(self) -> None:
        """Build the processor now (compiling the grammar), so bad options fail before any generation."""
        _ = self.processor
        if self.config.steer_gate != "none":
            _ = self.gate  # a model the gate cannot use fails here, before any generation

    @property
    def processor(self) -> Any:
        if self._processor is None:
            from toolgrammar.integrations.hf import ToolCallLogitsProcessor  # torch: only once a run generates

            options = processor_options(self.config, self.tools)
            self._processor = ToolCallLogitsProcessor(self.tokenizer, self.tools, **options)
        return self._processor

    @property
    def gate(self) -> Any:
        """The relevance gate ``config.steer_gate`` names, built on first use."""
        if self._gate is None:
            self._gate = RelevanceGate(
                self.model, self.tokenizer, method=self.config.steer_gate, format=self.config.format
            )
        return self._gate

    def relevance(self, conversations: Sequence[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> list[Any]:
        """The relevance gate's verdict on each conversation (``config.steer_gate`` names the method)."""
        return self.gate([(messages, tools) for messages in conversations])

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=self.config.reasoning != "disabled",
        )

    def _prefix_cache(self, prefix: list[int]) -> Any:
        """The KV cache of ``prefix`` (batch 1), computed once per distinct prefix and kept."""
        key = tuple(prefix)
        if self._prefix_key != key:
            torch = self.torch
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([prefix], dtype=torch.long), use_cache=True)
            self._prefix_key = key
            self._prefix_value = getattr(out, "cache", None) or out.past_key_values
        return self._prefix_value

    def generate(
        self,
        prompts: list[str],
        *,
        constrained: bool,
        seed: int,
        on_step: Callable[[int], None] | None = None,
        steer_rows: Sequence[bool] | None = None,
    ) -> list[Generation]:
        """One turn per prompt; ``steer_rows`` (constrained side, steering on): which rows steering may act on."""
        torch = self.torch
        from transformers import LogitsProcessor, LogitsProcessorList

        encoded = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        width = max(len(e) for e in encoded)
        # The prompts share the chat template's system turn (the tool list: about 550 tokens). Its KV
        # cache is computed once and every row starts from it; each row's own suffix is left-padded
        # *after* the shared prefix. Position ids come from the attention mask's cumulative sum, so
        # the padding in the middle changes nothing but the work saved (prefill was a third of the
        # default run's time on 2 cores).
        shared = 0
        if self.config.prefix_cache and len(encoded) > 0:
            shortest = min(len(e) for e in encoded)
            first = encoded[0]
            while shared < shortest - 1 and all(e[shared] == first[shared] for e in encoded):
                shared += 1
            if shared < 64:
                shared = 0
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, :shared] = torch.tensor(ids[:shared], dtype=torch.long)
            attention[row, :shared] = 1
            input_ids[row, width - len(ids) + shared :] = torch.tensor(ids[shared:], dtype=torch.long)
            attention[row, width - len(ids) + shared :] = 1
        extra: dict[str, Any] = {}
        if shared:
            cache = copy.deepcopy(self._prefix_cache(encoded[0][:shared]))
            cache.batch_repeat_interleave(len(encoded))
            # transformers 5 calls the keyword ``cache``; 4.x called it ``past_key_values``
            forward = inspect.signature(self.model.forward).parameters
            extra["cache" if "cache" in forward else "past_key_values"] = cache

        generator = self

        class _Timed(LogitsProcessor):  # times the grammar and ticks the progress display
            def __init__(self, inner: Any):
                self.inner = inner
                self.step = 0

            def __call__(self, ids: Any, scores: Any) -> Any:
                self.step += 1
                if on_step is not None:
                    on_step(self.step)
                if self.inner is None:
                    return scores
                started = time.perf_counter()
                scores = self.inner(ids, scores)
                generator.processor_seconds += time.perf_counter() - started
                return scores

        inner = None
        if constrained:
            inner = self.processor
            inner.reset()
            inner.steer_rows = steer_rows  # None: every row, as before
        sampling: dict[str, Any] = {"do_sample": False}
        if self.config.temperature > 0:
            sampling = {
                "do_sample": True,
                "temperature": self.config.temperature,
                "top_p": self.config.top_p,
                "top_k": self.config.top_k,
            }
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=self.config.max_new_tokens,
                logits_processor=LogitsProcessorList([_Timed(inner)]),
                pad_token_id=self.pad_id,
                eos_token_id=self.eos_ids,
                **sampling,
                **extra,
            )
        new = out[:, width:].tolist()
        errors = list(inner.errors) if inner is not None else [None] * len(new)
        closes = list(inner.row_stop_closes) if inner is not None else [0] * len(new)
        eos = set(self.eos_ids)
        results = []
        for row, ids in enumerate(new):
            end = next((i for i, t in enumerate(ids) if t in eos), None)
            kept = ids if end is None else ids[:end]
            text = self.tokenizer.decode(kept, skip_special_tokens=False)
            results.append(
                Generation(
                    text=text,
                    tokens=len(kept) + (end is not None),
                    finish="length" if end is None else "stop",
                    processor_error=errors[row] if row < len(errors) else None,
                    stop_closes=closes[row] if row < len(closes) else 0,
                )
            )
        return results


# --------------------------------------------------------------------------------------------------
# What both sides find pre-filled


def processor_options(config: CompareConfig, tools: Any) -> dict[str, Any]:
    """The keyword options of the constrained side's processor, the same for every engine's
    (:class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor`,
    :class:`~toolgrammar.integrations.llamacpp.LlamaToolCallProcessor`)."""
    return {
        "max_new_tokens": config.max_new_tokens,
        "mode": config.mode,
        "steer_to_blocks": config.steer_to_blocks,
        "close_on_stop": config.close_on_stop,
        "prefix_true": config.prefix_true,
        "assistant_prefix": assistant_opening(config, tools),
        **config.grammar_options(),
    }


def assistant_opening(config: CompareConfig, tools: Any) -> str:
    """What both sides find pre-filled in every assistant turn: what the grammar forces, when it forces a call.

    A policy that makes the turn the call (``required`` call-first, a named tool) forces the opening of
    the block, token by token, up to where the tools' names diverge (hermes: ``<tool_call>\\n{"name": "``,
    :meth:`~toolgrammar.turn.grammar.TurnGrammar.forced_text`). A harness that forces a call pre-fills the
    same. The free side gets it too, so it is judged on the calls it was made to start (its own errors
    inside blocks), not on never opening one; the constrained side's processor continues after it.
    Empty for ``auto``, ``none``, ``prose_first`` and when reasoning may come first.
    """
    if config.tool_choice in ("auto", "none") or config.prose_first or config.reasoning != "disabled":
        return ""

    forced = compile_turn(tools, **config.grammar_options()).forced_text()
    return forced if forced.startswith(get_format(config.format).markers.block_open) else ""
