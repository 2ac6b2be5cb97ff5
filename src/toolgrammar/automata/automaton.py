"""Byte-level regular languages: a small expression tree, compiled to a deterministic automaton.

Why not a regex library: a token may hold part of a UTF-8 character (emoji and CJK arguments are
split across tokens), so the automaton must run on *bytes*, and it needs two symbols beyond the 256
bytes: ``SPECIAL`` (a control token such as ``<|im_start|>``, which is not text) and ``EOS`` (the end
of the turn). The trees are built by ``json_grammar`` and the formats, compiled once here (Thompson
NFA, then subset construction over byte classes, then pruning of states that cannot reach the end),
and walked by ``engine``. ``to_regex`` prints the same tree as a Python regular expression for other
engines and for tests that cross-check this compiler against an independent one.

Everything here is pure Python + numpy, and imports no torch or transformers.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType

import numpy as np

from toolgrammar import native as native_core
from toolgrammar.errors import GrammarError

N_SYMBOLS = 258
"""Alphabet size: bytes 0-255, then :data:`SPECIAL` and :data:`EOS`."""
SPECIAL = 256
"""A control token that is not text (``<|im_start|>``...). Free text may hold it; a block never does."""
EOS = 257
"""The end of the turn (``<|im_end|>``, ``<|endoftext|>``)."""
DEAD = -1
"""Transition target meaning 'rejected'."""

MAX_NFA_STATES = 400_000
"""A grammar larger than this is refused with a clear error instead of exhausting memory."""
MAX_DFA_STATES = 200_000


# ----------------------------------------------------------------------------------------------
# Expression tree
# ----------------------------------------------------------------------------------------------


class Node:
    """An immutable expression over the 258-symbol alphabet."""

    __slots__ = ()


@dataclass(frozen=True, eq=False)
class Lit(Node):
    """An exact byte string."""

    data: bytes


@dataclass(frozen=True, eq=False)
class Sym(Node):
    """One symbol out of a set (a 258-bit mask). ``regex`` is its rendering for :func:`to_regex`."""

    mask: int
    regex: str | None = None


@dataclass(frozen=True, eq=False)
class Seq(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Alt(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Repeat(Node):
    """``item`` repeated ``lo`` to ``hi`` times (``hi=None``: unbounded)."""

    item: Node
    lo: int
    hi: int | None


@dataclass(frozen=True, eq=False)
class Avoid(Node):
    """The strings of ``item`` that contain none of ``words`` as a substring."""

    item: Node
    words: tuple[bytes, ...]


@dataclass(frozen=True, eq=False)
class Shared(Node):
    """A sub-language compiled once to a minimal DFA and embedded wherever it occurs.

    Trees that refer to the same sub-tree several times (nested free-form JSON) would otherwise be
    copied at each reference, which grows exponentially with the nesting.
    """

    item: Node


@dataclass(frozen=True, eq=False)
class NotPrefixed(Node):
    """The strings of ``item`` that do not start with ``word``."""

    item: Node
    word: bytes


@dataclass(frozen=True, eq=False)
class Group(Node):
    """A region of the grammar with a role: ``safe`` regions are free text, where a turn may be cut.

    ``regex`` optionally overrides the rendering of the whole region in :func:`to_regex` (for
    pieces whose byte-level construction has a shorter character-level spelling).
    """

    item: Node
    safe: bool = False
    regex: str | None = None


@dataclass(frozen=True, eq=False)
class Members(Node):
    """A list of members in a fixed order, each required or optional, joined by ``sep``.

    This is the body of a JSON object with declared properties: a separator goes between two
    members that are present, never before the first. Built linearly (two tracks: nothing written
    yet / something written), where nested alternatives would grow exponentially.
    """

    items: tuple[tuple[Node, bool], ...]  # (member, required)
    sep: Node


@dataclass(frozen=True, eq=False)
class Embedded(Node):
    """A part already compiled (by :mod:`toolgrammar.automata.compose`), placed as it is."""

    dfa: DFA


@dataclass(frozen=True, eq=False)
class Dispatch(Alt):
    """``alt(seq(lit(key), tail) ...)`` where the keys are prefix-free: the key says which tail follows.

    The choice of a tool by its name. Everywhere it is simply an :class:`Alt` (``items`` holds the
    branches), but :func:`compile_skeleton` leaves it out of the automaton it builds: the engine
    spells the keys as a trie and compiles a tail (a tool's arguments) when a walk first reaches it
    (:mod:`toolgrammar.automata.lazy`). ``cache_keys`` name each tail's language (tool schema and options), so
    a tail compiled for one tool list serves every list that holds the same tool.
    """

    keys: tuple[bytes, ...] = ()
    tails: tuple[Node, ...] = ()
    cache_keys: tuple[str, ...] = ()


# Constructors ---------------------------------------------------------------------------------


def dispatch(branches: Iterable[tuple[str | bytes, Node, str]]) -> Node:
    """A :class:`Dispatch` over ``(key, tail, cache_key)`` branches."""
    keys, tails, cache_keys = [], [], []
    for key, tail, cache_key in branches:
        keys.append(key.encode("utf-8") if isinstance(key, str) else bytes(key))
        tails.append(tail)
        cache_keys.append(cache_key)
    if not keys:
        raise GrammarError("dispatch() of nothing")
    ordered = sorted(keys)
    for a, b in itertools.pairwise(ordered):
        if b.startswith(a):
            raise GrammarError(f"dispatch keys must be prefix-free: {a!r} is a prefix of {b!r}")
    items = tuple(seq(Lit(k), t) for k, t in zip(keys, tails, strict=True))
    return Dispatch(items, tuple(keys), tuple(tails), tuple(cache_keys))


def lit(text: str | bytes) -> Node:
    """An exact string (``str`` is encoded as UTF-8)."""
    return Lit(text.encode("utf-8") if isinstance(text, str) else bytes(text))


def mask_of(symbols: Iterable[int]) -> int:
    m = 0
    for s in symbols:
        m |= 1 << s
    return m


def byte_range(lo: int, hi: int) -> int:
    """Mask of bytes ``lo..hi`` inclusive."""
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


def sym(mask: int, regex: str | None = None) -> Node:
    if mask == 0:
        raise GrammarError("empty symbol set")
    return Sym(mask, regex)


def chars(text: str, regex: str | None = None) -> Node:
    """One of the given ASCII characters."""
    if any(ord(c) > 127 for c in text):
        raise GrammarError(f"chars() takes ASCII only, got {text!r}")
    return Sym(mask_of(ord(c) for c in text), regex or "[" + "".join(_class_char(ord(c)) for c in text) + "]")


def seq(*items: Node) -> Node:
    # Nested sequences flattened and adjacent literals merged (fewer NFA states, shorter regexes), in one
    # pass: every schema part of every tool is built through here.
    merged: list[Node] = []
    run: Lit | None = None  # the literal being merged (a new one only once a second joins it)
    data = b""
    for item in items:
        for it in item.items if type(item) is Seq else (item,):  # type: ignore[attr-defined]
            if type(it) is Lit:
                if run is None:
                    run, data = it, it.data  # type: ignore[assignment, attr-defined]
                else:
                    data += it.data  # type: ignore[attr-defined]
                continue
            if run is not None:
                merged.append(run if len(data) == len(run.data) else Lit(data))
                run = None
            merged.append(it)
    if run is not None:
        merged.append(run if len(data) == len(run.data) else Lit(data))
    if len(merged) == 1:
        return merged[0]
    return Seq(tuple(merged))


def alt(*items: Node) -> Node:
    if not items:
        raise GrammarError("alt() of nothing")
    flat: list[Node] = []
    for it in items:
        if isinstance(it, Alt):
            flat.extend(it.items)
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def repeat(item: Node, lo: int, hi: int | None) -> Node:
    if lo < 0 or (hi is not None and hi < lo):
        raise GrammarError(f"bad repetition bounds {lo}..{hi}")
    return Repeat(item, lo, hi)


def opt(item: Node) -> Node:
    return Repeat(item, 0, 1)


def star(item: Node) -> Node:
    return Repeat(item, 0, None)


def plus(item: Node) -> Node:
    return Repeat(item, 1, None)


def avoiding(item: Node, *words: str | bytes) -> Node:
    ws = tuple(w.encode() if isinstance(w, str) else bytes(w) for w in words if w)
    return Avoid(item, ws) if ws else item


def shared(item: Node) -> Node:
    return item if isinstance(item, Shared) else Shared(item)


def not_prefixed(item: Node, word: str | bytes) -> Node:
    return NotPrefixed(item, word.encode() if isinstance(word, str) else bytes(word))


def group(item: Node, *, safe: bool = False, regex: str | None = None) -> Node:
    return Group(item, safe, regex)


EMPTY = Lit(b"")
ANY_BYTE = Sym(byte_range(0, 255), r"[\s\S]")
ANY_TEXT_SYMBOL = Sym(byte_range(0, 255) | (1 << SPECIAL), r"[\s\S]")
END = Sym(1 << EOS, "$")


@lru_cache(maxsize=64)
def utf8_char(*, exclude_ascii: str = "", ascii_only_printable: bool = False) -> Node:
    """One well-formed UTF-8 character (no surrogates, no overlongs), minus some ASCII characters.

    ``ascii_only_printable`` drops the control characters 0x00-0x1F (JSON forbids them raw in strings).
    One node per argument set, shared (nodes are immutable; what is computed from one is kept on it).
    """
    lo = 0x20 if ascii_only_printable else 0x00
    ascii_mask = byte_range(lo, 0x7F) & ~mask_of(ord(c) for c in exclude_ascii)
    cont = byte_range(0x80, 0xBF)
    multi = alt(
        seq(Sym(byte_range(0xC2, 0xDF)), Sym(cont)),
        seq(Sym(1 << 0xE0), Sym(byte_range(0xA0, 0xBF)), Sym(cont)),
        seq(Sym(byte_range(0xE1, 0xEC) | byte_range(0xEE, 0xEF)), Sym(cont), Sym(cont)),
        seq(Sym(1 << 0xED), Sym(byte_range(0x80, 0x9F)), Sym(cont)),
        seq(Sym(1 << 0xF0), Sym(byte_range(0x90, 0xBF)), Sym(cont), Sym(cont)),
        seq(Sym(byte_range(0xF1, 0xF3)), Sym(cont), Sym(cont), Sym(cont)),
        seq(Sym(1 << 0xF4), Sym(byte_range(0x80, 0x8F)), Sym(cont), Sym(cont)),
    )
    excluded = "".join(_class_char(ord(c)) for c in exclude_ascii)
    ctrl = r"\x00-\x1f" if ascii_only_printable else ""
    regex = f"[^{excluded}{ctrl}]" if (excluded or ctrl) else r"[\s\S]"
    return group(alt(Sym(ascii_mask), multi), regex=regex)


# ----------------------------------------------------------------------------------------------
# Size estimate (before any construction)
# ----------------------------------------------------------------------------------------------

MAX_ESTIMATED_SIZE = 12_000
"""Largest :func:`estimate_size` accepted for one part of a tool's schema: ``json_grammar`` checks each
part as it builds it (before any automaton is built), so a refusal takes milliseconds and names the
smallest part that is too large.

Measured on a whole turn (which compiles each block about three times), compile time grows by about
0.25 ms (hermes) to 0.75 ms (qwen-xml) and memory by about 40 kB per unit, so a schema at the limit
compiles in a few seconds (qwen-xml: under ten) and under 700 MB. Every bundled and tested tool set
estimates at about 5,000 or less (the largest: two free-form values under qwen-xml, flexible whitespace
and ``escape_markers``); the shapes that exploded (issue 11) estimate at 37,000 (200 optional
properties, qwen-xml) to 400,000 (``maxItems`` 200 of 3-property objects)."""

LAZY_REPEAT_FROM = 8_192
"""A bounded repeat estimated at more than this, built whole, is built a copy at a time instead, when a
walk reaches each (:func:`toolgrammar.automata.lazy.lazy_repeats`; its estimate is then its ``minItems`` copies and
one more). Building a copy then costs about a millisecond, what compiling a few hundred states up front
does, so the repeats that stay whole are the ones that compile in tens of milliseconds."""
_LAZY = "_lazy_repeat"
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
    return bool(node.__dict__.get(_LAZY))


def nodes_of(node: Node, *, below: Callable[[Node], bool] = lambda _n: True) -> Iterable[Node]:
    """Every node of ``node``'s tree once (dispatched tails included), in tree order (depth first, children
    left to right); the children of a node for which ``below`` is false are not visited."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if below(n):
            stack.extend(reversed(children(n)))


