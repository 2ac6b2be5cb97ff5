"""The language of a string keyword: a character-level regular expression, and ``pattern`` read as one.

A string keyword describes the *decoded* string, one code point per character (as Python's
``jsonschema`` counts and searches it). This module holds the language of decoded strings as a
small character-level regular expression (:class:`Rx`: character sets, concatenation, alternation,
bounded repetition), reads a ``pattern`` into one (:func:`parse_pattern`) and cuts one down to a
length range (:func:`restrict`). :mod:`toolgrammar.schema.string_keywords` combines the keywords of a
node; the value grammars spell the language as bytes.

Why a language of its own instead of Python's ``re``: the grammar is a byte-level automaton, so the
pattern must be compiled, not run. The regex dialect is the subset of ECMA-262 that JSON Schema
means *and* that Python's ``re`` (which ``jsonschema`` uses to judge calls) reads the same way; the
rest is refused by :func:`parse_pattern` with a message that names the construct.

Semantics, chosen so that every accepted string matches under both ECMA-262 and Python's ``re``:

- search, not match: a pattern without ``^`` may match anywhere, so it gets any text before it;
  without ``$``, any text after it. ``^``/``$`` are accepted only at the ends of a top-level
  alternative (``^a|b$`` is fine; ``a^b`` and ``(^a)`` are refused).
- ``\\d`` is ``[0-9]`` and ``\\w`` is ``[A-Za-z0-9_]`` (Python's are Unicode-wide, ECMA's ASCII:
  the grammar takes what both accept). ``\\s`` is the whitespace both agree on, ``\\S`` what neither
  calls whitespace. ``\\D`` and ``\\W`` are limited to ASCII (Python's complement of its Unicode
  classes depends on the Unicode version), and a negated class ``[^...]`` may not hold ``\\d``/``\\w``.
- ``.`` is any character but ``\\n``, ``\\r``, U+2028 and U+2029 (ECMA's; Python's excludes ``\\n``
  only). ``$`` matches at the very end only (Python's also before a final newline: the grammar
  never writes that newline).
- lazy quantifiers (``*?``) change what a match captures, not whether one exists: accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

CharSet = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-adjacent inclusive code point ranges; never a surrogate (U+D800-U+DFFF)."""

MAX_CODEPOINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
ANY: CharSet = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
"""Every character (every Unicode scalar value)."""


class StringSchemaError(ValueError):
    """A string keyword (or a combination of them) that the grammar cannot enforce exactly.

    ``keyword`` is the keyword at fault; the normalizer turns it into a
    :class:`~toolgrammar.errors.ToolSchemaError` with the tool and the pointer.
    """

    def __init__(self, keyword: str, message: str) -> None:
        super().__init__(message)
        self.keyword = keyword


# --------------------------------------------------------------------------------------------------
# Character sets


def charset(*ranges: tuple[int, int]) -> CharSet:
    """Normalize ranges: sorted, merged, surrogates cut out."""
    cut: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo > hi:
            continue
        for a, z in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi)):
            if a <= z:
                cut.append((a, z))
    out: list[list[int]] = []
    for a, z in sorted(cut):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], z)
        else:
            out.append([a, z])
    return tuple((a, z) for a, z in out)


def chars_of(text: str) -> CharSet:
    return charset(*((ord(c), ord(c)) for c in text))


def union(*sets: CharSet) -> CharSet:
    return charset(*(r for s in sets for r in s))


def complement(s: CharSet) -> CharSet:
    out, at = [], 0
    for a, z in s:
        if a > at:
            out.append((at, a - 1))
        at = z + 1
    if at <= MAX_CODEPOINT:
        out.append((at, MAX_CODEPOINT))
    return charset(*out)


def difference(a: CharSet, b: CharSet) -> CharSet:
    return complement(union(complement(a), b))


def intersect(a: CharSet, b: CharSet) -> CharSet:
    return complement(union(complement(a), complement(b)))


def contains(s: CharSet, cp: int) -> bool:
    return any(a <= cp <= z for a, z in s)


# --------------------------------------------------------------------------------------------------
# The character-level expression


class Rx:
    """A regular expression over characters (the decoded string)."""

    __slots__ = ()


