"""String values as bytes: the language of a node's string keywords spelled inside a value.

:func:`~toolgrammar.schema.string_keywords.string_language` gives the decoded strings a node allows (a
character-level :class:`~toolgrammar.schema.patterns.Rx`); this module spells them as bytes in two ways:

- ``"json"``: the text between the quotes of a JSON string, each character as ``json.dumps`` writes
  it (``ensure_ascii=False``: raw UTF-8; ``\\"``, ``\\\\`` and the control characters escaped, ``\\/``
  accepted for ``/``). A character of an unrestricted run (``.*`` of an unanchored pattern, the
  characters counted by a bare ``maxLength``) may also be any ``\\uXXXX`` escape, a surrogate pair
  counting as the one character it decodes to (lone surrogates are refused: they are no text).
- ``"raw"``: the characters as UTF-8 (the ``qwen-xml`` format writes string values as raw text).

:func:`constrained_text` keeps a format's forbidden words out of such a value.
"""

from __future__ import annotations

import re
from functools import lru_cache

from toolgrammar.automata.nodes import (
    Node,
    Sym,
    alt,
    avoiding,
    byte_range,
    chars,
    class_char,
    group,
    lit,
    repeat,
    seq,
    star,
)
from toolgrammar.automata.regex import to_regex
from toolgrammar.automata.size import MAX_ESTIMATED_SIZE, estimate_size
from toolgrammar.schema.patterns import (
    ANY,
    Cat,
    Chars,
    CharSet,
    Or,
    Rep,
    Rx,
    chars_of,
    charset,
    complement,
    contains,
    difference,
    intersect,
    union,
)


def counted(unit: Node, lo: int, hi: int | None) -> Node:
    """``unit`` repeated ``lo`` to ``hi`` times, built so its size grows linearly with the counts.

    A ``Repeat`` of many copies is estimated (and minimized) quadratically; here the required copies
    are one flat sequence and the optional ones nested eight at a time (``u{0,7} | u^8 (u{0,7} | u^8
    ...)``), which keeps the automaton's NFA sets small (at most two positions per level) and the
    tree shallow.
    """
    if (hi if hi is not None else lo) * estimate_size(unit) > _FAR_TOO_LARGE:
        # Far over the size limit: the caller's size check refuses it. A flat Repeat says so without
        # building thousands of nested levels (which would also overflow the recursion of the checks).
        return repeat(unit, lo, hi)
    head = [unit] * lo
    if hi is None:
        return seq(*head, star(unit)) if head else star(unit)
    extra = hi - lo
    if extra <= _CHUNK:
        tail = repeat(unit, 0, extra) if extra else lit("")
    else:
        levels = (extra - 1) // _CHUNK
        tail = repeat(unit, 0, extra - _CHUNK * levels)
        for _ in range(levels):
            tail = alt(repeat(unit, 0, _CHUNK - 1), seq(*([unit] * _CHUNK), tail))
    return seq(*head, tail) if head else tail


_CHUNK = 8
_FAR_TOO_LARGE = 8 * MAX_ESTIMATED_SIZE


def rx_node(rx: Rx, mode: str) -> Node:
    """``rx`` as bytes: ``mode`` is ``"json"`` (inside a JSON string) or ``"raw"`` (see the module docstring)."""
    if isinstance(rx, Chars):
        return charset_node(rx.set, mode)
    if isinstance(rx, Cat):
        if not rx.items:
            return lit("")
        return seq(*(rx_node(it, mode) for it in rx.items))
    if isinstance(rx, Or):
        return alt(*(rx_node(it, mode) for it in rx.items))
    if isinstance(rx, Rep):
        return counted(rx_node(rx.item, mode), rx.lo, rx.hi)
    raise TypeError(rx)


_JSON_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
_HEX = "0123456789abcdefABCDEF"


@lru_cache(maxsize=512)
def charset_node(s: CharSet, mode: str) -> Node:
    """One character of ``s``, spelled in ``mode``."""
    if mode == "raw":
        return _utf8(s)
    if mode != "json":
        raise ValueError(f"unknown mode {mode!r}")
    if s == ANY:
        return _json_any_char()
    plain = difference(s, union(chars_of('"\\'), charset((0, 0x1F))))
    parts: list[Node] = [_utf8(plain)] if plain else []
    if contains(s, 0x22):
        parts.append(lit('\\"'))
    if contains(s, 0x5C):
        parts.append(lit("\\\\"))
    if contains(s, 0x2F):
        parts.append(lit("\\/"))
    for cp in range(0x20):
        if contains(s, cp):
            if cp in _JSON_SHORT:
                parts.append(lit("\\" + _JSON_SHORT[cp]))
            low = f"{cp:04x}"
            parts.append(seq(lit("\\u00" + low[2]), chars(_case_variants(low[3]))))
    return alt(*parts)


def _case_variants(digit: str) -> str:
    return digit if not digit.isalpha() else digit.lower() + digit.upper()


@lru_cache(maxsize=1)
def _json_any_char() -> Node:
    """Any one character inside a JSON string, as one decoded character: raw, a short escape, a
    ``\\uXXXX`` escape of a non-surrogate, or a surrogate pair (one astral character)."""
    hexd = chars(_HEX, "[0-9a-fA-F]")
    not_d = chars("0123456789abcABCefEF", "[0-9a-cA-Ce-fE-F]")
    d = chars("dD", "[dD]")
    high = seq(lit("\\u"), d, chars("89abAB", "[89abAB]"), hexd, hexd)
    low = seq(lit("\\u"), d, chars("cdefCDEF", "[c-fC-F]"), hexd, hexd)
    bmp = seq(lit("\\u"), alt(seq(not_d, hexd, hexd, hexd), seq(d, chars("01234567", "[0-7]"), hexd, hexd)))
    plain = _utf8(difference(ANY, union(chars_of('"\\'), charset((0, 0x1F)))))
    short = seq(lit("\\"), chars('"\\/bfnrt', r'["\\/bfnrt]'))
    return group(
        alt(plain, short, bmp, seq(high, low)),
        regex=r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
        r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})",
    )


