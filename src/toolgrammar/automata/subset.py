"""Thompson NFA of a tree, then subset construction over symbol classes: the reference construction, and the
one :mod:`toolgrammar.automata.compose` falls back to for small or non-deterministic joins.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from types import ModuleType

import numpy as np

from toolgrammar import caches
from toolgrammar import native as native_core
from toolgrammar.automata.dfa import DFA, MASK_BYTES, MAX_DFA_STATES, Embedded, indices_of_mask, partition_masks
from toolgrammar.automata.nodes import (
    DEAD,
    N_SYMBOLS,
    Alt,
    Avoid,
    Group,
    Lit,
    Members,
    Node,
    NotPrefixed,
    Repeat,
    Seq,
    Shared,
    Sym,
    seq,
)
from toolgrammar.errors import GrammarError

PartDFA = Callable[[Node], DFA]
"""The compiled DFA of a :class:`Shared`, :class:`Avoid` or :class:`NotPrefixed` node, embedded as it is.
Passed in by :mod:`toolgrammar.automata.compile`, which compiles those parts (with this construction among
others): the recursion the algorithm needs, without an import loop."""

MAX_NFA_STATES = 400_000
"""A grammar larger than this is refused with a clear error instead of exhausting memory."""


class _NFA:
    __slots__ = ("edges", "eps", "safe")

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int]]] = []
        self.eps: list[list[int]] = []
        self.safe: list[bool] = []

    def new(self, safe: bool) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise GrammarError(
                f"grammar too large: more than {MAX_NFA_STATES} automaton states; reduce maxItems, "
                "enum sizes or the number of tools"
            )
        self.edges.append([])
        self.eps.append([])
        self.safe.append(safe)
        return len(self.edges) - 1


class _Builder:
    def __init__(self, part_dfa: PartDFA) -> None:
        self.nfa = _NFA()
        self.part_dfa = part_dfa

    def build(self, node: Node, safe: bool) -> tuple[int, int]:
        nfa = self.nfa
        if isinstance(node, Lit):
            start = cur = nfa.new(safe)
            for b in node.data:
                nxt = nfa.new(safe)
                nfa.edges[cur].append((1 << b, nxt))
                cur = nxt
            return start, cur
        if isinstance(node, Sym):
            a, b = nfa.new(safe), nfa.new(safe)
            nfa.edges[a].append((node.mask, b))
            return a, b
        if isinstance(node, Seq):
            start, end = self.build(node.items[0], safe)
            for it in node.items[1:]:
                s, e = self.build(it, safe)
                nfa.eps[end].append(s)
                end = e
            return start, end
        if isinstance(node, Alt):
            a, b = nfa.new(safe), nfa.new(safe)
            for it in node.items:
                s, e = self.build(it, safe)
                nfa.eps[a].append(s)
                nfa.eps[e].append(b)
            return a, b
        if isinstance(node, Repeat):
            start = end = nfa.new(safe)
            for _ in range(node.lo):
                s, e = self.build(node.item, safe)
                nfa.eps[end].append(s)
                end = e
            if node.hi is None:
                s, e = self.build(node.item, safe)
                loop_end = nfa.new(safe)
                nfa.eps[end].append(s)
                nfa.eps[end].append(loop_end)
                nfa.eps[e].append(s)
                nfa.eps[e].append(loop_end)
                return start, loop_end
            if node.hi > node.lo:
                final = nfa.new(safe)
                for _ in range(node.hi - node.lo):
                    nfa.eps[end].append(final)
                    s, e = self.build(node.item, safe)
                    nfa.eps[end].append(s)
                    end = e
                nfa.eps[end].append(final)
                end = final
            return start, end
        if isinstance(node, Group):
            return self.build(node.item, safe or node.safe)
        if isinstance(node, Members):
            return self._members(node, safe)
        if isinstance(node, Embedded):
            return self._embed(node.dfa, safe, cache=False)
        if isinstance(node, Avoid):
            return self._embed(self.part_dfa(node), safe)
        if isinstance(node, Shared):
            return self._embed(self.part_dfa(node), safe)
        if isinstance(node, NotPrefixed):
            return self._embed(self.part_dfa(node), safe)
        raise GrammarError(f"unknown grammar node {type(node).__name__}")

    def _members(self, node: Members, safe: bool) -> tuple[int, int]:
        nfa = self.nfa
        none_yet: int | None = nfa.new(safe)  # track 0: nothing written yet
        start = none_yet
        some: int | None = None  # track 1: something written
        for member, required in node.items:
            new_some = nfa.new(safe)
            if none_yet is not None:
                s, e = self.build(member, safe)
                nfa.eps[none_yet].append(s)
                nfa.eps[e].append(new_some)
            if some is not None:
                s, e = self.build(seq(node.sep, member), safe)
                nfa.eps[some].append(s)
                nfa.eps[e].append(new_some)
                if not required:
                    nfa.eps[some].append(new_some)
            if required:
                none_yet = None
            elif none_yet is not None:
                skip = nfa.new(safe)
                nfa.eps[none_yet].append(skip)
                none_yet = skip
            some = new_some
        end = nfa.new(safe)
        for track in (none_yet, some):
            if track is not None:
                nfa.eps[track].append(end)
        return start, end

    def _embed(self, dfa: DFA, safe: bool, *, cache: bool = True) -> tuple[int, int]:
        nfa = self.nfa
        ids = [nfa.new(safe or bool(dfa.safe[s])) for s in range(dfa.n_states)]
        end = nfa.new(safe)
        for s, row_edges in enumerate(_dfa_edges(dfa, cache=cache)):
            nfa.edges[ids[s]].extend((mask, ids[t]) for mask, t in row_edges)
            if dfa.accepting[s]:
                nfa.eps[ids[s]].append(end)
        return ids[dfa.start], end


_edges_cache: OrderedDict[int, tuple[DFA, list[list[tuple[int, int]]]]] = OrderedDict()
caches.register("automata.edges", _edges_cache.clear)


def _dfa_edges(dfa: DFA, *, cache: bool = True) -> list[list[tuple[int, int]]]:
    """Each state's transitions as (symbol mask, target) pairs; a shared DFA is embedded many times.

    ``cache=False`` for a part embedded once (a fallback join's parts): the cache would keep it alive."""
    hit = _edges_cache.get(id(dfa)) if cache else None
    if hit is not None and hit[0] is dfa:
        return hit[1]
    t = dfa.transitions
    n = dfa.n_states
    src, sym = np.nonzero(t >= 0)
    dst = t[src, sym]
    pair = src.astype(np.int64) * n + dst
    order = np.argsort(pair, kind="stable")
    pair, sym = pair[order], sym[order]
    uniq = np.unique(pair)
    bits = np.zeros((len(uniq), 264), dtype=bool)  # 258 symbols, padded to whole bytes
    group = np.searchsorted(uniq, pair)
    bits[group, sym] = True
    packed = np.packbits(bits, axis=1, bitorder="little")
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k, p in enumerate(uniq.tolist()):
        edges[p // n].append((int.from_bytes(packed[k].tobytes(), "little"), p % n))
    if not cache:
        return edges
    _edges_cache[id(dfa)] = (dfa, edges)
    while len(_edges_cache) > 256:
        _edges_cache.popitem(last=False)
    return edges


def subset_dfa(node: Node, safe: bool, part_dfa: PartDFA) -> DFA:
    """Thompson NFA of ``node``, then subset construction over symbol classes (start 0; not pruned).

    States are numbered breadth-first from the start, successors by symbol (as :func:`_canonical`
    numbers them), whether the C core or the Python loop builds them. ``safe`` marks every state (the
    node lies inside a safe :class:`Group`)."""
    builder = _Builder(part_dfa)
    start, end = builder.build(node, safe)
    nfa = builder.nfa
    core = native_core.module()
    if core is not None:
        return _subset_native(core, nfa, start, end)
    eps = nfa.eps

    closure_cache: dict[int, frozenset[int]] = {}

    def closure_of(state: int) -> frozenset[int]:
        got = closure_cache.get(state)
        if got is not None:
            return got
        seen = {state}
        stack = [state]
        while stack:
            s = stack.pop()
            for t in eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        result = frozenset(seen)
        closure_cache[state] = result
        return result

    edges_of = nfa.edges
    safe_of = nfa.safe
    safe_mark = len(edges_of)  # past every state: the set is safe (see below)

    def closure(states: Iterable[int]) -> frozenset[int]:
        """The set's key: the states of the closure that read a symbol, ``end``, and the safe mark when any
        state of the closure is safe (the states an epsilon path only passes through add nothing to the
        future; keyed by them, equal futures were different states, see the C core's ``subset``)."""
        out: set[int] = set()
        for s in states:
            out |= closure_of(s)
        key = {s for s in out if edges_of[s] or s == end}
        if any(safe_of[s] for s in out):
            key.add(safe_mark)
        return frozenset(key)

    start_set = closure([start])
    index: dict[frozenset[int], int] = {start_set: 0}
    sets = [start_set]
    rows: list[list[tuple[int, int]]] = []
    i = 0
    while i < len(sets):
        current = sets[i]
        i += 1
        edges = [e for s in current if s != safe_mark for e in edges_of[s]]
        row: list[tuple[int, int]] = []
        if edges:
            # Blocks by their lowest symbol: new states are then numbered as _canonical numbers them,
            # as the C core numbers them.
            for block in sorted(partition_masks([m for m, _ in edges]), key=lambda b: b & -b):
                target = closure(t for m, t in edges if m & block)
                j = index.get(target)
                if j is None:
                    j = len(sets)
                    if j >= MAX_DFA_STATES:
                        raise GrammarError(f"grammar too large: more than {MAX_DFA_STATES} DFA states")
                    index[target] = j
                    sets.append(target)
                row.append((block, j))
        rows.append(row)

    n = len(sets)
    table = np.full((n, N_SYMBOLS), DEAD, dtype=np.int32)
    for s, row in enumerate(rows):
        for block, t in row:
            table[s, indices_of_mask(block)] = t
    accepting = np.array([end in st for st in sets], dtype=bool)
    safe_sets = np.array([safe_mark in st for st in sets], dtype=bool)
    return DFA(table, 0, accepting, safe_sets, stats={"nfa_states": len(nfa.edges)})


def _subset_native(core: ModuleType, nfa: _NFA, start: int, end: int) -> DFA:
    """:func:`subset_dfa`'s loop in C (``_native.subset``): the NFA flattened into arrays, each edge's
    symbol set as little-endian 64-bit words."""
    m = len(nfa.edges)
    edge_counts = np.fromiter((len(e) for e in nfa.edges), dtype=np.int64, count=m)
    eps_counts = np.fromiter((len(e) for e in nfa.eps), dtype=np.int64, count=m)
    edge_ptr = np.concatenate([[0], np.cumsum(edge_counts)]).astype(np.int64)
    eps_ptr = np.concatenate([[0], np.cumsum(eps_counts)]).astype(np.int64)
    flat = [e for row in nfa.edges for e in row]
    bits = np.frombuffer(b"".join(mask.to_bytes(MASK_BYTES, "little") for mask, _ in flat), dtype="<u8")
    dst = np.fromiter((t for _, t in flat), dtype=np.int32, count=len(flat))
    eps_dst = np.fromiter((t for row in nfa.eps for t in row), dtype=np.int32, count=int(eps_ptr[-1]))
    safe = np.frombuffer(bytes(nfa.safe), dtype=np.uint8)
    done = core.subset(edge_ptr, bits, dst, eps_ptr, eps_dst, safe, start, end, N_SYMBOLS, MAX_DFA_STATES)
    if done is None:
        raise GrammarError(f"grammar too large: more than {MAX_DFA_STATES} DFA states")
    table, accepting, safe_sets = done
    table = np.frombuffer(bytearray(table), dtype=np.int32).reshape(-1, N_SYMBOLS)
    accepting = np.frombuffer(accepting, dtype=np.uint8).astype(bool)
    safe_sets = np.frombuffer(safe_sets, dtype=np.uint8).astype(bool)
    return DFA(table, 0, accepting, safe_sets, stats={"nfa_states": m})


__all__ = ["MAX_NFA_STATES", "subset_dfa"]