@dataclass(frozen=True)
class Chars(Rx):
    """One character of a set (never empty)."""

    set: CharSet


@dataclass(frozen=True)
class Cat(Rx):
    items: tuple[Rx, ...]


@dataclass(frozen=True)
class Or(Rx):
    items: tuple[Rx, ...]


@dataclass(frozen=True)
class Rep(Rx):
    """``item`` ``lo`` to ``hi`` times (``hi=None``: unbounded)."""

    item: Rx
    lo: int
    hi: int | None


EPSILON = Cat(())
"""The empty string."""

ANY_TEXT = Rep(Chars(ANY), 0, None)
"""Any string (what an unanchored pattern allows around its match)."""


def cat(*items: Rx) -> Rx:
    flat: list[Rx] = []
    for it in items:
        flat.extend(it.items if isinstance(it, Cat) else (it,))
    return flat[0] if len(flat) == 1 else Cat(tuple(flat))


def either(*items: Rx) -> Rx:
    flat: list[Rx] = []
    for it in items:
        flat.extend(it.items if isinstance(it, Or) else (it,))
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def literal(text: str) -> Rx:
    return cat(*(Chars(chars_of(c)) for c in text))


def lengths(rx: Rx) -> tuple[int, int | None]:
    """The shortest and longest length (``None``: unbounded) of the strings of ``rx``."""
    if isinstance(rx, Chars):
        return 1, 1
    if isinstance(rx, Cat):
        lo, hi = 0, 0
        for it in rx.items:
            a, b = lengths(it)
            lo += a
            hi = None if hi is None or b is None else hi + b
        return lo, hi
    if isinstance(rx, Or):
        spans = [lengths(it) for it in rx.items]
        his = [b for _, b in spans]
        return min(a for a, _ in spans), None if None in his else max(b for b in his if b is not None)
    if isinstance(rx, Rep):
        a, b = lengths(rx.item)
        hi = None if rx.hi is None or b is None else b * rx.hi
        if b == 0:
            hi = 0
        return a * rx.lo, hi
    raise TypeError(rx)


class _Empty(Exception):
    """Raised inside :func:`restrict` when no string of a part has an allowed length."""


def restrict(rx: Rx, lo: int, hi: int | None) -> Rx | None:
    r"""The strings of ``rx`` whose length is in ``lo..hi``, as an expression, or ``None`` when that
    cannot be written exactly by adjusting the repetitions of ``rx``.

    Exact whenever every concatenation has at most one part of variable length once the short
    variable parts (at most a few lengths: ``s?``) are split into one alternative per length, and
    every repetition of a variable part is left as it is by the bounds. That covers the patterns
    length bounds come with in practice (``^[a-z0-9_]+$``, ``^https?://``, formats of fixed shape;
    ``^\d+(\.\d+)?$`` under a ``maxLength`` of at most 16, split by the length of its first part);
    ``^[a-z]+-[a-z]+$`` with ``maxLength: 64`` is not (two unbounded parts share a large budget).
    Raises :class:`StringSchemaError` when no string has an allowed length.
    """
    try:
        return _restrict(rx, lo, hi)
    except _Empty:
        raise StringSchemaError(
            "maxLength" if hi is not None else "minLength", "no string of the pattern or format has an allowed length"
        ) from None


_SPLIT_LENGTHS = 16
"""Most lengths a variable part of a concatenation may have (within the length budget) to be split into
one alternative per length."""


