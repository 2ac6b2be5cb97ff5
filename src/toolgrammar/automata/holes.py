"""Holes: the parts of a tree left out of its automaton (a dispatch on tool names, the rest of a long repeat),
joined in as a walk reaches them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.nodes import Alt, Dispatch, Lit, Node, Repeat, Seq, children, rewrite_tree, seq, structure_key
from toolgrammar.automata.size import LAZY_REPEAT_MARK, estimate_size, lazy_repeat

HOLE_BYTE = 0xFF
"""First byte of a hole: never part of UTF-8, so never inside a block, where every byte is UTF-8 text."""


MAX_DISPATCHES = 8
"""Distinct :class:`Dispatch` nodes a skeleton can leave out (the hole's second byte is ``0xF8 + j``)."""


def dispatch_points(dfa: DFA, n_dispatches: int) -> tuple[tuple[int, int, int], ...]:
    """Where the holes of a compiled skeleton are: ``(p, e, j)`` as :attr:`Skeleton.points` holds them."""
    t = dfa.transitions
    points = []
    for p in np.flatnonzero(t[:, HOLE_BYTE] >= 0).tolist():
        q = int(t[p, HOLE_BYTE])
        allowed = np.flatnonzero(t[q] >= 0)
        if len(allowed) == 1 and 0xF8 <= allowed[0] < 0xF8 + n_dispatches:
            j = int(allowed[0]) - 0xF8
            points.append((p, int(t[q, 0xF8 + j]), j))
    return tuple(points)


_STRUCTURE = "_lazy_structure_key"
_HOLDS = "_holds_lazy_repeat"


def _item_key(item: Node) -> str:
    memo = item.__dict__
    got = memo.get(_STRUCTURE)
    if got is None:
        got = memo[_STRUCTURE] = structure_key(item)
    return got  # type: ignore[no-any-return]


@dataclass(frozen=True, eq=False)
class RestDispatch(Dispatch):
    """The dispatch :func:`lazy_repeats` leaves for the rest of a repeat: one key (the separator's first
    byte), one tail (the next item and the rest after it)."""


def _rest(item: Seq, count: int) -> Dispatch:
    """``item{0,count}`` (``count >= 1``) as a one-branch dispatch on ``item``'s first byte, whose tail is
    the rest of one ``item`` and ``item{0,count-1}``: the next copy is built when a walk takes the key."""
    # The key is the separator's first byte: the stub sits right after it, so the first mask that needs
    # the next item is the one where a token starts with the separator (a few hundred tokens go through
    # the stub). Keyed on all of ", ", the state between its bytes let every token that starts with a
    # space through the stub: tens of thousands to trace.
    data: bytes = item.items[0].data  # type: ignore[attr-defined]
    key = data[:1]
    after_key = Seq((Lit(data[1:]), *item.items[1:])) if len(data) > 1 else Seq(item.items[1:])
    more = Repeat(item, 0, count - 1)
    tail: Node = after_key if count == 1 else Seq((after_key, more))
    # Once a repeat is built a copy at a time it stays so to its last two copies (compiling the rest whole
    # once it is small enough would be a spike at one item), and every tail whose rest is left again is the
    # same automaton (the count left lives in the dispatch): three compiles per item, whatever maxItems is.
    lazy = count - 1 >= 2
    if lazy:
        estimate_size(more)
        more.__dict__[LAZY_REPEAT_MARK] = True
    left = "lazy" if lazy else str(count - 1)
    cache_key = hashlib.sha256(f"repeat\0{_item_key(item)}\0{left}".encode()).hexdigest()
    return RestDispatch((seq(Lit(key), tail),), (key,), (tail,), (cache_key,))


def lazy_repeats(node: Node, first: int = 0) -> tuple[Node, list[Dispatch]]:
    """``node`` with each long bounded repeat (:func:`~toolgrammar.automata.size.lazy_repeat`, up to
    :data:`~toolgrammar.automata.holes.MAX_DISPATCHES` of them) written as its first ``lo`` copies and then
    either nothing or a hole (as :func:`~toolgrammar.automata.skeleton.compile_skeleton` leaves for a dispatch)
    where :func:`_rest` goes on: the tree to compile and the dispatches, in hole order (the holes numbered
    from ``first``: a skeleton's own dispatches come first). Nothing inside a repeat so replaced is visited
    (its tail is rewritten when it is compiled)."""
    dispatches: list[Dispatch] = []

    def hole(n: Node, rewrite: Callable[[Node], Node]) -> Node | None:
        j = first + len(dispatches)
        if j >= MAX_DISPATCHES or not lazy_repeat(n):
            return None
        r: Repeat = n  # type: ignore[assignment]
        dispatches.append(_rest(r.item, r.hi - r.lo))  # type: ignore[arg-type, operator]
        optional = Alt((Lit(b""), Lit(bytes([HOLE_BYTE, 0xF8 + j]))))
        return optional if r.lo == 0 else Seq((Repeat(rewrite(r.item), r.lo, r.lo), optional))

    return rewrite_tree(node, hole, plain=lambda n: not _holds_lazy_repeat(n)), dispatches


def _holds_lazy_repeat(node: Node) -> bool:
    """Whether ``node``'s subtree holds a repeat built a copy at a time (kept on the node: the tails of a
    long array's items are rewritten at every item, and their parts are shared)."""
    memo = node.__dict__
    got = memo.get(_HOLDS)
    if got is None:
        got = memo[_HOLDS] = lazy_repeat(node) or any(_holds_lazy_repeat(c) for c in children(node))
    return got  # type: ignore[no-any-return]


__all__ = ["HOLE_BYTE", "MAX_DISPATCHES", "RestDispatch", "dispatch_points", "lazy_repeats"]
