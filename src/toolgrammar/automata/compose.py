"""Compile an expression tree bottom-up, joining the parts' DFAs where the join stays deterministic.

Why: subset construction (:func:`toolgrammar.automata.subset.subset_dfa`) pays a Python loop for every
state of the result, about 70 µs each, and a tool's arguments under bounded arrays reach thousands
of states (a ``maxItems`` 4 array of objects holding ``maxItems`` 10 arrays of points: 9,000 states,
0.65 s). Most joins in a JSON grammar need no subset construction at all: what follows a JSON value
(``,``, ``]``, ``}``, whitespace) is never a continuation of the value, so the DFA of ``a b`` is the
two tables side by side, with ``b``'s first row copied into ``a``'s accepting states. Those joins
are array operations here; a join whose rows would overlap (``a`` may go on with a symbol ``b`` may
start with: an enum's strings all open with ``"``; optional object members share the separator)
falls back to subset construction for that node alone, over its parts' DFAs already built; so does a
join whose determinization grows past :data:`JOIN_GROWTH` (overlapping loops).

A part that no other build holds or will ask for again is not copied into its parent's table: its own
table is grown in place (see :meth:`_Composer.take`).

What stays exact: the language, the accepting states and the ``safe`` flags. A joined state is the
state subset construction would reach (its row the union of the disjoint rows, ``safe`` the OR of
both, accepting when what follows may be empty), so after pruning and minimization the result is the
automaton :func:`~toolgrammar.automata.subset.subset_dfa` builds; ``tests/automata/test_compose.py`` checks that
they are isomorphic on every tool set the tests compile and on random trees.

The result is not pruned: states a join leaves behind (a part's start whose row was copied) are
dropped by :func:`~toolgrammar.automata.compile.compile_dfa`'s pruning, once, at the end.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from toolgrammar.automata.dfa import DFA, MAX_DFA_STATES, Embedded, indices_of_mask, shift_into
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
)
from toolgrammar.automata.size import estimate_size
from toolgrammar.automata.subset import PartDFA, subset_dfa
from toolgrammar.errors import GrammarError

SUBSET_UP_TO = 300
"""Parts estimated at up to this many states (:func:`~toolgrammar.automata.size.estimate_size`) are built by
subset construction, which is faster than joining tables of 258 columns while automata are small."""


def compose_dfa(node: Node, part_dfa: PartDFA) -> DFA:
    """The DFA of ``node`` (unpruned; start, accepting and safe flags as subset construction has them);
    ``part_dfa`` compiles the parts embedded as they are (:data:`~toolgrammar.automata.subset.PartDFA`)."""
    return _Composer(_references(node), part_dfa).build(node, False)


def _references(root: Node) -> dict[int, int]:
    """How many times the composer will ask for each node of the tree (by id): once per reference from a
    parent (the tree is a DAG: a part may be shared), the root once."""
    refs: dict[int, int] = {id(root): 1}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in _children(node):
            seen = id(child) in refs
            refs[id(child)] = refs.get(id(child), 0) + 1
            if not seen:
                stack.append(child)
    return refs


def _children(node: Node) -> list[Node]:
    """The parts :meth:`_Composer._build` asks for, one entry per request."""
    if isinstance(node, Seq | Alt):
        return list(node.items)
    if isinstance(node, Repeat | Group):
        return [node.item]
    if isinstance(node, Members):
        return [m for m, _ in node.items] + [node.sep]
    return []


GROWABLE = "composed"
"""``DFA.stats`` flag: the table was allocated here, so the one consumer of the DFA may grow it in place."""


def _raw(table: np.ndarray, start: int, accepting: np.ndarray, safe: np.ndarray) -> DFA:
    if table.shape[0] > MAX_DFA_STATES:
        raise GrammarError(f"grammar too large: more than {MAX_DFA_STATES} DFA states")
    return DFA(transitions=table, start=start, accepting=accepting, safe=safe, stats={GROWABLE: True})


def _epsilon(safe: bool) -> DFA:
    return _raw(np.full((1, N_SYMBOLS), DEAD, dtype=np.int32), 0, np.ones(1, dtype=bool), np.full(1, safe))


def _flagged(dfa: DFA, safe: bool) -> DFA:
    """``dfa`` with every state marked safe when ``safe`` (a region inside a safe group)."""
    if not safe or bool(dfa.safe.all()):
        return dfa
    return DFA(dfa.transitions, dfa.start, dfa.accepting, np.ones(dfa.n_states, dtype=bool))


def _stack(
    parts: list[DFA], spare: int = 0, owned: list[bool] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The parts' tables side by side (targets shifted), their flags, and each part's first row index;
    ``spare`` rows more at the end (unset, flags False) for the caller's own rows, so that adding
    them costs no second copy of the table.

    ``owned[i]``: nobody else holds ``parts[i]`` (see :meth:`_Composer.take`). The largest such part
    whose table this module allocated goes first and keeps its table, grown in place (``realloc``,
    which remaps large blocks rather than copying them): a schema's levels each wrap the part below in
    a few rows (the object's braces, its members, the arguments), and copying the whole table at every
    level was most of a large tail's joins. That part's DFA must not be used again."""
    sizes = [p.n_states for p in parts]
    total = sum(sizes)
    if total + spare > MAX_DFA_STATES:
        raise GrammarError(f"grammar too large: more than {MAX_DFA_STATES} DFA states")
    grow = _growable(parts, owned) if owned is not None else None
    order = ([grow] if grow is not None else []) + [i for i in range(len(parts)) if i != grow]
    offsets = np.zeros(len(parts), dtype=np.int64)
    at = 0
    for i in order:
        offsets[i] = at
        at += sizes[i]
    accepting = np.concatenate([parts[i].accepting for i in order] + [np.zeros(spare, dtype=bool)]).astype(bool)
    safe = np.concatenate([parts[i].safe for i in order] + [np.zeros(spare, dtype=bool)]).astype(bool)
    if grow is not None:
        table = parts[grow].transitions
        table.resize((total + spare, N_SYMBOLS), refcheck=False)
    else:
        table = np.empty((total + spare, N_SYMBOLS), dtype=np.int32)
    for i in order:
        if i != grow:
            shift_into(parts[i].transitions, table, int(offsets[i]), int(offsets[i]))
    return table, accepting, safe, offsets


