"""The grammar as a regular expression without lookaround, for engines that cannot take it.

:func:`~toolgrammar.automata.regex.to_regex` spells "text that does not contain ``<tool_call>``" (free
text, reasoning, ``escape_markers`` strings, ``qwen-xml`` raw-text values) and "does not start with
``<think>``" as lookaheads: short, and what Python's ``re`` reads, but DFA-based engines refuse them
(outlines-core's ``Index``: "Failed to build DFA error building NFA"; xgrammar). The languages are
regular all the same, so :func:`to_portable_regex` spells the same language without lookaround:

- an ``Avoid`` region is compiled to its (small) automaton, which is turned back into a regular
  expression over characters by state elimination;
- a ``NotPrefixed`` region is pushed into its first part (``(?!<think>)FREE(CALLS|$)`` becomes
  ``FREE'(CALLS|$)``, where ``FREE'`` is the free text that does not start with ``<think>``), which
  holds exactly when what follows cannot continue a prefix of the word; when it could, the region is
  compiled like an ``Avoid`` region, or refused with a :class:`~toolgrammar.errors.GrammarError`
  when its automaton is too large to spell out.

Two properties of outlines-core's reading shape the spelling. It reads alternations leftmost-first
and drops every lower-priority branch once a higher one reaches the end of the pattern (``a|ab``
does not take ``ab``); a ``$`` postpones the end of the pattern to the end of the input, so every
path of a turn ends in ``$``, as the end of the turn, and no branch is dropped mid-text (a block is
never a prefix of a longer block, so its pattern needs none). And it refuses a ``$`` that the empty
text reaches ("anchored universal start state doesn't exist"): a turn that may be empty is spelled
``(?:NONEMPTY)?``, with the empty turn as the last, lowest branch.

The result accepts the same texts as the lookahead spelling under ``re.fullmatch`` (tests compare
the two with Python's ``re`` and with outlines-core's ``Index``), and is longer: free text avoiding
``<tool_call>`` is about 300 characters instead of 25, a ``qwen-xml`` block of five tools tens of
kilobytes. Like :func:`~toolgrammar.automata.regex.to_regex` it describes text: control tokens are not
part of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.nodes import (
    EOS,
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
    alt,
    class_char,
    group,
    seq,
)
from toolgrammar.automata.regex import to_regex
from toolgrammar.errors import GrammarError

__all__ = ["MAX_SPELLED_STATES", "needs_lookaround", "push_not_prefixed", "to_portable_regex"]

MAX_SPELLED_STATES = 400
"""Largest automaton turned back into a regex; state elimination grows the text quickly beyond it."""

_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
_MAX_CODEPOINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)


def to_portable_regex(node: Node) -> str:
    """``node`` as a regular expression with no lookaround (same language as :func:`to_regex`)."""
    if not _first(node)[1]:
        return _render(node)
    # The empty text as a last, optional branch: a "$" that no character precedes would make the
    # start depend on the end of the input, which outlines-core refuses.
    rest = _nonempty(node)
    return "" if rest is None else "(?:" + _render(rest) + ")?"


def needs_lookaround(node: Node) -> bool:
    """Whether :func:`~toolgrammar.automata.regex.to_regex` spells ``node`` with a lookaround."""
    return _needs(node)


# -- rendering ----------------------------------------------------------------------------------


def _needs(node: Node) -> bool:
    if isinstance(node, (Avoid, NotPrefixed)):
        return True
    if isinstance(node, Group):
        if node.regex is not None:
            return any(m in node.regex for m in _LOOKAROUND)
        return _needs(node.item)
    if isinstance(node, (Shared, Repeat)):
        return _needs(node.item)
    if isinstance(node, (Seq, Alt)):
        return any(_needs(it) for it in node.items)
    if isinstance(node, Members):
        return _needs(node.sep) or any(_needs(m) for m, _ in node.items)
    return False


def _render(node: Node) -> str:
    if not _needs(node):
        return to_regex(node)
    if isinstance(node, Avoid):
        return _spell(node)
    if isinstance(node, NotPrefixed):
        pushed = push_not_prefixed(node.item, node.word)
        if pushed is None:
            raise GrammarError(f"every text of this region starts with {node.word!r}: it accepts nothing")
        return _render(pushed)
    if isinstance(node, (Group, Shared)):
        return _render(node.item)  # a Group whose own regex needs no lookaround was handled by to_regex
    if isinstance(node, Seq):
        return "".join(_render(it) for it in node.items)
    if isinstance(node, Alt):
        return "(?:" + "|".join(_render(it) for it in node.items) + ")"
    if isinstance(node, Repeat):
        inner = "(?:" + _render(node.item) + ")"
        quantifier = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((node.lo, node.hi))
        if quantifier is None:
            quantifier = "{" + str(node.lo) + "," + ("" if node.hi is None else str(node.hi)) + "}"
        return inner + quantifier
    if isinstance(node, Members):
        return _members(node)
    raise GrammarError(f"unknown grammar node {type(node).__name__}")  # pragma: no cover


def _members(node: Members) -> str:
    """The same O(n^2) spelling as the lookahead export (see ``automaton._members_regex``)."""
    sep = _render(node.sep)
    branches = []
    for k, (first, _required) in enumerate(node.items):
        parts = [_render(first)]
        for member, required in node.items[k + 1 :]:
            piece = sep + _render(member)
            parts.append(piece if required else f"(?:{piece})?")
        branches.append("".join(parts))
        if node.items[k][1]:
            break
    if all(not r for _, r in node.items):
        branches.append("")
    return "(?:" + "|".join(branches) + ")"


def _spell(node: Node, *, nonempty: bool = False) -> str:
    dfa = compile_dfa(node)
    if dfa.n_states > MAX_SPELLED_STATES:
        raise GrammarError(
            f"a region of {dfa.n_states} automaton states needs a lookahead in its regex and is too large to "
            f"spell without one (limit {MAX_SPELLED_STATES}); use the regex with lookaheads (Python re) or the "
            "logits processor"
        )
    return _dfa_to_regex(dfa, nonempty=nonempty)


# -- "does not start with WORD", pushed into the first part -------------------------------------


def _first(node: Node) -> tuple[int, bool]:
    """(a superset of the first symbols of the node's strings as a mask, whether it accepts the empty string)."""
    if isinstance(node, Lit):
        return (1 << node.data[0], False) if node.data else (0, True)
    if isinstance(node, Sym):
        return node.mask & ~(1 << EOS), bool(node.mask >> EOS & 1)  # the end of the turn is no text
    if isinstance(node, Seq):
        mask = 0
        for it in node.items:
            m, nullable = _first(it)
            mask |= m
            if not nullable:
                return mask, False
        return mask, True
    if isinstance(node, Alt):
        firsts = [_first(it) for it in node.items]
        mask = 0
        for m, _ in firsts:
            mask |= m
        return mask, any(n for _, n in firsts)
    if isinstance(node, Repeat):
        m, nullable = _first(node.item)
        return m, nullable or node.lo == 0
    if isinstance(node, (Avoid, NotPrefixed, Group, Shared)):
        return _first(node.item)
    if isinstance(node, Members):
        mask, _ = _first(node.sep)
        for member, _required in node.items:
            mask |= _first(member)[0]
        return mask, True  # a superset is enough
    raise GrammarError(f"unknown grammar node {type(node).__name__}")  # pragma: no cover


def push_not_prefixed(node: Node, word: bytes) -> Node | None:
    """The strings of ``node`` that do not start with ``word``, spelled without lookahead.

    Returns ``node`` itself when no string of it starts with ``word`` (callers rely on the identity),
    ``None`` when every string does.
    """
    if not word:
        return None
    mask, _ = _first(node)
    if not mask >> word[0] & 1:
        return node
    if isinstance(node, Lit):
        return None if node.data.startswith(word) else node
    if isinstance(node, Alt):
        parts = [push_not_prefixed(it, word) for it in node.items]
        if all(p is it for p, it in zip(parts, node.items, strict=True)):
            return node
        kept = [p for p in parts if p is not None]
        return alt(*kept) if kept else None
    if isinstance(node, (Group, Shared)):
        inner = push_not_prefixed(node.item, word)
        if inner is node.item:
            return node
        return None if inner is None else group(inner, safe=isinstance(node, Group) and node.safe)
    if isinstance(node, Seq):
        return _push_seq(node, word)
    return _spelled(NotPrefixed(node, word))


def _push_seq(node: Seq, word: bytes) -> Node | None:
    head, rest = node.items[0], seq(*node.items[1:])
    if isinstance(head, Lit):
        data = head.data
        if data.startswith(word):
            return None
        if not word.startswith(data):
            return node  # the literal leaves the word before it ends
        tail = push_not_prefixed(rest, word[len(data) :])
        return node if tail is rest else None if tail is None else seq(head, tail)
    # A string of the head that is a proper prefix of the word could be completed by the rest: the
    # push is exact only when no string of the rest continues any proper prefix (head's or not).
    if all(push_not_prefixed(rest, word[k:]) is rest for k in range(len(word))):
        pushed = push_not_prefixed(head, word)
        if pushed is head:
            return node
        return None if pushed is None else seq(pushed, rest)
    return _spelled(NotPrefixed(node, word))


def _spelled(node: Node, *, nonempty: bool = False) -> Node:
    """``node`` carrying its lookahead-free spelling (rendered by ``to_regex`` as it is).

    With ``nonempty`` the spelling leaves out the empty text while the item keeps it: the item only
    serves :func:`_first`, for which a superset is enough.
    """
    return group(node, regex=_spell(node, nonempty=nonempty))


# -- without the empty text -----------------------------------------------------------------------


def _nonempty(node: Node) -> Node | None:
    """The non-empty texts of ``node`` (``None`` when it has none), with no ``$`` that nothing precedes."""
    if not _first(node)[1]:
        return node
    if isinstance(node, Lit):
        return None
    if isinstance(node, Sym):
        rest = node.mask & ~(1 << EOS)
        return Sym(rest, node.regex) if rest else None
    if isinstance(node, Alt):
        kept = [p for p in (_nonempty(it) for it in node.items) if p is not None]
        return alt(*kept) if kept else None
    if isinstance(node, Seq):
        head, rest = node.items[0], seq(*node.items[1:])
        parts = []
        head_part = _nonempty(head)
        if head_part is not None:
            parts.append(seq(head_part, rest))
        rest_part = _nonempty(rest)  # the head read as the empty text
        if rest_part is not None:
            parts.append(rest_part)
        return alt(*parts) if parts else None
    if isinstance(node, NotPrefixed):
        pushed = push_not_prefixed(node.item, node.word)
        return None if pushed is None else _nonempty(pushed)
    if isinstance(node, Shared):
        return _nonempty(node.item)
    if isinstance(node, Group) and node.regex is None:
        inner = _nonempty(node.item)
        return None if inner is None else group(inner, safe=node.safe)
    return _spelled(node.item if isinstance(node, Group) else node, nonempty=True)


# -- automaton -> regular expression ------------------------------------------------------------


@dataclass(frozen=True)
class _Rx:
    """A regex fragment and how it binds: ``atom`` takes a quantifier, ``quant`` has one, ``seq``, ``alt``."""

    text: str
    kind: str


_EMPTY = _Rx("", "empty")
_END = _Rx("$", "atom")


def _concat(a: _Rx, b: _Rx) -> _Rx:
    if a.kind == "empty":
        return b
    if b.kind == "empty":
        return a
    return _Rx(_for_seq(a) + _for_seq(b), "seq")


def _for_seq(a: _Rx) -> str:
    return f"(?:{a.text})" if a.kind == "alt" else a.text


def _for_quant(a: _Rx) -> str:
    return a.text if a.kind == "atom" else f"(?:{a.text})"


def _union(a: _Rx | None, b: _Rx | None) -> _Rx | None:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if a.kind == "empty" or b.kind == "empty":
        other = b if a.kind == "empty" else a
        return _Rx(_for_quant(other) + "?", "quant")
    return _Rx(a.text + "|" + b.text, "alt")


def _star(a: _Rx | None) -> _Rx:
    if a is None or a.kind == "empty":
        return _EMPTY
    return _Rx(_for_quant(a) + "*", "quant")


def _dfa_to_regex(dfa: DFA, *, nonempty: bool = False) -> str:
    """The text language of ``dfa`` (control tokens left out, the end of the turn as ``$``).

    ``nonempty``: without the empty text (and so without a ``$`` that nothing precedes).
    """
    edges, ends = _char_edges(dfa)
    n = dfa.n_states
    start, final = n, n + 1  # fresh start and final states: eliminating every DFA state leaves start -> final
    out: dict[int, dict[int, _Rx]] = {s: {} for s in range(n + 2)}
    into: dict[int, dict[int, _Rx]] = {s: {} for s in range(n + 2)}

    def add(i: int, j: int, rx: _Rx) -> None:
        merged = _union(out[i].get(j), rx)
        assert merged is not None
        out[i][j] = into[j][i] = merged

    if nonempty:
        # A copy of the start that is not accepting and has no end-of-turn edge: every path reads a character.
        for (a, b), rx in edges.items():
            if a == dfa.start:
                add(start, b, rx)
    else:
        add(start, dfa.start, _EMPTY)
    for s in range(n):
        if dfa.accepting[s]:
            add(s, final, _EMPTY)
    for (s, t), rx in edges.items():
        add(s, t, rx)
    for s, t in ends:
        add(s, t, _END)
    remaining = set(range(n))
    while remaining:
        # Fewest paths through first: keeps the text from multiplying out.
        k = min(remaining, key=lambda s: (len(into[s]) - (s in into[s])) * (len(out[s]) - (s in out[s])))
        remaining.discard(k)
        loop = _star(out[k].pop(k, None))
        into[k].pop(k, None)
        sources, targets = list(into[k].items()), list(out[k].items())
        for i, _ in sources:
            del out[i][k]
        for j, _ in targets:
            del into[j][k]
        for i, a in sources:
            for j, b in targets:
                add(i, j, _concat(_concat(a, loop), b))
        out[k].clear()
        into[k].clear()
    result = out[start].get(final)
    if result is None:  # pragma: no cover - compile_dfa prunes automata that accept nothing
        raise GrammarError("the region accepts no text")
    return _for_quant(result) if result.kind in ("alt",) else result.text


def _char_edges(dfa: DFA) -> tuple[dict[tuple[int, int], _Rx], set[tuple[int, int]]]:
    """Per state pair, the characters (decoded from UTF-8 byte paths) that lead from one to the other;
    and the pairs joined by the end of the turn."""
    t = dfa.transitions
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    ends: set[tuple[int, int]] = set()
    tails = _tails_of(t)
    for s in range(dfa.n_states):
        row = t[s]
        for b in np.flatnonzero(row[:0x80] >= 0).tolist():
            ranges.setdefault((s, int(row[b])), []).append((b, b))
        for lead in np.flatnonzero(row[0xC0:0x100] >= 0).tolist():
            lead += 0xC0
            n_cont = 1 if lead < 0xE0 else 2 if lead < 0xF0 else 3
            if lead >= 0xF8:
                continue
            base = (lead & (0x3F >> n_cont)) << (6 * n_cont)
            lowest = (0x80, 0x800, 0x10000)[n_cont - 1]  # shorter spellings are overlong
            for lo, hi, dest in tails(int(row[lead]), n_cont):
                for a, z in _valid(base + lo, base + hi, lowest):
                    ranges.setdefault((s, dest), []).append((a, z))
        if row[EOS] >= 0:
            ends.add((s, int(row[EOS])))
    return {pair: _Rx(_char_class(spans), "atom") for pair, spans in ranges.items()}, ends


def _tails_of(t: np.ndarray) -> Callable[[int, int], tuple[tuple[int, int, int], ...]]:
    @cache
    def tails(state: int, n: int) -> tuple[tuple[int, int, int], ...]:
        """Runs ``(lo, hi, dest)`` of the values of ``n`` continuation bytes read from ``state``."""
        if n == 0:
            return ((0, 0, state),)
        width = 64 ** (n - 1)
        runs: list[list[int]] = []
        for c in range(64):
            nxt = int(t[state, 0x80 + c])
            if nxt < 0:
                continue
            for lo, hi, dest in tails(nxt, n - 1):
                a, z = c * width + lo, c * width + hi
                if runs and runs[-1][2] == dest and runs[-1][1] + 1 == a:
                    runs[-1][1] = z
                else:
                    runs.append([a, z, dest])
        return tuple((a, z, d) for a, z, d in runs)

    return tails


def _valid(lo: int, hi: int, lowest: int) -> list[tuple[int, int]]:
    lo, hi = max(lo, lowest), min(hi, _MAX_CODEPOINT)
    if lo > hi:
        return []
    s_lo, s_hi = _SURROGATES
    parts = [(lo, min(hi, s_lo - 1)), (max(lo, s_hi + 1), hi)]
    return [(a, z) for a, z in parts if a <= z]


_UNIVERSE = ((0, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, _MAX_CODEPOINT))


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for a, z in sorted(spans):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], z)
        else:
            merged.append([a, z])
    # Surrogates are never text: a class that stops just before them and resumes after them is one run.
    out: list[list[int]] = []
    for a, z in merged:
        if out and out[-1][1] == _SURROGATES[0] - 1 and a == _SURROGATES[1] + 1:
            out[-1][1] = z
        else:
            out.append([a, z])
    return [(a, z) for a, z in out]


