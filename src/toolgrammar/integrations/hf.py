"""transformers integration: :class:`ToolCallLogitsProcessor` for ``model.generate``.

    proc = ToolCallLogitsProcessor(tokenizer, tools, max_new_tokens=256)
    out = model.generate(**inputs, **proc.generate_kwargs())   # logits_processor and max_new_tokens=256

(:func:`toolgrammar.integrations.hf_generate.generate_turn` does the whole turn: template, generate, decode, parse.)

The processor is thin: the grammar is compiled once (and shared by every processor built for the
same tokenizer, tools and options), each row of the batch has its own cursor, and each step applies
one batched operation per mask kind. No Python loop over the vocabulary, no per-row host-device
copy: the sampled tokens come to the host once per step (one small copy), the index tensors of each
state's mask go to the device once and stay there.

The same processor object can serve several ``generate`` calls: a new call is recognised when the
input no longer extends the previous step's input by exactly one token (``reset()`` forces it).
Beam search works: when rows are reordered between steps, each row's cursor is taken from the row
whose sequence it extends.

The budget must be generate's own: a block that the processor plans to close by token 256 is cut if
``generate`` stops at 128. The processor checks what it can at the start of each generation and
warns with :class:`TokenBudgetWarning` (see :meth:`ToolCallLogitsProcessor.generate_kwargs`).
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from toolgrammar.errors import ProcessorError, TokenBudgetWarning
from toolgrammar.integrations.tokenizers import vocabulary_of
from toolgrammar.runtime.closing import close_row, log_sum, stop_ids
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.device_state import Closing, Follow, Pending, Tally, follow_on_device, follow_row, host_closing
from toolgrammar.runtime.host_row import check_budget_fits, start_state_of
from toolgrammar.runtime.input_window import WINDOW, InputWindow
from toolgrammar.runtime.masking import MaskApplier
from toolgrammar.runtime.prefix_true import NO_TABLE, pour_host_row
from toolgrammar.runtime.steering import CallPoints, call_openers, steer_row
from toolgrammar.runtime.stops import StopRule, checked_stops, pool_stops, stop_rule
from toolgrammar.runtime.token_grammar import TokenGrammar, token_grammar
from toolgrammar.turn.grammar import compile_turn

try:  # transformers is the point of this module, but keep the class importable for type checks
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
except ImportError:  # pragma: no cover
    LogitsProcessor = object  # type: ignore[assignment,misc]
    GenerationConfig = LogitsProcessorList = None  # type: ignore[assignment,misc]

_PER_GENERATION = frozenset(
    {
        "cursors",
        "_fresh",
        "_steer_allowed",
        "_prev_ids",
        "_windows",
        "_window",
        "_owner",
        "_guard",
        "_applier",
        "_watch_overrun",
        "_closing",
        "_pending",
        "_row_closes",
        "_follows",
    }
)
_SHARED_MESSAGE = (
    "this ToolCallLogitsProcessor is following another generation (another thread's generate() call): use one "
    "processor per concurrent generation; processors built for the same tokenizer, tools and options share one "
    "compiled grammar, so a second one costs nothing (or call reset() once the other generation is over)"
)


_FRAMEWORK_MODULES = ("toolgrammar.", "transformers.", "torch.")
"""Modules whose frames are not the caller a budget warning should point at."""
_MAX_FRAMES = 64
"""How far up the stack :func:`_generate_budget` looks for ``generate``'s loop."""
_STATE_IT_ONCE = (
    "state the budget once: model.generate(**inputs, **processor.generate_kwargs()), or "
    "toolgrammar.generate_turn(model, tokenizer, messages, tools, max_new_tokens=N)"
)


