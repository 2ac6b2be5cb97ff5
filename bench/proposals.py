"""Proposed speed-ups for toolgrammar's hot and cold paths, measured here before they go into ``src/``.

Nothing in ``src/`` is edited: each proposal is a drop-in replacement (a subclass, or a function with the
signature of the method it replaces) that ``bench/anchors.py --proposals`` measures side by side with
the shipped code in the same run. ``bench/RESULTS.md`` gives each as a diff with its measured gain.

Hot path (:class:`ProposedProcessor`, a subclass of ``hf.ToolCallLogitsProcessor``):

1. ``_sync``: compare the sequence with the previous step's on the host as bytes (``tobytes() ==``), not
   with ``torch.equal(input_ids[:, :-1], prev)`` (a slice and a compare through the dispatcher), and read
   the new tokens from the same numpy view.
2. The columns beyond the tokenizer are masked by the same operation as the state's mask: a banned list
   carries them (cached per mask and width), an allowed list fills the whole row anyway; only outside
   blocks (all allowed) is the tail written on its own, as a numpy slice.
3. One row: the mask is applied through the numpy view of the scores (one ``fill``, and a gather /
   scatter of a few values, or one fancy assignment), fewer dispatcher round trips than
   ``index_select`` + ``fill_`` + ``index_copy_``.

Everything off that path (CUDA tensors, non-float32 scores, batches) goes to the shipped code.

Cold path (:func:`walk_trie`, replacing ``engine.TokenTable.walk``): the vocabulary as a trie (built once
per tokenizer, next to the token table) walked level by level: a prefix shared by many tokens is walked
once, and nothing is compacted between levels (a dead node's children index the automaton's dead row).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from toolgrammar.hf import ToolCallLogitsProcessor

NINF = float("-inf")


class ProposedProcessor(ToolCallLogitsProcessor):
    """``ToolCallLogitsProcessor`` with proposals 1-3 (CPU float32 tensors; the rest as before)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._banned_full: dict[tuple[int, int], np.ndarray] = {}
        self._bench_keep: dict[int, Any] = {}

    def reset(self) -> None:
        super().reset()
        self._prev_bytes: bytes | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # The fast path needs host memory and float32; numpy views then give shapes without the dispatcher.
        if scores.dtype is not torch.float32 or not scores.is_cpu or not input_ids.is_cpu:
            self._prev_bytes = None  # the shipped path keeps its own state; resync from it next time
            return super().__call__(input_ids, scores)
        ids = input_ids.numpy()
        sc = scores.numpy()  # raises on a tensor that requires grad (never the case under generate)
        n_tokens = self.grammar.table.n_tokens
        if sc.ndim != 2 or ids.ndim != 2 or sc.shape[0] != 1 or ids.shape[0] != 1 or sc.shape[1] < n_tokens:
            self._prev_bytes = None
            return super().__call__(input_ids, scores)  # batches, and the shipped errors
        width = sc.shape[1]
        self._sync_np(input_ids, ids)
        m = self.cursors[0].mask()
        row = sc[0]
        if m is None or m.all_allowed:
            if width > n_tokens:
                row[n_tokens:] = NINF
        elif m.banned is not None:
            row[self._banned_with_tail(m, width)] = NINF
        else:
            allowed = m.allowed
            kept = row[allowed]
            row.fill(NINF)
            row[allowed] = kept
        return scores

    def _banned_with_tail(self, m: Any, width: int) -> np.ndarray:
        key = (id(m.banned), width)
        arr = self._banned_full.get(key)
        if arr is None:
            n = self.grammar.table.n_tokens
            arr = np.concatenate([m.banned, np.arange(n, width, dtype=np.int64)]) if width > n else m.banned
            self._banned_full[key] = arr
            self._bench_keep[id(m.banned)] = m  # the mask (hence the id) stays alive while the key is used
        return arr

    def _sync_np(self, input_ids: torch.Tensor, ids: np.ndarray) -> None:
        """One row: a new generation unless the input is the previous one plus one token (bytes compare)."""
        now = ids.tobytes()
        prev = self._prev_bytes
        if prev is not None and len(now) == len(prev) + ids.itemsize and now.startswith(prev):
            self.cursors[0].advance(int(ids[0, -1]))
        else:
            self._start(input_ids)
        self._prev_ids = input_ids
        self._prev_bytes = now


# ------------------------------------------------------------------------------------------ the cold walk