def _char_class(spans: list[tuple[int, int]]) -> str:
    merged = _merge(spans)
    if merged == [(0, _MAX_CODEPOINT)]:
        return r"[\s\S]"
    if len(merged) == 1 and merged[0][0] == merged[0][1]:
        return _class_item(merged[0][0])  # one character: no brackets needed
    complement = _complement(merged)
    if len(complement) < len(merged):
        return "[^" + "".join(_class_range(a, z) for a, z in complement) + "]"
    return "[" + "".join(_class_range(a, z) for a, z in merged) + "]"


def _complement(merged: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for a, z in merged:
        if a > at:
            out.extend(_valid(at, a - 1, 0))
        at = z + 1
    if at <= _MAX_CODEPOINT:
        out.extend(_valid(at, _MAX_CODEPOINT, 0))
    return _merge(out)


def _class_range(a: int, z: int) -> str:
    if a == z:
        return _class_char_any(a)
    if z == a + 1:
        return _class_char_any(a) + _class_char_any(z)
    return _class_char_any(a) + "-" + _class_char_any(z)


def _class_char_any(cp: int) -> str:
    return class_char(cp) if cp < 0x80 else chr(cp)


def _class_item(cp: int) -> str:
    """One character outside a class: escaped like the lookahead export's literals."""
    c = chr(cp)
    if c in ".^$*+?{}[]\\|()":
        return "\\" + c
    if c == "\n":
        return "\\n"
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    return c