def _growable(parts: list[DFA], owned: list[bool]) -> int | None:
    """The index of the largest part whose table may be grown in place, or None."""
    best = None
    for i, (p, mine) in enumerate(zip(parts, owned, strict=True)):
        t = p.transitions
        if (
            mine
            and p.stats.get(GROWABLE)
            and t.flags.owndata
            and t.flags.c_contiguous
            and t.dtype == np.int32
            and sum(q is p for q in parts) == 1
            and (best is None or p.n_states > parts[best].n_states)
        ):
            best = i
    return best


def _merge_rows(table: np.ndarray, targets: np.ndarray, row: np.ndarray) -> bool:
    """Copy ``row``'s transitions into the rows ``targets``; False (nothing changed) if any overlap."""
    if len(targets) == 0:
        return True
    rows = table[targets]
    defined = row >= 0
    if (rows[:, defined] >= 0).any():
        return False
    rows[:, defined] = row[defined]
    table[targets] = rows
    return True


def concat(parts: list[DFA], owned: list[bool] | None = None) -> DFA:
    """``parts[0] parts[1] ...``: the parts side by side, each part's ends given the next part's first
    row; where they overlap, determinized only until the two part ways (see :func:`determinize`).
    ``owned``: as :func:`_stack` reads it (an owned part's DFA is used up)."""
    if len(parts) == 1:
        return parts[0]
    table, accepting, safe, offsets = _stack(parts, owned=owned)
    entry = [int(off) + p.start for off, p in zip(offsets, parts, strict=True)]  # where each part begins
    sets = _Sets()  # the states each join below makes, kept for the joins to their left
    # Right to left, so that a part's first row already holds what follows when the part may be empty.
    for i in range(len(parts) - 2, -1, -1):
        nxt = entry[i + 1]
        ends = int(offsets[i]) + np.flatnonzero(parts[i].accepting)
        accepting[ends] = accepting[nxt]
        if _merge_rows(table, ends, table[nxt].copy()):
            safe[ends] |= safe[nxt]
            continue
        # The part may go on with what the next one starts with: each end becomes the set {end, next
        # start}, determinized until the two part ways, and every transition into an end leads there
        # (the part's own start too, when the part may be empty).
        n0 = table.shape[0]
        end_list = ends.tolist()
        entries = [frozenset((e, nxt)) for e in end_list]
        done = determinize(
            table, accepting, safe, entries, link=(frozenset(end_list), nxt), sets=sets, limit=_join_limit(n0)
        )
        assert done is not None  # no `within`
        table, accepting, safe, joined = done
        redirect = np.arange(n0, dtype=np.int32)
        redirect[ends] = joined
        head = table[:n0]
        table[:n0] = np.where(head >= 0, redirect[np.maximum(head, 0)], DEAD)
        entry[i] = int(redirect[entry[i]])
    return _raw(table, entry[0], accepting, safe)