def _generate_budget(prompt_length: int) -> tuple[int | None, int]:
    """``generate``'s budget of new tokens, if a transformers generation loop is calling, and where to warn.

    A logits processor is called with ``(input_ids, scores)`` only: transformers (checked on 5.19's
    ``_sample``, ``_beam_search`` and ``_assisted_decoding``) hands it neither the generation config
    nor the stopping criteria. So the budget is read, best effort, from the ``generation_config``
    local of the transformers frame that is running the loop (``max_length`` there is already
    ``max_new_tokens`` plus the prompt length). ``None`` when no such frame is found (a hand-written
    loop, another framework, a transformers that renamed it): the caller then falls back to what the
    processor sees itself.

    The second value is the ``stacklevel`` for a ``warnings.warn`` in the caller of this function:
    the first frame outside toolgrammar, transformers and torch above the loop (the user's
    ``generate`` call), or the caller itself when there is none.
    """
    budget: int | None = None
    level = 0
    frame = inspect.currentframe()
    try:
        depth = 0
        while frame is not None and depth < _MAX_FRAMES:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("transformers.") and budget is None and GenerationConfig is not None:
                config = frame.f_locals.get("generation_config")
                if isinstance(config, GenerationConfig) and isinstance(config.max_length, int):
                    budget = config.max_length - prompt_length
                    level = 0  # the caller to point at is above this loop, not below it
            elif not module.startswith(_FRAMEWORK_MODULES) and not level:
                level = depth
                if budget is not None:
                    break
            frame = frame.f_back
            depth += 1
    finally:
        del frame  # a frame reference kept in a local would keep the whole stack alive
    return (budget if budget is not None and budget > 0 else None), max(level, 1)


def _listed(value: Any) -> Any:
    """A sequence as a list (a tuple, a range, an array or tensor of ids), for ``checked_stops``; else as given."""
    if value is None or isinstance(value, str | bytes | Mapping):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value) if isinstance(value, Sequence) else value


def _host_views(input_ids: torch.Tensor, scores: torch.Tensor) -> tuple[np.ndarray, np.ndarray] | None:
    """numpy views of ``input_ids`` and ``scores`` where both are CPU tensors outside autograd and the scores are
    float32 (the one-row host path); ``None`` otherwise (``numpy()`` refuses a device or autograd tensor)."""
    try:
        sc = scores.numpy()
        ids = input_ids.numpy()
    except (TypeError, RuntimeError):
        return None
    return (ids, sc) if sc.dtype == np.float32 else None