def children(node: Node) -> tuple[Node, ...]:
    """A node's direct parts, in tree order (a :class:`Members`' separator last)."""
    if isinstance(node, Seq | Alt):
        return node.items
    if isinstance(node, Repeat | Group | Avoid | NotPrefixed | Shared):
        return (node.item,)
    if isinstance(node, Members):
        return (*(m for m, _ in node.items), node.sep)
    return ()


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
            # Built a copy at a time as a walk reaches it (toolgrammar.automata.lazy.lazy_repeats): the lo copies
            # every walk needs, then one more and a hole.
            node.__dict__[_LAZY] = True
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


# ----------------------------------------------------------------------------------------------
# Compiled automaton
# ----------------------------------------------------------------------------------------------


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


_shared_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()
_avoid_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()
_not_prefixed_dfas: weakref.WeakKeyDictionary[Node, DFA] = weakref.WeakKeyDictionary()


def clear_caches() -> None:
    """Forget every sub-automaton compiled in this process (shared parts, guarded products, skeletons)."""
    for cache in (_shared_dfas, _avoid_dfas, _not_prefixed_dfas):
        cache.clear()
    with _skeletons_lock:
        _skeletons.clear()
    _edges_cache.clear()


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
        dfa = _avoid_dfas[node] = _product_avoiding(compile_dfa(node.item), node.words)
    return dfa


