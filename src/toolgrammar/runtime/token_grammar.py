"""The token grammar: a turn grammar's byte automaton lifted to a tokenizer's vocabulary.

Compile once, walk cheaply (the split outlines-core and xgrammar use):

- :class:`~toolgrammar.runtime.token_table.TokenTable` is built once per vocabulary (about a second for 151k
  tokens, then cached in memory and on disk). It holds every token's symbols (bytes; ``SPECIAL``/``EOS`` for control
  tokens) in flat arrays for vectorized walks.
- :class:`TokenGrammar` joins a :class:`~toolgrammar.turn.grammar.TurnGrammar` and a table. It is
  immutable from the outside and shared by every sequence and every ``generate`` call that uses the
  same tools and options. For each automaton state it computes, on first visit, which tokens are
  allowed (one vectorized walk of the vocabulary through the byte automaton) and keeps the result;
  later visits reuse it. It also knows, for every state, an upper bound on the number of tokens
  needed to leave any block (``dist``), which is what makes the budget guarantee possible.
- :class:`~toolgrammar.runtime.cursor.Cursor` is the per-sequence state: where in the automaton, how many tokens are
left.

Error policy (written once, here): a bad grammar or tool set fails at compile time with a
:class:`~toolgrammar.errors.ToolgrammarError`. During generation nothing raises on a token: a token
the grammar rejects (possible only when something after the processor changed the scores) puts the
cursor in a sticky error state (``Cursor.error``), after which that row is left unconstrained and
the error is reported, never silently dropped.

Budget: with ``remaining`` tokens left (the current one included), a token is allowed only if the
state it leads to can leave every block within ``remaining - 1`` tokens. ``dist`` is computed with a
subset of the vocabulary (every single-byte token plus the tokens of the grammar's literals), so it
is an upper bound on the true distance: the guarantee is kept, at the price of closing a little
earlier than strictly necessary. Every single byte is a token in byte-level BPE vocabularies, so
every state has a finite bound.

Import boundary: numpy only (no torch, no transformers).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgrammar import cache as disk_cache
from toolgrammar import caches
from toolgrammar.automata.lazy import LazyAutomaton
from toolgrammar.automata.nodes import DEAD, EOS, N_SYMBOLS, literal_bytes
from toolgrammar.errors import TokenizerError
from toolgrammar.turn.grammar import tool_literals

if TYPE_CHECKING:
    from toolgrammar.turn.grammar import TurnGrammar
    from toolgrammar.vocab import Vocabulary
from toolgrammar.runtime.prefix_true import NO_TABLE, PrefixTable, build_prefix_table
from toolgrammar.runtime.token_table import TEXT_EXITS_CAP, TRIE_MIN_SYMBOLS, Loops, splice_rows, token_table

STEP_MEMO = 1 << 17
"""Most (state, token) pairs :meth:`TokenGrammar.step` remembers (about 13 MB)."""


MAX_NEEDS_STATES = 128
"""States whose per-token budget needs (one byte per token: 152 KB for Qwen3) are kept, least recently
used first out: at most about 19 MB, where keeping every state's grew without bound (45 MB at 300)."""


MAX_PREFIX_STATES = 256
"""States whose prefix-true tables a grammar keeps, least recently used first out (a table holds its
donors and receivers: a few hundred bytes at a literal, up to a few hundred KB inside a string)."""


INF = np.iinfo(np.int32).max // 2
"""``dist`` of a state that cannot leave its block (never allowed to be entered under a budget)."""


MAX_EDGE_TRIES = 32
"""Tries of the bound's token sets kept per grammar for the items of long repeats (see ``_token_edges``)."""