def _utf8(s: CharSet) -> Node:
    """One character of ``s`` as UTF-8 bytes, carrying its character-class regex for :func:`to_regex`."""
    if not s:
        raise ValueError("an empty character set")
    seqs = [sq for a, z in s for sq in _utf8_sequences(a, z)]
    branches = [seq(*(Sym(byte_range(x, y)) for x, y in sq)) for sq in seqs]
    return group(alt(*branches), regex=class_regex(s))


def _utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """``lo..hi`` as UTF-8 byte-range sequences (each byte position a range), as regex engines split them."""
    for boundary in (0x7F, 0x7FF, 0xFFFF):
        if lo <= boundary < hi:
            return _utf8_sequences(lo, boundary) + _utf8_sequences(boundary + 1, hi)
    if hi <= 0x7F:
        return [[(lo, hi)]]
    n = len(chr(lo).encode("utf-8"))
    for k in range(1, n):
        m = (1 << (6 * k)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                return _utf8_sequences(lo, lo | m) + _utf8_sequences((lo | m) + 1, hi)
            if hi & m != m:
                return _utf8_sequences(lo, (hi & ~m) - 1) + _utf8_sequences(hi & ~m, hi)
    a, b = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
    return [[(a[k], b[k]) for k in range(n)]]


def class_regex(s: CharSet) -> str:
    """``s`` as a Python regex class (non-ASCII characters written as themselves)."""
    if s == ANY:
        return r"[\s\S]"
    comp = complement(s)
    if len(s) == 1 and s[0][0] == s[0][1]:
        return "[" + _class_member(s[0][0]) + "]"
    if len(comp) < len(s):
        return "[^" + "".join(_class_range(a, z) for a, z in comp) + "]"
    return "[" + "".join(_class_range(a, z) for a, z in s) + "]"


def _class_range(a: int, z: int) -> str:
    if a == z:
        return _class_member(a)
    if z == a + 1:
        return _class_member(a) + _class_member(z)
    return _class_member(a) + "-" + _class_member(z)


def _class_member(cp: int) -> str:
    return class_char(cp) if cp < 0x80 else chr(cp)


# --------------------------------------------------------------------------------------------------
# A constrained string value, its forbidden substrings kept out


@lru_cache(maxsize=256)
def constrained_text(rx: Rx, mode: str, avoid: tuple[str, ...] = (), lead: str = "") -> Node:
    """``lead`` + the spelling of ``rx`` in ``mode``, containing none of ``avoid`` (raw substrings).

    A word is kept out only where the language can spell it: every one of its characters (but a
    leading newline, which ``lead`` supplies in the ``qwen-xml`` format) must be possible. Most
    patterns and every format cannot hold a ``<``, so their values need no guard at all.

    The regex of a guarded value (for :func:`~toolgrammar.automata.regex.to_regex`) puts the guard
    ``(?!w1|w2...)`` before every character that could start a word: a forbidden word can neither
    start inside an escape sequence (words start with ``<`` or a newline) nor straddle the end of
    the value (the markup that follows starts with ``"`` or a newline), so this is exact.
    """
    sets = _charsets(rx)
    possible = union(*sets) if sets else ()
    if mode == "raw":
        words = tuple(w for w in avoid if all(contains(possible, ord(c)) for c in (w[1:] if w.startswith("\n") else w)))
    else:
        words = tuple(w for w in avoid if w and contains(possible, ord(w[0])))
    body = rx_node(rx, mode)
    node = seq(lit(lead), body) if lead else body
    if not words:
        return node
    guard = "|".join(re.escape(w) for w in words)
    starts = chars_of("".join(sorted({w[0] for w in words})))
    head = "".join(f"(?:(?!{guard}){re.escape(c)})" if contains(starts, ord(c)) else re.escape(c) for c in lead)
    return group(avoiding(node, *words), regex=head + _rx_regex(rx, mode, guard, starts))


def _charsets(rx: Rx) -> list[CharSet]:
    if isinstance(rx, Chars):
        return [rx.set]
    if isinstance(rx, (Cat, Or)):
        return [s for it in rx.items for s in _charsets(it)]
    if isinstance(rx, Rep):
        return _charsets(rx.item)
    raise TypeError(rx)


def _rx_regex(rx: Rx, mode: str, guard: str, starts: CharSet) -> str:
    """The regex of ``rx`` spelled in ``mode``, each character that could start a word guarded."""
    if isinstance(rx, Chars):
        unit = class_regex(rx.set) if mode == "raw" else to_regex(charset_node(rx.set, "json"))
        if intersect(rx.set, starts):
            return f"(?:(?!{guard}){unit})"
        return f"(?:{unit})"
    if isinstance(rx, Cat):
        return "".join(_rx_regex(it, mode, guard, starts) for it in rx.items)
    if isinstance(rx, Or):
        return "(?:" + "|".join(_rx_regex(it, mode, guard, starts) for it in rx.items) + ")"
    if isinstance(rx, Rep):
        inner = "(?:" + _rx_regex(rx.item, mode, guard, starts) + ")"
        return inner + "{" + str(rx.lo) + "," + ("" if rx.hi is None else str(rx.hi)) + "}"
    raise TypeError(rx)


__all__ = ["charset_node", "class_regex", "constrained_text", "counted", "rx_node"]