def _restrict(rx: Rx, lo: int, hi: int | None) -> Rx | None:
    mn, mx = lengths(rx)
    lo = max(lo, 0)
    if (hi is not None and hi < mn) or (mx is not None and lo > mx) or (hi is not None and lo > hi):
        raise _Empty
    if lo <= mn and (hi is None or (mx is not None and mx <= hi)):
        return rx
    if isinstance(rx, Or):
        kept: list[Rx] = []
        for it in rx.items:
            try:
                sub = _restrict(it, lo, hi)
            except _Empty:
                continue
            if sub is None:
                return None
            kept.append(sub)
        if not kept:
            raise _Empty
        return either(*kept)
    if isinstance(rx, Rep):
        a, b = lengths(rx.item)
        if a != b and rx.hi == 1:  # X? is (|X): each side restricted on its own
            return _restrict(either(EPSILON, rx.item) if rx.lo == 0 else rx.item, lo, hi)
        if a != b:
            return None
        if a == 0:
            return rx  # only the empty string: already checked to fit
        k_lo = max(rx.lo, -(-lo // a))
        k_hi = hi // a if hi is not None else None
        if rx.hi is not None:
            k_hi = rx.hi if k_hi is None else min(k_hi, rx.hi)
        if k_hi is not None and k_lo > k_hi:
            raise _Empty
        return Rep(rx.item, k_lo, k_hi)
    if isinstance(rx, Cat):
        spans = [lengths(it) for it in rx.items]
        variable = [i for i, (a, b) in enumerate(spans) if a != b]
        if len(variable) == 1:
            i = variable[0]
            fixed = sum(a for j, (a, _) in enumerate(spans) if j != i)
            part = _restrict(rx.items[i], lo - fixed, None if hi is None else hi - fixed)
            return None if part is None else cat(*rx.items[:i], part, *rx.items[i + 1 :])
        # Split a variable part into one alternative per length it can have within the budget (s?, or
        # \d+ under a small maxLength): each alternative has one variable part less, and is restricted
        # as a whole. The alternatives multiply the size, so only a few lengths are split.
        others_min = sum(a for a, _ in spans)
        for i in variable:
            a, b = spans[i]
            if hi is not None:
                cap = hi - (others_min - a)
                b = cap if b is None else min(b, cap)
            if b is None or b - a >= _SPLIT_LENGTHS:
                continue
            branches: list[Rx] = []
            for n in range(a, b + 1):
                try:
                    head = _restrict(rx.items[i], n, n)
                    if head is None:
                        return None
                    branch = _restrict(cat(*rx.items[:i], head, *rx.items[i + 1 :]), lo, hi)
                except _Empty:
                    continue
                if branch is None:
                    return None
                branches.append(branch)
            if not branches:
                raise _Empty
            return either(*branches)
        return None
    raise _Empty  # pragma: no cover - a Chars always fits or is empty (checked above)


# --------------------------------------------------------------------------------------------------
# ECMA-262 patterns (the subset described in the module docstring)


_DIGITS = charset((0x30, 0x39))
_WORD = union(charset((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)), chars_of("_"))
_ASCII = charset((0, 0x7F))
# Whitespace by each definition: Python's str \s and ECMA-262's WhiteSpace + LineTerminator.
_PY_SPACE = union(
    chars_of(" \t\n\r\f\v\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"),
    charset((0x1C, 0x1F), (0x2000, 0x200A)),
)
_ECMA_SPACE = union(chars_of(" \t\n\r\f\v\xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"), charset((0x2000, 0x200A)))
_DOT = complement(chars_of("\n\r\u2028\u2029"))

# Each class escape: (what the grammar may generate, a superset of what either engine matches), so
# that a negated class [^...] stays inside both engines' readings (None: no superset to give).
_CLASS_ESCAPES: dict[str, tuple[CharSet, CharSet | None]] = {
    "d": (_DIGITS, None),
    "w": (_WORD, None),
    "s": (intersect(_PY_SPACE, _ECMA_SPACE), union(_PY_SPACE, _ECMA_SPACE)),
    "D": (difference(_ASCII, _DIGITS), complement(_DIGITS)),
    "W": (difference(_ASCII, _WORD), complement(_WORD)),
    "S": (complement(union(_PY_SPACE, _ECMA_SPACE)), complement(intersect(_PY_SPACE, _ECMA_SPACE))),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B}
_SYNTAX = set("^$\\.*+?()[]{}|/")
_MAX_REPEAT = 10_000
"""Largest count a quantifier may give (the size check refuses far smaller automata anyway)."""


class _PatternParser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def error(self, what: str, at: int | None = None) -> StringSchemaError:
        where = self.i if at is None else at
        return StringSchemaError("pattern", f"pattern {self.p!r}: {what} (at character {where})")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def parse(self) -> Rx:
        branches = []
        while True:
            start_anchor = self.peek() == "^"
            if start_anchor:
                self.i += 1
            body, end_anchor = self.alternative(top=True)
            branches.append(cat(EPSILON if start_anchor else ANY_TEXT, body, EPSILON if end_anchor else ANY_TEXT))
            if self.peek() == "|":
                self.i += 1
                continue
            if self.peek() == ")":
                raise self.error("unbalanced ')'")
            return either(*branches)

    def disjunction(self) -> Rx:
        branches = [self.alternative(top=False)[0]]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.alternative(top=False)[0])
        return either(*branches)

    def alternative(self, *, top: bool) -> tuple[Rx, bool]:
        items: list[Rx] = []
        while True:
            c = self.peek()
            if c in ("", "|", ")"):
                return cat(*items) if items else EPSILON, False
            if c == "$":
                self.i += 1
                if top and self.peek() in ("", "|"):
                    return cat(*items) if items else EPSILON, True
                raise self.error(
                    "'$' is supported only at the end of the pattern or of a top-level alternative", self.i - 1
                )
            if c == "^":
                raise self.error("'^' is supported only at the start of the pattern or of a top-level alternative")
            atom = self.atom()
            items.append(self.quantified(atom))

    def quantified(self, atom: Rx) -> Rx:
        c = self.peek()
        start = self.i
        if c in ("*", "+", "?"):
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{":
            got = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.p, self.i)
            if got is None:
                raise self.error(
                    "'{' that does not start a quantifier {n}, {n,} or {n,m} (ECMA-262 and Python read a lone "
                    "'{' differently: escape it as '\\{')"
                )
            self.i = got.end()
            lo = int(got.group(1))
            hi = lo if got.group(2) is None else (int(got.group(3)) if got.group(3) else None)
            if hi is not None and hi < lo:
                raise self.error(f"quantifier {got.group()} has its numbers out of order", start)
            if max(lo, hi or 0) > _MAX_REPEAT:
                raise self.error(f"quantifier {got.group()} counts past {_MAX_REPEAT}", start)
        else:
            return atom
        if self.peek() == "?":
            self.i += 1  # lazy: the same strings match
        if self.peek() in ("*", "+", "?", "{"):
            raise self.error("a quantifier directly after a quantifier (possessive or nested) is not supported")
        return Rep(atom, lo, hi)

    def atom(self) -> Rx:
        c = self.peek()
        start = self.i
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                what = {
                    "?=": "lookahead",
                    "?!": "negative lookahead",
                    "?<=": "lookbehind",
                    "?<!": "negative lookbehind",
                }
                name = next((v for k, v in what.items() if self.p.startswith(k, self.i)), None)
                if name is None and self.p.startswith(("?<", "?P<"), self.i):
                    name = "named group (ECMA-262 and Python spell it differently: use (?:...))"
                raise self.error(f"{name or 'group flag or extension'} is not supported", start)
            inner = self.disjunction()
            if self.peek() != ")":
                raise self.error("missing ')'", start)
            self.i += 1
            return inner
        if c == "[":
            return Chars(self.char_class())
        if c == ".":
            self.i += 1
            return Chars(_DOT)
        if c == "\\":
            got = self.escape(in_class=False)
            return Chars(got[0])
        if c in ("*", "+", "?", "{"):
            raise self.error(f"nothing to repeat before {c!r}")
        if c == "]" or c == "}":
            raise self.error(f"unescaped {c!r} (escape it as '\\{c}')")
        self.i += 1
        return Chars(chars_of(c))

    def escape(self, *, in_class: bool) -> tuple[CharSet, CharSet | None, bool]:
        """``\\X`` at the cursor: (what may be generated, a superset of what matches, is it one character)."""
        start = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.error("pattern ends with a lone backslash", start)
        self.i += 1
        if c in _CLASS_ESCAPES:
            under, over = _CLASS_ESCAPES[c]
            return under, over, False
        if c in _CONTROL_ESCAPES:
            one = chars_of(chr(_CONTROL_ESCAPES[c]))
            return one, one, True
        if c == "b" and in_class:
            one = chars_of("\b")
            return one, one, True
        if c in ("x", "u"):
            width = 2 if c == "x" else 4
            digits = self.p[self.i : self.i + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                extra = " (\\u{...} is not supported)" if c == "u" else ""
                raise self.error(f"\\{c} needs {width} hex digits{extra}", start)
            self.i += width
            cp = int(digits, 16)
            if _SURROGATES[0] <= cp <= _SURROGATES[1]:
                raise self.error(
                    "a surrogate escape (a half of a UTF-16 pair) is not supported: write the character itself", start
                )
            one = chars_of(chr(cp))
            return one, one, True
        if c in "bB":
            raise self.error("word boundaries (\\b, \\B) are not supported", start)
        if c.isdigit():
            raise self.error("backreferences and octal escapes (\\1, \\0...) are not supported", start)
        if c.isascii() and not c.isalnum():
            one = chars_of(c)
            return one, one, True
        raise self.error(
            f"the escape \\{c} is not supported (ECMA-262 and Python read it differently, or not at all)", start
        )

    def char_class(self) -> CharSet:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        if self.peek() == "]":
            raise self.error(
                "a class that starts with ']' is read differently by ECMA-262 (empty class) and Python: escape it",
                start,
            )
        under: list[CharSet] = []
        over: list[CharSet | None] = []
        while True:
            c = self.peek()
            if not c:
                raise self.error("missing ']'", start)
            if c == "]":
                self.i += 1
                break
            if c == "[":
                raise self.error("'[' inside a class is read differently by Python: escape it as '\\['")
            first = self.class_atom()
            if self.peek() == "-" and self.p[self.i + 1 : self.i + 2] not in ("]", ""):
                dash = self.i
                self.i += 1
                second = self.class_atom()
                if first[2] is None or second[2] is None:
                    raise self.error("a class escape (\\d, \\w, \\s...) cannot bound a range", dash)
                if first[2] > second[2]:
                    raise self.error("a range whose ends are out of order", dash)
                span = charset((first[2], second[2]))
                under.append(span)
                over.append(span)
            else:
                under.append(first[0])
                over.append(first[1])
        if not negated:
            got = union(*under)
            if not got:
                raise self.error("an empty class", start)
            return got
        if any(o is None for o in over):
            raise self.error(
                "\\d or \\w inside a negated class (Python's are Unicode-wide, ECMA-262's ASCII: write the "
                "characters out)",
                start,
            )
        got = complement(union(*(o for o in over if o is not None)))
        if not got:
            raise self.error("a negated class that excludes every character", start)
        return got

    def class_atom(self) -> tuple[CharSet, CharSet | None, int | None]:
        """One class member: (generated, superset matched, its code point when it is one character)."""
        c = self.peek()
        if c == "\\":
            under, over, single = self.escape(in_class=True)
            return under, over, under[0][0] if single else None
        if c in "&~|-" and self.p[self.i + 1 : self.i + 2] == c:
            raise self.error(f"{c}{c} inside a class (a set operation in Python's future syntax): escape one")
        self.i += 1
        one = chars_of(c)
        return one, one, ord(c)


@lru_cache(maxsize=256)
def parse_pattern(pattern: str) -> Rx:
    """The strings ``jsonschema`` would find ``pattern`` in (search semantics), as an :class:`Rx`.

    Raises :class:`StringSchemaError` (keyword ``pattern``) on what the grammar does not support or
    on a pattern Python's ``re`` cannot compile (``jsonschema`` would fail on every call then).
    """
    _check_text(pattern)
    rx = _PatternParser(pattern).parse()
    try:
        re.compile(pattern)
    except re.error as error:
        raise StringSchemaError(
            "pattern", f"pattern {pattern!r} is not a valid Python regular expression: {error}"
        ) from None
    return rx


def _check_text(pattern: str) -> None:
    if not isinstance(pattern, str):
        raise StringSchemaError("pattern", f"pattern must be a string, got {pattern!r}")


__all__ = [
    "ANY",
    "ANY_TEXT",
    "EPSILON",
    "MAX_CODEPOINT",
    "Cat",
    "CharSet",
    "Chars",
    "Or",
    "Rep",
    "Rx",
    "StringSchemaError",
    "cat",
    "chars_of",
    "charset",
    "complement",
    "contains",
    "difference",
    "either",
    "intersect",
    "lengths",
    "literal",
    "parse_pattern",
    "restrict",
    "union",
]