def _relax_native(core: Any, d: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
    """``d[s] <= d[t] + 1`` along every token edge ``s -> t``, least such ``d`` under its starting values
    (in place; the core buckets the edges by ``t`` itself)."""
    core.relax(d, np.ascontiguousarray(dst, dtype=np.int64), np.ascontiguousarray(src, dtype=np.int64), INF)


@dataclass(frozen=True)
class StateMask:
    """The tokens allowed in one state, in the representation cheapest to apply.

    Exactly one of ``banned`` / ``allowed`` is set unless ``all_allowed`` (then neither). Ids are
    sorted int64 arrays over the tokenizer's ids; logit columns beyond the tokenizer are always
    masked by the caller.
    """

    all_allowed: bool
    banned: np.ndarray | None
    allowed: np.ndarray | None
    n_allowed: int
    max_need: int
    """The largest ``dist`` of a state an allowed token leads to: a budget at least this large changes nothing."""


class TokenGrammar:
    """A turn grammar over one vocabulary: per-state masks (cached), the budget bound, stepping."""

    def __init__(self, grammar: TurnGrammar, vocab: Vocabulary):
        self.grammar = grammar
        self.vocab = vocab
        self.table = token_table(vocab)
        self.auto = LazyAutomaton(grammar.skeleton)
        self.start = self.auto.start
        self._lock = threading.RLock()
        self._refresh()
        self._steps: dict[int, int] = {}
        # The tokens the budget bound walks: every single symbol, and every token spelling a piece of
        # a literal (markers, names, JSON punctuation; a tool's keys once its tail is built), so the
        # bound follows the paths a tokenizer really takes through literals.
        self._dist_tokens: set[int] = set(self.table.single_symbol_tokens.values())
        m = grammar.format.markers
        markup = [m.block_open, m.block_close, m.think_open, m.think_close, m.call_separator]
        self._add_literal_tokens([*markup, *_JSON_PUNCTUATION, *grammar.format.budget_literals()])
        self._add_literal_tokens(literal_bytes(grammar.node, tails=False))
        # One tool's rendered call spells the joins every call shares (opener, name key, closer).
        self._selected = grammar.options.selected_tools(grammar.tools) if grammar.options.tool_choice != "none" else []
        if self._selected:
            self._add_literal_tokens(list(tool_literals(self._selected[0], grammar.format)))
        self._root_tokens: dict[int, set[int]] | None = None  # per tool, once the base set is final
        self._edge_tries: OrderedDict[object, Any] = OrderedDict()  # see _token_edges
        for stub in list(self.auto.expanded):  # built with the grammar (one tool): part of the base
            self._dist_tokens |= self._tail_tokens(stub)
        # A stub not built yet costs the tokens of its tail's shortest string, tokenized greedily
        # (a real path); those tokens join the bound's walk so the bound after building is no larger.
        self._stub_weights: dict[int, int] = {}
        self._stub_tokens: dict[int, list[int]] = {}
        for stub, witness in self.auto.witnesses.items():
            self._weigh(stub, witness)
            self._dist_tokens.update(self._stub_tokens[stub])
        self._root_tokens = {}
        # The per-state table below is only valid for this numbering of the states: the digest of the
        # automaton as it stands (the skeleton and the tails built with it) keys it too, so a compiler
        # that numbers states otherwise never reads a stale table. (The skeleton alone was not enough:
        # a tail built up front is numbered by the compiler too.)
        numbering = hashlib.sha256(memoryview(np.ascontiguousarray(self.auto.transitions))).hexdigest()
        self.key = hashlib.sha256((grammar.fingerprint + vocab.fingerprint + numbering).encode()).hexdigest()
        on_disk = self.n_states >= DIST_ON_DISK_FROM
        cached = disk_cache.load("token-grammars", self.key) if on_disk else None
        if cached is not None and cached["dist"].shape == (self.n_states,):
            self.dist = cached["dist"]
        else:
            self.dist = self._distances()
            if on_disk:
                disk_cache.save("token-grammars", self.key, {"dist": self.dist})
        self._masks: dict[int, StateMask] = {}
        self._same_row: dict[int, int] = {}  # state -> the representative of its row (see _representative)
        self._rows_seen: dict[tuple[bytes, bool, bool], int] = {}
        self._needs: OrderedDict[int, np.ndarray] = OrderedDict()  # LRU: one byte per token each
        self._budget_masks: OrderedDict[tuple[int, int], StateMask] = OrderedDict()
        self._closers: dict[int, np.ndarray] = {}  # state -> closing_tokens (shared by a row's states)
        self._prefix_tables: OrderedDict[int, PrefixTable] = OrderedDict()  # LRU (see prefix_table)
        self._dist_ids = np.empty(0, dtype=np.int64)  # _dist_tokens sorted, rebuilt when the set grows
        self.n_walks = 0
        self.n_expansions = 0

    def _refresh(self) -> None:
        """Derived arrays of the automaton as it stands."""
        auto = self.auto
        self.transitions = auto.transitions
        self.n_states = auto.n_states
        self.loops = Loops(self.transitions)
        self.n_symbols, finished, self.eos_allowed, self.safe = self._derived(0, self.n_states)
        self._finished = finished.tolist()

    def _grown(self, lo: int, stub: int) -> None:
        """:meth:`_refresh` for states ``lo..`` (a tail appended) and ``stub`` (its row rewritten) only: the
        rows before did not change, and a pass over the whole table per tail was most of a tail's cost."""
        auto = self.auto
        self.transitions = auto.transitions
        self.n_states = auto.n_states
        self.loops.grow(self.transitions, lo, stub)
        new = self._derived(lo, self.n_states)
        one = self._derived(stub, stub + 1)
        for i, name in ((0, "n_symbols"), (2, "eos_allowed"), (3, "safe")):
            setattr(self, name, splice_rows(getattr(self, name), lo, new[i], stub, one[i][0]))
        self._finished[lo:] = new[1].tolist()
        self._finished[stub] = bool(one[1][0])

    def _derived(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(n_symbols, finished, eos_allowed, safe)`` of states ``lo..hi-1``."""
        auto = self.auto
        # The trap (and every stub's row, which leads there) stands for rows not built yet: no symbol,
        # no end of turn, never safe.
        real = self.transitions[lo:hi]
        live = (real >= 0) & (real != auto.trap)
        eos = live[:, EOS]
        finished = auto.accepting[lo:hi] & ~live[:, :N_SYMBOLS].any(axis=1)
        safe = (auto.safe[lo:hi] | eos | auto.accepting[lo:hi]) & (np.arange(lo, hi) != auto.trap)
        return live.sum(axis=1), finished, eos, safe

    def build_all(self) -> None:
        """Build every tool's tail now, every long repeat's items included (the engine otherwise builds a
        tail when a walk first reaches it)."""
        while self.auto.stubs:
            self._expand(set(self.auto.stubs))

    def _add_literal_tokens(self, texts: list[str | bytes]) -> None:
        self._dist_tokens |= self._literal_tokens(texts)

    def _literal_tokens(self, texts: list[str | bytes]) -> set[int]:
        """Every token that spells a piece (up to 32 bytes) of one of ``texts``."""
        if self.table.native is not None and self.table.text_index_exact:
            data = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
            return set(np.concatenate([self.table.text_pieces(d) for d in data] or [np.empty(0, np.int64)]).tolist())
        id_of = self.table.id_of_bytes
        special = self.vocab.special_ids
        out: set[int] = set()
        for text in texts:
            data = text.encode("utf-8") if isinstance(text, str) else text
            for i in range(len(data)):
                for j in range(i + 1, min(len(data), i + 32) + 1):
                    tid = id_of.get(data[i:j])
                    if tid is not None and tid not in special:
                        out.add(tid)
        return out

    def _greedy_tokens(self, data: bytes) -> list[int]:
        """``data`` cut into the longest tokens first (every byte is a token in byte-level vocabularies)."""
        got = self.table.greedy_pieces(data)
        if got is None:  # no native core: the same cut in Python
            got = self.vocab.greedy_token_ids(data, exclude=self.vocab.special_ids, max_len=32)
        if isinstance(got, int):
            raise TokenizerError(f"byte {data[got]:#x} is not a token of {self.vocab.name!r}")
        return got

    def _weigh(self, stub: int, witness: bytes) -> None:
        """A stub's weight: its tail's shortest string cut into real tokens (kept: they join the walk of
        the bound where that tail is built, so the bound there is no larger)."""
        tokens = self._greedy_tokens(witness)
        self._stub_tokens[stub] = tokens
        self._stub_weights[stub] = len(tokens)

    def _tail_tokens(self, stub: int) -> set[int]:
        """The bound's tokens for one tail: the base set and the pieces of that tool's literals; a long
        repeat's next item (a stub inside a tail) takes its tool's set and its own weight's tokens."""
        root = self.auto.root_of.get(stub)
        if root is not None:
            return self._tool_tokens(root) | set(self._stub_tokens[stub])
        return self._tool_tokens(stub)

    def _tokens_key(self, stub: int) -> object:
        """What names :meth:`_tail_tokens`' set for a stub inside a tail (the same for every next item of a
        repeat), or None for a tool's tail (built once)."""
        root = self.auto.root_of.get(stub)
        return None if root is None else (root, tuple(self._stub_tokens[stub]))

    def _tool_tokens(self, stub: int) -> set[int]:
        got = self._root_tokens.get(stub) if self._root_tokens is not None else None
        if got is not None:
            return got
        _e, j, b = self.auto.expanded[stub]
        d = self.auto.dispatches[j]
        texts: list[str | bytes] = list(literal_bytes(d.tails[b]))
        if len(self._selected) == len(d.keys):  # the format's dispatch is over the selected tools, in order
            texts.extend(tool_literals(self._selected[b], self.grammar.format))
        got = self._literal_tokens(texts) | self._dist_tokens
        if self._root_tokens is not None:  # the base set is final: kept per tool
            self._root_tokens[stub] = got
        return got

    def _expand(self, stubs: set[int]) -> None:
        """Build the tails behind ``stubs`` and bound their new states.

        Nothing computed before changes: the states that existed keep their bound (a stub keeps the
        cost of its tail's shortest string), and each tail's states are bounded from the tail alone
        and the states it leads back to. So masks, budgets and bounds do not depend on which tools
        earlier turns happened to build: the same prompt and seed give the same tokens.
        """
        with self._lock:
            for stub in sorted(stubs):
                before = self.auto.n_states
                inner = self.auto.expand(stub)
                if inner is None:
                    continue
                self.n_expansions += 1
                for s in inner:
                    self._weigh(s, self.auto.witnesses[s])
                self._grown(before, stub)
                tail = self._tail_distances(
                    before, self.auto.n_states, self._tail_tokens(stub), inner, self._tokens_key(stub)
                )
                self.dist = np.concatenate([self.dist, tail])

    def _tail_distances(
        self, lo: int, hi: int, tokens: set[int], inner: tuple[int, ...] = (), key: object = None
    ) -> np.ndarray:
        """The bound of states ``lo..hi-1`` (one tail): token edges inside it, and out of it to states
        whose bound is known (the grammar after the dispatch). A stub ``inner`` to the tail (a long
        repeat's next item) costs its weight more than the state after it, as stubs do in
        :meth:`_distances`; the joins are applied between passes until nothing moves."""
        src, dst = self._token_edges(np.arange(lo, hi, dtype=np.int32), tokens, key)
        d = np.full(hi - lo, INF, dtype=np.int64)
        d[self.safe[lo:hi]] = 0
        out = (dst < lo) | (dst >= hi)
        known = out & (dst < len(self.dist))
        if known.any():
            np.minimum.at(d, src[known] - lo, self.dist[dst[known]].astype(np.int64) + 1)
        s_in, d_in = src[~out] - lo, dst[~out] - lo
        stubs = np.array(inner, dtype=np.int64) - lo
        after = np.array([self.auto.stubs[s][0] for s in inner], dtype=np.int64) - lo
        weights = np.array([self._stub_weights[s] for s in inner], dtype=np.int64)
        core = self.table.native
        while True:
            if core is not None and len(s_in):
                # d[s] <= d[t] + 1 along each edge s -> t inside the tail: shortest paths from the exits, in C.
                _relax_native(core, d, s_in, d_in)
            else:
                while len(s_in):
                    new = d.copy()
                    np.minimum.at(new, s_in, d[d_in] + 1)
                    if np.array_equal(new, d):
                        break
                    d = new
            if not len(stubs):
                break
            joined = np.minimum(d[after] + weights, INF)
            lower = joined < d[stubs]
            if not lower.any():
                break
            d[stubs[lower]] = joined[lower]
        return np.minimum(d, INF).astype(np.int32)

    def _token_edges(self, states: np.ndarray, tokens: set[int], key: object = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) of every token of ``tokens`` from every state of ``states`` that accepts it
        (an end of turn ends no edge; walks into the trap, through a stub not built yet, are dropped).
        ``key`` names a token set asked for again (each next item of a long repeat): its trie is kept."""
        t = self.transitions
        core = self.table.native
        if core is not None:
            sub = self._edge_tries.get(key) if key is not None else None
            if sub is None:
                sub = self.table.sub_trie(np.array(sorted(tokens), dtype=np.int64))
                if key is not None:
                    self._edge_tries[key] = sub
                    while len(self._edge_tries) > MAX_EDGE_TRIES:
                        self._edge_tries.popitem(last=False)
            else:
                self._edge_tries.move_to_end(key)
            pairs = core.trie_edges(
                np.ascontiguousarray(t, dtype=np.int32),
                N_SYMBOLS,
                np.ascontiguousarray(states, dtype=np.int32),
                sub.max_depth,
                sub.sym,
                sub.depth,
                sub.end,
                sub.start,
                self.auto.trap,
                EOS,
            )
            edges = np.frombuffer(pairs, dtype=np.int64).reshape(-1, 2)
            return edges[:, 0].copy(), edges[:, 1].copy()
        src_list, dst_list = [], []
        for tok in sorted(tokens):
            cur = states.copy()
            for x in self.table.symbols(tok).tolist():
                if x == EOS:
                    cur[:] = DEAD
                    break
                cur = t[cur, x]
            ok = (cur >= 0) & (cur != self.auto.trap)
            src_list.append(states[ok])
            dst_list.append(cur[ok])
        return np.concatenate(src_list).astype(np.int64), np.concatenate(dst_list).astype(np.int64)

    def _stubs_hit(self, state: int, tokens: np.ndarray) -> set[int]:
        """The stubs that ``tokens`` (walked from ``state`` into the trap) pass through."""
        # All at once, a symbol position at a time (a token stops at the first stub it meets): where many
        # tokens cross into a stub (tens of thousands start with a space), one token at a time was most of
        # the mask.
        found: set[int] = set()
        t = self.transitions
        is_stub = np.zeros(t.shape[0], dtype=bool)
        is_stub[np.fromiter(self.auto.stubs, dtype=np.int64, count=len(self.auto.stubs))] = True
        offsets = self.table.offsets[tokens]
        lengths = self.table.lengths[tokens]
        cur = np.full(len(tokens), state, dtype=np.int64)
        walking = lengths > 0
        for i in range(int(lengths.max(initial=0))):
            walking &= lengths > i
            hit = walking & is_stub[cur]
            if hit.any():
                found.update(np.unique(cur[hit]).tolist())
                walking &= ~hit
            if not walking.any():
                break
            cur[walking] = t[cur[walking], self.table.flat[offsets[walking] + i]]
            walking &= cur >= 0
        return found

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Pickled as what it is built from: the unpickling process rebuilds (or finds) its own copy,
        # with its own lock and caches.
        return token_grammar, (self.grammar, self.vocab)

    def __deepcopy__(self, memo: dict[int, object]) -> TokenGrammar:
        return self  # shared and immutable from the outside (its caches are guarded by its lock)

    # -- budget bound ------------------------------------------------------------------------

    def _distances(self) -> np.ndarray:
        """Upper bound on tokens needed from each state to reach a safe state (0 for safe states)."""
        src, dst = self._token_edges(np.arange(self.n_states, dtype=np.int32), self._dist_tokens)
        dist = np.full(self.n_states, INF, dtype=np.int64)
        dist[self.safe] = 0
        core = self.table.native
        if core is not None:
            return self._distances_native(core, src, dst, dist)
        # A stub not built yet counts as its tail's shortest string cut into real tokens, then the
        # state after the dispatch: an upper bound, so the guarantee holds before the tail exists.
        after: dict[int, list[tuple[int, int]]] = {}
        for stub, (e, _j, _b) in self.auto.stubs.items():
            after.setdefault(e, []).append((stub, self._stub_weights[stub]))
        scheduled: dict[int, list[int]] = {}

        def settle(states: np.ndarray, level: int) -> None:
            for s in states.tolist():
                for stub, weight in after.get(s, ()):
                    scheduled.setdefault(level + weight, []).append(stub)

        # Backward BFS over the token edges (unit cost), stubs joining at their level.
        order = np.argsort(dst, kind="stable")
        src_sorted, dst_sorted = src[order], dst[order]
        bounds = np.searchsorted(dst_sorted, np.arange(self.n_states + 1))
        frontier = np.flatnonzero(self.safe)
        settle(frontier, 0)
        level = 0
        while len(frontier) or scheduled:
            level += 1
            preds = (
                np.concatenate([src_sorted[bounds[s] : bounds[s + 1]] for s in frontier])
                if len(frontier)
                else np.empty(0, dtype=np.int64)
            )
            joining = scheduled.pop(level, [])
            if joining:
                preds = np.concatenate([preds, np.array(joining, dtype=preds.dtype)])
            preds = np.unique(preds)
            new = preds[dist[preds] == INF]
            dist[new] = level
            settle(new, level)
            frontier = new
        return dist.astype(np.int32)

    def _distances_native(self, core: Any, src: np.ndarray, dst: np.ndarray, dist: np.ndarray) -> np.ndarray:
        """:meth:`_distances` by the C core's shortest paths (the Python breadth-first search above visits
        every state in a Python loop: most of a 200-tool bound). The same least fixpoint: a state is at
        most one more than a state a token leads to, a stub at most its weight more than the state after
        its dispatch; the stubs' joins are applied between passes until nothing moves (the state after a
        dispatch rarely depends on another stub, so two passes are the rule)."""
        src, dst = np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64)
        stubs = np.fromiter(self.auto.stubs, dtype=np.int64, count=len(self.auto.stubs))
        after = np.array([e for e, _j, _b in self.auto.stubs.values()], dtype=np.int64)
        weights = np.array([self._stub_weights[s] for s in self.auto.stubs], dtype=np.int64)
        while True:
            _relax_native(core, dist, src, dst)
            if not len(stubs):
                break
            joined = np.minimum(dist[after] + weights, INF)
            lower = joined < dist[stubs]
            if not lower.any():
                break
            dist[stubs[lower]] = joined[lower]
        return np.minimum(dist, INF).astype(np.int32)

    # -- masks ---------------------------------------------------------------------------------

    def mask(self, state: int, remaining: int | None = None) -> StateMask:
        """The allowed tokens in ``state`` with ``remaining`` tokens left (``None``: no budget)."""
        m = self._masks.get(state)
        if m is None:
            with self._lock:
                m = self._masks.get(state)
                if m is None:
                    rep = self._representative(state)
                    m = self._masks.get(rep) if rep != state else None
                    if m is None:
                        m = self._compute(state)
                    self._masks[state] = m
        if remaining is None or remaining - 1 >= m.max_need:
            return m
        return self._budget_mask(self._same_row.get(state, state), remaining - 1)

    def _representative(self, state: int) -> int:
        """The first state seen with ``state``'s row and flags: the two accept the same tokens, with the
        same needs after them, so they share every mask.

        Tails are not minimized (see :func:`toolgrammar.automata.lazy.tail_dfa`), and subset construction
        leaves equivalent states with identical rows behind (a string's first character and the ones after
        it): without this, each would walk the vocabulary on its first visit. A stub's row stands for a
        tail not built yet, so a stub is only ever its own representative."""
        rep = self._same_row.get(state)
        if rep is None:
            rep = state
            if state not in self.auto.stubs:
                key = (self.transitions[state].tobytes(), bool(self.auto.accepting[state]), bool(self.auto.safe[state]))
                rep = self._rows_seen.setdefault(key, state)
            self._same_row[state] = rep
        return rep

    def _walk(self, state: int) -> np.ndarray:
        self.n_walks += 1
        return self.table.walk(self.transitions, state, self.loops)

    def _compute(self, state: int) -> StateMask:
        """The state's mask; the tails its tokens reach are built first (then its walk is redone)."""
        while True:
            if state in self.auto.stubs:
                self._expand({state})
            try:
                return self._compute_built(state)
            except _Unbuilt as unbuilt:
                self._expand(unbuilt.stubs)

    def _check_built(self, state: int, ids: np.ndarray, nxt: np.ndarray) -> None:
        """Raise :class:`_Unbuilt` when some token (``ids[i]`` ended in ``nxt[i]``) went through a stub.

        A token that ends in the trap without a stub on its way (only from the trap itself, which no
        cursor ever reaches) is rejected: ``nxt`` is changed in place to DEAD there."""
        trapped = nxt == self.auto.trap
        if trapped.any():
            stubs = self._stubs_hit(state, ids[trapped]) if self.auto.stubs else set()
            if stubs:
                raise _Unbuilt(stubs)
            nxt[trapped] = DEAD

    def _compute_built(self, state: int) -> StateMask:
        table = self.table
        if table.native is not None:
            return self._compute_native(state)
        if self.n_symbols[state] > TRIE_MIN_SYMBOLS:
            # A text state: walk the trie, then the budget bookkeeping on the allowed tokens only.
            self.n_walks += 1
            nxt = table.walk_trie(self.transitions, state)
            self._check_built(state, self.table.all_ids, nxt)
            idx = np.flatnonzero(nxt >= 0)
            need = self.dist[nxt[idx]]
            fin = need < INF
            max_need = int(need[fin].max()) if fin.any() else 0
            ok = np.zeros(table.n_tokens, dtype=bool)
            ok[idx[fin]] = True
            return _make_mask(ok, max_need)
        if not self.loops.any[state]:
            # A literal state: few tokens can even start here, so stay sparse (no vocabulary-wide arrays).
            candidates = np.flatnonzero(table.candidates(self.transitions, state))
            if len(candidates) * 4 <= table.n_tokens:
                self.n_walks += 1
                nxt = table.walk_ids(self.transitions, state, candidates, self.loops)
                self._check_built(state, candidates, nxt)
                need = np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)
                ok = need < INF
                allowed = candidates[ok].astype(np.int64)
                max_need = int(need[ok].max()) if ok.any() else 0
                return StateMask(False, None, allowed, len(allowed), max_need)
        nxt = self._walk(state)
        self._check_built(state, self.table.all_ids, nxt)
        ok = nxt >= 0
        need = np.where(ok, self.dist[np.maximum(nxt, 0)], INF)
        finite = need[ok & (need < INF)]
        max_need = int(finite.max()) if len(finite) else 0
        # Tokens leading to states that can never close are treated as banned (none exist after pruning).
        ok &= need < INF
        return _make_mask(ok, max_need)

    def _compute_native(self, state: int) -> StateMask:
        """:meth:`_compute_built` by the C core: one depth-first walk of the trie makes the mask on the way
        (a literal state stays sparse, a text state is one vocabulary-wide array)."""
        self.n_walks += 1
        table = self.table
        n = table.n_tokens
        # Where most tokens start with a symbol the state takes (a text state), start from "all allowed" and
        # write what is left out; elsewhere write what is allowed.
        dense = int(table.first_symbol_counts[self.transitions[state] >= 0].sum()) * 2 > n
        ok = np.ones(n, dtype=np.uint8) if dense else np.zeros(n, dtype=np.uint8)
        ids = np.empty(n, dtype=np.int64)
        trapped = np.empty(n, dtype=np.int64)
        t = np.ascontiguousarray(self.transitions, dtype=np.int32)
        loops = (int(self.loops.low0[state]), int(self.loops.low1[state]))
        exits = table.text_exits(loops) if dense else None
        record = np.empty((TEXT_EXITS_CAP, 3), dtype=np.int32) if dense and exits is None else None
        k, max_need, n_trapped, n_recorded, has_pure = table.native.trie_mask(
            t,
            t.shape[1],
            state,
            table.pre_max_depth,
            table.pre_sym,
            table.pre_depth,
            table.pre_end,
            table.pre_start,
            table.pre_tokens,
            np.ascontiguousarray(self.dist, dtype=np.int32),
            INF,
            self.auto.trap,
            self.loops.low0,
            self.loops.low1,
            table.pre_sub_low0,
            table.pre_sub_low1,
            table.pre_sub_high,
            table.pre_whole,
            self.loops.utf8_memo,
            int(dense),
            ok,
            ids,
            trapped,
            exits[0] if exits is not None else None,
            exits[1] if exits is not None else 0,
            record,
        )
        if n_recorded >= 0 and record is not None:
            table.remember_text_exits(loops, record[:n_recorded].copy(), has_pure)
        if n_trapped:
            stubs = self._stubs_hit(state, trapped[:n_trapped]) if self.auto.stubs else set()
            if stubs:
                raise _Unbuilt(stubs)
        if k * 4 <= n and not dense:  # ids lists every allowed token (the core lists up to n / 4 + 1)
            return StateMask(False, None, np.sort(ids[:k]), k, max_need)
        if k == n:
            return StateMask(True, None, None, k, max_need)
        if dense and (n - k) * 4 <= n:  # ids lists every token left out
            return StateMask(False, np.sort(ids[: n - k]), None, k, max_need)
        if k * 2 >= n:
            return StateMask(False, np.flatnonzero(ok == 0), None, k, max_need)
        return StateMask(False, None, np.flatnonzero(ok), k, max_need)

    def _budget_mask(self, state: int, budget: int) -> StateMask:
        key = (state, budget)
        with self._lock:
            m = self._budget_masks.get(key)
            if m is not None:
                self._budget_masks.move_to_end(key)
                return m
            # Per state, each token's need as one byte (255: that many or more, or never), so a
            # state costs 152 KB rather than 607 KB; the rare budgets of 255 or more re-walk.
            need = self._needs.get(state)
            exact: np.ndarray | None = None
            if need is None:
                exact = self._exact_needs(state)
                need = np.minimum(exact, 255).astype(np.uint8)
                self._needs[state] = need
                if len(self._needs) > MAX_NEEDS_STATES:
                    self._needs.popitem(last=False)
            else:
                self._needs.move_to_end(state)
            if budget < 255:
                ok = need <= budget
            else:
                exact = self._exact_needs(state) if exact is None else exact
                ok = exact <= budget
            if not ok.any():
                # Nothing can finish in time (the budget was too small from the start, e.g.
                # tool_choice="required" with a handful of tokens): head for the exit as fast as
                # possible rather than leave the sampler with no token at all.
                exact = self._exact_needs(state) if exact is None else exact
                ok = exact == exact.min()
            m = _make_mask(ok, budget)
            self._budget_masks[key] = m
            if len(self._budget_masks) > 4096:
                self._budget_masks.popitem(last=False)
            return m

    def prefix_table(self, state: int) -> PrefixTable:
        """The state's :class:`~toolgrammar.runtime.prefix_true.PrefixTable` (prefix-true masking): empty
        outside blocks. Built on first asking from one walk of the trie (call :meth:`mask` for the state
        first: its tails are built then), kept for the last :data:`MAX_PREFIX_STATES` states asked."""
        if self.safe[state]:
            return NO_TABLE
        got = self._prefix_tables.get(state)
        if got is not None:
            with contextlib.suppress(KeyError):  # another thread's insert evicted it: the table is still right
                self._prefix_tables.move_to_end(state)
            return got
        with self._lock:
            rep = self._representative(state)
            got = self._prefix_tables.get(rep)
            if got is None:
                got = self._build_prefix_table(rep)
            self._prefix_tables[rep] = got
            self._prefix_tables[state] = got
            while len(self._prefix_tables) > MAX_PREFIX_STATES:
                self._prefix_tables.popitem(last=False)
        return got

    def _build_prefix_table(self, state: int) -> PrefixTable:
        m = self.mask(state)
        n = self.table.n_tokens
        if m.all_allowed:
            return NO_TABLE
        if m.banned is not None:
            allowed = np.ones(n, dtype=bool)
            allowed[m.banned] = False
        else:
            allowed = np.zeros(n, dtype=bool)
            allowed[m.allowed] = True
        nodes = self.table.node_states(self.transitions, state)
        viable = (nodes >= 0) & (nodes != self.auto.trap)
        viable &= self.dist[np.maximum(nodes, 0)] < INF
        auto = self.auto
        in_place = (self.transitions == self.transitions[state]).all(axis=1)
        in_place[:-1] &= (auto.accepting == auto.accepting[state]) & (auto.safe == auto.safe[state])
        in_place[-1] = False  # the dead row
        return build_prefix_table(self.table, nodes, viable, allowed, in_place)

    def closing_tokens(self, state: int) -> np.ndarray:
        """Where the call in an open block is complete, the tokens that take ``state`` nearest to leaving
        the block (sorted ids); elsewhere none.

        Complete: optional whitespace, the format's ``call_end`` (unless written already) and its
        ``block_close`` lead out of the block from here (after the last brace of a hermes call, not
        inside its arguments). The tokens: of those the budget bound walks in every state (single
        bytes, markers, JSON punctuation), the ones after which ``dist`` is least. Computed on first
        asking and kept per state. Call :meth:`mask` for the state first: the tails its tokens reach are
        built then; a token whose walk would reach a tail not built yet is left out."""
        got = self._closers.get(state)
        if got is None:
            with self._lock:
                rep = self._representative(state)
                got = self._closers.get(rep)
                if got is None:
                    got = self._closing_tokens(rep)
                    self._closers[rep] = got
                self._closers[state] = got
        return got

    def _closing_tokens(self, state: int) -> np.ndarray:
        if self.safe[state] or not self._call_complete(state):
            return np.empty(0, dtype=np.int64)
        if len(self._dist_ids) != len(self._dist_tokens):
            self._dist_ids = np.array(sorted(self._dist_tokens), dtype=np.int64)
        ids = self._dist_ids
        nxt = self.table.walk_ids(self.transitions, state, ids, self.loops)
        nxt[nxt == self.auto.trap] = DEAD
        need = np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)
        best = int(need.min()) if len(need) else INF
        if best >= INF:
            return np.empty(0, dtype=np.int64)
        return ids[need == best]

    def _call_complete(self, state: int) -> bool:
        fmt = self.grammar.format
        close = fmt.markers.block_close
        for text in {f"{space}{end}{close}" for space in ("", "\n", " ") for end in (fmt.call_end, "")}:
            after = self._walk_text(state, np.frombuffer(text.encode(), dtype=np.uint8))
            if after >= 0 and self.safe[after]:
                return True
        return False

    def _exact_needs(self, state: int) -> np.ndarray:
        """Each token's ``dist`` after it from ``state`` (INF where rejected)."""
        nxt = self._walk(state)
        return np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)

    # -- stepping ------------------------------------------------------------------------------

    def step(self, state: int, token: int) -> int:
        """The state after ``token`` (DEAD if the grammar rejects it); recent pairs are remembered."""
        n = self.table.n_tokens
        if not 0 <= token < n:
            return DEAD
        key = state * n + token
        got = self._steps.get(key)
        if got is not None:
            return got
        with self._lock:  # a tail appended meanwhile rewrites rows in place (see LazyAutomaton.expand)
            got = self._step(state, token)
        if len(self._steps) >= STEP_MEMO:
            self._steps.clear()
        self._steps[key] = got
        return got

    def _step(self, state: int, token: int) -> int:
        while True:
            t = self.transitions
            got = state
            for x in self.table.symbols(token).tolist():
                got = int(t[got, x])
                if got < 0:
                    return DEAD
            if got != self.auto.trap:
                return got
            stubs = self._stubs_hit(state, np.array([token])) if self.auto.stubs else set()
            if not stubs:  # the trap itself: never a real path
                return DEAD
            self._expand(stubs)

    def walk_text(self, text: str, state: int | None = None) -> int:
        """The state after the UTF-8 bytes of ``text`` from ``state`` (default: the start); DEAD if rejected.

        For text the prompt already put into the assistant turn (a harness that pre-fills the block
        opener): the grammar continues from there.
        """
        first = self.start if state is None else state
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        with self._lock:
            return self._walk_text(first, data)

    def _walk_text(self, first: int, data: np.ndarray) -> int:
        # A stub on the way is built where the walk meets it, and the walk goes on from there (a text that
        # crosses 200 array items builds 200 of them: starting over after each was quadratic).
        got, stubs = first, self.auto.stubs
        for x in data.tolist():
            if got in stubs:
                self._expand({got})
            got = int(self.transitions[got, x])
            if got < 0:
                return DEAD
        return DEAD if got == self.auto.trap else got  # the trap itself: never a real path

    def is_finished(self, state: int) -> bool:
        """True once the turn has ended (after an end-of-turn token)."""
        return self._finished[state]

    def in_block(self, state: int) -> bool:
        """True while a block is open (the turn may not be cut here)."""
        return not bool(self.safe[state])

    @property
    def cache_bytes(self) -> int:
        """Memory held by cached masks (ids arrays), in bytes."""
        total = 0
        shared = {id(m): m for m in list(self._masks.values()) + list(self._budget_masks.values())}
        for m in shared.values():
            for arr in (m.banned, m.allowed):
                if arr is not None:
                    total += arr.nbytes
        total += sum(a.nbytes for a in self._needs.values())
        total += sum(t.nbytes for t in {id(t): t for t in list(self._prefix_tables.values())}.values())
        return total

    def stats(self) -> dict[str, int]:
        return {
            "dfa_states": self.n_states,
            "cached_states": len(self._masks),
            "budget_masks": len(self._budget_masks),
            "walks": self.n_walks,
            "cache_bytes": self.cache_bytes,
        }


