"""Skeletons: a turn's automaton with every dispatch left as a hole, compiled once per format and options."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from toolgrammar import caches
from toolgrammar.automata import skeleton_store
from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.holes import HOLE_BYTE, MAX_DISPATCHES, dispatch_points, lazy_repeats
from toolgrammar.automata.nodes import Dispatch, Lit, Node, rewrite_tree, structure_key
from toolgrammar.errors import GrammarError


@dataclass(frozen=True)
class Skeleton:
    """A DFA with each :class:`Dispatch` left out, and where the dispatches go.

    ``points`` holds ``(p, e, j)``: from state ``p`` the keys of ``dispatches[j]`` start, and after a
    key and its tail the automaton continues in state ``e``. ``p``'s transitions on :data:`HOLE_BYTE`
    are the placeholder, to be replaced.
    """

    dfa: DFA
    points: tuple[tuple[int, int, int], ...]
    dispatches: tuple[Dispatch, ...]
    key: str = ""
    """:func:`structure_key` of the tree compiled (the dispatches as holes): what the skeleton is cached by."""
    compiled: bool = True
    """Whether it was compiled by this call (not read from the process's memory, the package or the disk)."""


def compile_skeleton(node: Node, *, shipped: bool = True, disk: bool = True) -> Skeleton:
    """Compile ``node`` with every :class:`Dispatch` replaced by a hole (a two-byte placeholder).

    A skeleton depends on the format and the options only (and, in the formats whose markup spells the
    tools, on their names), so it is compiled once per process; the common ones ship with the package
    (:mod:`toolgrammar.automata.skeletons`: read instead of compiled when ``shipped``), and the others go to the
    on-disk cache under the same key (when ``disk``), one entry per skeleton, not per tool list."""
    skeleton_tree, dispatches = skeleton_parts(node)
    key = structure_key(skeleton_tree)
    with _skeletons_lock:
        hit = _skeletons.get(key)
        if hit is not None:
            _skeletons.move_to_end(key)
            return Skeleton(dfa=hit[0], points=hit[1], dispatches=tuple(dispatches), key=key, compiled=False)
    found = skeleton_store.shipped_skeleton(key, len(dispatches)) if shipped else None
    if found is None and disk:
        found = skeleton_store.cached_skeleton(key, len(dispatches))
    if found is not None:
        dfa, points = found
    else:
        dfa = compile_dfa(skeleton_tree)
        points = dispatch_points(dfa, len(dispatches))
        if disk:
            skeleton_store.save_skeleton(key, dfa, points)
    with _skeletons_lock:
        _skeletons[key] = (dfa, points)
        while len(_skeletons) > 64:
            _skeletons.popitem(last=False)
    return Skeleton(dfa=dfa, points=points, dispatches=tuple(dispatches), key=key, compiled=found is None)


def skeleton_key(node: Node) -> str:
    """The key ``node``'s skeleton is cached and shipped under (:attr:`Skeleton.key`), without compiling it."""
    return structure_key(skeleton_parts(node)[0])


def skeleton_parts(node: Node) -> tuple[Node, list[Dispatch]]:
    """The tree a skeleton compiles (each :class:`Dispatch` a hole, and each long repeat left outside them
    a hole too, :func:`toolgrammar.automata.holes.lazy_repeats`) and what the holes stand for, in hole order."""
    tree, dispatches = _skeleton_tree(node)
    tree, rests = lazy_repeats(tree, first=len(dispatches))
    return tree, [*dispatches, *rests]


def _skeleton_tree(node: Node) -> tuple[Node, list[Dispatch]]:
    """``node`` with each :class:`Dispatch` replaced by a hole, and the dispatches in hole order."""
    found: dict[int, int] = {}
    dispatches: list[Dispatch] = []

    def hole(n: Node, _rewrite: Callable[[Node], Node]) -> Node | None:
        if not isinstance(n, Dispatch):
            return None
        j = found.get(id(n))
        if j is None:
            if len(dispatches) >= MAX_DISPATCHES:
                raise GrammarError(f"more than {MAX_DISPATCHES} dispatches in one grammar")
            j = found[id(n)] = len(dispatches)
            dispatches.append(n)
        return Lit(bytes([HOLE_BYTE, 0xF8 + j]))

    return rewrite_tree(node, hole), dispatches


# A turn's skeleton depends on the format and the options, not on the tools (their names and schemas are
# in the dispatches): tool lists of one kind share it. Keyed by the skeleton tree's structure.
_skeletons: OrderedDict[str, tuple[DFA, tuple[tuple[int, int, int], ...]]] = OrderedDict()


_skeletons_lock = threading.Lock()


def _clear_skeletons() -> None:
    with _skeletons_lock:
        _skeletons.clear()


caches.register("automata.skeletons", _clear_skeletons)


def skeleton_count() -> int:
    """How many skeletons this process keeps in memory."""
    with _skeletons_lock:
        return len(_skeletons)


__all__ = ["Skeleton", "compile_skeleton", "skeleton_count", "skeleton_key", "skeleton_parts"]
