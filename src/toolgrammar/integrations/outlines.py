"""outlines integration: toolgrammar's engine as an outlines logits processor, with the token budget.

    import outlines
    from toolgrammar.integrations.outlines import ToolCallProcessor, chat_prompt

    model = outlines.from_transformers(hf_model, hf_tokenizer)
    prompt = chat_prompt(model, messages, tools, enable_thinking=False)   # the chat template, with the tools
    processor = ToolCallProcessor(model, tools, max_new_tokens=64, tool_choice="required", reasoning=prompt.reasoning)
    turn = outlines.Generator(model, processor=processor)(prompt, max_new_tokens=64)

or, with the budget and the reasoning option tied to the call for you::

    generator = ToolCallGenerator(model, tools, max_new_tokens=64, tool_choice="required", reasoning=prompt.reasoning)
    turn = generator(prompt)

:class:`ToolCallProcessor` is an :class:`outlines.processors.OutlinesLogitsProcessor` (the interface
outlines' own regex, JSON and grammar processors implement: ``process_logits`` on 2-D torch tensors,
``reset`` before each generation). It wraps :class:`toolgrammar.integrations.hf.ToolCallLogitsProcessor`, so the
grammar, the per-row cursors, the budget guarantee (a started block always closes within
``max_new_tokens``; a forcing policy that cannot fit is refused when the processor is built) and the
options are exactly those of ``model.generate``. Only outlines' own ``Transformers`` models (torch)
take it.

Two things outlines does differently from ``model.generate``, and what this module does about them:

- outlines decodes the output with ``skip_special_tokens=True``. Free text may hold control tokens
  (the grammar leaves it free), and a dropped one glues the text around it: ``<tool`` +
  ``<|vision_start|>`` + ``_call>`` would read as a block the grammar never opened. So by default
  (``exact_text=True``) the processor also masks, outside blocks, the control tokens that decoding
  drops (every special token except the end-of-turn ones), and once a row's turn has ended lets it
  write only end-of-turn tokens: the string outlines returns is exactly the text the grammar checked,
  and :func:`toolgrammar.parse_turn` judges it as written. Blocks never hold a control token anyway.
- outlines applies the chat template to a plain string prompt, as a user message, and its ``Chat``
  input renders the template without tools. :func:`chat_prompt` renders the template with the
  tools and returns a :class:`ToolPrompt`, a ``str`` that outlines' ``Transformers`` models pass to the
  tokenizer as it is (the one input type this module registers with outlines), with the grammar's
  ``reasoning`` option that matches the rendered generation prompt.

Regular-expression exports in outlines
--------------------------------------
outlines' own regex route (``outlines.Generator(model, outlines.types.Regex(pattern))``, built by
outlines-core 0.2.14, which outlines 1.3.3 pins) compiles a regex to a DFA and refuses lookarounds
("Failed to build DFA error building NFA"). :meth:`toolgrammar.turn.grammar.TurnGrammar.to_regex` and
:meth:`~toolgrammar.turn.grammar.TurnGrammar.block_regex` spell free text, reasoning, ``escape_markers``
strings and ``qwen-xml`` raw-text values with lookaheads, so with their default ``lookahead=True``:

- ``block_regex()`` builds for ``hermes`` without ``escape_markers``; it fails with
  ``escape_markers=True`` and for ``qwen-xml``;
- ``to_regex()`` (the whole turn) builds only where the turn has no free text and no reasoning part:
  ``tool_choice="required"`` (call first) or a named tool, with ``reasoning="disabled"``, ``hermes``,
  no ``escape_markers``; every other turn fails.

``lookahead=False`` spells the same languages without lookaround (:mod:`toolgrammar.automata.portable_regex`,
which also says how it meets outlines-core's leftmost-first reading of alternations), and every one
of them builds: tests build them with ``outlines_core.Index`` and check that the index accepts
exactly what Python's ``re`` accepts with the lookahead spelling. They are longer; for the five seed
tools: 5.6 KB instead of 2.9 KB for the ``auto`` turn, 37 KB with ``escape_markers``, 41 KB for a
``qwen-xml`` block, 339 KB for a ``qwen-xml`` turn (an ``Index`` over the Qwen3 vocabulary takes
seconds for the first, minutes for the last).

No regex carries the token budget: a regex route cuts a block that is still open when
``max_new_tokens`` runs out, and cannot keep one from opening too late. Only the processor carries
the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import outlines
    from outlines.models.base import Model
    from outlines.models.transformers import Transformers, TransformersTypeAdapter
    from outlines.processors import OutlinesLogitsProcessor
except ImportError as error:
    raise ImportError(
        "toolgrammar.outlines needs the outlines package (version 1.3.3): "
        "pip install 'toolgrammar[outlines]'  (or: pip install outlines==1.3.3)"
    ) from error

import torch

from toolgrammar.errors import ProcessorError
from toolgrammar.formats import get_format
from toolgrammar.formats.options import reasoning_after
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.schema import load_tools

__all__ = ["ToolCallGenerator", "ToolCallProcessor", "ToolPrompt", "chat_prompt"]


class ToolPrompt(str):
    """A prompt rendered by the model's chat template with the tools (see :func:`chat_prompt`).

    outlines' ``Transformers`` models tokenize it as it is, where a plain ``str`` would be wrapped
    in the chat template again as a user message.
    """

    reasoning: str
    """The grammar's ``reasoning`` option that matches the generation prompt."""
    tools: Any
    """The tool list the prompt was rendered with."""

    def __new__(cls, text: str, *, reasoning: str, tools: Any) -> ToolPrompt:
        self = super().__new__(cls, text)
        self.reasoning = reasoning
        self.tools = tools
        return self


