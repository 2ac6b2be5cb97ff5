"""The compiled automaton (:class:`DFA`) and the table algorithms on it: pruning, minimization, products."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from toolgrammar import native as native_core
from toolgrammar.automata.nodes import DEAD, N_SYMBOLS, Node
from toolgrammar.errors import GrammarError

MAX_DFA_STATES = 200_000


@dataclass(frozen=True, eq=False)
class DFA:
    """A deterministic automaton over the 258-symbol alphabet.

    ``transitions[s, x]`` is the next state or :data:`DEAD`. Every state that is kept can reach an
    accepting state (states that cannot are pruned), so a transition that is not DEAD never leads
    into a dead end. ``safe[s]`` marks free-text states, where a turn may be cut without leaving a
    block open.
    """

    transitions: np.ndarray  # int32 (n_states, N_SYMBOLS)
    start: int
    accepting: np.ndarray  # bool (n_states,)
    safe: np.ndarray  # bool (n_states,)
    stats: dict = field(default_factory=dict)

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    def step(self, state: int, data: bytes | Iterable[int]) -> int:
        """Walk ``data`` from ``state``; DEAD as soon as a symbol is rejected."""
        t = self.transitions
        for b in data:
            state = int(t[state, b])
            if state < 0:
                return DEAD
        return state

    def matches(self, data: bytes | Iterable[int], *, start: int | None = None) -> bool:
        s = self.step(self.start if start is None else start, data)
        return s >= 0 and bool(self.accepting[s])


def _mask_from_indices(indices: np.ndarray) -> int:
    m = 0
    for i in indices.tolist():
        m |= 1 << i
    return m


@lru_cache(maxsize=4096)
def indices_of_mask(mask: int) -> np.ndarray:
    """The symbols of a 258-bit mask, ascending (a cached array: do not modify)."""
    bits = np.unpackbits(np.frombuffer(mask.to_bytes(33, "little"), dtype=np.uint8), bitorder="little")
    return np.flatnonzero(bits[:N_SYMBOLS]).astype(np.intp)


def partition_masks(masks: list[int]) -> list[int]:
    """The coarsest partition of the union of ``masks`` that each mask is a union of blocks of."""
    blocks: list[int] = []
    for m in set(masks):
        new_blocks = []
        rest = m
        for b in blocks:
            inter = b & m
            if inter and inter != b:
                new_blocks.append(inter)
                new_blocks.append(b & ~m)
            else:
                new_blocks.append(b)
            rest &= ~b
        if rest:
            new_blocks.append(rest)
        blocks = new_blocks
    return blocks


def shift_into(src: np.ndarray, dst: np.ndarray, first_row: int, shift: int) -> None:
    """``dst[first_row : first_row + len(src)] = src`` with every target moved by ``shift`` (dead stays dead).

    How composed parts are stacked and lazy tails appended: one pass in the C core (numpy's masked add
    is two, and was most of a large tail's joins)."""
    core = native_core.module()
    if core is not None:
        core.shift_rows(np.ascontiguousarray(src, dtype=np.int32), dst, first_row, dst.shape[1], shift)
        return
    out = dst[first_row : first_row + src.shape[0]]
    out[...] = src
    if shift:
        np.add(src, shift, out=out, where=src >= 0)


MASK_BYTES = 8 * ((N_SYMBOLS + 63) // 64)
"""A symbol mask's bytes in the C core's layout (whole 64-bit words)."""


def prune(
    table: np.ndarray,
    start: int,
    accepting: np.ndarray,
    safe: np.ndarray,
    *,
    nfa_states: int = 0,
    minimize: bool = True,
    in_place: bool = False,
) -> DFA:
    """Drop states that cannot reach acceptance and renumber the rest (start stays reachable or raises).

    ``in_place``: the caller gives ``table`` up, so the kept rows are renumbered where they are and the
    table shrunk (a large tail's pruned copy was one more fresh table of its size to fault in)."""
    n = table.shape[0]
    core = native_core.module()
    if core is not None:
        reach = np.zeros(n, dtype=np.uint8)
        table = np.ascontiguousarray(table, dtype=np.int32)
        if not core.live_states(table, table.shape[1], np.ascontiguousarray(accepting, dtype=np.uint8), start, reach):
            raise GrammarError("the grammar accepts nothing (every path is a dead end)")
        keep = np.flatnonzero(reach)
    else:
        keep = _live_numpy(table, start, accepting)
    remap = np.full(n + 1, DEAD, dtype=np.int32)  # index n maps DEAD (-1) to DEAD
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    if core is not None:
        # Rows only move down (``keep`` is sorted), so compacting a table onto itself never overwrites a
        # row before it is read.
        own = in_place and table.flags.owndata and table.flags.c_contiguous
        new = table[: len(keep)] if own else np.empty((len(keep), table.shape[1]), dtype=np.int32)
        core.compact(table, keep.astype(np.int64), remap[:n], new)
        if own:
            del new
            table.resize((len(keep), table.shape[1]), refcheck=False)
            new = table
    else:
        new = remap[table[keep]]  # -1 indexes the last slot, which holds DEAD
    if minimize:
        table, start, accepting, safe = _minimize(new, int(remap[start]), accepting[keep], safe[keep])
        table, start, accepting, safe = _canonical(table, start, accepting, safe)
    else:
        table, start, accepting, safe = new, int(remap[start]), accepting[keep], safe[keep]
    return DFA(
        transitions=np.ascontiguousarray(table, dtype=np.int32),
        start=start,
        accepting=accepting,
        safe=safe,
        stats={"nfa_states": nfa_states, "dfa_states": int(table.shape[0])},
    )


def _live_numpy(table: np.ndarray, start: int, accepting: np.ndarray) -> np.ndarray:
    """The states on some path from ``start`` to acceptance (the C core's ``live_states``, in numpy)."""
    n = table.shape[0]
    src, _sym = np.nonzero(table >= 0)
    pairs = np.unique(src.astype(np.int64) * n + table[src, _sym])
    src_u, dst_u = pairs // n, pairs % n  # sorted by source
    # Reverse reachability from accepting states, then forward from the start through live states.
    order = np.argsort(dst_u, kind="stable")
    live = _reach(accepting.copy(), dst_u[order], src_u[order], n)
    if not live[start]:
        raise GrammarError("the grammar accepts nothing (every path is a dead end)")
    ok = live[src_u] & live[dst_u]
    seed = np.zeros(n, dtype=bool)
    seed[start] = True
    return np.flatnonzero(_reach(seed, src_u[ok], dst_u[ok], n))


def _reach(seen: np.ndarray, heads: np.ndarray, tails: np.ndarray, n: int) -> np.ndarray:
    """``seen`` grown by every state reachable along the edges ``heads[i] -> tails[i]`` (sorted by head).

    Breadth-first, a whole frontier per numpy step: a Python loop per state was most of a large
    automaton's pruning."""
    core = native_core.module()
    if core is not None:
        flags = seen.view(np.uint8)
        core.reach(flags, np.ascontiguousarray(heads, dtype=np.int64), np.ascontiguousarray(tails, dtype=np.int64))
        return seen
    starts = np.searchsorted(heads, np.arange(n + 1))
    frontier = np.flatnonzero(seen)
    while len(frontier):
        lo = starts[frontier]
        counts = starts[frontier + 1] - lo
        some = counts > 0
        lo, counts = lo[some], counts[some]
        if not len(counts):
            break
        # Edge indices of every frontier state's range at once: position p of range r is lo_r + (p - c_r),
        # c_r the ranges' running total.
        shift = lo - np.concatenate([[0], np.cumsum(counts)[:-1]])
        targets = tails[np.arange(int(counts.sum())) + np.repeat(shift, counts)]
        frontier = np.unique(targets[~seen[targets]])
        seen[frontier] = True
    return seen


def _canonical(
    table: np.ndarray, start: int, accepting: np.ndarray, safe: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """The states renumbered in breadth-first order from the start, successors by symbol.

    A minimal DFA is unique up to renaming its states; this names them by the automaton alone, so the
    numbering (and every file written from it: the GBNF and lark exports) does not depend on how the
    automaton was built. Every state must be reachable from the start (pruning sees to it)."""
    n = table.shape[0]
    order = np.full(n, -1, dtype=np.int64)
    core = native_core.module()
    if core is not None:
        table = np.ascontiguousarray(table, dtype=np.int32)
        count = core.bfs_order(table, table.shape[1], start, order)
    else:
        order[start] = 0
        frontier = np.array([start], dtype=np.int64)
        count = 1
        while len(frontier):
            targets = table[frontier].reshape(-1)  # row by row, symbols ascending: the visiting order
            targets = targets[targets >= 0]
            targets = targets[order[targets] < 0]
            _, first = np.unique(targets, return_index=True)
            frontier = targets[np.sort(first)]
            order[frontier] = np.arange(count, count + len(frontier))
            count += len(frontier)
    if count != n:
        raise GrammarError(f"internal: {n - count} automaton states are unreachable after pruning")
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    rows = table[inverse]
    renamed = np.where(rows >= 0, order[np.maximum(rows, 0)], DEAD).astype(np.int32)
    return renamed, 0, accepting[inverse], safe[inverse]


def _minimize(
    table: np.ndarray, start: int, accepting: np.ndarray, safe: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Moore partition refinement: merge states with the same future (and the same flags).

    Fewer states means fewer distinct token masks to compute and cache. Runs on the table with
    equivalent symbol columns merged (JSON grammars use a few dozen symbol classes, not 258), and
    compares rows by a 128-bit random hash, which is exact in practice and fast in numpy.
    """
    n = table.shape[0]
    rng = np.random.default_rng(0x5EED)
    # Equal symbol columns by a random-weight hash, checked exactly: np.unique(table.T, axis=0) sorts 258
    # opaque rows of 4n bytes and took most of this function (about 100 ms at 1,200 states).
    tt = np.ascontiguousarray(table.T)
    with np.errstate(over="ignore"):
        col_hash = (tt.astype(np.int64) + 2) @ rng.integers(1, 2**62, size=n, dtype=np.int64)
    _, col_first, col_class = np.unique(col_hash, return_index=True, return_inverse=True)
    columns = tt[col_first]
    if not np.array_equal(tt, columns[col_class.reshape(-1)]):  # a collision: exact columns
        columns = np.unique(tt, axis=0)
    small = np.ascontiguousarray(columns.T)  # (n, n_symbol_classes)
    weights = rng.integers(1, 2**62, size=small.shape[1] + 1, dtype=np.int64)
    _, cls = np.unique(accepting.astype(np.int64) * 2 + safe, return_inverse=True)
    cls = cls.reshape(-1).astype(np.int64)
    n_cls = int(cls.max()) + 1
    core = native_core.module()
    if core is not None:
        n_cls = core.minimize(np.ascontiguousarray(small, dtype=np.int32), small.shape[1], cls)
        return _merge_classes(table, start, accepting, safe, cls, n_cls)
    sig = np.empty((n, small.shape[1] + 1), dtype=np.int64)
    ext = np.full(n + 1, -1, dtype=np.int64)  # successor classes; index -1 (DEAD) reads the trailing -1
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
    return _merge_classes(table, start, accepting, safe, cls, n_cls)


def _merge_classes(
    table: np.ndarray, start: int, accepting: np.ndarray, safe: np.ndarray, cls: np.ndarray, n_cls: int
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """One state per class of ``cls`` (``n_cls`` classes), the classes numbered by first appearance."""
    n = table.shape[0]
    if n_cls == n:
        return table, start, accepting.copy(), safe.copy()
    # One representative per class; classes numbered by first appearance keep the start state small.
    _, first_idx = np.unique(cls, return_index=True)
    order = np.argsort(first_idx, kind="stable")
    renumber = np.empty(n_cls, dtype=np.int64)
    renumber[order] = np.arange(n_cls)
    reps = first_idx[order]
    cls = renumber[cls]
    rows = table[reps]
    new_table = np.where(rows >= 0, np.take(cls, np.maximum(rows, 0)), DEAD).astype(np.int32)
    return new_table, int(cls[start]), accepting[reps].copy(), safe[reps].copy()


DENSE_PRODUCT_UP_TO = 20_000
"""State pairs up to which :func:`_intersect` builds the whole product at once (5 MB of table)."""


def _intersect(dfa: DFA, guard: np.ndarray) -> DFA:
    """``dfa`` run in step with a small guard automaton (start 0; ``-1`` = forbidden), pruned.

    A pair of states is one code (``d * guards + g``). Up to :data:`DENSE_PRODUCT_UP_TO` pairs the
    whole product table is one array operation and pruning keeps the reachable pairs; beyond, the
    pairs are explored from the start, each row built with array operations over the symbols.
    """
    n_guard = guard.shape[0]
    if dfa.n_states * n_guard <= DENSE_PRODUCT_UP_TO:
        d = dfa.transitions.astype(np.int64)[:, None, :]
        g = guard.astype(np.int64)[None, :, :]
        table = np.where((d >= 0) & (g >= 0), d * n_guard + g, DEAD).reshape(-1, N_SYMBOLS).astype(np.int32)
        accepting = np.repeat(dfa.accepting.astype(bool), n_guard)
        safe = np.repeat(dfa.safe.astype(bool), n_guard)
        return prune(table, dfa.start * n_guard, accepting, safe, minimize=False)
    transitions = dfa.transitions.astype(np.int64)
    guard64 = guard.astype(np.int64)
    start = dfa.start * n_guard
    index = {start: 0}
    pairs = [start]
    rows = []
    i = 0
    while i < len(pairs):
        d, g = divmod(pairs[i], n_guard)
        i += 1
        dn, gn = transitions[d], guard64[g]
        ok = (dn >= 0) & (gn >= 0)
        row = np.full(N_SYMBOLS, DEAD, dtype=np.int32)
        if ok.any():
            codes = dn[ok] * n_guard + gn[ok]
            targets = np.unique(codes)
            ids = np.empty(len(targets), dtype=np.int32)
            for k, code in enumerate(targets.tolist()):
                j = index.get(code)
                if j is None:
                    j = index[code] = len(pairs)
                    pairs.append(code)
                ids[k] = j
            row[ok] = ids[np.searchsorted(targets, codes)]
        rows.append(row)
    table = np.stack(rows)
    states = np.array(pairs, dtype=np.int64) // n_guard
    # Not minimized here: the automaton this is embedded in is minimized as a whole.
    return prune(table, 0, dfa.accepting[states].astype(bool), dfa.safe[states].astype(bool), minimize=False)


def product_not_prefixed(dfa: DFA, word: bytes) -> DFA:
    """``dfa`` restricted to strings that do not start with ``word``."""
    free = len(word)  # diverged from the word: anything goes
    guard = np.full((len(word) + 1, N_SYMBOLS), free, dtype=np.int32)
    for k, b in enumerate(word):
        guard[k, b] = k + 1 if k + 1 < len(word) else -1
    return _intersect(dfa, guard)


def product_avoiding(dfa: DFA, words: tuple[bytes, ...]) -> DFA:
    """``dfa`` restricted to strings containing none of ``words`` (Aho-Corasick guard)."""
    goto: list[dict[int, int]] = [{}]
    out = [False]
    for w in words:
        s = 0
        for b in w:
            if b not in goto[s]:
                goto.append({})
                out.append(False)
                goto[s][b] = len(goto) - 1
            s = goto[s][b]
        out[s] = True
    fail = [0] * len(goto)
    ac = np.zeros((len(goto), N_SYMBOLS), dtype=np.int32)
    queue = []
    for b, t in goto[0].items():
        queue.append(t)
        ac[0, b] = t
    head = 0
    while head < len(queue):
        s = queue[head]
        head += 1
        out[s] = out[s] or out[fail[s]]
        ac[s] = ac[fail[s]]
        for b, t in goto[s].items():
            fail[t] = int(ac[fail[s], b]) if s else 0
            ac[s, b] = t
            queue.append(t)
    guard = np.where(np.array(out)[ac], -1, ac).astype(np.int32)  # reaching a match is forbidden
    return _intersect(dfa, guard)


def check_dfa_arrays(entry: dict[str, np.ndarray]) -> str | None:
    """Why a cached automaton cannot be used as it is (shapes, dtypes, ranges), or ``None``.

    The entry's content hash already matched; this guards the arrays' layout so that an entry
    written by another version, or crafted, is rebuilt instead of indexing out of range.
    """
    names = {"transitions", "accepting", "safe", "start", "points"}
    if set(entry) != names:
        return f"arrays {sorted(entry)}, expected {sorted(names)}"
    t, accepting, safe, start = entry["transitions"], entry["accepting"], entry["safe"], entry["start"]
    if t.ndim != 2 or t.shape[1] != N_SYMBOLS or t.shape[0] < 1 or t.dtype != np.int32:
        return f"transitions of shape {t.shape} and dtype {t.dtype}, expected (n, {N_SYMBOLS}) int32"
    n = t.shape[0]
    for name, array in (("accepting", accepting), ("safe", safe)):
        if array.shape != (n,) or array.dtype != np.bool_:
            return f"{name} of shape {array.shape} and dtype {array.dtype}, expected ({n},) bool"
    if start.shape != () or start.dtype.kind not in "iu" or not 0 <= int(start) < n:
        return f"start state {start!r} is not one of the {n} states"
    if int(t.min()) < DEAD or int(t.max()) >= n:
        return f"transitions lead outside the {n} states"
    points = entry["points"]
    if points.ndim != 2 or points.shape[1] != 3 or points.dtype.kind not in "iu":
        return f"dispatch points of shape {points.shape}, expected (k, 3) integers"
    if len(points) and (int(points[:, :2].min()) < 0 or int(points[:, :2].max()) >= n or int(points[:, 2].min()) < 0):
        return f"dispatch points outside the {n} states"
    return None


@dataclass(frozen=True, eq=False)
class Embedded(Node):
    """A part already compiled (by :mod:`toolgrammar.automata.compose`), placed as it is."""

    dfa: DFA


__all__ = [
    "DENSE_PRODUCT_UP_TO",
    "DFA",
    "MASK_BYTES",
    "MAX_DFA_STATES",
    "Embedded",
    "check_dfa_arrays",
    "indices_of_mask",
    "partition_masks",
    "product_avoiding",
    "product_not_prefixed",
    "prune",
    "shift_into",
]
