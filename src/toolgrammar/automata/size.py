"""The size of a tree's automaton, estimated before any construction, and the long repeats built a copy at a time."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from toolgrammar.automata.nodes import (
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
    nodes_of,
    shortest_witness,
)
from toolgrammar.errors import GrammarError

MAX_ESTIMATED_SIZE = 12_000
"""Largest :func:`estimate_size` accepted for one part of a tool's schema: ``json_grammar`` checks each
part as it builds it (before any automaton is built), so a refusal takes milliseconds and names the
smallest part that is too large.

Measured on a whole turn (which compiles each block about three times), compile time grows by about
0.25 ms (hermes) to 0.75 ms (qwen-xml) and memory by about 40 kB per unit, so a schema at the limit
compiles in a few seconds (qwen-xml: under ten) and under 700 MB. Every bundled and tested tool set
estimates at about 5,000 or less (the largest: two free-form values under qwen-xml, flexible whitespace
and ``escape_markers``); the shapes that exploded estimate at 37,000 (200 optional
properties, qwen-xml) to 400,000 (``maxItems`` 200 of 3-property objects)."""


LAZY_REPEAT_FROM = 8_192
"""A bounded repeat estimated at more than this, built whole, is built a copy at a time instead, when a
walk reaches each (:func:`toolgrammar.automata.holes.lazy_repeats`; its estimate is then its ``minItems`` copies and
one more). Building a copy then costs about a millisecond, what compiling a few hundred states up front
does, so the repeats that stay whole are the ones that compile in tens of milliseconds."""


LAZY_REPEAT_MARK = "_lazy_repeat"
"""Set on a :class:`Repeat` that :func:`estimate_size` counted as built a copy at a time."""


def _lazy_shape(node: Repeat) -> bool:
    """Whether ``node`` can be built a copy at a time: bounded, at least two copies optional, each copy
    opening with a literal (an array's separator: the key of the copy's stub) and with a plain shortest
    string (the stub's weight in the budget bound)."""
    item = node.item
    return (
        node.hi is not None
        and node.hi - node.lo >= 2
        and type(item) is Seq
        and type(item.items[0]) is Lit
        and bool(item.items[0].data)
        and shortest_witness(item) is not None
    )


def lazy_repeat(node: Node) -> bool:
    """Whether ``node`` is a repeat built a copy at a time (see :data:`LAZY_REPEAT_FROM`)."""
    if type(node) is not Repeat:
        return False
    estimate_size(node)
    return bool(node.__dict__.get(LAZY_REPEAT_MARK))


def lazy_repeats_in(node: Node) -> list[Repeat]:
    """The repeats of ``node`` (dispatched tails included) that are built a copy at a time."""
    return [n for n in nodes_of(node, below=lambda n: not lazy_repeat(n)) if lazy_repeat(n)]  # type: ignore[misc]


_REPEAT_ROUNDS = 8
"""A bounded repeat of more copies than this counts ``copies / _REPEAT_ROUNDS`` times its states (see
:func:`estimate_size`; measured: ``maxItems`` 10/20/40 of a 3-property object compile in 0.43/1.56/5.78 s)."""


_SET_WORK_PER_STATE = 32
"""NFA states held in undecided DFA states that cost as much as one DFA state (measured: 400 optional
booleans take 3.4 s and 400 MB, 400 required ones 1.0 s and 200 MB)."""


_ESTIMATE = "_estimate_size"
"""The attribute a node's :func:`estimate_size` is kept in (in the node's ``__dict__``: the nodes are frozen,
and a process-wide weak mapping cost a weak reference and a Python-level lookup per call, ~10% of a large
tool list's compile)."""


def estimate_size(node: Node) -> int:
    """An estimate of the automaton states ``node`` costs to compile, from the tree alone (linear time).

    Roughly an upper bound on its NFA states where the DFA follows the NFA, and on its DFA states where
    a structure is known to blow up in the subset construction:

    - a literal counts its bytes, a symbol 1, a sequence or an alternative the sum of its parts;
    - a bounded ``Repeat`` is built as ``hi`` copies of its item (``lo + 1`` when unbounded), so nested
      bounded repeats multiply (arrays with ``maxItems`` inside arrays);
    - ``Members`` counts each member and separator once, plus, for every pair (a position, a later
      member reachable from it by skipping only optional members), the states the DFA needs to tell
      that member apart from the other candidates: the separator and the prefix its key shares with
      another key. All-optional members give n^2/2 pairs: the subset construction's real blow-up;
    - ``Avoid`` and ``NotPrefixed`` (products with a small guard automaton) add the guard's states;
    - ``Shared`` is compiled once and embedded minimized: each distinct shared part inside it counts once.

    Results are memoized per node, so checking every part of a schema as it is built stays linear.
    """
    memo = node.__dict__
    got = memo.get(_ESTIMATE)
    if got is None:
        got = memo[_ESTIMATE] = _estimate(node, estimate_size)
    return got


def _estimate(node: Node, sub: Callable[[Node], int]) -> int:
    """One level of :func:`estimate_size`; ``sub`` estimates the children."""
    kind = type(node)  # the common kinds first, by exact type (a chain of isinstance was a tenth of a compile)
    if kind is Lit:
        return len(node.data)  # type: ignore[attr-defined]
    if kind is Seq:
        return sum(map(sub, node.items))  # type: ignore[attr-defined]
    if kind is Members:
        return _estimate_members(node, sub)  # type: ignore[arg-type]
    if isinstance(node, Lit):
        return len(node.data)
    if isinstance(node, Sym):
        return 1
    if isinstance(node, Seq):
        return sum(sub(it) for it in node.items)
    if isinstance(node, Alt):
        return 1 + sum(sub(it) for it in node.items)
    if isinstance(node, Repeat):
        copies = node.lo + 1 if node.hi is None else node.hi
        item = sub(node.item)
        # Long bounded repeats cost more than their states: copy i and copy i+1 differ only by how
        # many items are left, so minimization needs rounds in proportion to the copies too.
        whole = 1 + copies * item * max(_REPEAT_ROUNDS, copies) // _REPEAT_ROUNDS
        if whole > LAZY_REPEAT_FROM and _lazy_shape(node):
            # Built a copy at a time as a walk reaches it (toolgrammar.automata.holes.lazy_repeats): the lo copies
            # every walk needs, then one more and a hole.
            node.__dict__[LAZY_REPEAT_MARK] = True
            return 2 + (node.lo + 1) * item
        return whole
    if isinstance(node, Group):
        return sub(node.item)
    if isinstance(node, Avoid):
        return sub(node.item) + sum(len(w) for w in node.words)
    if isinstance(node, NotPrefixed):
        return sub(node.item) + len(node.word)
    if isinstance(node, Shared):
        return _estimate_shared(node)
    if isinstance(node, Members):
        return _estimate_members(node, sub)
    raise GrammarError(f"unknown grammar node {type(node).__name__}")


def _estimate_shared(node: Shared) -> int:
    # Nested free-form JSON refers to the same shared part several times (array items, object
    # values); minimization merges those copies, so each distinct one counts once, which keeps the
    # estimate near the measured size (ANY_VALUE_DEPTH 3: 965 states) instead of 4^depth times it.
    inner: dict[int, Shared] = {}

    def walk(child: Node) -> int:
        if isinstance(child, Shared):
            inner.setdefault(id(child), child)
            return 0
        return _estimate(child, walk)

    return walk(node.item) + sum(estimate_size(s) for s in inner.values())


def _estimate_members(node: Members, sub: Callable[[Node], int]) -> int:
    sep = sub(node.sep)
    total = 2 + sum(sub(member) + sep for member, _ in node.items)
    # Positions that reach member j directly besides one: any member since the last required one (and the
    # start, when none is required before j); the direct one is already counted above.
    others = []
    last_required = -1
    for j, (_, required) in enumerate(node.items):
        others.append(j - last_required - 1)
        if required:
            last_required = j
    if not any(others):  # every member but the last required: no candidates to tell apart
        return total
    leads = [_lead(node.sep, member) for member, _ in node.items]
    shared = _shared_prefixes(leads)
    # NFA states held by the DFA states that have not told the candidates apart yet
    pairs = sum(k * (prefix + 1) for k, prefix in zip(others, shared, strict=True))
    return total + pairs // _SET_WORK_PER_STATE


def _lead(sep: Node, member: Node) -> tuple[int, ...]:
    """What the DFA reads after a member before it knows the next one: separator, then the key's bytes."""
    out: list[int] = []
    sep_items = _seq_items(sep)
    for k, it in enumerate((*sep_items, *_seq_items(member))):
        if isinstance(it, Lit):
            out.extend(it.data)
        elif k < len(sep_items):
            out.append(256 + id(it))  # the separator's nodes are the same objects in every member
        else:
            break  # the key is over: what follows belongs to this member alone
    return tuple(out)


def _seq_items(node: Node) -> tuple[Node, ...]:
    return node.items if isinstance(node, Seq) else (node,)


def _shared_prefixes(leads: list[tuple[int, ...]]) -> list[int]:
    """For each lead, the length of the longest prefix it shares with another one (sorted neighbours)."""
    order = sorted(range(len(leads)), key=lambda i: leads[i])
    out = [0] * len(leads)
    for a, b in itertools.pairwise(order):
        n = 0
        for x, y in zip(leads[a], leads[b], strict=False):
            if x != y:
                break
            n += 1
        out[a] = max(out[a], n)
        out[b] = max(out[b], n)
    return out


__all__ = [
    "LAZY_REPEAT_FROM",
    "LAZY_REPEAT_MARK",
    "MAX_ESTIMATED_SIZE",
    "estimate_size",
    "lazy_repeat",
    "lazy_repeats_in",
]
