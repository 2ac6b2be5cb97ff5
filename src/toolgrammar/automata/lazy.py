"""The automaton the engine walks, built only as far as generation goes.

A turn grammar's automaton is mostly its tools' arguments, and a turn visits one or two tools.
So the engine starts from the turn's *skeleton* (:func:`toolgrammar.automata.skeleton.compile_skeleton`:
markers, free text, reasoning; every :class:`~toolgrammar.automata.nodes.Dispatch` left out), spells each
dispatch's keys (the tools' names) as a trie of plain rows, and ends every key in a *stub*: a state
whose tail (the tool's arguments and what closes the call) is not built yet. A stub's row leads
every symbol to :attr:`LazyAutomaton.trap`, so a token walk that would go *through* a stub ends in
the trap, which the engine notices: it then builds that tail (:meth:`LazyAutomaton.expand`: compile
once per distinct schema and options, process-wide, see :func:`tail_dfa`; append its rows; join its
accepting states to the state that follows the dispatch) and walks again. A token that ends *on* a
stub needs nothing yet.

Inside a tail (or a skeleton, where a format writes a tool's arguments without a dispatch), a long
bounded repeat (an array's further items under ``maxItems``, estimated whole past
:data:`~toolgrammar.automata.size.LAZY_REPEAT_FROM`) is left unbuilt the same way (:func:`lazy_repeats`): the
separator's first byte is the key of a one-branch dispatch whose tail is one more item and the rest of the
repeat, so a walk builds the items it writes, one at a time, instead of all ``maxItems`` copies up front.
Those tails share one compiled automaton per item (the count left is in the dispatch, not in the
automaton) down to the last two copies.

What stays exact: the language. Every tail is the same DFA the whole-turn compile would embed, the
trie spells exactly the keys, and the joins are checked to be deterministic (a conflict raises
rather than merge). The budget bound (:class:`toolgrammar.runtime.token_grammar.TokenGrammar`) counts each stub's
tail as its shortest string (:func:`~toolgrammar.automata.nodes.shortest_witness`) cut into real tokens,
an upper bound on its true cost; a built tail's states are bounded from the tail alone and the states
it leads back to, and no earlier bound changes, so nothing depends on the order tails were built in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from toolgrammar import caches
from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA, shift_into
from toolgrammar.automata.holes import HOLE_BYTE, RestDispatch, dispatch_points, lazy_repeats
from toolgrammar.automata.nodes import DEAD, N_SYMBOLS, Dispatch, Node, shortest_witness
from toolgrammar.automata.skeleton import Skeleton
from toolgrammar.errors import GrammarError

MAX_CACHED_TAILS = 1024
"""Compiled tails kept process-wide (least recently used out)."""
MAX_CACHED_TAIL_BYTES = 256 * 2**20
"""And at most this many bytes of them: a tail may hold thousands of 1 KiB rows, so a count alone does not
bound the cache (the tail just built is always kept, whatever its size)."""


_tails: OrderedDict[str, Tail] = OrderedDict()
_tails_bytes = 0
_tails_lock = threading.Lock()


@dataclass(frozen=True)
class Tail:
    """A compiled tail: its automaton, with a hole where each long repeat inside it goes on (see
    :func:`lazy_repeats`)."""

    dfa: DFA
    points: tuple[tuple[int, int, int], ...]
    """``(p, e, j)`` in the tail's numbering: from ``p`` the keys of ``dispatches[j]`` start, and after one
    the tail continues in ``e`` (as :attr:`~toolgrammar.automata.skeleton.Skeleton.points`)."""
    dispatches: tuple[Dispatch, ...]


def _nbytes(tail: Tail) -> int:
    dfa = tail.dfa
    return int(dfa.transitions.nbytes + dfa.accepting.nbytes + dfa.safe.nbytes)


def schema_tail_key(shape: list[object], schema_json: str) -> str:
    """The cache key of a tool's tail: ``shape`` (JSON data: the format and the options that shape its
    values) and the tool's arguments schema as ``Tool.schema_json`` spells it (``schema_json``).

    That spelling keeps the properties in their order: a call writes them in that order, so two schemas
    that differ only in it have two tails (a key that sorted them made the second list walk the first
    list's order).
    """
    return hashlib.sha256(f"{_shape_text(tuple(shape))}\0{schema_json}".encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _shape_text(shape: tuple[object, ...]) -> str:
    # Every tool of a list has the same shape: spelled once, not once per tool.
    return json.dumps(list(shape), ensure_ascii=False, separators=(",", ":"))


def tail_dfa(key: str, node: Node) -> Tail:
    """A dispatch tail compiled (its long repeats left as holes, :func:`lazy_repeats`), once per ``key``
    (schema and options) in this process."""
    with _tails_lock:
        hit = _tails.get(key)
        if hit is not None:
            _tails.move_to_end(key)
    if hit is not None and not hit.dispatches:  # no holes: nothing of this call's tree is needed
        return hit
    tree, dispatches = lazy_repeats(node)
    if hit is not None:  # the same automaton; the dispatches are this tree's (the counts left differ)
        return Tail(hit.dfa, hit.points, tuple(dispatches))
    # Tails are not minimized: a turn walks one path through a tail, so the states that exist cost rows,
    # not masks. Merging them was a third to two thirds of a tail's compile (nested: 6.7 ms against 4.3 ms;
    # bounded arrays: 7.1 against 4.4), for 20-50% fewer rows; per-token costs after warm-up did not change
    # (bench/anchors.py).
    dfa = compile_dfa(tree, minimize=False)
    tail = Tail(dfa, dispatch_points(dfa, len(dispatches)) if dispatches else (), tuple(dispatches))
    global _tails_bytes
    with _tails_lock:
        old = _tails.pop(key, None)  # another thread built it meanwhile: replaced, counted once
        _tails_bytes += _nbytes(tail) - (_nbytes(old) if old is not None else 0)
        _tails[key] = tail
        while len(_tails) > 1 and (len(_tails) > MAX_CACHED_TAILS or _tails_bytes > MAX_CACHED_TAIL_BYTES):
            _tails_bytes -= _nbytes(_tails.popitem(last=False)[1])
    return tail


def cached_tail_bytes() -> int:
    """Bytes held by the process-wide tail cache (at most :data:`MAX_CACHED_TAIL_BYTES`, or one tail)."""
    return _tails_bytes


def _spare_rows(n: int) -> int:
    """Rows reserved past ``n`` for tails to come: as many again, at least 4,096 (4 MiB of address space)."""
    return max(n, 4096)


def clear_tail_cache() -> None:
    global _tails_bytes
    with _tails_lock:
        _tails.clear()
        _tails_bytes = 0


caches.register("automata.tails", clear_tail_cache)


def _spell_keys(
    points: list[tuple[int, int, int, tuple[bytes, ...]]], n: int, *, shared: bool = False
) -> tuple[list[int], list[int], list[int], dict[int, tuple[int, int, int]], int]:
    """The rows that spell each point's keys as a trie from its state ``p``, numbered from ``n``: edges
    ``(src, sym, dst)``, the stub each key ends in (``stub -> (e, j, branch)``), and the next free row.

    ``shared``: points with the same dispatch and the same state after it share one trie and its stubs
    (a repeat's hole follows every state that may end an item: the digits of a number, say; one next item
    serves them all, where a trie each would build that item once per state, and its next once per state
    of each, and so on)."""
    src: list[int] = []
    sym: list[int] = []
    dst: list[int] = []
    stubs: dict[int, tuple[int, int, int]] = {}
    roots: dict[object, dict[int, int]] = {}
    for p, e, j, keys in points:
        group = (e, j) if shared else p
        known = group in roots
        root = roots.setdefault(group, {})
        if known and shared:  # the trie exists: p only joins its first rows
            for x, nxt in root.items():
                src.append(p)
                sym.append(x)
                dst.append(nxt)
            continue
        children: dict[tuple[int, int], int] = {}
        for b, key in enumerate(keys):
            cur = p
            for i, x in enumerate(key):
                nxt = root.get(x) if cur == p else children.get((cur, x))
                if nxt is None:
                    nxt = n
                    n += 1
                    if cur == p:
                        root[x] = nxt
                    else:
                        children[(cur, x)] = nxt
                    src.append(cur)
                    sym.append(x)
                    dst.append(nxt)
                if i == len(key) - 1:
                    if nxt in stubs:  # pragma: no cover - keys are checked prefix-free
                        raise GrammarError(f"dispatch key {key!r} repeats")
                    stubs[nxt] = (e, j, b)
                cur = nxt
    return src, sym, dst, stubs, n


def _write_tries(
    t: np.ndarray,
    points: list[tuple[int, int, int, tuple[bytes, ...]]],
    src: list[int],
    sym: list[int],
    dst: list[int],
    stubs: dict[int, tuple[int, int, int]],
    trap: int,
) -> None:
    """Put :func:`_spell_keys`' rows into ``t`` (the new rows already DEAD): each point's hole goes, its
    keys start where it was, and every stub leads to ``trap``. A key whose first byte the point's state
    already takes is refused."""
    starts = {p for p, _e, _j, _k in points}
    for p in starts:
        t[p, HOLE_BYTE] = DEAD
    for s, x in zip(src, sym, strict=True):
        if s in starts and t[s, x] >= 0:
            raise GrammarError(f"a dispatch key starts with byte {x:#x}, which state {s} already takes")
    if src:
        t[np.array(src), np.array(sym)] = np.array(dst, dtype=np.int32)
    if stubs:
        t[np.fromiter(stubs, dtype=np.int64, count=len(stubs))] = trap


class LazyAutomaton:
    """Rows, flags and stubs of a turn automaton that grows as tails are built.

    ``transitions`` always ends with the dead row (index ``-1``), as the engine's walks need.
    State ids never change: rows are only appended, and a stub's row is replaced when it expands.
    """

    def __init__(self, skeleton: Skeleton):
        self.skeleton = skeleton
        dfa = skeleton.dfa
        n0 = dfa.n_states
        self.start = dfa.start
        self.trap = n0
        self.dispatches: list[Dispatch] = list(skeleton.dispatches)
        """What the ``j`` of a stub stands for: the skeleton's dispatches, then those of long repeats inside
        the tails built so far (:func:`lazy_repeats`)."""
        self.stubs: dict[int, tuple[int, int, int]] = {}
        """stub state -> (state after the dispatch, dispatch index, branch index)."""
        self.expanded: dict[int, tuple[int, int, int]] = {}
        """Built stubs, as :attr:`stubs` held them."""
        self.root_of: dict[int, int] = {}
        """A stub inside a tail (a long repeat's next item) -> the skeleton stub whose tool it belongs to."""
        points = [(p, e, j, skeleton.dispatches[j].keys) for p, e, j in skeleton.points]
        src, sym, dst, stubs, n = _spell_keys(points, n0 + 1)  # after the trap
        # Rows live in a buffer with room to spare: a tail is appended in place, and the old rows are never
        # copied for it (a copy held the table twice at the peak). Rows not written yet are never touched,
        # so the spare room costs address space, not resident memory.
        self._buffer = np.empty((n + 1 + _spare_rows(n), N_SYMBOLS), dtype=np.int32)
        t = self._buffer[: n + 1]
        t[...] = DEAD
        t[:n0] = dfa.transitions
        t[self.trap] = self.trap
        _write_tries(t, points, src, sym, dst, stubs, self.trap)
        self.stubs.update(stubs)
        self.transitions = t
        self.accepting = np.zeros(n, dtype=bool)
        self.accepting[:n0] = dfa.accepting
        self.safe = np.zeros(n, dtype=bool)
        self.safe[:n0] = dfa.safe
        self._lock = threading.Lock()
        self.witnesses: dict[int, bytes] = {}
        """stub state -> a shortest string of its tail (tails without a simple one are built at once)."""
        for stub, (_e, j, b) in list(self.stubs.items()):
            d = skeleton.dispatches[j]
            w = shortest_witness(d.tails[b])
            # One tool (a named one): the turn will use it, build it now. (Not the rest of a long repeat the
            # skeleton holds, whose point is to be built when reached.)
            if w is None or (len(d.keys) == 1 and not isinstance(d, RestDispatch)):
                self.expand(stub)
            else:
                self.witnesses[stub] = w

    @property
    def n_states(self) -> int:
        """States, the trap included (the dead row excluded)."""
        return int(self.transitions.shape[0]) - 1

    def expand(self, stub: int) -> tuple[int, ...] | None:
        """Build the tail behind ``stub``: the stubs its long repeats left (see :func:`lazy_repeats`), or
        None if it was built already."""
        with self._lock:
            info = self.stubs.get(stub)
            if info is None:
                return None
            e, j, b = info
            d = self.dispatches[j]
            tail = tail_dfa(d.cache_keys[b], d.tails[b])
            dfa = tail.dfa
            off = self.n_states
            first_j = len(self.dispatches)
            points = [(off + p, off + q, first_j + k, tail.dispatches[k].keys) for p, q, k in tail.points]
            src, sym, dst, new_stubs, end = _spell_keys(points, off + dfa.n_states, shared=True)
            size = end + 1
            if size > self._buffer.shape[0]:  # out of room: a new buffer, the old rows copied once
                grown = np.empty((size + _spare_rows(size), N_SYMBOLS), dtype=np.int32)
                grown[: off + 1] = self._buffer[: off + 1]
                self._buffer = grown
            # The tail goes where the dead row was, and the dead row moves to the new end; the rows before
            # are never copied for it (a copy held the table twice at the peak). Old views are read under
            # the engine's lock only, and no walk reads the dead row (it stops at DEAD).
            buffer = self._buffer
            rows = buffer[off : off + dfa.n_states]
            shift_into(dfa.transitions, buffer, off, off)
            try:
                if new_stubs:
                    buffer[off + dfa.n_states : end] = DEAD
                    _write_tries(buffer, points, src, sym, dst, new_stubs, self.trap)
                e_row = buffer[e]
                ends = np.flatnonzero(dfa.accepting)
                clash = (rows[ends] >= 0) & (e_row >= 0)
                if clash.any():
                    raise GrammarError(
                        f"dispatch tail {b} ({d.keys[b]!r}) may continue where the grammar after it starts "
                        f"(symbol {int(np.flatnonzero(clash.any(axis=0))[0])}): the tail is not prefix-free"
                    )
            except GrammarError:
                buffer[off] = DEAD  # refused: the automaton stays as it was
                raise
            rows[ends] = np.where(rows[ends] >= 0, rows[ends], e_row)
            more = end - off - dfa.n_states
            accepting = np.concatenate([dfa.accepting & bool(self.accepting[e]), np.zeros(more, dtype=bool)])
            safe = np.concatenate([dfa.safe | (dfa.accepting & bool(self.safe[e])), np.zeros(more, dtype=bool)])
            buffer[end] = DEAD
            buffer[stub] = rows[dfa.start]
            self.accepting = np.concatenate([self.accepting, accepting])
            self.safe = np.concatenate([self.safe, safe])
            if dfa.accepting[dfa.start]:
                self.accepting[stub] = bool(self.accepting[e])
            self.dispatches.extend(tail.dispatches)
            root = self.root_of.get(stub, stub)
            for s, (_e, k, c) in new_stubs.items():
                w = shortest_witness(self.dispatches[k].tails[c])
                if w is None:  # pragma: no cover - lazy_repeats only leaves repeats with a plain shortest string
                    raise GrammarError(f"a repeat left unbuilt has no plain shortest string (dispatch {k})")
                self.witnesses[s] = w
                self.root_of[s] = root
            self.stubs.update(new_stubs)
            self.expanded[stub] = self.stubs.pop(stub)
            self.witnesses.pop(stub, None)
            self.transitions = buffer[:size]
            return tuple(new_stubs)


__all__ = [
    "MAX_CACHED_TAILS",
    "MAX_CACHED_TAIL_BYTES",
    "LazyAutomaton",
    "Tail",
    "cached_tail_bytes",
    "clear_tail_cache",
    "schema_tail_key",
    "tail_dfa",
]