def _addressable(t: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the C core may read or write ``t`` by its address: what ``numpy()`` would view without a copy
    (CPU, outside autograd), of ``dtype``, contiguous. About 0.3 us where a numpy view costs 1-4."""
    return t.dtype is dtype and t.is_cpu and not t.requires_grad and t.is_contiguous()


def _under_way(cursor: Cursor) -> bool:
    """A row that may still take tokens: not ended, not failed, budget not spent."""
    spent = cursor.max_tokens is not None and cursor.n_tokens >= cursor.max_tokens
    return cursor.error is None and not cursor.finished and not spent


class ToolCallLogitsProcessor(LogitsProcessor):
    """Masks logits so that every tool-call block is valid, closed in time, and free text stays free.

    Parameters
    ----------
    tokenizer :
        The model's transformers tokenizer (or a :class:`~toolgrammar.vocab.Vocabulary`).
    tools :
        Anything :func:`toolgrammar.schema.loading.load_tools` takes (OpenAI tool list, JSON file path, ToolSet).
    max_new_tokens : int | None, default: None
        The same number given to ``generate`` (``model.generate(**inputs, **proc.generate_kwargs())``
        gives it for you). With it, a block that has started always closes within the budget, and a
        block is never opened that could not close in time. A generation whose budget differs gets
        a :class:`TokenBudgetWarning` where that can be detected (its docstring says where).
    mode : {"schema", "strings"}, default: "schema"
        Argument rule: each tool's JSON Schema, or the seed harness's all-strings rule.
    steer_to_blocks : bool, default: False
        At a call point (the start of the turn, just after the reasoning, just after a block), move the
        probability of tokens that open another call shape (a code fence, bare JSON) onto the block
        opener's first token, so a call the model meant to write in another shape becomes a real, checked
        block. Every other token keeps its log-probability exactly; see :mod:`toolgrammar.runtime.steering`.
        :class:`ProcessorError` where that token does not commit the turn to a block (free text may go on
        after it: DeepSeek's DSML openers, gpt-oss; the table is in docs/policies.md#steering).
    steer_rows : sequence of bool | None, default: None
        With ``steer_to_blocks``: which rows of the batch may be steered (``None``: every row). Read
        when a generation starts, so it can be set per ``generate`` call (the attribute of the same
        name); a row not steered is masked as usual, only the opener pool is left alone. Its length
        must be the batch's, or divide it (``generate`` repeats each input row for ``num_beams`` or
        ``num_return_sequences``: each entry then covers its row's copies). A relevance gate
        (:mod:`toolgrammar.evaluate.relevance`) decides it per row in ``toolgrammar compare --steer-gate pmi|question``.
    close_on_stop : bool, default: True
        Inside a block whose call is complete (after a hermes call's last brace; never inside its
        arguments), where the end-of-turn tokens are masked, move their probability onto the token
        that takes the block nearest to its close (of those, the one the model rates highest), and carry
        that decision while the row takes the close, instead of spreading the stop over every allowed
        token: a model that means to stop after its call closes the block and stops, rather than writing
        the close in pieces and calling again. Every other token keeps its logit exactly and the mask is
        unchanged; outside blocks nothing changes. See :mod:`toolgrammar.runtime.closing`.
    prefix_true : bool, default: False
        Inside a block, a masked token whose bytes start with a continuation the grammar accepts (``},``
        where only ``}`` may follow the value) gives its probability to the allowed tokens consistent with
        that continuation (``}``, ``}}``, ``}\\n``), in proportion to their own, instead of spreading it over
        every allowed token: the model's "this value is done" stays on closing the value. Only allowed
        tokens gain; outside blocks nothing changes. See :mod:`toolgrammar.runtime.prefix_true`.
    assistant_prefix : str, default: ""
        Text the prompt already put at the start of the assistant turn, after the generation prompt
        (a harness that pre-fills the block opener, ``"<tool_call>\\n"``): the grammar continues after
        it. It must be a valid start of a turn under these options (:class:`ProcessorError` otherwise).
    stop_strings : str | sequence of str | None, default: None
        Stop strings honoured where the grammar allows the end of the turn, and nowhere else (give them
        here, not to ``generate``, whose ``stop_strings`` would cut a call in the middle): in free text
        under ``tool_choice="auto"``, after the calls under ``required`` or a named tool; never inside
        a block or the reasoning part, where they are text like any other. There, a token that would
        complete one (given the text written since the turn could last end) gives its probability to
        the end-of-turn token the model rates highest (the log-sum-exp of their logits) and is masked:
        the turn ends as often as a stop would have ended it, ends with the end-of-turn token, and the
        stop's text is not written. Each 1 to 256 UTF-8 bytes, at most 64. See :mod:`toolgrammar.runtime.stops`.
    stop_token_ids : sequence of int | None, default: None
        Token ids honoured the same way: where the turn may end, their probability goes to the end of
        the turn; elsewhere the grammar decides as for any token. At most 64, each an id of the tokenizer.
    **options :
        Grammar options (:class:`toolgrammar.turn.grammar.GrammarOptions`): ``format``, ``tool_choice``,
        ``parallel_tool_calls``, ``reasoning``, ``whitespace``, ``max_whitespace``,
        ``escape_markers``, ``after_calls``.

    Notes
    -----
    Logit columns beyond the tokenizer (Qwen3 models have 151,936 columns for 151,669 ids) are
    always masked. Outside blocks nothing else is touched, except what the tool-choice policy or the
    budget demands (``none`` removes the opener; ``required`` and a named tool make the turn the call;
    near the end of the budget the opener is removed when a call could no longer close) and, with
    ``steer_to_blocks``, the opener pool at call points.
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: Any,
        *,
        max_new_tokens: int | None = None,
        mode: str = "schema",
        steer_to_blocks: bool = False,
        steer_rows: Sequence[bool] | None = None,
        close_on_stop: bool = True,
        prefix_true: bool = False,
        assistant_prefix: str = "",
        stop_strings: str | Sequence[str] | None = None,
        stop_token_ids: Sequence[int] | None = None,
        **options: Any,
    ):
        if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
            raise ProcessorError(f"max_new_tokens must be a positive int or None, got {max_new_tokens!r}")
        if not isinstance(steer_to_blocks, bool):
            raise ProcessorError(f"steer_to_blocks must be True or False, got {steer_to_blocks!r}")
        if not isinstance(close_on_stop, bool):
            raise ProcessorError(f"close_on_stop must be True or False, got {close_on_stop!r}")
        if not isinstance(prefix_true, bool):
            raise ProcessorError(f"prefix_true must be True or False, got {prefix_true!r}")
        if not isinstance(assistant_prefix, str):
            raise ProcessorError(f"assistant_prefix must be a string, got {type(assistant_prefix).__name__}")
        self.vocab = vocabulary_of(tokenizer)
        strings, ids = checked_stops(
            _listed(stop_strings), _listed(stop_token_ids), self.vocab.n_tokens, where="ToolCallLogitsProcessor"
        )
        self.stop_strings: tuple[str, ...] = tuple(strings)
        """The stop strings honoured where the turn may end (``stop_strings``, checked, duplicates dropped)."""
        self.stop_token_ids: tuple[int, ...] = tuple(ids)
        """The stop token ids honoured where the turn may end (sorted, duplicates dropped)."""
        self._stops: StopRule | None = stop_rule(self.vocab, strings, ids)
        self._end_ids = stop_ids(self.vocab)  # where a stop's probability goes: the best of them
        self.turn_grammar = compile_turn(tools, mode=mode, **options)
        self.grammar: TokenGrammar = token_grammar(self.turn_grammar, self.vocab)
        self.max_new_tokens = max_new_tokens
        self.assistant_prefix = assistant_prefix
        self._start_state = start_state_of(self.grammar, self.turn_grammar.options, assistant_prefix)
        check_budget_fits(self.grammar, self.turn_grammar.options, self._start_state, max_new_tokens)
        self.steer_to_blocks = steer_to_blocks
        self._call_points: CallPoints | None = None
        if steer_to_blocks:
            openers = call_openers(self.vocab, self.turn_grammar.format.markers.block_open)
            self._call_points = CallPoints(self.grammar, openers)
        self.steer_rows = steer_rows
        self.close_on_stop = close_on_stop
        self.prefix_true = prefix_true
        self._stop_ids = stop_ids(self.vocab) if close_on_stop else None
        self._closes = Tally()  # blocks a stop closed, earlier generations (see stop_closes)
        self._steered = Tally()
        self._applier = MaskApplier()
        self._guard = threading.Lock()
        self.reset()

    @property
    def start_state(self) -> int:
        """The grammar state the turn starts from: the start, walked over ``assistant_prefix``."""
        return self._start_state

    # -- copies --------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # A copy (deepcopy, pickle) starts with no generation under way: cursors, the previous input
        # and the device-side mask tensors belong to the original. The compiled grammar is shared.
        return {k: v for k, v in self.__dict__.items() if k not in _PER_GENERATION}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._applier = MaskApplier()
        self._guard = threading.Lock()
        self.reset()

    # -- which rows are steered ------------------------------------------------------------------

    @property
    def steer_rows(self) -> tuple[bool, ...] | None:
        """Per row, whether steering may act on it (``None``: every row); read when a generation starts."""
        return self._steer_rows

    @steer_rows.setter
    def steer_rows(self, value: Sequence[bool] | None) -> None:
        if value is None:
            self._steer_rows: tuple[bool, ...] | None = None
            return
        if not self.steer_to_blocks:
            raise ProcessorError("steer_rows needs steer_to_blocks=True: without steering there is nothing to select")
        if isinstance(value, str | bytes | Mapping) or not (isinstance(value, Sequence) or hasattr(value, "tolist")):
            raise ProcessorError(f"steer_rows must be a sequence of True/False per row, or None; got {value!r}")
        rows = value.tolist() if hasattr(value, "tolist") else list(value)  # a tensor or array of bools too
        bad = [v for v in rows if not isinstance(v, bool)]
        if bad or not rows:
            raise ProcessorError(
                f"steer_rows must hold one True/False per row of the batch; got {value!r}"
                + (f" (not a bool: {bad[0]!r})" if bad else " (empty)")
            )
        self._steer_rows = tuple(rows)

    def _allowed_rows(self, rows: int) -> list[bool]:
        """``steer_rows`` for a batch of ``rows`` (expanded when generate repeated each input row)."""
        chosen = self._steer_rows
        if chosen is None:
            return [True] * rows
        if len(chosen) == rows:
            return list(chosen)
        if len(chosen) and rows % len(chosen) == 0:
            copies = rows // len(chosen)
            return [allowed for allowed in chosen for _ in range(copies)]
        raise ProcessorError(
            f"steer_rows has {len(chosen)} entries but this generation has {rows} rows: give one per row "
            "(or per input row, when generate repeats rows for num_beams or num_return_sequences), or set it to None"
        )

    # -- state -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the current generation; the next call starts from its input as the prompt."""
        self._owner: int | None = None  # the thread whose generation this is
        self.cursors: list[Cursor] = []
        self._fresh: list[bool] = []  # per row: at a call point (steering only)
        self._steer_allowed: list[bool] = []  # per row: steer_rows as this generation read it
        self._closing: list[Closing] = []  # per row: the closing probability carried (close_on_stop)
        self._pending: list[Pending] = []  # per row: this step's closer, q if it is taken
        self._closes.absorb(getattr(self, "_row_closes", Tally(0)))  # what the forgotten generation counted
        self._row_closes = Tally(0)  # per row: the blocks a stop closed (counted on the device by batch steps)
        self._follows: list[Follow] = []  # this step's rows whose last decision is on the device
        self._tails: list[bytes] = []  # per row: the free text since the turn could last end (stop_strings)
        self._prev_ids: torch.Tensor | None = None
        self._windows: list[list[int]] = []  # per row: the windows the next input must repeat (see _sync)
        self._tail_len = 0
        self._window = InputWindow()  # the host path's record of the last input (see _call_host_row)
        self._watch_overrun = False  # see _check_overrun
        self.prompt_length = 0
        self.generate_budget: int | None = None
        """The current generation's budget of new tokens as read from ``generate`` (``None``: unknown)."""

    @property
    def row_stop_closes(self) -> list[int]:
        """Per row of the current generation: the blocks :attr:`stop_closes` counts (``close_on_stop``).

        A batch step counts these on the device: reading this waits for it (it is for reports, not per token)."""
        return self._row_closes.counts()

    @property
    def stop_closes(self) -> int:
        """Blocks closed by a closer that a stop, more likely than not, chose (``close_on_stop``; for reports),
        in every generation this processor followed; read back from the device like :attr:`row_stop_closes`."""
        return self._closes.total() + self._row_closes.total()

    @property
    def steered_steps(self) -> int:
        """Rows x steps at which steering moved probability (for reports; read back from the device)."""
        return self._steered.total()

    @property
    def errors(self) -> list[str | None]:
        """Per row: ``None``, or why the row left the grammar (a token the grammar rejected)."""
        return [c.error for c in self.cursors]

    def _start(self, input_ids: torch.Tensor) -> None:
        rows = input_ids.shape[0]
        self.cursors = [Cursor(self.grammar, self.max_new_tokens, self._start_state) for _ in range(rows)]
        points = self._call_points
        self._steer_allowed = self._allowed_rows(rows) if points is not None else [False] * rows
        initial = points.initial(self._start_state) if points is not None else False
        self._fresh = [initial and allowed for allowed in self._steer_allowed]
        self._closing = [0.0] * rows
        self._pending = [None] * rows
        self._closes.absorb(self._row_closes)
        self._row_closes = Tally(rows)
        self._follows = []
        self._tails = [b""] * rows
        self.prompt_length = input_ids.shape[1]
        self._check_budget()

    # -- the budget ----------------------------------------------------------------------------

    def generate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``model.generate`` that state the token budget once.

        ``model.generate(**inputs, **processor.generate_kwargs())`` passes this processor as the
        ``logits_processor`` and its ``max_new_tokens`` as generate's, so the two cannot disagree
        (giving ``max_new_tokens`` again is a ``TypeError``). A processor built without a budget
        returns the processor only. To run other logits processors too, pass
        ``logits_processor=LogitsProcessorList([*others, processor])`` and
        ``max_new_tokens=processor.max_new_tokens`` yourself; keep this processor last, so nothing
        after it gives a masked token its probability back.
        """
        kwargs: dict[str, Any] = {"logits_processor": LogitsProcessorList([self])}
        if self.max_new_tokens is not None:
            kwargs["max_new_tokens"] = self.max_new_tokens
        return kwargs

    def _check_budget(self) -> None:
        """Warn at the start of a generation when its budget and this processor's disagree.

        :class:`TokenBudgetWarning` lists what is detected and what cannot be; a generation whose
        budget cannot be read is watched step by step instead (:meth:`_check_overrun`).
        """
        budget, choice = self.max_new_tokens, self.turn_grammar.options.tool_choice
        self._watch_overrun = False
        self.generate_budget = None
        if choice == "none":
            return  # no block can open: no budget can cut one
        generate, level = _generate_budget(self.prompt_length)
        self.generate_budget = generate
        message = None
        if budget is None and generate is not None:
            message = (
                f"ToolCallLogitsProcessor was built without max_new_tokens, but generate() stops after {generate} "
                f"new tokens: nothing makes a tool call close before then. Build it with max_new_tokens={generate}; "
                f"better, {_STATE_IT_ONCE}"
            )
        elif budget is None and choice != "auto":
            message = (
                f"ToolCallLogitsProcessor was built without max_new_tokens under tool_choice={choice!r}: nothing "
                f"makes the forced call close before the generation stops. Build it with the generation's "
                f"max_new_tokens; better, {_STATE_IT_ONCE}"
            )
        elif budget is not None and generate is not None and generate < budget:
            message = (
                f"ToolCallLogitsProcessor was built with max_new_tokens={budget}, but generate() stops after "
                f"{generate} new tokens: a tool call still open at token {generate} is cut off (the processor closes "
                f"calls within its own budget, {budget}). Give both the same number; better, "
                f"{_STATE_IT_ONCE}"
            )
        elif budget is not None and generate is not None and generate > budget:
            message = (
                f"ToolCallLogitsProcessor was built with max_new_tokens={budget}, but generate() allows {generate} "
                f"new tokens: the processor ends every call by token {budget} and opens none after it. Give both "
                f"the same number; better, {_STATE_IT_ONCE}"
            )
        elif budget is not None and generate is None:
            self._watch_overrun = True
        if message is not None:
            warnings.warn(message, TokenBudgetWarning, stacklevel=level)

    def _check_overrun(self) -> None:
        """Warn (once per generation) when a generation this processor could not read goes past its budget."""
        budget = self.max_new_tokens
        if budget is None or not self.cursors or self.cursors[0].n_tokens < budget:
            return
        self._watch_overrun = False
        if all(c.error is not None or c.finished for c in self.cursors):
            return  # every turn has ended: past the end nothing is constrained, the budget is moot
        _, level = _generate_budget(self.prompt_length)
        warnings.warn(
            f"the generation asks for new token {self.cursors[0].n_tokens + 1}, but this ToolCallLogitsProcessor was "
            f"built with max_new_tokens={budget}: the generation's budget is larger, and past token {budget} "
            f"no tool call can open. Give both the same number; better, {_STATE_IT_ONCE}",
            TokenBudgetWarning,
            stacklevel=level,
        )

    def _advance(self, row: int, token: int) -> None:
        cursor = self.cursors[row]
        before = cursor.state
        cursor.advance(token)
        pending = self._pending[row]
        self._closing[row] = 0.0
        if pending is not None:  # only then is there a decision to follow: most tokens skip the call
            self._pending[row] = None
            done = follow_row(pending, token, cursor.in_block, cursor.error is None)
            if isinstance(done, Follow):  # decided on the device: followed there, with the batch's others
                done.slot = row
                self._follows.append(done)
            else:
                self._closing[row], closed = done
                if closed:
                    self._row_closes.add(row)
        stops = self._stops
        if stops is not None:  # the tail runs on only while the turn may end before and after the token
            ends = self.grammar.eos_allowed
            going = cursor.error is None and ends[before] and ends[cursor.state]
            self._tails[row] = stops.extend(self._tails[row], token) if going else b""
        points = self._call_points
        if points is not None:
            allowed = self._steer_allowed[row]
            fresh = allowed and cursor.error is None and points.update(self._fresh[row], before, token, cursor.state)
            self._fresh[row] = fresh

    def _sync(self, input_ids: torch.Tensor) -> None:
        """Advance every row by the token ``input_ids`` adds to the last step's input, or start a new generation.

        Whether the input extends the last one is checked on windows, not whole: each row's first
        :data:`WINDOW` tokens and the last ones of the previous input. A whole-sequence comparison every step
        costs O(context) per token, quadratic over a long generation (3.8x an ``add_`` pass at 128k tokens); a
        new ``generate()`` call whose input is one token longer and agrees on both windows but not in between is
        not a case that happens (``reset()`` marks a new call for certain). The windows and the new tokens are
        read to the host together: the step's one read (``generate`` has the new tokens on the host anyway,
        for its stopping criteria)."""
        prev = self._prev_ids
        b, length = input_ids.shape
        if prev is None or prev.shape[0] != b or prev.shape[1] + 1 != length:
            self._start_windows(input_ids)
            return
        if not self._windows:  # the last step took the one-row host path, which keeps its windows as bytes
            self._windows = self._read_windows(prev)
        head, tail = len(self._windows[0]) - self._tail_len, self._tail_len
        seen = torch.cat([input_ids[:, :head], input_ids[:, length - 1 - tail :]], dim=1).tolist()
        if all(row[:-1] == old for row, old in zip(seen, self._windows, strict=True)):
            tokens = [row[-1] for row in seen]
            cut = head + (1 if tail == WINDOW else 0)
            self._windows = [row[:head] + row[cut:] for row in seen]
            self._tail_len = min(WINDOW, tail + 1)
        elif self._reorder(input_ids, prev):
            tokens = input_ids[:, -1].tolist()
            self._windows = self._read_windows(input_ids)
        else:
            self._start_windows(input_ids)  # not an extension of the last step: a new generate() call
            return
        for row, token in enumerate(tokens):
            self._advance(row, int(token))
        self._follow_on_device()
        self._prev_ids = input_ids

    def _start_windows(self, input_ids: torch.Tensor) -> None:
        self._start(input_ids)
        self._windows = self._read_windows(input_ids)
        self._prev_ids = input_ids

    def _read_windows(self, input_ids: torch.Tensor) -> list[list[int]]:
        """Each row's first :data:`WINDOW` tokens (of the prompt) and last :data:`WINDOW` ones (see :meth:`_sync`)."""
        length = input_ids.shape[1]
        head, self._tail_len = min(WINDOW, self.prompt_length), min(WINDOW, length)
        return torch.cat([input_ids[:, :head], input_ids[:, length - self._tail_len :]], dim=1).tolist()

    def _follow_on_device(self) -> None:
        """Follow, in one batch on the device, the decisions this step's rows took their tokens after."""
        if self._follows:
            for follow, carried in zip(self._follows, follow_on_device(self._follows, self._row_closes), strict=True):
                self._closing[follow.slot] = carried
            self._follows = []

    def _reorder(self, input_ids: torch.Tensor, prev: torch.Tensor) -> bool:
        """Rows were reordered (beam search): give each row the cursor of the row it extends.

        Returns False when some row extends no previous row (then this is a new generation).
        """
        index = {tuple(row): i for i, row in enumerate(prev[:, self.prompt_length :].tolist())}
        parents = []
        for row in input_ids[:, self.prompt_length : -1].tolist():
            parent = index.get(tuple(row))
            if parent is None:
                return False
            parents.append(parent)
        self.cursors = [self.cursors[p].fork() for p in parents]
        self._fresh = [self._fresh[p] for p in parents]
        self._steer_allowed = [self._steer_allowed[p] for p in parents]
        self._closing = [self._closing[p] for p in parents]
        self._pending = [self._pending[p] for p in parents]
        self._row_closes.reorder(parents)
        self._tails = [self._tails[p] for p in parents]
        return True

    # -- masking -----------------------------------------------------------------------------

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self._guard.acquire(blocking=False):
            raise ProcessorError(_SHARED_MESSAGE)
        try:
            self._check_owner()
            return self._masked(input_ids, scores)
        finally:
            self._guard.release()

    def _check_owner(self) -> None:
        """One processor follows one generation at a time: another thread's unfinished one is an error."""
        me = threading.get_ident()
        if self._owner is not None and self._owner != me and any(_under_way(c) for c in self.cursors):
            raise ProcessorError(_SHARED_MESSAGE)
        self._owner = me

    def _masked(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._call_host_row(input_ids, scores):
            return scores
        self._window.forget()
        if scores.dim() != 2 or input_ids.dim() != 2 or scores.shape[0] != input_ids.shape[0]:
            raise ProcessorError(
                f"expected input_ids (batch, length) and scores (batch, vocab) with the same batch, got "
                f"{tuple(input_ids.shape)} and {tuple(scores.shape)}"
            )
        n_tokens = self.grammar.table.n_tokens
        width = scores.shape[1]
        if width < n_tokens:
            raise ProcessorError(
                f"scores have {width} columns but the tokenizer has {n_tokens} ids; pass the tokenizer of this model"
            )
        self._sync(input_ids)
        if self._watch_overrun:
            self._check_overrun()
        masks = [c.mask() for c in self.cursors]
        rows = [r for r, m in enumerate(masks) if m is not None]
        if len(rows) < len(masks) and width > n_tokens:
            scores[:, n_tokens:] = -float("inf")  # finished rows too: padding columns are never text
        close, closers = self._closers(rows)
        stop = self._applier.stop_logits(scores, close, self._stop_ids) if close else None
        pouring = None
        if self.prefix_true and rows:
            tables = [self.grammar.prefix_table(self.cursors[r].state) for r in rows]
            pouring = self._applier.gather_donors(scores, rows, tables)
        self._applier.apply(scores, rows, [masks[r] for r in rows], n_tokens)
        if pouring is not None:
            self._applier.pour(scores, pouring)
        if stop is not None:
            got = self._applier.close(scores, close, stop, closers, [self._closing[r] for r in close])  # on the device
            for r, pending in zip(close, got, strict=True):
                self._pending[r] = pending
        stops = self._stops
        if stops is not None:
            ends = self.grammar.eos_allowed
            stop_at = [r for r in rows if ends[self.cursors[r].state]]
            if stop_at:
                banned = [stops.banned(self._tails[r]) for r in stop_at]
                self._applier.pool_stops(scores, stop_at, banned, self._end_ids)
        if self._call_points is not None:
            steer = [r for r in rows if self._fresh[r]]
            if steer:
                self._applier.steer(scores, steer, self._call_points.openers, self._steered)
        return scores

    def _closers(self, rows: Sequence[int]) -> tuple[list[int], list[np.ndarray]]:
        """The rows (of ``rows``, masked this step) where a stop goes to a close, and each one's closing tokens.

        Looked up before masking (the stop is read from the raw logits); a row inside a block whose call is
        not complete has none, and most steps in a block are such steps: they read nothing more."""
        if self._stop_ids is None:
            return [], []
        close, closers = [], []
        for r in rows:
            ids = self.cursors[r].closing_tokens()
            if len(ids):
                close.append(r)
                closers.append(ids)
        return close, closers

    def _call_host_row(self, input_ids: torch.Tensor, scores: torch.Tensor) -> bool:
        """One row on the host, in place: about a third of the torch path's per-step cost. False where this path
        does not apply (a batch, a device or autograd tensor, or a shape the torch path rejects with its error).

        With the C core (the token table's), the input and the row are read and written by address, and the
        input check (:class:`~toolgrammar.runtime.input_window.InputWindow`: the last input plus one token, agreeing
        on its first and last :data:`WINDOW` tokens, as in :meth:`_sync`) and the mask write are one C call
        each; without it, both go through numpy views. A numpy view of the row is made only where an option
        (close_on_stop at a complete call, prefix-true, stop strings, steering) reads it.
        """
        shape, ids_shape = scores.shape, input_ids.shape
        n_tokens = self.grammar.table.n_tokens
        if len(shape) != 2 or len(ids_shape) != 2 or shape[0] != 1 or ids_shape[0] != 1 or shape[1] < n_tokens:
            return False
        core = self.grammar.table.native
        view: np.ndarray | None = None
        if core is not None and _addressable(scores, torch.float32) and _addressable(input_ids, torch.int64):
            ids: int | np.ndarray = input_ids.data_ptr()
            row: int | np.ndarray = scores.data_ptr()
        else:
            views = _host_views(input_ids, scores)
            if views is None:
                return False
            core = None
            ids, view = views[0][0], views[1][0]
            row = view
        length = ids_shape[1]
        token = self._window.follows(ids, length, core)
        if token >= 0:
            self._advance(0, token)
            self._follow_on_device()
        else:
            self._start(input_ids)
            self._window.restart(input_ids[0].numpy(), self.prompt_length)
        self._prev_ids = input_ids
        self._windows = []
        if self._watch_overrun:
            self._check_overrun()
        cursor = self.cursors[0]
        mask = cursor.mask()
        closers = cursor.closing_tokens() if mask is not None and self._stop_ids is not None else None
        closing = closers is not None and len(closers) > 0
        stops = self._stops
        stopping = mask is not None and stops is not None and self.grammar.eos_allowed[cursor.state]
        steering = mask is not None and self._call_points is not None and self._fresh[0]
        pouring = self.prefix_true and mask is not None
        reads = closing or stopping or steering or pouring  # options that read the logits before the write
        sc = view if view is not None or not reads else scores.numpy()[0]
        stop = log_sum(sc[self._stop_ids]) if closing and sc is not None else None
        prefix = self.grammar.prefix_table(cursor.state) if pouring else NO_TABLE
        donors = sc[prefix.donors] if sc is not None and not prefix.empty else None
        self._applier.host.apply_at(row, shape[1], mask, n_tokens, core)
        if sc is None or not reads:
            return True
        if donors is not None:
            pour_host_row(sc, donors, prefix, self.grammar.table.native)
        if stop is not None and closers is not None:
            self._pending[0] = close_row(sc, stop, closers, host_closing(self._closing[0]))
        if stopping and stops is not None:
            pool_stops(sc, stops.banned(self._tails[0]), self._end_ids)
        if steering and self._call_points is not None:
            self._steered.add(count=steer_row(sc, self._call_points.openers))
        return True

    # -- reporting ---------------------------------------------------------------------------

    def in_block(self) -> list[bool]:
        """Per row: whether a block is open now."""
        return [c.in_block for c in self.cursors]

    def stats(self) -> dict[str, Any]:
        return {**self.grammar.stats(), "rows": len(self.cursors), "errors": sum(e is not None for e in self.errors)}


__all__ = ["TokenBudgetWarning", "ToolCallLogitsProcessor", "vocabulary_of"]