def _format_tool_prompt(adapter: TransformersTypeAdapter, model_input: ToolPrompt) -> str:
    return str(model_input)


# outlines picks the formatter by the input's type (functools.singledispatchmethod): registering
# ToolPrompt changes nothing for any other input.
TransformersTypeAdapter.format_input.register(ToolPrompt, _format_tool_prompt)


def _hf_tokenizer(model_or_tokenizer: Any) -> Any:
    if isinstance(model_or_tokenizer, Transformers):
        if model_or_tokenizer.tensor_library_name != "torch":
            raise ProcessorError(
                f"toolgrammar.outlines needs a torch model; this one uses {model_or_tokenizer.tensor_library_name!r}"
            )
        return model_or_tokenizer.hf_tokenizer
    if isinstance(model_or_tokenizer, Model):
        raise ProcessorError(
            f"toolgrammar.outlines supports outlines' Transformers models (outlines.from_transformers), "
            f"not {type(model_or_tokenizer).__name__}"
        )
    return model_or_tokenizer


def chat_prompt(
    model: Any,
    messages: str | Sequence[Mapping[str, Any]],
    tools: Any,
    *,
    format: str = "hermes",
    **template_kwargs: Any,
) -> ToolPrompt:
    """Render the chat template with the tools and the generation prompt.

    Parameters
    ----------
    model :
        An outlines ``Transformers`` model (``outlines.from_transformers``) or its transformers tokenizer.
    messages :
        The conversation (``[{"role": ..., "content": ...}, ...]``), or one user message as a string.
    tools :
        Anything :func:`toolgrammar.schema.loading.load_tools` takes; the template is given the OpenAI list.
    format :
        The tool-call format, for its reasoning markers.
    **template_kwargs :
        Passed to ``apply_chat_template`` (``enable_thinking=False`` for Qwen3, ...).

    Returns
    -------
    ToolPrompt
        The prompt, with ``.reasoning``: ``"disabled"`` when the generation prompt already closed the
        reasoning (Qwen3 with ``enable_thinking=False``), ``"prefilled"`` when it opened it
        (Qwen3-Thinking-2507), ``"enabled"`` otherwise (the model may open it). Give it to the processor.
    """
    tokenizer = _hf_tokenizer(model)
    toolset = load_tools(tools)
    conversation = [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)
    text = tokenizer.apply_chat_template(
        conversation, tools=toolset.to_openai(), add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    if not isinstance(text, str):
        raise ProcessorError(f"apply_chat_template returned {type(text).__name__}, expected the prompt text")
    markers = get_format(format).markers
    reasoning = reasoning_after(text, markers.think_open, markers.think_close)
    return ToolPrompt(text, reasoning=reasoning, tools=tools)


class ToolCallProcessor(OutlinesLogitsProcessor):
    """Masks logits so that every tool-call block is valid and closes within the budget (outlines).

    Parameters
    ----------
    model :
        An outlines ``Transformers`` model (``outlines.from_transformers``), or its transformers tokenizer.
    tools :
        Anything :func:`toolgrammar.schema.loading.load_tools` takes.
    max_new_tokens :
        The same number given to the generator call: a started block always closes within it, and a
        forcing policy that cannot fit is refused here. ``None`` only where no budget applies.
    exact_text : bool, default: True
        Outside blocks, mask the control tokens that outlines' decoding drops, and after the end of the
        turn allow only end-of-turn tokens, so the returned string is the text the grammar checked.
    **options :
        Everything :class:`toolgrammar.integrations.hf.ToolCallLogitsProcessor` takes: ``mode``, ``format``,
        ``tool_choice``, ``parallel_tool_calls``, ``reasoning`` (use the prompt's, see
        :func:`chat_prompt`), ``whitespace``, ``escape_markers``, ``after_calls``, ``steer_to_blocks``, ...
    """

    def __init__(self, model: Any, tools: Any, *, max_new_tokens: int | None, exact_text: bool = True, **options: Any):
        if not isinstance(exact_text, bool):
            raise ProcessorError(f"exact_text must be True or False, got {exact_text!r}")
        super().__init__("torch")
        self.hf = ToolCallLogitsProcessor(_hf_tokenizer(model), tools, max_new_tokens=max_new_tokens, **options)
        """The transformers processor that does the work (its cursors, errors and statistics)."""
        self.exact_text = exact_text
        vocab = self.hf.vocab
        n_tokens = self.hf.grammar.table.n_tokens
        self.control_ids: tuple[int, ...] = tuple(sorted(i for i in vocab.special_ids - vocab.eos_ids if i < n_tokens))
        """The control tokens outlines' decoding drops, masked outside blocks when ``exact_text`` is on."""
        self._eos_ids = sorted(vocab.eos_ids)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def max_new_tokens(self) -> int | None:
        return self.hf.max_new_tokens

    @property
    def reasoning(self) -> str:
        return self.hf.turn_grammar.options.reasoning

    @property
    def errors(self) -> list[str | None]:
        """Per row of the last generation: ``None``, or why the row left the grammar."""
        return self.hf.errors

    def reset(self) -> None:
        """outlines' generators call this before each generation."""
        self.hf.reset()

    def process_logits(self, input_ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        scores = self.hf(input_ids, logits)
        if self.exact_text:
            self._keep_text_exact(scores)
        return scores

    def _keep_text_exact(self, scores: torch.Tensor) -> None:
        free, ended = [], []
        for row, cursor in enumerate(self.hf.cursors):
            if cursor.error is not None:
                continue
            if cursor.finished:
                ended.append(row)
            elif not cursor.in_block:  # inside a block the grammar already masks every control token
                free.append(row)
        if not free and not ended:
            return
        hidden, eos = self._indices(scores.device)
        if free and len(hidden):
            rows = torch.tensor(free, device=scores.device)
            scores[rows.unsqueeze(1), hidden.unsqueeze(0)] = -math.inf
        for row in ended:
            kept = scores[row, eos].clone()
            scores[row].fill_(-math.inf)
            scores[row, eos] = kept

    def _indices(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        got = self._on_device.get(device)
        if got is None:
            got = (
                torch.tensor(self.control_ids, dtype=torch.long, device=device),
                torch.tensor(self._eos_ids, dtype=torch.long, device=device),
            )
            self._on_device[device] = got
        return got


class ToolCallGenerator:
    """An outlines ``Generator`` with a :class:`ToolCallProcessor`, its budget given to every call.

    ``generator(prompt)`` returns outlines' string for one prompt, ``generator.batch(prompts)`` one
    per prompt. ``max_new_tokens`` in a call must be the processor's (or left out); a
    :class:`ToolPrompt` whose ``reasoning`` differs from the processor's is refused.
    """

    def __init__(self, model: Any, tools: Any, *, max_new_tokens: int, **options: Any):
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise ProcessorError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        self.processor = ToolCallProcessor(model, tools, max_new_tokens=max_new_tokens, **options)
        self.generator = outlines.Generator(model, processor=self.processor)
        self.max_new_tokens = max_new_tokens

    def __call__(self, prompt: Any, **inference_kwargs: Any) -> str:
        self._check(prompt)
        out: str = self.generator(prompt, **self._kwargs(inference_kwargs))
        return out

    def batch(self, prompts: Sequence[Any], **inference_kwargs: Any) -> list[str]:
        for prompt in prompts:
            self._check(prompt)
        out: list[str] = self.generator.batch(list(prompts), **self._kwargs(inference_kwargs))
        return out

    def _kwargs(self, inference_kwargs: dict[str, Any]) -> dict[str, Any]:
        asked = inference_kwargs.get("max_new_tokens", self.max_new_tokens)
        if asked != self.max_new_tokens:
            raise ProcessorError(
                f"max_new_tokens={asked!r} differs from the processor's budget ({self.max_new_tokens}): a block "
                "could be cut; build another ToolCallGenerator for another budget"
            )
        return {**inference_kwargs, "max_new_tokens": self.max_new_tokens}

    def _check(self, prompt: Any) -> None:
        if isinstance(prompt, ToolPrompt) and prompt.reasoning != self.processor.reasoning:
            raise ProcessorError(
                f"the prompt's generation prompt means reasoning={prompt.reasoning!r}, but the processor was built "
                f"with reasoning={self.processor.reasoning!r}; pass reasoning=prompt.reasoning"
            )