def union(parts: list[DFA], owned: list[bool] | None = None) -> DFA:
    """``parts[0] | parts[1] | ...``: the parts side by side under one start, determinized only where
    they overlap (see :func:`determinize`). ``owned``: as :func:`_stack` reads it."""
    if len(parts) == 1:
        return parts[0]
    table, accepting, safe, offsets = _stack(parts, owned=owned)
    firsts = frozenset((offsets + np.array([p.start for p in parts], dtype=np.int64)).tolist())
    done = determinize(table, accepting, safe, [firsts], limit=_join_limit(table.shape[0]))
    assert done is not None  # no `within`: every set is read
    table, accepting, safe, (start,) = done
    return _raw(table, start, accepting, safe)


_WEIGHTS = np.random.default_rng(0x5EED).integers(1, 2**62, size=64, dtype=np.int64)


def _join_limit(n: int) -> int:
    return JOIN_GROWTH[0] * n + JOIN_GROWTH[1]


def _distinct_columns(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of ``block`` (k rows) and, per column, which one it is (columns that hold the
    same targets in another order count as distinct: they lead to the same set, so the same state).

    By a random-weight hash of each column, checked exactly (``np.unique(axis=1)`` sorts opaque
    records and cost half a millisecond a call, most of a small alternation's compile)."""
    k = block.shape[0]
    weights = _WEIGHTS[:k] if k <= len(_WEIGHTS) else np.random.default_rng(k).integers(1, 2**62, size=k)
    with np.errstate(over="ignore"):
        h = weights @ (block.astype(np.int64) + 2)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    columns = block[:, first]
    inverse = inverse.reshape(-1)
    if not np.array_equal(block, columns[:, inverse]):  # a collision: exact columns
        columns, inverse = np.unique(block, axis=1, return_inverse=True)
        inverse = inverse.reshape(-1)
    return columns, inverse


class _Unfinished(Exception):
    pass


class _JoinTooLarge(Exception):
    """A join's determinization made more states than :data:`JOIN_GROWTH` allows: the node is built by
    subset construction instead (what its own NFA gives, exact, and far smaller in the cases seen)."""


JOIN_GROWTH = (4, 4096)
"""A join of a table of n states may make up to ``4 * n + 4096`` states; past that, the node falls back.
Overlapping joins of loops can otherwise make sets by the hundred thousand where the node's own subset
construction makes a hundred (random trees found it; JSON's joins rarely overlap at all)."""


class _Sets:
    """The states :func:`determinize` made, as the sets of other states they stand for, and back.

    A set is always held flat (the states it stands for, never a made state among them): a sequence
    joined right to left meets, at each join, the states the join to its right made, and sets of
    sets would tell apart what is one state (the reference automaton of one test tree had 124 states;
    its joins made 200,000 before this)."""

    def __init__(self) -> None:
        self.members: dict[int, frozenset[int]] = {}
        self.state: dict[frozenset[int], int] = {}

    def flat(self, states: Iterable[int]) -> frozenset[int]:
        out: set[int] = set()
        for s in states:
            got = self.members.get(s)
            if got is None:
                out.add(s)
            else:
                out |= got
        return frozenset(out)


def determinize(
    table: np.ndarray,
    accepting: np.ndarray,
    safe: np.ndarray,
    entries: list[frozenset[int]],
    *,
    within: int | None = None,
    link: tuple[frozenset[int], int] | None = None,
    spare: int = 0,
    sets: _Sets | None = None,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]] | None:
    """Rows for the sets of states ``entries``, read as one state each (their union), appended to ``table``.

    Subset construction, except that a set of one state is that state's own row: the parts of an
    alternation overlap only until their strings differ (the keys of a dispatch, the members of an
    object after their separator all open with a quote), and from there each part's table serves as
    it is. Returns the new table, its flags and each entry's state; None when a set of several
    states reaches a state ``>= within`` (rows the caller has yet to finish).

    ``link=(ends, to)``: a set holding one of ``ends`` holds ``to`` as well (an epsilon move: the end
    of one part of a sequence is the start of the next, see :func:`concat`).

    ``spare``: rows more at the end of the returned table (unset, flags False), as in :func:`_stack`.

    ``sets``: the states earlier calls on this table made (see :class:`_Sets`); the new ones are added.

    ``limit``: raise :class:`_JoinTooLarge` past this many new states.

    ``table`` is grown in place when it owns its data (callers pass the tables they stacked): views of it
    taken before must not be used after. It is left as it was when None is returned or a limit raises.
    """
    n0 = table.shape[0]
    known = _Sets() if sets is None else sets
    made: list[frozenset[int]] = []
    ends, to = link if link is not None else (frozenset(), DEAD)
    to_members = known.flat([to]) if link is not None else frozenset()

    def state_of(states: frozenset[int]) -> int:
        states = known.flat(states)
        if ends and not ends.isdisjoint(states):
            states = states | to_members
        if len(states) == 1:
            return next(iter(states))
        j = known.state.get(states)
        if j is None:
            if within is not None and max(states) >= within:
                raise _Unfinished
            j = n0 + len(made)
            if limit is not None and len(made) >= limit:
                raise _JoinTooLarge
            if j >= MAX_DFA_STATES:
                raise GrammarError(f"grammar too large: more than {MAX_DFA_STATES} DFA states")
            known.state[states] = j
            known.members[j] = states
            made.append(states)
        return j

    rows: list[np.ndarray] = []
    try:
        ids = [state_of(e) for e in entries]
        i = 0
        while i < len(made):
            members = np.array(sorted(made[i]), dtype=np.int64)
            i += 1
            columns, inverse = _distinct_columns(table[members])
            targets = np.array(
                [state_of(frozenset(t for t in c if t >= 0)) if max(c) >= 0 else DEAD for c in columns.T.tolist()],
                dtype=np.int32,
            )
            rows.append(targets[inverse])
    except _Unfinished:
        return None
    if not made and not spare:
        return table, accepting, safe, ids
    size = (n0 + len(made) + spare, N_SYMBOLS)
    if table.flags.owndata and table.flags.c_contiguous and table.dtype == np.int32:
        # Every caller passes a table it allocated (stacked parts): grown in place (``realloc`` remaps a
        # large block rather than copying it; a copy was a second fresh table of a large tail's size).
        grown = table
        grown.resize(size, refcheck=False)
    else:
        grown = np.empty(size, dtype=np.int32)
        grown[:n0] = table
    for k, row in enumerate(rows):
        grown[n0 + k] = row
    flags = np.zeros(spare, dtype=bool)
    new_accepting = np.array([bool(accepting[list(st)].any()) for st in made], dtype=bool)
    new_safe = np.array([bool(safe[list(st)].any()) for st in made], dtype=bool)
    accepting = np.concatenate([accepting, new_accepting, flags])
    safe = np.concatenate([safe, new_safe, flags])
    return grown, accepting, safe, ids


def _ends_go_on_like_the_start(item: DFA) -> bool:
    """Whether an accepting state of ``item`` takes a symbol its start takes (then a repeat's copies
    cannot be joined side by side)."""
    first = item.transitions[item.start]
    return bool((item.transitions[np.flatnonzero(item.accepting)][:, first >= 0] >= 0).any())


def star(item: DFA, safe_flag: bool, owned: bool = False) -> DFA | None:
    """``item*``, or None when ``item``'s accepting states overlap its first row (checked before
    anything is built: an owned ``item`` is left as it was)."""
    if _ends_go_on_like_the_start(item):
        return None
    first = item.transitions[item.start].copy()
    ends = np.flatnonzero(item.accepting)
    table, accepting, safe, _ = _stack([item], spare=1, owned=[owned])
    _merge_rows(table, ends, first)
    safe[ends] |= safe[item.start]
    table[-1] = first
    accepting[-1] = True
    safe[-1] = safe_flag or bool(item.safe[item.start])
    return _raw(table, table.shape[0] - 1, accepting, safe)


def up_to(item: DFA, count: int, safe_flag: bool, owned: bool = False) -> DFA | None:
    """``item{0,count}`` as ``(item (item (...)?)?)?``, or None when ``item``'s accepting states overlap
    its first row (checked before anything is built)."""
    if count > 1 and _ends_go_on_like_the_start(item):
        return None
    ends = np.flatnonzero(item.accepting)
    n = item.n_states
    table, accepting, safe, offsets = _stack([item] * count, spare=1, owned=[owned] * count)
    if count > 1 and len(ends):
        # Every copy's ends take the next copy's first row: the item's first row shifted by the next
        # copy's offset (no overlap, checked above), all copies in one assignment rather than a
        # row merge per copy (a maxItems 50 array: 49 merges, 2 ms of its tail).
        first = item.transitions[item.start]
        cols = np.flatnonzero(first >= 0)
        rows = offsets[:-1, None] + ends[None, :]
        table[rows[:, :, None], cols[None, None, :]] = (first[cols][None, :] + offsets[1:, None])[:, None, :]
        safe[rows.ravel()] |= bool(item.safe[item.start])
    table[-1] = table[item.start]  # the first copy's first row, from a state that accepts
    accepting[-1] = True
    safe[-1] = safe_flag or bool(item.safe[item.start])
    assert table.shape[0] == count * n + 1
    return _raw(table, table.shape[0] - 1, accepting, safe)


def _members_table(members: list[DFA], required: list[bool], sep: DFA) -> DFA | None:
    """See :meth:`_Composer._members`; None when a join overlaps."""
    n = len(members)
    table, accepting, safe, offsets = _stack(members + [sep] * (n - 1))
    sep_at = [0] + [int(offsets[n + k - 1]) for k in range(1, n)]  # the separator copy before member k
    member_ends = [int(offsets[j]) + np.flatnonzero(m.accepting) for j, m in enumerate(members)]
    sep_ends = np.flatnonzero(sep.accepting)
    may_end = [not any(required[k:]) for k in range(n + 1)]

    def next_members(k: int) -> frozenset[int]:
        out = []
        for j in range(k, n):
            out.append(int(offsets[j]) + members[j].start)
            if required[j]:
                break
        return frozenset(out)

    accepting[:] = False
    for j in range(n):
        if j + 1 < n:
            first = sep_at[j + 1] + sep.start
            if not _merge_rows(table, member_ends[j], table[first].copy()):
                return None
            safe[member_ends[j]] |= safe[first]
        accepting[member_ends[j]] = may_end[j + 1]
    done = determinize(
        table, accepting, safe, [next_members(k) for k in range(n)], within=int(offsets[n]) if n > 1 else None, spare=1
    )
    if done is None:
        return None
    table, accepting, safe, entries = done
    for k in range(1, n):
        ends = sep_at[k] + sep_ends
        if not _merge_rows(table, ends, table[entries[k]].copy()):
            return None
        accepting[ends] = accepting[entries[k]]
        safe[ends] |= safe[entries[k]]
    table[-1] = table[entries[0]]
    accepting[-1] = may_end[0] or bool(accepting[entries[0]])
    safe[-1] = bool(safe[entries[0]])
    return _raw(table, table.shape[0] - 1, accepting, safe)


class _Composer:
    def __init__(self, references: dict[int, int], part_dfa: PartDFA) -> None:
        self.part_dfa = part_dfa
        self._cache: dict[tuple[int, bool], DFA] = {}
        self._references = references
        self._left: dict[int, int] = {}
        """id of a DFA -> how many more times it will be handed out (by every cache entry that holds it)."""
        self._held: dict[int, int] = {}
        """id of a DFA -> how many builds hold it now (taken, not yet joined into their own DFA)."""

    def build(self, node: Node, safe: bool) -> DFA:
        got, _ = self.take(node, safe)
        self._done([got])
        return got

    def take(self, node: Node, safe: bool) -> tuple[DFA, bool]:
        """``node``'s DFA, and whether the caller owns it: this was its last request and no other build
        holds it, so nobody reads it again and the caller may grow its table in place. Requests are
        counted per reference in the tree (:func:`_references`); a node built under both safe flags never
        counts as used up. Every take is matched by :meth:`_done` once the caller's own DFA is built."""
        key = (id(node), safe)
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = self._build(node, safe)
            self._left[id(got)] = self._left.get(id(got), 0) + self._references.get(id(node), 1)
        self._left[id(got)] -= 1
        self._held[id(got)] = self._held.get(id(got), 0) + 1
        return got, self._left[id(got)] <= 0 and self._held[id(got)] == 1

    def _done(self, parts: list[DFA]) -> None:
        for p in parts:
            self._held[id(p)] -= 1

    def _build(self, node: Node, safe: bool) -> DFA:
        if isinstance(node, Seq | Alt | Repeat | Members) and estimate_size(node) <= SUBSET_UP_TO:
            return subset_dfa(node, safe, self.part_dfa)
        if isinstance(node, Lit):
            n = len(node.data) + 1
            table = np.full((n, N_SYMBOLS), DEAD, dtype=np.int32)
            table[np.arange(n - 1), np.frombuffer(node.data, dtype=np.uint8)] = np.arange(1, n, dtype=np.int32)
            accepting = np.zeros(n, dtype=bool)
            accepting[-1] = True
            return _raw(table, 0, accepting, np.full(n, safe))
        if isinstance(node, Sym):
            table = np.full((2, N_SYMBOLS), DEAD, dtype=np.int32)
            table[0, indices_of_mask(node.mask)] = 1
            return _raw(table, 0, np.array([False, True]), np.full(2, safe))
        if isinstance(node, Group):
            return self.build(node.item, safe or node.safe)  # passed up as it is: held by the parent next
        if isinstance(node, Embedded):
            return _flagged(node.dfa, safe)
        if isinstance(node, Shared):
            return _flagged(self.part_dfa(node), safe)
        if isinstance(node, Avoid):
            return _flagged(self.part_dfa(node), safe)
        if isinstance(node, NotPrefixed):
            return _flagged(self.part_dfa(node), safe)
        if isinstance(node, Seq | Alt):  # an Alt may be a Dispatch: its keys differ, all open with a quote
            taken = [self.take(it, safe) for it in node.items]
            parts, owned = [d for d, _ in taken], [o for _, o in taken]
            try:
                return concat(parts, owned) if isinstance(node, Seq) else union(parts, owned)
            except _JoinTooLarge:
                return self._fallback(node, safe)
            finally:
                self._done(parts)
        if isinstance(node, Repeat):
            return self._repeat(node, safe)
        if isinstance(node, Members):
            return self._members(node, safe)
        raise GrammarError(f"unknown grammar node {type(node).__name__}")

    def _repeat(self, node: Repeat, safe: bool) -> DFA:
        item, owned = self.take(node.item, safe)
        try:
            return self._repeat_of(node, item, owned and node.lo == 0, safe)  # lo > 0: joined once more
        finally:
            self._done([item])

    def _repeat_of(self, node: Repeat, item: DFA, owned: bool, safe: bool) -> DFA:
        if node.hi is None:
            rest = star(item, safe, owned)
        elif node.hi > node.lo:
            rest = up_to(item, node.hi - node.lo, safe, owned)
        else:
            rest = _epsilon(safe)
        if rest is None:
            return self._fallback(Repeat(Embedded(item), node.lo, node.hi), safe)
        try:
            return concat([item] * node.lo + [rest], [False] * node.lo + [True])
        except _JoinTooLarge:
            return self._fallback(Repeat(Embedded(item), node.lo, node.hi), safe)

    def _members(self, node: Members, safe: bool) -> DFA:
        """Members in one table: each member's DFA once, a copy of the separator before each member but
        the first, and at each junction the members that may come next (up to the first required one),
        determinized only through their keys. What follows a member depends on the member alone."""
        members = [self.take(m, safe)[0] for m, _ in node.items]
        required = [r for _, r in node.items]
        sep = self.take(node.sep, safe)[0]
        try:
            joined = None if bool(sep.accepting[sep.start]) else _members_table(members, required, sep)
            if joined is not None:
                return joined
            embedded = tuple((Embedded(m), r) for m, r in zip(members, required, strict=True))
            return self._fallback(Members(embedded, Embedded(sep)), safe)
        finally:
            self._done([*members, sep])

    def _fallback(self, node: Node, safe: bool) -> DFA:
        return subset_dfa(node, safe, self.part_dfa)


__all__ = ["compose_dfa", "concat", "star", "union", "up_to"]
