"""vLLM integration: the same tool-call grammar in a vLLM server, by two routes.

On an OpenAI server, plain requests (``tools=...``, ``tool_choice=...``, nothing else) are constrained
by the tool-call parser plugin, :mod:`toolgrammar.integrations.vllm_tool_parser` (``--tool-call-parser
toolgrammar_hermes``), which builds route 2's spec from each request's own fields. The two routes
below are the Python-level building blocks, usable offline and per request.

Route 1, structured outputs (:func:`structured_outputs`)
    ``SamplingParams(structured_outputs=structured_outputs(tools, tool_choice="required"))``. The turn
    grammar is written as an xgrammar *structural tag* (:mod:`toolgrammar.turn.structural_tag`, re-exported
    here: :func:`structural_tag`, :func:`turn_structural_tag`, :func:`xgrammar_regex`), lowered from the
    same turn policy as the engine's grammar, and enforced by vLLM's own xgrammar backend (so it works
    with speculative decoding and on any vLLM server). It cannot carry **the token budget** (a block
    open when ``max_tokens`` runs out is cut) nor lookahead-only constraints (``escape_markers=True``,
    ``qwen-xml``), which it refuses; see that module for the tag's shape and limits. Needs the
    ``xgrammar`` backend (vLLM's default ``auto`` picks it).

Route 2, the logits processor (:class:`VllmToolCallLogitsProcessor`)
    Runs toolgrammar's own engine inside vLLM's sampler, with the **budget guarantee**: the
    request's ``max_tokens`` is the budget, a block that has started always closes within it, and a
    block is never opened that could not close in time. Load it once per engine::

        LLM(model, logits_processors=[VllmToolCallLogitsProcessor])      # offline
        vllm serve MODEL --logits-processors toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor

    (installing toolgrammar also registers it under the ``vllm.logits_processors`` entry-point group,
    which every vLLM engine loads; see "Loading" below) and switch it on per request::

        SamplingParams(max_tokens=256, extra_args=extra_args(tools, tool_choice="required"))
        # OpenAI server: extra_body={"vllm_xargs": extra_args(tools, as_json=True)}
        # steered (toolgrammar.runtime.steering): extra_args(tools, steer_to_blocks=True)

    Requests without the ``"toolgrammar"`` key are untouched. Loaded per engine, not per request.
    Not available with speculative decoding: vLLM refuses a named processor there, and silently
    skips entry-point ones (toolgrammar requests would then run unconstrained; use route 1).

Loading, and vLLM's async scheduling
    The processor needs each row's sampled tokens. With async scheduling (vLLM's default on GPUs)
    vLLM fills in the real token ids only when some custom processor was *named* at start-up
    (``logits_processors=`` / ``--logits-processors``); a processor loaded only through the entry
    point then sees placeholder ids (``-1``). So name it explicitly (the entry-point copy notices
    the named one and stands down, so the mask is not applied twice), or pass
    ``--no-async-scheduling``. When a row sees a placeholder anyway, that row is left unconstrained
    and an error is logged; nothing raises inside the engine (a raise there would fail every
    request of the batch). vLLM's CPU backend never schedules asynchronously.

Error policy
    Bad tools or options fail the request before it runs: :meth:`VllmToolCallLogitsProcessor.validate_params`
    compiles the grammar in the front end and raises ``ValueError`` (HTTP 400 from the server).
    Inside the engine nothing raises: a row whose sampled token the grammar rejects (possible only
    when something else changed its logits: ``min_tokens``, a thinking budget) or whose tokens are
    unknown goes into a sticky error state, is left unconstrained and is logged. A ``max_tokens``
    below what the policy's first call needs (``required`` or a named tool with a tiny budget) is
    logged as a warning: the engine then heads for the end as fast as it can, but that call can be cut
    (the server's front end refuses such a request with an HTTP 400, as it refuses ``min_tokens``,
    ``ignore_eos`` and ``include_stop_str_in_output`` with tools, and a prefill the grammar cannot continue).

Hot path: per step, each constrained row catches up with its new output tokens (O(new tokens)),
reads its cached mask, and :class:`toolgrammar.runtime.masking.MaskApplier` (shared with the transformers
adapter) masks the batch with one ``index_fill_`` (banned ids) and one ``fill_``/``index_copy_``
pair (allowed ids) over the flattened logits, the index tensors of each cached mask copied to the
device once; a single constrained row on the CPU takes its numpy fast path. Rows of other requests
are not touched. No Python loop over the vocabulary.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import DEAD
from toolgrammar.errors import GrammarError, ProcessorError, ToolgrammarError
from toolgrammar.formats import registered_format
from toolgrammar.formats.options import GrammarOptions
from toolgrammar.integrations.tokenizers import vocabulary_of
from toolgrammar.runtime.closing import close_row, log_sum, stop_ids
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.device_state import Closing, Follow, Pending, Tally, follow_on_device, follow_row, host_closing
from toolgrammar.runtime.prefix_true import NO_TABLE, PrefixTable, pour_host_row
from toolgrammar.runtime.steering import CallPoints, call_openers, steer_row
from toolgrammar.runtime.stops import StopRule, checked_stops, pool_stops, stop_rule
from toolgrammar.runtime.token_grammar import token_grammar
from toolgrammar.schema import load_tools_lenient
from toolgrammar.turn.grammar import TurnGrammar, compile_turn
from toolgrammar.turn.structural_tag import structural_tag, turn_structural_tag, xgrammar_regex
from toolgrammar.vocab import Vocabulary

if TYPE_CHECKING:
    import numpy as np
    import torch

    from toolgrammar.runtime.token_grammar import StateMask, TokenGrammar

try:  # the processor must subclass vLLM's base class; keep the module importable without vLLM
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except ImportError:  # pragma: no cover - exercised only where vLLM is absent
    LogitsProcessor = object  # type: ignore[assignment,misc]
    BatchUpdate = Any  # type: ignore[assignment,misc]
    MoveDirectionality = None  # type: ignore[assignment]

logger = logging.getLogger("toolgrammar.vllm")

EXTRA_ARGS_KEY = "toolgrammar"
"""The key of ``SamplingParams.extra_args`` (``vllm_xargs`` on the server) that switches route 2 on."""

ENTRY_POINT = "toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor"
"""What to pass to ``--logits-processors`` / ``LLM(logits_processors=[...])``."""

PROCESSOR_KEYS = ("close_on_stop", "prefix_true", "steer_to_blocks", "assistant_prefix", "stop", "stop_token_ids")
"""Spec keys that set the processor's behaviour for the request, not its grammar."""

