"""Byte-level regular languages as a small expression tree: the nodes, their constructors, and walks over trees.

Why bytes and not a regex library: a token may hold part of a UTF-8 character (emoji and CJK arguments are
split across tokens), so the automaton runs on *bytes*, with two symbols beyond the 256 bytes: ``SPECIAL``
(a control token such as ``<|im_start|>``, which is not text) and ``EOS`` (the end of the turn). The trees
are built by :mod:`toolgrammar.values` and the formats, compiled by :func:`toolgrammar.automata.compile.compile_dfa`
and walked by :mod:`toolgrammar.runtime`.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from toolgrammar.errors import GrammarError

N_SYMBOLS = 258
"""Alphabet size: bytes 0-255, then :data:`SPECIAL` and :data:`EOS`."""


SPECIAL = 256
"""A control token that is not text (``<|im_start|>``...). Free text may hold it; a block never does."""


EOS = 257
"""The end of the turn (``<|im_end|>``, ``<|endoftext|>``)."""


DEAD = -1
"""Transition target meaning 'rejected'."""


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
    return Sym(mask_of(ord(c) for c in text), regex or "[" + "".join(class_char(ord(c)) for c in text) + "]")


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
    excluded = "".join(class_char(ord(c)) for c in exclude_ascii)
    ctrl = r"\x00-\x1f" if ascii_only_printable else ""
    regex = f"[^{excluded}{ctrl}]" if (excluded or ctrl) else r"[\s\S]"
    return group(alt(Sym(ascii_mask), multi), regex=regex)


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


def class_char(i: int) -> str:
    """Byte ``i`` as a member of a regex character class."""
    c = chr(i)
    if c in "\\]^-[":
        return "\\" + c
    if i < 0x20 or i == 0x7F:
        return f"\\x{i:02x}"
    return c


__all__ = [
    "ANY_BYTE",
    "ANY_TEXT_SYMBOL",
    "DEAD",
    "EMPTY",
    "END",
    "EOS",
    "N_SYMBOLS",
    "SPECIAL",
    "Alt",
    "Avoid",
    "Dispatch",
    "Group",
    "Lit",
    "Members",
    "Node",
    "NotPrefixed",
    "Repeat",
    "Seq",
    "Shared",
    "Sym",
    "alt",
    "avoiding",
    "byte_range",
    "chars",
    "children",
    "class_char",
    "dispatch",
    "find_dispatches",
    "group",
    "lit",
    "literal_bytes",
    "mask_of",
    "nodes_of",
    "not_prefixed",
    "opt",
    "plus",
    "repeat",
    "rewrite_tree",
    "seq",
    "shared",
    "shortest_witness",
    "star",
    "structure_key",
    "sym",
    "utf8_char",
]
