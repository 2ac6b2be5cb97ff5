"""The one compile entry: a tree to a pruned DFA (:func:`compile_dfa`), and the parts compiled once per node."""

from __future__ import annotations

import weakref

from toolgrammar import caches
from toolgrammar.automata.compose import GROWABLE, compose_dfa
from toolgrammar.automata.dfa import DFA, product_avoiding, product_not_prefixed, prune
from toolgrammar.automata.nodes import Avoid, Node, NotPrefixed, Shared
from toolgrammar.automata.subset import subset_dfa
from toolgrammar.errors import GrammarError

_shared_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()


_avoid_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()


_not_prefixed_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()


def _clear_parts() -> None:
    for cache in (_shared_dfas, _avoid_dfas, _not_prefixed_dfas):
        cache.clear()


caches.register("automata.parts", _clear_parts)


def part_dfa(node: Node) -> DFA:
    """The DFA of a part embedded as it is (:class:`Shared`, :class:`Avoid`, :class:`NotPrefixed`), compiled
    once per node: what subset construction and composition are handed
    (:data:`~toolgrammar.automata.subset.PartDFA`)."""
    if isinstance(node, Shared):
        return shared_dfa(node)
    if isinstance(node, Avoid):
        return avoid_dfa(node)
    if isinstance(node, NotPrefixed):
        return not_prefixed_dfa(node)
    raise GrammarError(f"{type(node).__name__} is not a part compiled on its own")


def reference_dfa(node: Node, safe: bool = False) -> DFA:
    """Subset construction over the whole tree (unpruned): the reference the composed automaton is tested against."""
    return subset_dfa(node, safe, part_dfa)


def shared_dfa(node: Shared) -> DFA:
    """The minimal DFA of a :class:`Shared` node's language, compiled once per node in this process."""
    dfa = _shared_dfas.get(node)
    if dfa is None:
        dfa = _shared_dfas[node] = compile_dfa(node.item)
    return dfa


def avoid_dfa(node: Avoid) -> DFA:
    """An :class:`Avoid` node's DFA (its item run beside an Aho-Corasick guard), once per node."""
    dfa = _avoid_dfas.get(node)
    if dfa is None:
        dfa = _avoid_dfas[node] = product_avoiding(compile_dfa(node.item), node.words)
    return dfa


def not_prefixed_dfa(node: NotPrefixed) -> DFA:
    """A :class:`NotPrefixed` node's DFA, once per node."""
    dfa = _not_prefixed_dfas.get(node)
    if dfa is None:
        dfa = _not_prefixed_dfas[node] = product_not_prefixed(compile_dfa(node.item), node.word)
    return dfa


def compile_dfa(node: Node, *, minimize: bool = True, compose: bool = True) -> DFA:
    """Compile an expression tree into a pruned DFA.

    The tree is compiled bottom-up by :func:`toolgrammar.automata.compose.compose_dfa` (parts joined as
    tables where the join stays deterministic, subset construction only where it does not);
    ``compose=False`` runs subset construction over the whole tree (:func:`subset_dfa`), the reference
    the composed automaton is tested against.

    ``minimize=False`` keeps equivalent states apart: for an automaton walked along a single path (a tool's
    arguments in a turn) the states a walk visits, not the states that exist, cost masks, and merging was
    a third to two thirds of a tail's compile (see :func:`toolgrammar.automata.lazy.tail_dfa`)."""
    if compose:
        raw = compose_dfa(node, part_dfa)
        owned = bool(raw.stats.get(GROWABLE))
    else:
        raw = subset_dfa(node, False, part_dfa)
        owned = False
    return prune(
        raw.transitions,
        raw.start,
        raw.accepting,
        raw.safe,
        nfa_states=int(raw.stats.get("nfa_states", raw.n_states)),
        minimize=minimize,
        in_place=owned,  # a table compose allocated is held by nothing but ``raw``, which ends here
    )


__all__ = ["avoid_dfa", "compile_dfa", "not_prefixed_dfa", "part_dfa", "reference_dfa", "shared_dfa"]
