"""One sequence's constrained step on the host, in numpy: no torch, no device.

What an engine that hands a logits processor one row of float32 scores per token runs (llama.cpp's
``logits_processor``, :mod:`toolgrammar.integrations.llamacpp`): :class:`RowRules` holds what a processor
fixes once (the compiled grammar, its start state, the stops, the options), :class:`HostRow` one
sequence's state (its cursor, the closing probability it carries, its stop tail, whether it stands
at a call point), and :meth:`HostRow.step` does, on one row, the transformers processor's one-row
step in the same order: donors read, mask, pour, close_on_stop, stop strings, steering.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from toolgrammar.automata.nodes import DEAD
from toolgrammar.errors import ProcessorError
from toolgrammar.runtime.closing import close_row, follow, log_sum
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.prefix_true import NO_TABLE, pour_host_row
from toolgrammar.runtime.steering import CallPoints, steer_row
from toolgrammar.runtime.stops import StopRule, pool_stops
from toolgrammar.runtime.token_grammar import StateMask, TokenGrammar

NEG_INF = np.float32(-np.inf)


def start_state_of(grammar: TokenGrammar, options: Any, assistant_prefix: str) -> int:
    """The state a turn starts from after ``assistant_prefix``; :class:`ProcessorError` where the grammar cannot
    continue it (``options``: the turn grammar's :class:`~toolgrammar.formats.options.GrammarOptions`)."""
    state = grammar.walk_text(assistant_prefix)
    if state == DEAD:
        shown = assistant_prefix if len(assistant_prefix) <= 200 else "..." + assistant_prefix[-200:]
        raise ProcessorError(
            f"assistant_prefix {shown!r} (the text already in the assistant turn: a prefilled assistant "
            f"message, or assistant_prefix) is not a valid start of a turn under these options "
            f"(format {options.format!r}, tool_choice {options.tool_choice!r}, "
            f"reasoning {options.reasoning!r}), so the grammar cannot continue it: end it "
            "where a turn may go on (in free text, or inside a call that these tools allow, with the format's "
            "markup and the tools' names and arguments), or give a tool_choice that allows it"
        )
    return state


def check_budget_fits(grammar: TokenGrammar, options: Any, start_state: int, max_new_tokens: int | None) -> None:
    """:class:`ProcessorError` where a policy that forces a call gets a budget too small for the shortest one."""
    if max_new_tokens is None or options.tool_choice in ("auto", "none"):
        return
    shortest = int(grammar.dist[start_state])
    if max_new_tokens < shortest:
        raise ProcessorError(
            f"max_new_tokens={max_new_tokens} is too small for tool_choice={options.tool_choice!r}: the "
            f"shortest call this grammar allows takes {shortest} tokens; raise max_new_tokens to at least "
            f"{shortest}, or use tool_choice='auto'"
        )


class HostMasker:
    """Writes a :class:`~toolgrammar.runtime.token_grammar.StateMask` into one float32 host row, padding columns
    included: in one call of the C core's ``mask_row`` where the core is on, else in one numpy write (the
    banned ids with the padding are cached per mask and width)."""

    def __init__(self) -> None:
        self._with_padding: dict[tuple[int, int, int], np.ndarray] = {}
        self._keep: dict[int, object] = {}  # keeps each mask alive, so its id() is never reused

    def banned_with_padding(self, m: StateMask, width: int, n_tokens: int) -> np.ndarray:
        """A banned (or all-allowed) mask's ids and the padding columns ``n_tokens..width``, cached per mask."""
        key = (id(m.banned) if m.banned is not None else -1, width, n_tokens)
        ids = self._with_padding.get(key)
        if ids is None:
            ids = m.banned if m.banned is not None else np.empty(0, dtype=np.int64)
            if width > n_tokens:
                ids = np.concatenate([ids, np.arange(n_tokens, width, dtype=np.int64)])
            self._with_padding[key] = ids
            if m.banned is not None:
                self._keep[id(m.banned)] = m
        return ids

    def apply(self, row: np.ndarray, m: StateMask | None, n_tokens: int, core: ModuleType | None = None) -> None:
        """Mask one host row (a 1-D float32 numpy array, written in place) and its padding columns.

        ``core``: the C core that writes it (the token table's
        :attr:`~toolgrammar.runtime.token_table.TokenTable.native`), or ``None`` for numpy; both write the same
        values."""
        self.apply_at(row, row.shape[0], m, n_tokens, core)

    def apply_at(
        self, row: int | np.ndarray, width: int, m: StateMask | None, n_tokens: int, core: ModuleType | None
    ) -> None:
        """:meth:`apply`, where with the C core ``row`` may also be the address of a CPU tensor's row of ``width``
        float32 columns, checked by the caller (contiguous, outside autograd: what ``Tensor.numpy()`` would accept);
        without it ``row`` is a numpy row."""
        if core is None:
            if not isinstance(row, np.ndarray):
                raise TypeError("HostMasker.apply_at: a row given by address needs the C core")
            self.apply_numpy(row, m, n_tokens)
        elif m is None or m.all_allowed:
            core.mask_row(row, width, n_tokens, None, None)
        else:
            core.mask_row(row, width, n_tokens, m.banned, m.allowed)

    def apply_numpy(self, row: np.ndarray, m: StateMask | None, n_tokens: int) -> None:
        """:meth:`apply` in numpy: a banned list carries the padding columns; an allowed list fills the whole row
        anyway; only an all-allowed (or ``None``: finished) row writes the padding alone."""
        width = row.shape[0]
        if m is None or m.all_allowed:
            if width > n_tokens:
                row[n_tokens:] = NEG_INF
        elif m.banned is not None:
            row[self.banned_with_padding(m, width, n_tokens)] = NEG_INF
        else:
            kept = row[m.allowed]
            row.fill(NEG_INF)
            row[m.allowed] = kept


@dataclass(frozen=True, eq=False)
class RowRules:
    """What a processor fixes once and its rows share (see the transformers processor for each option)."""

    grammar: TokenGrammar
    start_state: int
    max_new_tokens: int | None
    prefix_true: bool
    close_ids: np.ndarray | None
    """The end-of-turn ids whose probability ``close_on_stop`` moves onto a close (``None``: the option is off)."""
    stops: StopRule | None
    end_ids: np.ndarray
    """Where a stop's probability goes: the best of these end-of-turn ids."""
    call_points: CallPoints | None
    """Steering's call points (``None``: no steering)."""


class HostRow:
    """One sequence under :class:`RowRules`: :meth:`advance` by each token it takes, :meth:`step` on each row of
    scores before the next one is sampled."""

    def __init__(self, rules: RowRules, masker: HostMasker, *, steer: bool = True) -> None:
        self.rules = rules
        self._masker = masker
        self.cursor = Cursor(rules.grammar, rules.max_new_tokens, rules.start_state)
        points = rules.call_points
        self._steer = steer and points is not None
        self.fresh = self._steer and points is not None and points.initial(rules.start_state)
        """Whether the row stands at a call point (steering only)."""
        self._closing = 0.0
        self._pending: tuple[int, float] | None = None
        self._tail = b""
        self.stop_closes = 0
        """Blocks closed by a closer a stop, more likely than not, chose (``close_on_stop``)."""
        self.steered_steps = 0
        """Steps at which steering moved probability."""

    @property
    def error(self) -> str | None:
        """Why the row left the grammar (a token it rejected), or ``None``."""
        return self.cursor.error

    def advance(self, token: int) -> None:
        """The row took ``token``."""
        cursor, rules = self.cursor, self.rules
        before = cursor.state
        cursor.advance(token)
        if self._pending is not None:
            self._closing, closed = follow(self._pending, token, cursor.in_block, cursor.error is None)
            self._pending = None
            self.stop_closes += closed
        else:
            self._closing = 0.0
        stops = rules.stops
        if stops is not None:  # the tail runs on only while the turn may end before and after the token
            ends = rules.grammar.eos_allowed
            going = cursor.error is None and ends[before] and ends[cursor.state]
            self._tail = stops.extend(self._tail, token) if going else b""
        points = rules.call_points
        if points is not None and self._steer:
            self.fresh = cursor.error is None and points.update(self.fresh, before, token, cursor.state)

    def step(self, row: np.ndarray) -> None:
        """Constrain one row of scores (a 1-D float32 array, written in place) for the row's next token."""
        rules, cursor = self.rules, self.cursor
        grammar = rules.grammar
        n_tokens = grammar.table.n_tokens
        if row.shape[0] < n_tokens:
            raise ProcessorError(
                f"scores have {row.shape[0]} columns but the vocabulary has {n_tokens} ids; build the processor "
                "from this model's vocabulary"
            )
        mask = cursor.mask()
        closers = cursor.closing_tokens() if mask is not None and rules.close_ids is not None else None
        stop = log_sum(row[rules.close_ids]) if closers is not None and len(closers) else None
        prefix = grammar.prefix_table(cursor.state) if rules.prefix_true and mask is not None else NO_TABLE
        donors = row[prefix.donors] if not prefix.empty else None
        self._masker.apply(row, mask, n_tokens, grammar.table.native)
        if donors is not None:
            pour_host_row(row, donors, prefix, grammar.table.native)
        if stop is not None and closers is not None:
            self._pending = close_row(row, stop, closers, self._closing)
        stops = rules.stops
        if mask is not None and stops is not None and grammar.eos_allowed[cursor.state]:
            pool_stops(row, stops.banned(self._tail), rules.end_ids)
        points = rules.call_points
        if mask is not None and points is not None and self.fresh:
            self.steered_steps += steer_row(row, points.openers)


__all__ = ["HostMasker", "HostRow", "RowRules", "check_budget_fits", "start_state_of"]