class _Unbuilt(Exception):
    """A walk went through stubs whose tails are not built yet (see :mod:`toolgrammar.automata.lazy`)."""

    def __init__(self, stubs: set[int]):
        super().__init__(f"stubs {sorted(stubs)} not built")
        self.stubs = stubs


def _make_mask(ok: np.ndarray, max_need: int) -> StateMask:
    n_allowed = int(ok.sum())
    if n_allowed == len(ok):
        return StateMask(True, None, None, n_allowed, max_need)
    if n_allowed * 2 >= len(ok):
        return StateMask(False, np.flatnonzero(~ok).astype(np.int64), None, n_allowed, max_need)
    return StateMask(False, None, np.flatnonzero(ok).astype(np.int64), n_allowed, max_need)


_JSON_PUNCTUATION = (
    '{"a": "", "b": 0, "c": [], "d": {}, "e": ["", 0, {}], "f": true, "g": false, "h": null, "i": -1.5e+2}',
    '"}}\n',
    '"]}}\n',
    "]}}\n",
    "}}}\n",
    '""}}\n',
    '"}, "',
    '"], "',
    "}, {",
)


_grammars: OrderedDict[str, TokenGrammar] = OrderedDict()


_grammars_lock = threading.Lock()


def _clear_grammars() -> None:
    with _grammars_lock:
        _grammars.clear()