def not_prefixed_dfa(node: NotPrefixed) -> DFA:
    """A :class:`NotPrefixed` node's DFA, once per node."""
    dfa = _not_prefixed_dfas.get(node)
    if dfa is None:
        dfa = _not_prefixed_dfas[node] = _product_not_prefixed(compile_dfa(node.item), node.word)
    return dfa


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
    def __init__(self) -> None:
        self.nfa = _NFA()

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
            return self._embed(avoid_dfa(node), safe)
        if isinstance(node, Shared):
            return self._embed(shared_dfa(node), safe)
        if isinstance(node, NotPrefixed):
            return self._embed(not_prefixed_dfa(node), safe)
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


# ----------------------------------------------------------------------------------------------
# Skeletons: the automaton without its dispatched tails (see Dispatch and toolgrammar.automata.lazy)
# ----------------------------------------------------------------------------------------------

HOLE_BYTE = 0xFF
"""First byte of a hole: never part of UTF-8, so never inside a block, where every byte is UTF-8 text."""
MAX_DISPATCHES = 8
"""Distinct :class:`Dispatch` nodes a skeleton can leave out (the hole's second byte is ``0xF8 + j``)."""


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
    from toolgrammar.automata import skeletons

    found = skeletons.shipped_skeleton(key, len(dispatches)) if shipped else None
    if found is None and disk:
        found = skeletons.cached_skeleton(key, len(dispatches))
    if found is not None:
        dfa, points = found
    else:
        dfa = compile_dfa(skeleton_tree)
        points = _dispatch_points(dfa, len(dispatches))
        if disk:
            skeletons.save_skeleton(key, dfa, points)
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
    a hole too, :func:`toolgrammar.automata.lazy.lazy_repeats`) and what the holes stand for, in hole order."""
    from toolgrammar.automata.lazy import lazy_repeats  # lazy builds on this module

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


def rewrite_tree(
    node: Node,
    replace: Callable[[Node, Callable[[Node], Node]], Node | None],
    *,
    plain: Callable[[Node], bool] | None = None,
) -> Node:
    """``node`` with each node ``replace`` returns a replacement for replaced (``None``: keep it and rewrite
    its children; ``replace`` gets the rewriting function too, for the parts it keeps); parents are rebuilt
    only where a child changed, and a node shared in the tree is rewritten once. ``plain(n)`` true: ``n`` is
    known to hold nothing to replace (not visited)."""
    memo: dict[int, Node] = {}

    def rewrite(n: Node) -> Node:
        got = memo.get(id(n))
        if got is not None:
            return got
        if plain is not None and plain(n):
            return n
        out = replace(n, rewrite)
        if out is None:
            out = n
            if isinstance(n, Seq | Alt):
                items = tuple(rewrite(i) for i in n.items)
                if any(a is not b for a, b in zip(items, n.items, strict=True)):
                    out = type(n)(items)
            elif isinstance(n, Repeat):
                item = rewrite(n.item)
                out = n if item is n.item else Repeat(item, n.lo, n.hi)
            elif isinstance(n, Group):
                item = rewrite(n.item)
                out = n if item is n.item else Group(item, n.safe, n.regex)
            elif isinstance(n, Avoid):
                item = rewrite(n.item)
                out = n if item is n.item else Avoid(item, n.words)
            elif isinstance(n, NotPrefixed):
                item = rewrite(n.item)
                out = n if item is n.item else NotPrefixed(item, n.word)
            elif isinstance(n, Shared):
                item = rewrite(n.item)
                out = n if item is n.item else Shared(item)
            elif isinstance(n, Members):
                members = tuple((rewrite(m), r) for m, r in n.items)
                sep = rewrite(n.sep)
                if sep is not n.sep or any(a is not b for (a, _), (b, _) in zip(members, n.items, strict=True)):
                    out = Members(members, sep)
        memo[id(n)] = out
        return out

    return rewrite(node)


def _dispatch_points(dfa: DFA, n_dispatches: int) -> tuple[tuple[int, int, int], ...]:
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


# A turn's skeleton depends on the format and the options, not on the tools (their names and schemas are
# in the dispatches): tool lists of one kind share it. Keyed by the skeleton tree's structure.
_skeletons: OrderedDict[str, tuple[DFA, tuple[tuple[int, int, int], ...]]] = OrderedDict()
_skeletons_lock = threading.Lock()


def structure_key(node: Node) -> str:
    """A digest of ``node``'s structure: equal for trees that spell the same expression."""
    memo: dict[int, bytes] = {}

    def h(n: Node) -> bytes:
        got = memo.get(id(n))
        if got is not None:
            return got
        parts: list[bytes] = [type(n).__name__.encode()]
        if isinstance(n, Lit):
            parts.append(n.data)
        elif isinstance(n, Sym):
            parts.append(n.mask.to_bytes(33, "little"))
        elif isinstance(n, Seq | Alt):
            parts.extend(h(i) for i in n.items)
        elif isinstance(n, Repeat):
            parts += [h(n.item), str((n.lo, n.hi)).encode()]
        elif isinstance(n, Group):
            parts += [h(n.item), b"1" if n.safe else b"0"]
        elif isinstance(n, Avoid):
            parts += [h(n.item), *n.words]
        elif isinstance(n, NotPrefixed):
            parts += [h(n.item), n.word]
        elif isinstance(n, Shared):
            parts.append(h(n.item))
        elif isinstance(n, Members):
            parts += [h(n.sep), *(h(m) + (b"r" if r else b"o") for m, r in n.items)]
        digest = hashlib.sha256(b"\0".join(len(p).to_bytes(4, "little") + p for p in parts)).digest()
        memo[id(n)] = digest
        return digest

    return h(node).hex()