SPEC_KEYS = ("tools", "mode", "lenient", *GrammarOptions.__dataclass_fields__, *PROCESSOR_KEYS)
"""Keys a request's ``extra_args["toolgrammar"]`` may hold: ``tools`` (required), ``mode``, ``lenient``
(default ``False``: load the tools as ``load_tools(..., lenient=True)`` does, each change logged), the grammar
options, ``close_on_stop`` (route 2 only; default ``True``, see :mod:`toolgrammar.runtime.closing`),
``prefix_true`` (route 2 only; default ``False``, see :mod:`toolgrammar.runtime.prefix_true`),
``steer_to_blocks`` (route 2 only; default ``False``, see :mod:`toolgrammar.runtime.steering`),
``assistant_prefix`` (the text a prefilled assistant message already put into the turn: the grammar
continues after it) and ``stop`` / ``stop_token_ids`` (stops honoured where the turn may end, see
:mod:`toolgrammar.runtime.stops`; give them here instead of in ``SamplingParams``, which would cut calls)."""


# ================================================================================================
# Route 1: structured outputs (an xgrammar structural tag)
# ================================================================================================


def structured_outputs(tools: Any, *, format: str = "hermes", mode: str = "schema", **options: Any) -> Any:
    """``vllm.sampling_params.StructuredOutputsParams`` carrying the turn grammar as a structural tag.

    Parameters are those of :func:`toolgrammar.turn.grammar.compile_turn`. See :mod:`toolgrammar.turn.structural_tag`
    for the tag's shape and what this route cannot carry (the token budget; lookahead-only constraints).
    """
    from vllm.sampling_params import StructuredOutputsParams

    tag = structural_tag(tools, format=format, mode=mode, **options)
    return StructuredOutputsParams(structural_tag=json.dumps(tag, ensure_ascii=False))


# ================================================================================================
# Route 2: the logits processor
# ================================================================================================


def extra_args(tools: Any, *, mode: str = "schema", as_json: bool = False, **options: Any) -> dict[str, Any]:
    """The ``extra_args`` that switch the processor on for one request (checked now, by compiling).

    ``as_json=True`` puts the spec in as a JSON string: the OpenAI server's ``vllm_xargs`` takes flat
    values only (``str | int | float | list``), so pass ``extra_body={"vllm_xargs": extra_args(...,
    as_json=True)}`` there. Tools may be anything :func:`~toolgrammar.schema.loading.load_tools` takes that is
    JSON (the OpenAI tool list, or bare ``{"name", "description", "parameters"}`` entries).
    """
    spec: dict[str, Any] = {"tools": tools, "mode": mode, **options}
    compile_spec(_normalize_spec(spec))
    return {EXTRA_ARGS_KEY: json.dumps(spec, ensure_ascii=False) if as_json else spec}


def request_spec(params: Any) -> dict[str, Any] | None:
    """The toolgrammar spec of a request's ``SamplingParams`` (``None``: not a toolgrammar request).

    Raises :class:`~toolgrammar.errors.GrammarError` on a malformed spec.
    """
    args = getattr(params, "extra_args", None)
    if not args or EXTRA_ARGS_KEY not in args:
        return None
    return _normalize_spec(args[EXTRA_ARGS_KEY])