caches.register("runtime.token_grammars", _clear_grammars)


MAX_CACHED_GRAMMARS = 32


DIST_ON_DISK_FROM = 8_192
"""States from which a turn's per-state budget bound is kept in the on-disk cache (keyed by the tool list).

Below, computing it is cheaper than the disk: measured, 0.8-4 ms for 250-4,000 states (1 to 200 tools,
a named tool's tail built up front), against about 2 ms to write an entry and 0.4 to look for one; and an
entry per tool list would grow the cache by one file per new list a server sees."""


def token_grammar(grammar: TurnGrammar, vocab: Vocabulary) -> TokenGrammar:
    """The token grammar for ``grammar`` over ``vocab``, shared process-wide (LRU of 32)."""
    key = grammar.fingerprint + vocab.fingerprint
    with _grammars_lock:
        tg = _grammars.get(key)
        if tg is not None:
            _grammars.move_to_end(key)
            return tg
    tg = TokenGrammar(grammar, vocab)
    with _grammars_lock:
        _grammars[key] = tg
        while len(_grammars) > MAX_CACHED_GRAMMARS:
            _grammars.popitem(last=False)
    return tg


__all__ = [
    "DIST_ON_DISK_FROM",
    "INF",
    "MAX_CACHED_GRAMMARS",
    "MAX_EDGE_TRIES",
    "MAX_NEEDS_STATES",
    "MAX_PREFIX_STATES",
    "STEP_MEMO",
    "StateMask",
    "TokenGrammar",
    "token_grammar",
]