def find_dispatches(node: Node) -> tuple[Dispatch, ...]:
    """The :class:`Dispatch` nodes of ``node`` in the order :func:`compile_skeleton` numbers them."""
    out: list[Dispatch] = []
    seen: set[int] = set()

    def visit(n: Node) -> None:
        if id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, Dispatch):
            if all(d is not n for d in out):
                out.append(n)
        elif isinstance(n, Seq | Alt):
            for i in n.items:
                visit(i)
        elif isinstance(n, Repeat | Group | Avoid | NotPrefixed | Shared):
            visit(n.item)
        elif isinstance(n, Members):
            for m, _ in n.items:
                visit(m)
            visit(n.sep)

    visit(node)
    return tuple(out)


def literal_bytes(node: Node, *, tails: bool = True) -> list[bytes]:
    """Every literal of ``node`` (keys, punctuation), in tree order, each once.

    ``tails=False``: of a :class:`Dispatch`, its keys only (what the skeleton and its tries spell)."""
    out: dict[bytes, None] = {}
    keys_only = not tails
    for n in nodes_of(node, below=lambda n: not (keys_only and isinstance(n, Dispatch))):
        if isinstance(n, Lit):
            if n.data:
                out[n.data] = None
        elif keys_only and isinstance(n, Dispatch):
            out.update(dict.fromkeys(n.keys))
    return list(out)


