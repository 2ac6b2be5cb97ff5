"""llama.cpp integration (llama-cpp-python): :class:`LlamaToolCallProcessor` and :func:`generate_turn`, no torch.

    from llama_cpp import Llama
    from toolgrammar.llamacpp import generate_turn

    llm = Llama("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", n_ctx=4096, verbose=False)
    turn = generate_turn(llm, messages, tools, max_new_tokens=256)
    turn.parsed.tool_calls   # the valid calls; turn.text is the turn as the model wrote it

llama-cpp-python calls a ``logits_processor`` once per token with the whole sequence so far (prompt
included, numpy ``intc``) and that token's scores (numpy float32, one row). The processor is the
transformers processor's one-row host step (:mod:`toolgrammar.runtime.host_row`): the same grammar,
budget guarantee, ``close_on_stop``, ``prefix_true``, steering and stops, on a vocabulary read from
the model itself (:func:`llama_vocabulary`: each id's bytes as llama.cpp renders them, its control
tokens, its end-of-generation ids).

:func:`generate_turn` renders the GGUF's own chat template with the tools (llama-cpp-python's
``Jinja2ChatFormatter``, aligned with transformers' rendering), tokenizes it with special tokens
parsed, runs ``Llama.generate`` with the processor under one budget, decodes the new tokens with
special tokens rendered, and parses the turn with the strict parser under the same format and tools.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolgrammar.errors import ProcessorError, TokenBudgetWarning
from toolgrammar.formats import get_format
from toolgrammar.formats.options import Reasoning, reasoning_after
from toolgrammar.integrations.generated_turn import (
    GeneratedTurn,
    GenerateError,
    check_reasoning,
    checked_messages,
    checked_template_kwargs,
    is_prefilled,
    split_options,
)
from toolgrammar.runtime.closing import stop_ids
from toolgrammar.runtime.host_row import HostMasker, HostRow, RowRules, check_budget_fits, start_state_of
from toolgrammar.runtime.steering import CallPoints, call_openers
from toolgrammar.runtime.stops import checked_stops, stop_rule
from toolgrammar.runtime.token_grammar import TokenGrammar, token_grammar
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn
from toolgrammar.vocab import Vocabulary

__all__ = ["LlamaToolCallProcessor", "chat_formatter", "generate_turn", "llama_vocabulary"]

_WINDOW = 16
"""Tokens compared at the start of the input when checking that a call extends the previous one."""
_vocabularies: dict[int, tuple[weakref.ref, Vocabulary]] = {}
_vocabularies_lock = threading.Lock()


def llama_vocabulary(llama: Any) -> Vocabulary:
    """The :class:`~toolgrammar.vocab.Vocabulary` of a ``llama_cpp.Llama``, read from the loaded model, once per object.

    Each id's bytes are llama.cpp's own piece for it (``llama_token_to_piece`` with special tokens
    rendered: what ``detokenize(..., special=True)`` writes); control, unknown and unused ids are the
    control tokens (never text inside a block); the end-of-turn ids are the model's end-of-generation ids
    (``llama_vocab_is_eog``: where llama.cpp itself stops).
    """
    if isinstance(llama, Vocabulary):
        return llama
    import llama_cpp

    if not isinstance(llama, llama_cpp.Llama):
        raise ProcessorError(
            f"expected a llama_cpp.Llama (or a toolgrammar Vocabulary), got {type(llama).__name__}: build the "
            "processor from the Llama object that generates"
        )
    key = id(llama)
    with _vocabularies_lock:
        hit = _vocabularies.get(key)
        if hit is not None and hit[0]() is llama:
            return hit[1]
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    size = 256
    buf = ctypes.create_string_buffer(size)
    pieces: list[bytes] = []
    special, added, eog = [], [], []
    not_text = (
        llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN | llama_cpp.LLAMA_TOKEN_ATTR_UNUSED
    )
    for i in range(n):
        k = llama_cpp.llama_token_to_piece(vocab, i, buf, size, 0, True)
        if k < 0:  # longer than the buffer: -k bytes
            size = -k
            buf = ctypes.create_string_buffer(size)
            k = llama_cpp.llama_token_to_piece(vocab, i, buf, size, 0, True)
        pieces.append(buf.raw[:k])
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        if attr & not_text or attr == llama_cpp.LLAMA_TOKEN_ATTR_UNDEFINED:
            special.append(i)
        if attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED):
            added.append(i)
        if llama_cpp.llama_vocab_is_eog(vocab, i):
            eog.append(i)
    result = Vocabulary.from_pieces(
        pieces, special_ids=special, eos_ids=eog, added_ids=added, source=str(getattr(llama, "model_path", "llama"))
    )
    with _vocabularies_lock:
        _vocabularies[key] = (weakref.ref(llama), result)
    return result


class LlamaToolCallProcessor:
    """A llama-cpp-python ``logits_processor``: every tool-call block valid and closed in time, free text free.

    ``llm.create_completion(prompt, **processor.completion_kwargs())`` (or
    ``logits_processor=LogitsProcessorList([processor])`` with ``max_tokens=processor.max_new_tokens``).
    One processor follows one sequence at a time; a call whose input does not extend the previous call's
    by one token starts a new generation (``reset()`` forces it).

    Parameters
    ----------
    llama :
        The ``llama_cpp.Llama`` that generates (or a :class:`~toolgrammar.vocab.Vocabulary`,
        :func:`llama_vocabulary` of it).
    tools, max_new_tokens, mode, steer_to_blocks, close_on_stop, prefix_true, assistant_prefix, stop_strings, \
