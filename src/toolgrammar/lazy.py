"""The automaton the engine walks, built only as far as generation goes.

A turn grammar's automaton is mostly its tools' arguments, and a turn visits one or two tools.
So the engine starts from the turn's *skeleton* (:func:`toolgrammar.automaton.compile_skeleton`:
markers, free text, reasoning; every :class:`~toolgrammar.automaton.Dispatch` left out), spells each
dispatch's keys (the tools' names) as a trie of plain rows, and ends every key in a *stub*: a state
whose tail (the tool's arguments and what closes the call) is not built yet. A stub's row leads
every symbol to :attr:`LazyAutomaton.trap`, so a token walk that would go *through* a stub ends in
the trap, which the engine notices: it then builds that tail (:meth:`LazyAutomaton.expand`: compile
once per distinct schema and options, process-wide, see :func:`tail_dfa`; append its rows; join its
accepting states to the state that follows the dispatch) and walks again. A token that ends *on* a
stub needs nothing yet.

What stays exact: the language. Every tail is the same DFA the whole-turn compile would embed, the
trie spells exactly the keys, and the joins are checked to be deterministic (a conflict raises
rather than merge). The budget bound (:class:`toolgrammar.engine.TokenGrammar`) counts each stub's
tail as its shortest string (:func:`~toolgrammar.automaton.shortest_witness`) cut into real tokens,
an upper bound on its true cost; a built tail's states are bounded from the tail alone and the states
it leads back to, and no earlier bound changes, so nothing depends on the order tails were built in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from .automaton import DEAD, DFA, HOLE_BYTE, N_SYMBOLS, Node, Skeleton, compile_dfa, shift_into, shortest_witness
from .errors import GrammarError

if TYPE_CHECKING:
    from .tools import Tool

MAX_CACHED_TAILS = 1024
"""Compiled tails kept process-wide (least recently used out)."""
MAX_CACHED_TAIL_BYTES = 256 * 2**20
"""And at most this many bytes of them: a tail may hold thousands of 1 KiB rows, so a count alone does not
bound the cache (the tail just built is always kept, whatever its size)."""

_tails: OrderedDict[str, DFA] = OrderedDict()
_tails_bytes = 0
_tails_lock = threading.Lock()


def _nbytes(dfa: DFA) -> int:
    return int(dfa.transitions.nbytes + dfa.accepting.nbytes + dfa.safe.nbytes)


def schema_tail_key(shape: list[object], tool: Tool) -> str:
    """The cache key of ``tool``'s tail: ``shape`` (JSON data: the format and the options that shape its
    values) and the tool's arguments schema as :attr:`~toolgrammar.tools.Tool.schema_json` spells it.

    That spelling keeps the properties in their order: a call writes them in that order, so two schemas
    that differ only in it have two tails (a key that sorted them made the second list walk the first
    list's order).
    """
    return hashlib.sha256(f"{_shape_text(tuple(shape))}\0{tool.schema_json}".encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _shape_text(shape: tuple[object, ...]) -> str:
    # Every tool of a list has the same shape: spelled once, not once per tool.
    return json.dumps(list(shape), ensure_ascii=False, separators=(",", ":"))


def tail_dfa(key: str, node: Node) -> DFA:
    """The DFA of a dispatch tail, compiled once per ``key`` (schema and options) in this process."""
    with _tails_lock:
        dfa = _tails.get(key)
        if dfa is not None:
            _tails.move_to_end(key)
            return dfa
    # Tails are not minimized: a turn walks one path through a tail, so the states that exist cost rows,
    # not masks. Merging them was a third to two thirds of a tail's compile (nested: 6.7 ms against 4.3 ms;
    # bounded arrays: 7.1 against 4.4), for 20-50% fewer rows; per-token costs after warm-up did not change
    # (bench/anchors.py).
    dfa = compile_dfa(node, minimize=False)
    global _tails_bytes
    with _tails_lock:
        old = _tails.pop(key, None)  # another thread built it meanwhile: replaced, counted once
        _tails_bytes += _nbytes(dfa) - (_nbytes(old) if old is not None else 0)
        _tails[key] = dfa
        while len(_tails) > 1 and (len(_tails) > MAX_CACHED_TAILS or _tails_bytes > MAX_CACHED_TAIL_BYTES):
            _tails_bytes -= _nbytes(_tails.popitem(last=False)[1])
    return dfa


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
        self.stubs: dict[int, tuple[int, int, int]] = {}
        """stub state -> (state after the dispatch, dispatch index, branch index)."""
        self.expanded: dict[int, tuple[int, int, int]] = {}
        """Built stubs, as :attr:`stubs` held them."""
        src: list[int] = []
        sym: list[int] = []
        dst: list[int] = []
        n = n0 + 1  # after the trap
        root_rows: dict[int, dict[int, int]] = {}
        for p, e, j in skeleton.points:
            d = skeleton.dispatches[j]
            root = root_rows.setdefault(p, {})
            children: dict[tuple[int, int], int] = {}
            for b, key in enumerate(d.keys):
                cur = p
                for i, x in enumerate(key):
                    last = i == len(key) - 1
                    if cur == p:
                        nxt = root.get(x)
                        if nxt is None:
                            nxt = n
                            n += 1
                            root[x] = nxt
                    else:
                        nxt = children.get((cur, x))
                        if nxt is None:
                            nxt = n
                            n += 1
                            children[(cur, x)] = nxt
                            src.append(cur)
                            sym.append(x)
                            dst.append(nxt)
                    if last:
                        if nxt in self.stubs:  # pragma: no cover - keys are checked prefix-free
                            raise GrammarError(f"dispatch key {key!r} repeats")
                        self.stubs[nxt] = (e, j, b)
                    cur = nxt
        # Rows live in a buffer with room to spare: a tail is appended in place, and the old rows are never
        # copied for it (a copy held the table twice at the peak). Rows not written yet are never touched,
        # so the spare room costs address space, not resident memory.
        self._buffer = np.empty((n + 1 + _spare_rows(n), N_SYMBOLS), dtype=np.int32)
        t = self._buffer[: n + 1]
        t[...] = DEAD
        t[:n0] = dfa.transitions
        t[self.trap] = self.trap
        for p, root in root_rows.items():
            t[p, HOLE_BYTE] = DEAD
            for x, nxt in root.items():
                if t[p, x] >= 0:
                    raise GrammarError(f"a dispatch key starts with byte {x:#x}, which state {p} already takes")
                t[p, x] = nxt
        if src:
            t[np.array(src), np.array(sym)] = np.array(dst, dtype=np.int32)
        stub_ids = np.fromiter(self.stubs, dtype=np.int64, count=len(self.stubs))
        t[stub_ids] = self.trap
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
            if w is None or len(d.keys) == 1:  # one tool (a named one): the turn will use it, build it now
                self.expand(stub)
            else:
                self.witnesses[stub] = w

    @property
    def n_states(self) -> int:
        """States, the trap included (the dead row excluded)."""
        return int(self.transitions.shape[0]) - 1

    def expand(self, stub: int) -> bool:
        """Build the tail behind ``stub`` (False if it was built already)."""
        with self._lock:
            info = self.stubs.get(stub)
            if info is None:
                return False
            e, j, b = info
            d = self.skeleton.dispatches[j]
            tail = tail_dfa(d.cache_keys[b], d.tails[b])
            off = self.n_states
            size = off + tail.n_states + 1
            if size > self._buffer.shape[0]:  # out of room: a new buffer, the old rows copied once
                grown = np.empty((size + _spare_rows(size), N_SYMBOLS), dtype=np.int32)
                grown[: off + 1] = self._buffer[: off + 1]
                self._buffer = grown
            # The tail goes where the dead row was, and the dead row moves to the new end; the rows before
            # are never copied for it (a copy held the table twice at the peak). Old views are read under
            # the engine's lock only, and no walk reads the dead row (it stops at DEAD).
            buffer = self._buffer
            rows = buffer[off : off + tail.n_states]
            shift_into(tail.transitions, buffer, off, off)
            e_row = buffer[e]
            ends = np.flatnonzero(tail.accepting)
            clash = (rows[ends] >= 0) & (e_row >= 0)
            if clash.any():
                buffer[off] = DEAD  # refused: the automaton stays as it was
                raise GrammarError(
                    f"dispatch tail {b} ({d.keys[b]!r}) may continue where the grammar after it starts "
                    f"(symbol {int(np.flatnonzero(clash.any(axis=0))[0])}): the tail is not prefix-free"
                )
            rows[ends] = np.where(rows[ends] >= 0, rows[ends], e_row)
            accepting = tail.accepting & bool(self.accepting[e])
            safe = tail.safe | (tail.accepting & bool(self.safe[e]))
            buffer[size - 1] = DEAD
            buffer[stub] = rows[tail.start]
            grown = buffer[:size]
            self.accepting = np.concatenate([self.accepting, accepting])
            self.safe = np.concatenate([self.safe, safe])
            if tail.accepting[tail.start]:
                self.accepting[stub] = bool(self.accepting[e])
            self.expanded[stub] = self.stubs.pop(stub)
            self.witnesses.pop(stub, None)
            self.transitions = grown
            return True

    def stub_on_path(self, state: int, symbols: np.ndarray) -> int | None:
        """The first stub a walk of ``symbols`` from ``state`` passes through (before its last symbol)."""
        t = self.transitions
        cur = state
        for x in symbols.tolist():
            if cur in self.stubs:
                return cur
            cur = int(t[cur, x])
            if cur < 0:
                return None
        return None


__all__ = [
    "MAX_CACHED_TAILS",
    "MAX_CACHED_TAIL_BYTES",
    "LazyAutomaton",
    "cached_tail_bytes",
    "clear_tail_cache",
    "schema_tail_key",
    "tail_dfa",
]