_WITNESS = "_shortest_witness"
"""The attribute a node's :func:`shortest_witness` is kept in (as :data:`_ESTIMATE`)."""


def shortest_witness(node: Node) -> bytes | None:
    """A shortest string of ``node``'s language, built from the tree (``None`` where that is not simple).

    Exact for everything but :class:`Avoid` and :class:`NotPrefixed`, whose item's shortest string is
    used when it passes their condition (``None`` otherwise). Its length bounds from above the tokens
    a byte-level tokenizer needs to cross the language (every byte is a token).
    """
    memo = node.__dict__
    if _WITNESS in memo:
        return memo[_WITNESS]  # type: ignore[no-any-return]
    out: bytes | None
    if isinstance(node, Lit):
        out = node.data
    elif isinstance(node, Sym):
        low = node.mask & ((1 << 256) - 1)
        out = bytes([(low & -low).bit_length() - 1]) if low else None
    elif isinstance(node, Seq):
        parts = [shortest_witness(i) for i in node.items]
        out = None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]
    elif isinstance(node, Alt):
        found = [w for w in (shortest_witness(i) for i in node.items) if w is not None]
        out = min(found, key=len) if found else None
    elif isinstance(node, Repeat):
        w = shortest_witness(node.item) if node.lo else b""
        out = None if w is None else w * node.lo
    elif isinstance(node, Group | Shared):
        out = shortest_witness(node.item)
    elif isinstance(node, Avoid):
        w = shortest_witness(node.item)
        out = w if w is not None and not any(word in w for word in node.words) else None
    elif isinstance(node, NotPrefixed):
        w = shortest_witness(node.item)
        out = w if w is not None and not w.startswith(node.word) else None
    elif isinstance(node, Members):
        sep = shortest_witness(node.sep)
        required = [shortest_witness(m) for m, r in node.items if r]
        out = None if sep is None or any(w is None for w in required) else sep.join(required)  # type: ignore[arg-type]
    else:
        raise GrammarError(f"unknown grammar node {type(node).__name__}")
    memo[_WITNESS] = out
    return out


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