def _normalize_spec(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as error:
            raise GrammarError(f"extra_args[{EXTRA_ARGS_KEY!r}] is a string but not JSON: {error}") from error
    if not isinstance(raw, Mapping):
        raise GrammarError(
            f"extra_args[{EXTRA_ARGS_KEY!r}] must be an object (or its JSON text) with 'tools' and options, "
            f"got {type(raw).__name__}"
        )
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise GrammarError(
            f"extra_args[{EXTRA_ARGS_KEY!r}] has unknown key(s) {', '.join(unknown)}; known: {', '.join(SPEC_KEYS)}"
        )
    if "tools" not in raw:
        raise GrammarError(f"extra_args[{EXTRA_ARGS_KEY!r}] needs 'tools' (the OpenAI tool list)")
    for key in ("lenient", "close_on_stop", "prefix_true", "steer_to_blocks"):
        if key in raw and not isinstance(raw[key], bool):
            raise GrammarError(f"extra_args[{EXTRA_ARGS_KEY!r}][{key!r}] must be true or false, got {raw[key]!r}")
    if "assistant_prefix" in raw and not isinstance(raw["assistant_prefix"], str):
        raise GrammarError(
            f"extra_args[{EXTRA_ARGS_KEY!r}]['assistant_prefix'] must be a string, got {raw['assistant_prefix']!r:.100}"
        )
    if "stop" in raw or "stop_token_ids" in raw:
        try:
            checked_stops(raw.get("stop"), raw.get("stop_token_ids"), 1 << 31, where=f"extra_args[{EXTRA_ARGS_KEY!r}]")
        except ProcessorError as error:
            raise GrammarError(str(error)) from error
    if "format" in raw:  # data from a request: it selects a registered format, it never names code to import
        registered_format(raw["format"], where=f"extra_args[{EXTRA_ARGS_KEY!r}]['format']")
    return dict(raw)


_turns: OrderedDict[str, TurnGrammar] = OrderedDict()
_turns_lock = threading.Lock()
_MAX_TURNS = 64


def _grammar_key(spec: dict[str, Any]) -> str:
    """The spec's grammar part as a cache key (processor options such as ``close_on_stop`` left out)."""
    try:
        return json.dumps(
            {k: v for k, v in spec.items() if k not in PROCESSOR_KEYS}, sort_keys=True, ensure_ascii=False
        )
    except (TypeError, ValueError) as error:
        raise GrammarError(f"extra_args[{EXTRA_ARGS_KEY!r}] is not JSON-serialisable: {error}") from error


def compile_spec(spec: dict[str, Any]) -> TurnGrammar:
    """The turn grammar of a spec, compiled once per process per distinct spec (LRU of 64)."""
    key = _grammar_key(spec)
    with _turns_lock:
        turn = _turns.get(key)
        if turn is not None:
            _turns.move_to_end(key)
            return turn
    options = {k: v for k, v in spec.items() if k not in ("tools", "mode", "lenient", *PROCESSOR_KEYS)}
    mode = spec.get("mode", "schema")
    tools = _load_lenient(spec["tools"], mode) if spec.get("lenient", False) else spec["tools"]
    turn = compile_turn(tools, mode=mode, **options)
    with _turns_lock:
        _turns[key] = turn
        while len(_turns) > _MAX_TURNS:
            _turns.popitem(last=False)
    return turn


def _load_lenient(tools: Any, mode: str) -> Any:
    """``load_tools(tools, lenient=True)``, each of its reports (what was mapped or dropped, where) logged.

    Logged once per distinct spec: the compiled turn is cached, so a repeated request does not log again."""

    toolset, notes = load_tools_lenient(tools, mode=mode)
    for note in notes:
        logger.warning("toolgrammar: lenient loading: %s", note)
    return toolset


@dataclass
class _Compiled:
    """One spec's grammar as the processor keeps it."""

    grammar: TokenGrammar
    block_open: str
    """The format's block opener (steering pools onto its first token)."""
    points: CallPoints | None = None
    """Built on the first request that steers (``steer_to_blocks``)."""
    unsteerable: bool = False
    """Steering was refused for this grammar (the opener's first token does not commit the turn to a
    block, see :class:`~toolgrammar.runtime.steering.CallPoints`): requests are masked, not steered."""
    starts: dict[str, int] = field(default_factory=dict)
    """The state after each ``assistant_prefix`` seen (the last 64)."""


@dataclass
class _Row:
    """One constrained request in the persistent batch."""

    cursor: Cursor
    output_ids: list[int]
    """vLLM's own running list of the request's output token ids (a reference: it grows in place, and
    vLLM may also trim it in place: a failed KV load, a speculative-decoding correction)."""
    params: Any = None
    """The request's ``SamplingParams`` (the same object when vLLM re-adds a preempted request)."""
    seen: list[int] = field(default_factory=list)
    """The tokens the cursor consumed, in order (to notice ``output_ids`` changing under it)."""
    consumed: int = 0
    """How many of ``output_ids`` the cursor has consumed."""
    stops: StopRule | None = None
    """The request's stop strings and stop token ids (:mod:`toolgrammar.runtime.stops`)."""
    tail: bytes = b""
    """The end of the text written since the turn could last end (what a stop string may complete)."""
    close_on_stop: bool = True
    prefix_true: bool = False
    """Prefix-true masking for this request (:mod:`toolgrammar.runtime.prefix_true`)."""
    closing: Closing = 0.0
    """The closing probability carried (``close_on_stop``; see :mod:`toolgrammar.runtime.closing`): on the host,
    or on the device where a batch step decided it (:mod:`toolgrammar.runtime.device_state`)."""
    pending: Pending = None
    """This step's closer and the closing probability if it is taken (on the host or on the device)."""
    points: CallPoints | None = None
    """Where a block may open, for ``steer_to_blocks`` (``None``: the row is not steered)."""
    fresh: bool = False
    """At a call point now (``steer_to_blocks``; see :mod:`toolgrammar.runtime.steering`)."""


_MAX_PARKED = 256
"""Removed rows kept for a preempted request's return."""
_MAX_LOGGED = 256
"""Distinct log-once keys remembered."""
_CHECKED_TAIL = 8
"""How many of a row's last consumed tokens are compared with vLLM's output at each step: vLLM changes a
request's output only at its end (a speculative-decoding correction) or by trimming it (a failed KV load)."""

_live: weakref.WeakSet[VllmToolCallLogitsProcessor] = weakref.WeakSet()
_live_lock = threading.Lock()


class VllmToolCallLogitsProcessor(LogitsProcessor):
    """vLLM v1 logits processor: toolgrammar's engine, with the budget guarantee, per request.

    A request opts in with ``SamplingParams(extra_args={"toolgrammar": {"tools": [...], ...}})``
    (see :func:`extra_args`); its ``max_tokens`` is the budget. Keys: ``tools`` (required),
    ``mode`` (``"schema"`` | ``"strings"``), and the grammar options (:class:`~toolgrammar.turn.grammar.GrammarOptions`:
    ``format``, ``tool_choice``, ``parallel_tool_calls``, ``reasoning``, ``whitespace``,
    ``max_whitespace``, ``escape_markers``, ``after_calls``), ``close_on_stop`` (default ``True``: a
    stop where the block's call is complete closes the block, as in the transformers processor; see
    :mod:`toolgrammar.runtime.closing`), ``prefix_true`` (default ``False``: inside a block a masked token
    whose bytes start with an accepted continuation gives its probability to the allowed tokens consistent
    with it; see :mod:`toolgrammar.runtime.prefix_true`) and ``steer_to_blocks`` (default ``False``: at a call point the
    probability of tokens that open a fenced or bare-JSON call moves onto the block opener's first
    token, as in the transformers processor; see :mod:`toolgrammar.runtime.steering`). Other requests are untouched.

    One instance per engine, built by vLLM (``__init__(vllm_config, device, is_pin_memory)``). The
    tokenizer's vocabulary is read on the first toolgrammar request (about a second for Qwen3's
    151k tokens), not at start-up, so an installed-but-unused toolgrammar costs nothing. Compiled
    grammars and their masks are shared by all requests with the same spec.

    Notes
    -----
    Not argmax-invariant (it changes greedy picks), so vLLM applies it before penalties and
    temperature. Penalties and ``logit_bias`` cannot undo a ``-inf``. ``min_tokens`` and
    ``ignore_eos`` conflict with a turn that the grammar says is finished (vLLM then bans the only
    allowed token), and ``SamplingParams.stop`` / ``stop_token_ids`` would cut calls: give stops in the
    spec instead (``"stop"``, ``"stop_token_ids"``), where they are honoured where the turn may end. The
    tool-parser plugin does all this for a server's requests and refuses the rest (HTTP 400). vLLM may
    preempt a request and add it back, or trim its output in place: the row's state follows (a parked row
    is taken back; a shrunk output is rewound and replayed). Without the tool-parser plugin, the
    server's own ``tool_choice="required"``/named tool choice also constrains (vLLM attaches a
    JSON-array schema): send ``tool_choice="auto"`` to vLLM and put the policy in the toolgrammar spec
    instead; with the plugin (:mod:`toolgrammar.integrations.vllm_tool_parser`) the request's own
    ``tool_choice`` is the policy.
    """

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        from toolgrammar.runtime.masking import MaskApplier  # torch: imported where vLLM runs the processor

        self.vllm_config = vllm_config
        self.device = device
        model_config = getattr(vllm_config, "model_config", None)
        self.model_config = model_config
        self.max_model_len = getattr(model_config, "max_model_len", None)
        self.rows: dict[int, _Row] = {}
        self.applier: MaskApplier = MaskApplier()
        self._vocab: Vocabulary | None = None
        self._vocab_error: str | None = None
        self._grammars: dict[str, _Compiled] = {}
        self._logged: OrderedDict[str, None] = OrderedDict()
        self._parked: OrderedDict[int, _Row] = OrderedDict()  # removed rows, by id(row): see _park, _unpark
        self.n_rewinds = 0
        """Rows rewound because vLLM trimmed or replaced output tokens they had consumed."""
        self.n_requests = 0
        self.n_errors = 0
        self._closes = Tally()  # blocks a stop closed: counted on the device by batch steps
        self._steered = Tally()
        self._follows: list[Follow] = []  # this step's rows whose last decision is on the device
        self._awaiting: dict[int, tuple[_Row, int]] = {}  # id(row) -> the row and its entry in _follows
        scheduler_config = getattr(vllm_config, "scheduler_config", None)
        named = bool(getattr(model_config, "logits_processors", None))
        self.placeholder_risk = bool(getattr(scheduler_config, "async_scheduling", False)) and not named
        # Loaded twice (entry point + named): the second copy stands down, so masks are applied once.
        with _live_lock:
            self.active = not any(p is not self and p.active and p.vllm_config is vllm_config for p in _live)
            _live.add(self)

    # -- vLLM interface ----------------------------------------------------------------------------

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Front-end check of a request's toolgrammar spec: compile it, or raise ``ValueError`` (HTTP 400)."""
        try:
            spec = request_spec(sampling_params)
            if spec is None:
                return
            if getattr(sampling_params, "structured_outputs", None) is not None:
                raise GrammarError(
                    "a request cannot use both structured_outputs and the toolgrammar logits processor: the two "
                    "constraints would fight; use one route"
                )
            compile_spec(spec)
        except ToolgrammarError as error:
            raise ValueError(f"toolgrammar: {error}") from error

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None or not self.active:
            return
        # vLLM lists in `removed` only the slots it leaves empty: a removed request whose slot an added
        # request or a one-way move (condensing the batch) fills again is replaced there unannounced. So
        # the row an add or a one-way move overwrites is parked too (or a preempted request would come
        # back as a new one), and the added requests look for their parked rows only once the whole
        # update is in: a request may leave one slot and come back to another in the same update.
        for index in batch_update.removed:
            self._park(self.rows.pop(index, None))
        added: dict[int, tuple[Any, list[int] | None, list[int]]] = {}
        for index, params, prompt_ids, output_ids in batch_update.added:
            self._park(self.rows.pop(index, None))
            added[index] = (params, prompt_ids, output_ids)
        for a, b, direction in batch_update.moved:
            swap = direction == MoveDirectionality.SWAP
            self._park(_move(self.rows, a, b, swap))
            _move(added, a, b, swap)
        for index, (params, prompt_ids, output_ids) in added.items():
            row = self._unpark(params, output_ids)
            if row is not None:
                row.output_ids = output_ids  # a preempted request back: its state goes on (catch-up rewinds if needed)
            else:
                row = self._new_row(params, prompt_ids, output_ids)
            if row is not None:
                self.rows[index] = row

    def _park(self, row: _Row | None) -> None:
        """Keep a removed row a while: vLLM removes a preempted (or unscheduled) request and adds it back later."""
        if row is None or row.params is None:
            return
        self._parked[id(row)] = row
        while len(self._parked) > _MAX_PARKED:
            self._parked.popitem(last=False)

    def _unpark(self, params: Any, output_ids: list[int]) -> _Row | None:
        """The parked row of a request vLLM adds back (the same ``SamplingParams`` object), or ``None``.

        vLLM hands one ``SamplingParams`` object to all the samples of an ``n > 1`` request without a
        seed (its child requests), so that object alone may not say which row is the request's: its
        output list does (the same list object; under async scheduling a resumed request with output
        gets a new list, which starts with the tokens its row consumed). A row that fits neither is
        left parked: the request starts over as a new row, which follows its whole output."""
        mine = [row for row in self._parked.values() if row.params is params]
        if not mine:
            return None
        row = next((r for r in mine if r.output_ids is output_ids), None)
        if row is None and output_ids:  # (a new request has no output yet: it never takes a parked row here)
            fits = [r for r in mine if output_ids[: len(r.seen)] == r.seen]
            row = max(fits, key=lambda r: len(r.seen), default=None)
        if row is not None:
            del self._parked[id(row)]
        return row

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows or not self.active:
            return logits
        rows: list[int] = []
        masks: list[StateMask] = []
        closing_rows: list[_Row] = []  # rows whose stop goes to a close this step (close_on_stop)
        close_at: list[int] = []
        closers: list[np.ndarray] = []
        steer: list[tuple[int, CallPoints]] = []  # rows at a call point (steer_to_blocks)
        stop_at: list[int] = []  # rows where the turn may end and a stop would end it (stop, stop_token_ids)
        stop_banned: list[np.ndarray] = []
        prefixes: list[PrefixTable] = []  # per masked row: its prefix-true table (empty where off)
        n_tokens = 0
        for index, row in self.rows.items():
            if index >= logits.shape[0]:
                continue  # not scheduled in this step
            self._catch_up(row)
            mask = row.cursor.mask()
            if mask is None:
                continue  # finished, or in error: unconstrained
            rows.append(index)
            masks.append(mask)
            grammar = row.cursor.grammar
            prefixes.append(grammar.prefix_table(row.cursor.state) if row.prefix_true else NO_TABLE)
            n_tokens = grammar.table.n_tokens
            if row.fresh and row.points is not None:
                steer.append((index, row.points))
            if row.close_on_stop:
                ids = row.cursor.closing_tokens()
                if len(ids):
                    closing_rows.append(row)
                    close_at.append(index)
                    closers.append(ids)
            if row.stops is not None and grammar.eos_allowed[row.cursor.state]:
                stop_at.append(index)
                stop_banned.append(row.stops.banned(row.tail))
        self._follow_on_device()
        stops = stop_ids(self.vocabulary()) if closing_rows or stop_at else None
        if len(rows) == 1 and logits.device.type == "cpu" and logits.dtype == _float32() and logits.is_contiguous():
            # One row on the host: one numpy write through a view (the transformers adapter's fast path).
            view = logits[rows[0]].numpy()
            stop = log_sum(view[stops]) if closing_rows else None
            donors = view[prefixes[0].donors] if not prefixes[0].empty else None
            self.applier.apply_host_row(view, masks[0], n_tokens, grammar.table.native)
            if donors is not None:
                pour_host_row(view, donors, prefixes[0], grammar.table.native)
            if stop is not None:
                row = closing_rows[0]
                row.pending = close_row(view, stop, closers[0], host_closing(row.closing))
            if stop_at:
                pool_stops(view, stop_banned[0], stops)
            if steer:
                self._steered.add(count=steer_row(view, steer[0][1].openers))
        elif rows:
            stop_logits = self.applier.stop_logits(logits, close_at, stops) if closing_rows else None
            pouring = self.applier.gather_donors(logits, rows, prefixes)
            self.applier.apply(logits, rows, masks, n_tokens)
            if pouring is not None:
                self.applier.pour(logits, pouring)
            if stop_logits is not None:
                got = self.applier.close(logits, close_at, stop_logits, closers, [r.closing for r in closing_rows])
                for row, pending in zip(closing_rows, got, strict=True):
                    row.pending = pending
            if stop_at:
                self.applier.pool_stops(logits, stop_at, stop_banned, stops)
            if steer:
                self._steer(logits, steer)
        return logits

    def _steer(self, logits: torch.Tensor, steer: list[tuple[int, CallPoints]]) -> None:
        """Steer the batch's rows at a call point, one pass per set of openers (one per vocabulary and opener)."""
        groups: dict[int, tuple[CallPoints, list[int]]] = {}
        for index, points in steer:
            groups.setdefault(id(points.openers), (points, []))[1].append(index)
        for points, indices in groups.values():
            self.applier.steer(logits, indices, points.openers, self._steered)

    # -- rows ----------------------------------------------------------------------------------------

    def _new_row(self, params: Any, prompt_ids: list[int] | None, output_ids: list[int]) -> _Row | None:
        try:
            spec = request_spec(params)
        except ToolgrammarError as error:  # validate_params should have refused it already
            self._log_once("spec", f"toolgrammar: request left unconstrained: {error}")
            return None
        if spec is None:
            return None
        self.n_requests += 1
        if self.placeholder_risk:
            self._log_once(
                "async",
                "toolgrammar: this engine schedules asynchronously and the processor was loaded only through its "
                "entry point, so vLLM may hand over placeholder token ids; start vLLM with --logits-processors "
                f"{ENTRY_POINT} (or --no-async-scheduling)",
                logging.WARNING,
            )
        try:
            compiled = self._compiled(spec)
            start = self._start(compiled, spec.get("assistant_prefix", ""))
            vocab = self.vocabulary()
            strings, ids = checked_stops(
                spec.get("stop"), spec.get("stop_token_ids"), vocab.n_tokens, where="the request's toolgrammar spec"
            )
            stops = stop_rule(vocab, strings, ids)
        except ToolgrammarError as error:
            self.n_errors += 1
            self._log_once(f"compile:{error}", f"toolgrammar: request left unconstrained: {error}")
            return None
        budget = getattr(params, "max_tokens", None)
        if self.max_model_len is not None and prompt_ids is not None:
            room = self.max_model_len - len(prompt_ids)
            budget = room if budget is None else min(budget, room)

        grammar = compiled.grammar
        cursor = Cursor(grammar, budget if budget is None or budget >= 1 else 1, start=start)
        need = int(grammar.dist[start])
        if cursor.max_tokens is not None and cursor.max_tokens < need:
            # Only a policy that forces a call (required, a named tool) needs tokens before the turn may end.
            # The server's front end refuses such a request; this is the offline route, or a context too short.
            self._log_once(
                f"budget:{need}:{cursor.max_tokens}",
                f"toolgrammar: max_tokens={cursor.max_tokens} is below the {need} tokens this policy may need for its "
                f"first call (tool_choice={grammar.grammar.options.tool_choice!r}); that call can be cut",
                logging.WARNING,
            )
        points = self._call_points(compiled) if spec.get("steer_to_blocks", False) else None
        fresh = points is not None and points.initial(cursor.state)
        return _Row(
            cursor,
            output_ids,
            params=params,
            stops=stops,
            close_on_stop=spec.get("close_on_stop", True),
            prefix_true=spec.get("prefix_true", False),
            points=points,
            fresh=fresh,
        )

    def _start(self, compiled: _Compiled, prefix: str) -> int:
        """The state after ``assistant_prefix`` (the start state when there is none)."""
        if not prefix:
            return compiled.grammar.start
        state = compiled.starts.get(prefix)
        if state is None:
            state = compiled.grammar.walk_text(prefix)
            if state == DEAD:
                raise GrammarError(
                    f"the assistant prefill {prefix[-120:]!r} is not the start of a turn this grammar allows, so the "
                    "turn cannot be continued from it"
                )
            if len(compiled.starts) >= _MAX_TURNS:
                compiled.starts.pop(next(iter(compiled.starts)))
            compiled.starts[prefix] = state
        return state

    def _catch_up(self, row: _Row) -> None:
        """Feed the cursor the tokens vLLM appended to the request's output since the last step.

        vLLM may also have trimmed the output in place, or replaced its last tokens: then the row is
        rewound to what the output and the tokens consumed still share, and follows from there."""
        ids = row.output_ids
        done = row.consumed
        if done:
            window = min(done, _CHECKED_TAIL)
            if len(ids) < done or ids[done - window : done] != row.seen[done - window : done]:
                self._rewind(row)
        self._consume(row, row.consumed, len(ids), count=True)

    def _rewind(self, row: _Row) -> None:
        """Start the row over and replay the part of its output it had already consumed that is still there."""
        ids, seen = row.output_ids, row.seen
        common = 0
        limit = min(len(ids), len(seen))
        while common < limit and ids[common] == seen[common]:
            common += 1
        cursor = row.cursor
        cursor.reset()
        row.seen, row.consumed, row.tail = [], 0, b""
        row.closing, row.pending = 0.0, None
        self._awaiting.pop(id(row), None)
        row.fresh = row.points is not None and row.points.initial(cursor.state)
        self.n_rewinds += 1
        self._consume(row, 0, common, count=False)

    def _consume(self, row: _Row, begin: int, end: int, *, count: bool) -> None:
        """Advance the row over ``output_ids[begin:end]``; ``count``: errors and closes go into the stats
        (not when a rewind replays tokens already counted)."""
        ids = row.output_ids
        cursor = row.cursor
        grammar = cursor.grammar
        for position in range(begin, end):
            token = ids[position]
            row.seen.append(token)
            row.consumed = position + 1
            if cursor.error is not None:  # sticky: the row stays unconstrained
                continue
            before = cursor.state
            if token < 0:
                cursor.error = f"placeholder token id {token} at output position {position}"
                if count:
                    self.n_errors += 1
                    self._log_once(
                        "placeholder",
                        "toolgrammar: vLLM handed over placeholder token ids (async scheduling); the row is left "
                        f"unconstrained. Start vLLM with --logits-processors {ENTRY_POINT} or --no-async-scheduling",
                    )
                continue
            if not cursor.advance(token) and count:
                self.n_errors += 1
                self._log_once(
                    "rejected",
                    f"toolgrammar: a sampled token left the grammar ({cursor.error}); the row is left unconstrained. "
                    "Something else changed the row's logits (min_tokens, a thinking budget, another processor)",
                )
            self._follow_close(row, token, count=count)
            if row.stops is not None:
                after = cursor.state
                ending = cursor.error is None and grammar.eos_allowed[before] and grammar.eos_allowed[after]
                row.tail = row.stops.extend(row.tail, token) if ending else b""
            if row.points is not None:
                row.fresh = cursor.error is None and row.points.update(row.fresh, before, token, cursor.state)

    def _follow_close(self, row: _Row, token: int, *, count: bool = True) -> None:
        """Carry or end a close decision once ``token`` is consumed (:func:`toolgrammar.runtime.closing.follow`).

        A decision a batch step left on the device is followed there, with the step's others
        (:meth:`_follow_on_device`); a later token of the same row before that supersedes what it carries."""
        if row.pending is None:
            row.closing = 0.0
            self._awaiting.pop(id(row), None)
            return
        done = follow_row(row.pending, token, row.cursor.in_block, count and row.cursor.error is None)
        row.pending = None
        if isinstance(done, Follow):
            self._awaiting[id(row)] = (row, len(self._follows))
            self._follows.append(done)
            return
        row.closing, closed = done
        if closed:
            self._closes.add()

    def _follow_on_device(self) -> None:
        """Follow, in one batch on the device, the decisions this step's rows took their tokens after."""
        if not self._follows:
            return
        carried = follow_on_device(self._follows, self._closes)
        for row, position in self._awaiting.values():
            row.closing = carried[position]
        self._follows, self._awaiting = [], {}

    # -- grammar and vocabulary ----------------------------------------------------------------------

    def _compiled(self, spec: dict[str, Any]) -> _Compiled:
        """The spec's token grammar (and, once a request steers, its call points), shared by every request
        with the same grammar; up to 64 kept, the oldest dropped."""

        key = _grammar_key(spec)
        compiled = self._grammars.get(key)
        if compiled is None:
            turn = compile_spec(spec)
            compiled = _Compiled(token_grammar(turn, self.vocabulary()), turn.format.markers.block_open)
            if len(self._grammars) >= _MAX_TURNS:
                self._grammars.pop(next(iter(self._grammars)))
            self._grammars[key] = compiled
        return compiled

    def _call_points(self, compiled: _Compiled) -> CallPoints | None:
        """Where a block may open in the grammar, built on the first request that steers.

        ``None``, logged once, where steering is refused for the grammar (the block opener's first token
        in this vocabulary does not commit the turn to a block: free text may go on after it, as after
        the ``<`` of DeepSeek's DSML openers): the request is then masked as usual, not steered."""
        if compiled.points is None and not compiled.unsteerable:
            try:
                compiled.points = CallPoints(compiled.grammar, call_openers(self.vocabulary(), compiled.block_open))
            except ToolgrammarError as error:
                compiled.unsteerable = True
                self._log_once(f"steer:{error}", f"toolgrammar: request masked but not steered: {error}")
                return None
        return compiled.points

    def vocabulary(self) -> Vocabulary:
        """The model tokenizer's vocabulary, read once (raises :class:`ProcessorError` if there is none)."""
        if self._vocab is not None:
            return self._vocab
        if self._vocab_error is not None:
            raise ProcessorError(self._vocab_error)

        try:
            from vllm.tokenizers import cached_tokenizer_from_config

            tokenizer = cached_tokenizer_from_config(self.model_config)
            if tokenizer is None:
                raise ProcessorError("the engine runs with skip_tokenizer_init, so there is no vocabulary to mask")
            vocab = vocabulary_of(tokenizer)  # a transformers tokenizer, or vLLM's MistralTokenizer
        except ToolgrammarError as error:
            self._vocab_error = str(error)
            raise
        except Exception as error:  # a tokenizer toolgrammar cannot read: a clear error, once
            self._vocab_error = f"cannot read the model's tokenizer: {type(error).__name__}: {error}"
            raise ProcessorError(self._vocab_error) from error
        width = self.model_config.get_vocab_size() if hasattr(self.model_config, "get_vocab_size") else None
        if width is not None and width < vocab.n_tokens:
            self._vocab_error = (
                f"the model has {width} logit columns but its tokenizer has {vocab.n_tokens} ids; "
                "toolgrammar needs a column per token"
            )
            raise ProcessorError(self._vocab_error)
        self._vocab = vocab
        return vocab

    def _log_once(self, key: str, message: str, level: int = logging.ERROR) -> None:
        """Log ``message`` the first time ``key`` is seen; the last 256 keys are remembered."""
        if key in self._logged:
            self._logged.move_to_end(key)
            return
        self._logged[key] = None
        while len(self._logged) > _MAX_LOGGED:
            self._logged.popitem(last=False)
        logger.log(level, message)

    # -- reporting ------------------------------------------------------------------------------------

    @property
    def stop_closes(self) -> int:
        """Blocks closed by a closer that a stop, more likely than not, chose (``close_on_stop``).

        Batch steps count these on the device: reading this waits for the device (not on the per-token path)."""
        return self._closes.total()

    @property
    def steered_steps(self) -> int:
        """Rows x steps at which steering moved probability onto the block opener (``steer_to_blocks``); read
        back from the device like :attr:`stop_closes`."""
        return self._steered.total()

    def stats(self) -> dict[str, int]:
        """Counters for logs and tests: requests seen (a preempted request that comes back counts once), rows
        tracked now, errors, blocks ``close_on_stop`` closed, rows x steps steered (``steer_to_blocks``), rows
        rewound because vLLM trimmed their output."""
        return {
            "requests": self.n_requests,
            "rows": len(self.rows),
            "errors": self.n_errors,
            "stop_closes": self.stop_closes,
            "steered_steps": self.steered_steps,
            "rewinds": self.n_rewinds,
        }


def _move(slots: dict[int, Any], a: int, b: int, swap: bool) -> Any:
    """Move slot ``a``'s entry to ``b`` (``swap``: exchange the two); returns what a one-way move overwrote."""
    item_a, item_b = slots.pop(a, None), slots.pop(b, None)
    if item_a is not None:
        slots[b] = item_a
    if not swap:
        return item_b
    if item_b is not None:
        slots[a] = item_b
    return None


def _float32() -> Any:
    import torch

    return torch.float32


def processor_stats() -> list[dict[str, Any]]:
    """Stats of every live processor in this process (for ``LLM.collective_rpc`` in tests and benchmarks)."""
    with _live_lock:
        return [{**p.stats(), "active": p.active} for p in _live]


__all__ = [
    "ENTRY_POINT",
    "EXTRA_ARGS_KEY",
    "VllmToolCallLogitsProcessor",
    "extra_args",
    "processor_stats",
    "request_spec",
    "structural_tag",
    "structured_outputs",
    "turn_structural_tag",
    "xgrammar_regex",
]