stop_token_ids, **options :
        As for :class:`toolgrammar.hf.ToolCallLogitsProcessor`.
    """

    def __init__(
        self,
        llama: Any,
        tools: Any,
        *,
        max_new_tokens: int | None = None,
        mode: str = "schema",
        steer_to_blocks: bool = False,
        close_on_stop: bool = True,
        prefix_true: bool = False,
        assistant_prefix: str = "",
        stop_strings: str | Sequence[str] | None = None,
        stop_token_ids: Sequence[int] | None = None,
        **options: Any,
    ):
        if max_new_tokens is not None and (
            isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1
        ):
            raise ProcessorError(f"max_new_tokens must be a positive int or None, got {max_new_tokens!r}")
        for name, value in (
            ("steer_to_blocks", steer_to_blocks),
            ("close_on_stop", close_on_stop),
            ("prefix_true", prefix_true),
        ):
            if not isinstance(value, bool):
                raise ProcessorError(f"{name} must be True or False, got {value!r}")
        if not isinstance(assistant_prefix, str):
            raise ProcessorError(f"assistant_prefix must be a string, got {type(assistant_prefix).__name__}")
        self.vocab = llama_vocabulary(llama)
        strings, ids = checked_stops(
            _listed(stop_strings), _listed(stop_token_ids), self.vocab.n_tokens, where="LlamaToolCallProcessor"
        )
        self.turn_grammar = compile_turn(tools, mode=mode, **options)
        self.grammar: TokenGrammar = token_grammar(self.turn_grammar, self.vocab)
        self.max_new_tokens = max_new_tokens
        self.assistant_prefix = assistant_prefix
        start = start_state_of(self.grammar, self.turn_grammar.options, assistant_prefix)
        check_budget_fits(self.grammar, self.turn_grammar.options, start, max_new_tokens)
        points = None
        if steer_to_blocks:
            points = CallPoints(self.grammar, call_openers(self.vocab, self.turn_grammar.format.markers.block_open))
        self.rules = RowRules(
            grammar=self.grammar,
            start_state=start,
            max_new_tokens=max_new_tokens,
            prefix_true=prefix_true,
            close_ids=stop_ids(self.vocab) if close_on_stop else None,
            stops=stop_rule(self.vocab, strings, ids),
            end_ids=stop_ids(self.vocab),
            call_points=points,
        )
        self.steer_to_blocks = steer_to_blocks
        self.close_on_stop = close_on_stop
        self.prefix_true = prefix_true
        self.stop_strings: tuple[str, ...] = tuple(strings)
        self.stop_token_ids: tuple[int, ...] = tuple(ids)
        self._masker = HostMasker()
        self._earlier_closes = 0
        self._earlier_steered = 0
        self._steer = True
        self.reset()

    @property
    def start_state(self) -> int:
        """The grammar state the turn starts from: the start, walked over ``assistant_prefix``."""
        return self.rules.start_state

    @property
    def steer(self) -> bool:
        """Whether steering acts on the next generation (with ``steer_to_blocks``; set it to a relevance gate's
        verdict on the request). Read when a generation starts, so one processor serves the requests a gate lets
        steer and the ones it holds back (masked by the same grammar, unsteered)."""
        return self.steer_to_blocks and self._steer

    @steer.setter
    def steer(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ProcessorError(f"steer must be True or False, got {value!r}")
        if not self.steer_to_blocks:
            raise ProcessorError("steer needs steer_to_blocks=True: without steering there is nothing to switch")
        self._steer = value

    def reset(self) -> None:
        """Forget the current generation; the next call starts from its input as the prompt."""
        row = getattr(self, "row", None)
        if row is not None:
            self._earlier_closes += row.stop_closes
            self._earlier_steered += row.steered_steps
        self.row: HostRow | None = None
        """The current generation's row (``None`` before the first call)."""
        self.prompt_length = 0
        self._length = -1
        self._head = b""
        self._last = -1
        self._warned = False

    def completion_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``Llama.create_completion`` / ``create_chat_completion`` that state the budget
        once: this processor as the ``logits_processor`` and its ``max_new_tokens`` as ``max_tokens``."""
        from llama_cpp import LogitsProcessorList

        kwargs: dict[str, Any] = {"logits_processor": LogitsProcessorList([self])}
        if self.max_new_tokens is not None:
            kwargs["max_tokens"] = self.max_new_tokens
        return kwargs

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        ids = np.asarray(input_ids)
        if ids.ndim != 1 or np.asarray(scores).ndim != 1:
            raise ProcessorError(
                f"expected one sequence's input ids and one row of scores (1-D each, as llama-cpp-python passes "
                f"them), got shapes {ids.shape} and {np.shape(scores)}"
            )
        length = len(ids)
        head = ids[: min(_WINDOW, length)].tobytes()
        row = self.row
        extends = (
            row is not None
            and length == self._length + 1
            and head[: len(self._head)] == self._head
            and (self._last < 0 or int(ids[-2]) == self._last)
        )
        if extends and row is not None:
            row.advance(int(ids[-1]))
        else:
            self.reset()
            row = self.row = HostRow(self.rules, self._masker, steer=self._steer)
            self.prompt_length = length
            self._head = ids[: min(_WINDOW, length)].tobytes()
        self._length = length
        self._last = int(ids[-1]) if length else -1
        self._check_overrun(row)
        # llama-cpp-python hands a strided view of its token array: work on a contiguous float32 row.
        out = scores if _contiguous_f32(scores) else np.ascontiguousarray(scores, dtype=np.float32)
        row.step(out)
        return out

    def _check_overrun(self, row: HostRow) -> None:
        budget = self.max_new_tokens
        cursor = row.cursor
        if budget is None or self._warned or cursor.n_tokens < budget or cursor.finished or cursor.error:
            return
        self._warned = True
        warnings.warn(
            f"the generation asks for new token {cursor.n_tokens + 1}, but this LlamaToolCallProcessor was built "
            f"with max_new_tokens={budget}: past token {budget} no tool call can open. Give both the same number: "
            "llm.create_completion(prompt, **processor.completion_kwargs())",
            TokenBudgetWarning,
            stacklevel=2,
        )

    @property
    def error(self) -> str | None:
        """Why the current generation left the grammar (a token it rejected), or ``None``."""
        return None if self.row is None else self.row.error

    @property
    def stop_closes(self) -> int:
        """Blocks closed by a closer a stop, more likely than not, chose (``close_on_stop``), every generation."""
        return self._earlier_closes + (self.row.stop_closes if self.row is not None else 0)

    @property
    def steered_steps(self) -> int:
        """Steps at which steering moved probability, every generation."""
        return self._earlier_steered + (self.row.steered_steps if self.row is not None else 0)


def _contiguous_f32(scores: Any) -> bool:
    return isinstance(scores, np.ndarray) and scores.dtype == np.float32 and scores.flags.c_contiguous


def _listed(value: Any) -> Any:
    """A sequence as a list (a tuple, a range, an array of ids), for ``checked_stops``; else as given."""
    if value is None or isinstance(value, str | bytes | Mapping):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value) if isinstance(value, Sequence) else value


_OWN_SAMPLING_KWARGS = {
    "tokens": "the prompt is rendered and tokenized from the messages",
    "logits_processor": "the processor is this turn's (give processors of your own as extra_processors)",
    "reset": "every turn starts from its own prompt",
}
"""``Llama.generate`` arguments this function sets itself, with why."""


def chat_formatter(llama: Any, template: str) -> Any:
    """The GGUF's chat template as llama-cpp-python's ``Jinja2ChatFormatter`` (transformers' rendering), with the
    model's own end and start tokens and the generation prompt added."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    pieces = llama_vocabulary(llama).token_bytes
    eos, bos = llama.token_eos(), llama.token_bos()
    return Jinja2ChatFormatter(
        template,
        eos_token=pieces[eos].decode("utf-8", "replace") if eos >= 0 else "",
        bos_token=pieces[bos].decode("utf-8", "replace") if bos >= 0 else "",
        add_generation_prompt=True,
    )


def generate_turn(
    llama: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    *,
    max_new_tokens: int,
    tool_choice: str = "auto",
    parallel_tool_calls: bool = True,
    format: str = "hermes",
    mode: str = "schema",
    reasoning: Reasoning | None = None,
    steer_to_blocks: bool = False,
    close_on_stop: bool = True,
    prefix_true: bool = False,
    assistant_prefix: str = "",
    chat_template_kwargs: Mapping[str, Any] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    extra_processors: Sequence[Any] = (),
    temperature: float = 0.0,
    seed: int | None = None,
    **kwargs: Any,
) -> GeneratedTurn:
    """Generate the next assistant turn of one conversation with llama.cpp, every tool call in it valid.

    The llama.cpp form of :func:`toolgrammar.generate_turn`: the same arguments and the same
    :class:`~toolgrammar.integrations.generated_turn.GeneratedTurn`, with the ``Llama`` in place of the model and
    tokenizer. ``temperature`` 0 (the default) is greedy; above 0 samples with ``seed`` (llama-cpp-python's
    ``temp``); other keyword arguments that are not grammar options go to ``Llama.generate`` (``top_k``,
    ``top_p``, ``min_p``, ``repeat_penalty``...). ``extra_processors`` run before this turn's processor.
    A conversation may not end with an assistant message here (give the turn's start as
    ``assistant_prefix``). The GGUF's chat template (``tokenizer.chat_template``) renders the prompt.

    Raises
    ------
    GenerateError
        Bad messages or budget, arguments this function sets itself, a GGUF without a chat template, a
        prefilled assistant message, ``reasoning`` contradicting the prompt.
    ToolSchemaError, GrammarError, ProcessorError
        As for :class:`LlamaToolCallProcessor`.
    """
    from llama_cpp import Llama, LogitsProcessorList

    if not isinstance(llama, Llama):
        raise GenerateError(f"llama must be a llama_cpp.Llama, got {type(llama).__name__}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise GenerateError(f"max_new_tokens must be a positive int (the turn's one budget), got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise GenerateError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
    chat = checked_messages(messages, "messages")
    if is_prefilled(chat):
        raise GenerateError(
            "messages ends with an assistant message (a prefill), which this route does not render: give the "
            "turn's start as assistant_prefix instead"
        )
    for name, why in _OWN_SAMPLING_KWARGS.items():
        if name in kwargs:
            raise GenerateError(f"{name} is set by generate_turn itself ({why}); leave it out")
    grammar_options, sampling = split_options(kwargs)
    template_kwargs = checked_template_kwargs(chat_template_kwargs, reasoning)
    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise GenerateError(
            f"the GGUF {getattr(llama, 'model_path', '')!r} has no chat template (tokenizer.chat_template): "
            "generate_turn renders the conversation with it"
        )
    toolset = load_tools(tools, mode=mode)  # type: ignore[arg-type]
    vocab = llama_vocabulary(llama)
    formatter = chat_formatter(llama, template)
    rendered = formatter(messages=chat, tools=toolset.to_openai(), **template_kwargs).prompt
    markers = get_format(format).markers
    read = reasoning_after(
        rendered, markers.think_open, markers.think_close, enable_thinking=template_kwargs.get("enable_thinking")
    )
    if reasoning is None:
        reasoning = read
    else:
        check_reasoning(reasoning, read)
    processor = LlamaToolCallProcessor(
        llama,
        toolset,
        max_new_tokens=max_new_tokens,
        mode=mode,
        steer_to_blocks=steer_to_blocks,
        close_on_stop=close_on_stop,
        prefix_true=prefix_true,
        assistant_prefix=assistant_prefix,
        stop_strings=stop_strings,
        stop_token_ids=stop_token_ids,
        format=format,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        reasoning=reasoning,
        **grammar_options,
    )
    prompt = rendered + assistant_prefix
    tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    if seed is not None:
        llama.set_seed(seed)
    new: list[int] = []
    ended = False
    for token in llama.generate(
        tokens,
        temp=float(temperature),
        logits_processor=LogitsProcessorList([*extra_processors, processor]),
        reset=True,
        **sampling,
    ):
        new.append(int(token))
        if token in vocab.eos_ids:
            ended = True
            break
        if len(new) >= max_new_tokens:
            break
    kept = new[:-1] if ended else new
    text = assistant_prefix + b"".join(vocab.token_bytes[t] for t in kept).decode("utf-8", "replace")
    parsed = parse_turn(text, processor.turn_grammar.tools, format=format, reasoning_started=reasoning == "prefilled")
    return GeneratedTurn(
        text=text,
        token_ids=tuple(new),
        parsed=parsed,
        prompt=prompt,
        finish="stop" if ended else "length",
        reasoning=reasoning,
        processor_error=processor.error,
    )