def _partition(masks: list[int]) -> list[int]:
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
        from toolgrammar.automata.compose import GROWABLE, compose_dfa

        raw = compose_dfa(node)
        owned = bool(raw.stats.get(GROWABLE))
    else:
        raw = subset_dfa(node, False)
        owned = False
    return _prune(
        raw.transitions,
        raw.start,
        raw.accepting,
        raw.safe,
        nfa_states=int(raw.stats.get("nfa_states", raw.n_states)),
        minimize=minimize,
        in_place=owned,  # a table compose allocated is held by nothing but ``raw``, which ends here
    )


def subset_dfa(node: Node, safe: bool) -> DFA:
    """Thompson NFA of ``node``, then subset construction over symbol classes (start 0; not pruned).

    States are numbered breadth-first from the start, successors by symbol (as :func:`_canonical`
    numbers them), whether the C core or the Python loop builds them. ``safe`` marks every state (the
    node lies inside a safe :class:`Group`)."""
    builder = _Builder()
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
            for block in sorted(_partition([m for m, _ in edges]), key=lambda b: b & -b):
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
    bits = np.frombuffer(b"".join(mask.to_bytes(_MASK_BYTES, "little") for mask, _ in flat), dtype="<u8")
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


_MASK_BYTES = 8 * ((N_SYMBOLS + 63) // 64)
"""A symbol mask's bytes in the C core's layout (whole 64-bit words)."""


def _prune(
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
        return _prune(table, dfa.start * n_guard, accepting, safe, minimize=False)
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
    return _prune(table, 0, dfa.accepting[states].astype(bool), dfa.safe[states].astype(bool), minimize=False)


def _product_not_prefixed(dfa: DFA, word: bytes) -> DFA:
    """``dfa`` restricted to strings that do not start with ``word``."""
    free = len(word)  # diverged from the word: anything goes
    guard = np.full((len(word) + 1, N_SYMBOLS), free, dtype=np.int32)
    for k, b in enumerate(word):
        guard[k, b] = k + 1 if k + 1 < len(word) else -1
    return _intersect(dfa, guard)


def _product_avoiding(dfa: DFA, words: tuple[bytes, ...]) -> DFA:
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


# ----------------------------------------------------------------------------------------------
# Regex export
# ----------------------------------------------------------------------------------------------


def to_regex(node: Node) -> str:
    """Render the tree as a Python ``re`` pattern over *characters* (UTF-8 decoded).

    ``EOS`` renders as ``$`` and ``SPECIAL`` as nothing: the pattern describes the text of a turn.
    ``Avoid`` renders as a tempered token ``(?:(?!w)x)*``, which ``re`` supports but not every engine.
    """
    if isinstance(node, Lit):
        return _escape(node.data.decode("utf-8"))
    if isinstance(node, Sym):
        if node.regex is not None:
            return node.regex
        return _mask_to_class(node.mask)
    if isinstance(node, Seq):
        return "".join(_wrap(to_regex(it), it, in_seq=True) for it in node.items)
    if isinstance(node, Alt):
        if len(node.items) == 1:  # a Dispatch of one tool
            return to_regex(node.items[0])
        return "(?:" + "|".join(to_regex(it) for it in node.items) + ")"
    if isinstance(node, Repeat):
        inner = _wrap(to_regex(node.item), node.item, in_seq=False)
        if (node.lo, node.hi) == (0, 1):
            return inner + "?"
        if (node.lo, node.hi) == (0, None):
            return inner + "*"
        if (node.lo, node.hi) == (1, None):
            return inner + "+"
        return inner + "{" + str(node.lo) + "," + ("" if node.hi is None else str(node.hi)) + "}"
    if isinstance(node, Group):
        return node.regex if node.regex is not None else to_regex(node.item)
    if isinstance(node, Members):
        return _members_regex(node)
    if isinstance(node, Shared):
        return to_regex(node.item)
    if isinstance(node, NotPrefixed):
        return f"(?!{_escape(node.word.decode('utf-8'))}){to_regex(node.item)}"
    if isinstance(node, Avoid):
        guard = "|".join(_escape(w.decode("utf-8")) for w in node.words)
        item = node.item
        if isinstance(item, Repeat) and item.hi is None:
            body = to_regex(item.item)
            q = "*" if item.lo == 0 else "+"
            return f"(?:(?!{guard}){body}){q}"
        return f"(?:(?!.*(?:{guard})){to_regex(item)})"
    raise GrammarError(f"unknown grammar node {type(node).__name__}")


_REGEX_META = set(".^$*+?{}[]\\|()")
_CONTROL_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(text: str) -> str:
    """Escape regex metacharacters only; control characters as ``\\n``/``\\xHH`` (portable to other engines)."""
    out = []
    for c in text:
        if c in _REGEX_META:
            out.append("\\" + c)
        elif c in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)


def _members_regex(node: Members) -> str:
    """O(n^2) rendering: choose the first member present, then each later one with its separator."""
    sep = to_regex(node.sep)
    branches = []
    for k, (first, _required) in enumerate(node.items):
        parts = [to_regex(first)]
        for member, required in node.items[k + 1 :]:
            piece = sep + to_regex(member)
            parts.append(piece if required else f"(?:{piece})?")
        branches.append("".join(parts))
        if node.items[k][1]:
            break  # a required member must be the first present one if all before it were skipped
    if all(not r for _, r in node.items):
        branches.append("")
    return "(?:" + "|".join(branches) + ")"


def _wrap(rx: str, node: Node, *, in_seq: bool) -> str:
    """Parenthesize ``rx`` where a quantifier or concatenation would otherwise bind wrongly."""
    if in_seq or isinstance(node, (Avoid, Sym)) or (isinstance(node, Alt) and len(node.items) > 1):
        return rx
    if isinstance(node, Lit) and len(node.data.decode("utf-8")) <= 1:
        return rx
    if isinstance(node, Group) and node.regex is not None and node.regex.startswith("[") and node.regex.endswith("]"):
        return rx
    return "(?:" + rx + ")"


def _mask_to_class(mask: int) -> str:
    byte_mask = mask & byte_range(0, 255)
    if byte_mask == byte_range(0, 255):
        return r"[\s\S]"
    idx = [i for i in range(128) if byte_mask >> i & 1]
    if byte_mask >> 128:
        # High bytes only appear inside utf8_char(), which carries its own regex.
        raise GrammarError("a byte class with bytes >= 0x80 has no character-level regex")
    if len(idx) == 1:
        return _escape(chr(idx[0]))
    return "[" + "".join(_class_char(i) for i in idx) + "]"


def _class_char(i: int) -> str:
    c = chr(i)
    if c in "\\]^-[":
        return "\\" + c
    if i < 0x20 or i == 0x7F:
        return f"\\x{i:02x}"
    return c