class Trie:
    """A vocabulary's tokens as a trie of symbols, laid out by depth for level-by-level walks.

    ``parent[k]`` / ``symbol[k]`` for node ``k``; nodes of depth ``d`` are ``level[d]:level[d+1]``, and a
    node's parent has a smaller index (the root is -1, handled by the first level). ``leaf[t]`` is the
    node that ends token ``t``.
    """

    def __init__(self, table: Any):
        n = table.n_tokens
        lengths = table.lengths.astype(np.int64)
        offsets = table.offsets
        flat = table.flat.astype(np.int64)
        max_len = int(lengths.max())
        # Level by level: the nodes of depth d are the distinct prefixes of length d+1 (parent node, symbol).
        node_of_token = np.full(n, -1, dtype=np.int64)  # the node of each token's prefix so far
        parents, symbols, levels = [], [], [0]
        leaf = np.empty(n, dtype=np.int64)
        total = 0
        active = np.arange(n)
        for d in range(max_len):
            active = active[lengths[active] > d]
            if not len(active):
                break
            par = node_of_token[active]
            sym = flat[offsets[active] + d]
            key = (par + 1) * 259 + sym  # parent -1 -> 0
            uniq, inv = np.unique(key, return_inverse=True)
            parents.append(uniq // 259 - 1)
            symbols.append(uniq % 259)
            node_of_token[active] = total + inv
            ends = lengths[active] == d + 1
            leaf[active[ends]] = total + inv[ends]
            total += len(uniq)
            levels.append(total)
        self.levels = levels
        self.leaf = leaf
        self.n_nodes = total
        # Per level, the parents (node ids) and symbols of its nodes, ready for one gather per level.
        self.parents = [p.astype(np.intp) for p in parents]
        self.symbols = [x.astype(np.int32) for x in symbols]


def walk_trie(table: Any, trie: Trie, transitions: np.ndarray, state: int) -> np.ndarray:
    """End state of every token from ``state`` (DEAD = -1 where rejected): ``TokenTable.walk``'s result.

    One gather per trie level over that level's nodes, through the flattened transition table: a dead
    parent (-1) gives index ``-258 + symbol``, which lands in the table's last row, the dead row, so dead
    nodes need no masking and nothing is compacted.
    """
    n_sym = transitions.shape[1]
    flat = transitions.reshape(-1)
    lv = trie.levels
    cur = np.empty(trie.n_nodes, dtype=np.int32)
    cur[: lv[1]] = transitions[state, trie.symbols[0]]
    for d in range(1, len(lv) - 1):
        p = cur[trie.parents[d]]
        p *= n_sym
        p += trie.symbols[d]
        cur[lv[d] : lv[d + 1]] = flat[p]
    return cur[trie.leaf]


TRIE_MIN_SYMBOLS = 32
"""A state that accepts more symbols than this (text: free text, strings) is walked with the trie; a state
on JSON structure or a literal (a handful of symbols) keeps ``TokenTable.walk``'s first-pair filter,
which leaves a few hundred tokens to walk."""

_tries: dict[int, Trie] = {}


def trie_of(table: Any) -> Trie:
    """The trie of a token table, built once per table (per tokenizer; ~0.1 s for Qwen3)."""
    t = _tries.get(id(table))
    if t is None:
        t = _tries[id(table)] = Trie(table)
        table._bench_trie = t  # keeps the id valid while the table lives
    return t


def proposed_walk(tg: Any, state: int) -> np.ndarray:
    """Replacement for ``TokenGrammar._walk``: the trie for text states, the shipped walk otherwise."""
    tg.n_walks += 1
    t = tg.transitions
    if int(np.count_nonzero(t[state] >= 0)) > TRIE_MIN_SYMBOLS:
        return walk_trie(tg.table, trie_of(tg.table), t, state)
    return tg.table.walk(t, state, getattr(tg, "loops", None))


def proposed_compute(tg: Any, state: int) -> Any:
    """Replacement for ``TokenGrammar._compute``: text states (more than :data:`TRIE_MIN_SYMBOLS` symbols
    accepted) are walked with the trie, and the budget bookkeeping runs on the allowed tokens only;
    literal and structure states keep the shipped code (already sparse there)."""
    from toolgrammar.engine import INF, StateMask

    t = tg.transitions
    if int(np.count_nonzero(t[state] >= 0)) <= TRIE_MIN_SYMBOLS:
        return type(tg)._compute(tg, state)
    tg.n_walks += 1
    nxt = walk_trie(tg.table, trie_of(tg.table), t, state)
    idx = np.flatnonzero(nxt >= 0)
    need = tg.dist[nxt[idx]]
    fin = need < INF
    max_need = int(need[fin].max()) if fin.any() else 0
    if not fin.all():
        idx = idx[fin]
    n = len(nxt)
    k = len(idx)
    if k == n:
        return StateMask(True, None, None, k, max_need)
    if k * 2 >= n:
        ok = np.zeros(n, dtype=bool)
        ok[idx] = True
        return StateMask(False, np.flatnonzero(~ok).astype(np.int64), None, k, max_need)
    return StateMask(False, None, idx.astype(np.int64), k, max_need)


STEP_MEMO = 1 << 17
"""Most (state, token) pairs ``TokenGrammar.step`` remembers (a dict entry is ~100 bytes: ~13 MB)."""


def patch_grammar(tg: Any) -> Any:
    """Give one ``TokenGrammar`` the proposals (instance attributes: other grammars keep the shipped code).

    Cold: :func:`proposed_walk` / :func:`proposed_compute`. Hot: ``step`` remembers (state, token) pairs (a
    dict lookup instead of slicing the token's symbols out of the table and indexing the transition table
    once per symbol), and ``is_finished`` reads a precomputed list instead of an ``any()`` over a row.
    """
    import types

    from toolgrammar.automaton import N_SYMBOLS

    tg._walk = types.MethodType(proposed_walk, tg)
    tg._compute = types.MethodType(proposed_compute, tg)
    shipped_step = tg.step
    memo: dict[int, int] = {}
    n = tg.table.n_tokens

    def step(state: int, token: int) -> int:
        key = state * n + token if 0 <= token < n else -1
        got = memo.get(key)
        if got is None:
            got = shipped_step(state, token)
            if key >= 0 and len(memo) < STEP_MEMO:
                memo[key] = got
        return got

    finished = (tg.dfa.accepting & ~(tg.transitions[:-1, :N_SYMBOLS] >= 0).any(axis=1)).tolist()
    tg.step = step
    tg.is_finished = finished.__getitem__
    return tg


# ------------------------------------------------------------------------------------------ the compile


def proposed_minimize(
    table: np.ndarray, start: int, accepting: np.ndarray, safe: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """``automaton._minimize`` with the same result, faster:

    - equal symbol columns are found by a random-weight hash of each column (checked exactly, with
      ``np.unique(axis=0)`` as the fallback on a collision) instead of ``np.unique(table.T, axis=0)``,
      which sorts 258 rows of ``4 * n_states`` bytes as opaque void items (about 100 ms at 1,200 states);
    - each round's signature gathers the successor classes through a class array with a trailing -1
      (a dead transition, -1, indexes it) into a preallocated matrix, instead of ``where`` + ``take`` +
      ``concatenate``.
    """
    from toolgrammar.automaton import DEAD

    n = table.shape[0]
    rng = np.random.default_rng(0x5EED)
    tt = np.ascontiguousarray(table.T)
    col_weights = rng.integers(1, 2**62, size=n, dtype=np.int64)
    with np.errstate(over="ignore"):
        col_hash = (tt.astype(np.int64) + 2) @ col_weights
    _, col_first, col_class = np.unique(col_hash, return_index=True, return_inverse=True)
    columns = tt[col_first]
    if not np.array_equal(tt, columns[col_class.reshape(-1)]):  # a collision: exact columns
        columns = np.unique(tt, axis=0)
    small = np.ascontiguousarray(columns.T)  # (n, n_symbol_classes)
    weights = rng.integers(1, 2**62, size=small.shape[1] + 1, dtype=np.int64)
    _, cls = np.unique(accepting.astype(np.int64) * 2 + safe, return_inverse=True)
    cls = cls.reshape(-1).astype(np.int64)
    n_cls = int(cls.max()) + 1
    sig = np.empty((n, small.shape[1] + 1), dtype=np.int64)
    ext = np.empty(n + 1, dtype=np.int64)
    ext[n] = -1
    while True:
        ext[:n] = cls
        sig[:, 0] = cls
        sig[:, 1:] = ext[small]
        with np.errstate(over="ignore"):
            h = sig @ weights
        _, first, new_cls = np.unique(h, return_index=True, return_inverse=True)
        new_cls = new_cls.reshape(-1).astype(np.int64)
        if not np.array_equal(sig, sig[first[new_cls]]):  # a hash collision: fall back to exact rows
            _, new_cls = np.unique(sig, axis=0, return_inverse=True)
            new_cls = new_cls.reshape(-1).astype(np.int64)
        new_n = int(new_cls.max()) + 1
        if new_n == n_cls:
            break
        cls, n_cls = new_cls, new_n
    if n_cls == n:
        return table, start, accepting.copy(), safe.copy()
    _, first_idx = np.unique(cls, return_index=True)
    order = np.argsort(first_idx, kind="stable")
    renumber = np.empty(n_cls, dtype=np.int64)
    renumber[order] = np.arange(n_cls)
    reps = first_idx[order]
    cls = renumber[cls]
    rows = table[reps]
    new_table = np.where(rows >= 0, np.take(cls, np.maximum(rows, 0)), DEAD).astype(np.int32)
    return new_table, int(cls[start]), accepting[reps].copy(), safe[reps].copy()
