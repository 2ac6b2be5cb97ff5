"""Numbers within ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``, as regular languages.

``jsonschema`` compares a value with a bound as Python does: an ``int`` exactly (``int`` against
``float`` included), a ``float`` as the double the JSON text rounds to. So:

- **integer syntax** (``-?(0|[1-9][0-9]*)``, for ``integer`` and ``number`` alike) is exact: the
  decimal strings of the integers in the range, built digit by digit as regex engines build numeric
  ranges (a bound of more than :data:`MAX_EXACT_DIGITS` digits is moved inward to a power of ten, so
  huge bounds stay small: sound, and only integers of more than 24 digits are lost).
- **fraction syntax** (``-?I.F``, ``number`` only) is sound and exact up to rounding: the bound is
  first made the double ``T`` that a value must reach (``minimum 0.1``: 0.1's double;
  ``exclusiveMinimum 0``: the smallest positive double), then written as the shortest decimal ``D``
  that rounds to ``T`` (``repr``), and the grammar allows the decimals ``>= D``. Rounding is
  monotonic, so every such text reads as a double ``>= T``; the only texts lost are the few that
  round to ``T`` from below ``D`` (beyond the 17th significant digit). A ``D`` with more than
  :data:`MAX_FRACTION_DIGITS` digits after the point is rounded inward to that many.
- **exponent syntax** (``1e-05``, ``1.5E+20``) is allowed only where a bound is ``0`` and the other
  side is open (``minimum: 0``, ``exclusiveMinimum: 0``, ``maximum: 0``, ``exclusiveMaximum: 0``):
  the sign decides, and the exponent is kept where no reading underflows to zero. Elsewhere a
  bounded number is written without an exponent (what ``json.dumps`` writes from 1e-4 to 1e16).

Each allowed text therefore satisfies the bounds when read; the construction never relies on the
model stopping early.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

from toolgrammar.automata.automaton import Node, alt, chars, lit, opt, repeat, seq, star
from toolgrammar.schema.strings import counted

MAX_EXACT_DIGITS = 24
"""Longest integer bound (in digits) enforced digit by digit; longer ones move inward to a power of ten."""

MAX_FRACTION_DIGITS = 24
"""Most digits after the point a fraction-syntax bound keeps (rounded inward beyond: 1e-300 as a bound
of a fraction-syntax value becomes 1e-24, which no fraction text below it reaches)."""

MAX_FLOAT_INT_DIGITS = 17
"""Integer digits of a fraction-syntax number with no upper bound (as in ``json_grammar.finite_number``)."""

NUMBER_KEYWORDS: tuple[str, ...] = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")

_DIGIT = chars("0123456789", "[0-9]")
_NONZERO = chars("123456789", "[1-9]")


class Bounds:
    """A value's bounds as exact fractions: ``lo``/``hi`` (``None``: open) and whether each is exclusive."""

    __slots__ = ("hi", "hi_open", "lo", "lo_open")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.lo: Fraction | None = None
        self.lo_open = False
        self.hi: Fraction | None = None
        self.hi_open = False
        for key, is_lo, is_open in (
            ("minimum", True, False),
            ("exclusiveMinimum", True, True),
            ("maximum", False, False),
            ("exclusiveMaximum", False, True),
        ):
            if key not in schema:
                continue
            value = Fraction(schema[key])
            if is_lo and (self.lo is None or value > self.lo or (value == self.lo and is_open)):
                self.lo, self.lo_open = value, is_open
            if not is_lo and (self.hi is None or value < self.hi or (value == self.hi and is_open)):
                self.hi, self.hi_open = value, is_open

    @property
    def any(self) -> bool:
        return self.lo is not None or self.hi is not None

    def integer_range(self) -> tuple[int | None, int | None]:
        """The smallest and largest integer inside the bounds (``None``: open)."""
        lo = hi = None
        if self.lo is not None:
            lo = math.floor(self.lo) + 1 if self.lo_open and self.lo.denominator == 1 else math.ceil(self.lo)
        if self.hi is not None:
            hi = math.ceil(self.hi) - 1 if self.hi_open and self.hi.denominator == 1 else math.floor(self.hi)
        return lo, hi

    def has_number(self) -> bool:
        """Whether any real number satisfies the bounds."""
        if self.lo is None or self.hi is None:
            return True
        return self.lo < self.hi or (self.lo == self.hi and not self.lo_open and not self.hi_open)

    def float_range(self) -> tuple[Decimal | None, Decimal | None] | None:
        """The decimal bounds ``D`` of fraction-syntax values (module docstring), ``None`` when no finite
        double is inside the bounds."""
        lo = hi = None
        if self.lo is not None:
            t = _double_at_least(self.lo, self.lo_open)
            if t is None:
                return None
            lo = _round_fraction(Decimal(repr(t)), up=True)
        if self.hi is not None:
            t = _double_at_least(-self.hi, self.hi_open)
            if t is None:
                return None
            hi = -_round_fraction(Decimal(repr(t)), up=True)
        if lo is not None and hi is not None and lo > hi:
            return None
        return lo, hi


def _double_at_least(bound: Fraction, strict: bool) -> float | None:
    """The smallest finite double ``>= bound`` (``> bound`` when ``strict``), or ``None``."""
    try:
        t = float(bound)
    except OverflowError:
        return None if bound > 0 else -1.7976931348623157e308
    if Fraction(t) < bound or (strict and Fraction(t) == bound):
        t = math.nextafter(t, math.inf)
    if t == 0.0:
        t = 0.0  # -0.0 and 0.0 are the same bound; repr would keep the sign
    return t if math.isfinite(t) else None


def _round_fraction(d: Decimal, *, up: bool) -> Decimal:
    """``d`` with at most :data:`MAX_FRACTION_DIGITS` digits after the point, rounded up (or down)."""
    quantum = Decimal(1).scaleb(-MAX_FRACTION_DIGITS)
    if d.as_tuple().exponent >= -MAX_FRACTION_DIGITS:  # type: ignore[operator]
        return d
    return d.quantize(quantum, rounding="ROUND_CEILING" if up else "ROUND_FLOOR")


# --------------------------------------------------------------------------------------------------
# Integers


def integer_node(lo: int | None, hi: int | None) -> Node:
    """Canonical JSON integers (``-0`` included, as :func:`~toolgrammar.values.json_grammar.json_integer`)
    whose value is in ``lo..hi``. The caller checks that the range is not empty."""
    parts: list[Node] = []
    if hi is None or hi >= 0:
        plus = _magnitudes(max(lo, 0) if lo is not None else 0, hi)
        if plus is not None:
            parts.append(plus)
    if lo is None or lo <= 0:
        # "-" then the magnitudes: -0 is 0, so it belongs wherever 0 does.
        minus = _magnitudes(0 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
        if minus is not None:
            parts.append(seq(lit("-"), minus))
    if not parts:
        raise ValueError(
            f"no integer from {lo} to {hi} can be written: bounds of more than {MAX_EXACT_DIGITS} digits are moved "
            "inward to a power of ten"
        )
    return alt(*parts)


def _magnitudes(a: int, b: int | None) -> Node | None:
    """The decimal strings (no sign, no leading zero) of ``a..b`` (``b=None``: unbounded), ``0 <= a``;
    ``None`` when there is none."""
    parts: list[Node] = []
    if a == 0:
        parts.append(lit("0"))
        a = 1
    if b is not None and b < a:
        return alt(*parts) if parts else None
    if b is not None and len(str(b)) > MAX_EXACT_DIGITS:
        b = 10 ** (len(str(b)) - 1) - 1  # inward: every integer with one digit fewer than b
    if len(str(a)) > MAX_EXACT_DIGITS:
        a = 10 ** len(str(a))  # inward: the next power of ten
    if b is not None and b < a:
        return alt(*parts) if parts else None
    la = len(str(a))
    if b is None:
        parts.append(_same_length(str(a), "9" * la))
        parts.append(seq(_NONZERO, counted(_DIGIT, la, None)))
        return alt(*parts)
    lb = len(str(b))
    if la == lb:
        parts.append(_same_length(str(a), str(b)))
        return alt(*parts)
    parts.append(_same_length(str(a), "9" * la))
    if lb - la >= 2:  # every length strictly between
        parts.append(seq(_NONZERO, counted(_DIGIT, la, lb - 2)))
    parts.append(_same_length("1" + "0" * (lb - 1), str(b)))
    return alt(*parts)


def _between(lo: str, hi: str) -> Node:
    """One digit from ``lo`` to ``hi``."""
    if lo == hi:
        return lit(lo)
    digits = "".join(str(d) for d in range(int(lo), int(hi) + 1))
    return chars(digits, f"[{lo}-{hi}]" if int(hi) - int(lo) > 1 else f"[{digits}]")


def _free(n: int) -> Node:
    return seq(*([_DIGIT] * n)) if n else lit("")


def _same_length(a: str, b: str) -> Node:
    """Digit strings of one length from ``a`` to ``b`` (``a <= b``), compared digit by digit."""
    k = 0
    while k < len(a) and a[k] == b[k]:
        k += 1
    prefix = lit(a[:k])
    if k == len(a):
        return prefix
    rest = len(a) - k - 1
    lo_tail, hi_tail = a[k + 1 :], b[k + 1 :]
    branches: list[Node] = []
    if lo_tail == "0" * rest and hi_tail == "9" * rest:
        return seq(prefix, _between(a[k], b[k]), _free(rest))
    branches.append(seq(lit(a[k]), _at_least(lo_tail)))
    if int(b[k]) - int(a[k]) >= 2:
        branches.append(seq(_between(str(int(a[k]) + 1), str(int(b[k]) - 1)), _free(rest)))
    branches.append(seq(lit(b[k]), _at_most(hi_tail)))
    return seq(prefix, alt(*branches))


def _at_least(a: str) -> Node:
    """Digit strings of ``len(a)`` digits ``>= a``."""
    if not a:
        return lit("")
    if a == "0" * len(a):
        return _free(len(a))
    branches = [seq(lit(a[0]), _at_least(a[1:]))]
    if a[0] != "9":
        branches.append(seq(_between(str(int(a[0]) + 1), "9"), _free(len(a) - 1)))
    return alt(*branches)


def _at_most(b: str) -> Node:
    """Digit strings of ``len(b)`` digits ``<= b``."""
    if not b:
        return lit("")
    if b == "9" * len(b):
        return _free(len(b))
    branches = [seq(lit(b[0]), _at_most(b[1:]))]
    if b[0] != "0":
        branches.append(seq(_between("0", str(int(b[0]) - 1)), _free(len(b) - 1)))
    return alt(*branches)


# --------------------------------------------------------------------------------------------------
# Numbers


def number_node(bounds: Bounds, base: Node) -> Node:
    """JSON numbers within ``bounds``; ``base`` is the unbounded number grammar (returned when open)."""
    if not bounds.any:
        return base
    parts: list[Node] = []
    ilo, ihi = bounds.integer_range()
    if ilo is None or ihi is None or ilo <= ihi:
        parts.append(integer_node(ilo, ihi))
    decimals = bounds.float_range()
    if decimals is not None:
        lo, hi = decimals
        if hi is None or hi >= 0:
            plus = _decimal_magnitudes(max(lo, Decimal(0)) if lo is not None else Decimal(0), hi)
            if plus is not None:
                parts.append(plus)
        if lo is None or lo <= 0:
            neg_lo = Decimal(0) if hi is None or hi >= 0 else -hi
            minus = _decimal_magnitudes(neg_lo, None if lo is None else -lo)
            if minus is not None:
                parts.append(seq(lit("-"), minus))
    exponent = _exponent_forms(bounds)
    if exponent is not None:
        parts.append(exponent)
    if not parts:
        raise ValueError("no number inside the bounds can be written")
    return alt(*parts)


def _exponent_forms(bounds: Bounds) -> Node | None:
    """Numbers with an exponent, where a bound of zero and an open other side decide by the sign alone."""
    zero = Fraction(0)
    if bounds.lo == zero and bounds.hi is None:
        sign, strict = "", bounds.lo_open
    elif bounds.hi == zero and bounds.lo is None:
        sign, strict = "-", bounds.hi_open
    else:
        return None
    e = chars("eE", "[eE]")
    frac = seq(lit("."), repeat(_DIGIT, 1, None))

    def int_part(max_digits: int, *, nonzero: bool) -> Node:
        head = seq(_NONZERO, repeat(_DIGIT, 0, max_digits - 1))
        return head if nonzero else alt(lit("0"), head)

    # As json_grammar.finite_number: below 1e308 when read. When zero is excluded the value must not
    # underflow to 0.0 either: an integer part of at least 1 and an exponent of at least -299.
    neg_exp = seq(e, lit("-"), repeat(_DIGIT, 1, 2)) if strict else seq(e, lit("-"), repeat(_DIGIT, 1, None))
    if strict:
        neg_exp = alt(neg_exp, seq(e, lit("-"), chars("12", "[12]"), _DIGIT, _DIGIT))
    small_exp = alt(neg_exp, seq(e, opt(lit("+")), repeat(_DIGIT, 1, 2)))
    big_exp = seq(e, opt(lit("+")), chars("12", "[12]"), _DIGIT, _DIGIT)
    long_form = seq(int_part(MAX_FLOAT_INT_DIGITS, nonzero=strict), opt(frac), small_exp)
    short_form = seq(int_part(8, nonzero=strict), opt(frac), big_exp)
    return seq(lit(sign), alt(long_form, short_form)) if sign else alt(long_form, short_form)


def _split(d: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    sign, digits, exponent = d.as_tuple()
    assert not sign or d == 0
    text = "".join(map(str, digits))
    exp = int(exponent)
    if exp >= 0:
        return int(text + "0" * exp), ""
    whole, frac = (text[:exp] or "0"), text[exp:].rjust(-exp, "0")
    return int(whole), frac.rstrip("0")


def _decimal_magnitudes(a: Decimal, b: Decimal | None) -> Node | None:
    """``I.F`` texts (canonical integer part, at least one fraction digit) whose value is in ``a..b``;
    ``None`` when there is none. Integer parts keep :data:`MAX_FLOAT_INT_DIGITS` digits at most (as
    ``finite_number``): a larger bound is as good as none."""
    ai, af = _split(a)
    digits_plus = repeat(_DIGIT, 1, None)
    parts: list[Node] = []
    top = 10**MAX_FLOAT_INT_DIGITS - 1
    if b is not None and _split(b)[0] > top:
        b = None
    if b is None:
        if ai > top:
            return None
        parts.append(seq(_int_text(ai), lit("."), _fraction_at_least(af)))
        middle = _magnitudes(ai + 1, top) if ai + 1 <= top else None
        if middle is not None:
            parts.append(seq(middle, lit("."), digits_plus))
        return alt(*parts)
    bi, bf = _split(b)
    if ai == bi:
        return seq(_int_text(ai), lit("."), _fraction_between(af, bf))
    parts.append(seq(_int_text(ai), lit("."), _fraction_at_least(af)))
    middle = _magnitudes(ai + 1, bi - 1) if ai + 1 <= bi - 1 else None
    if middle is not None:
        parts.append(seq(middle, lit("."), digits_plus))
    parts.append(seq(_int_text(bi), lit("."), _fraction_at_most(bf)))
    return alt(*parts)


def _int_text(n: int) -> Node:
    return lit(str(n))


def _ge(f: str) -> Node:
    """Digit strings X (maybe empty) with 0.X >= 0.f (``f`` has no trailing zero)."""
    if not f:
        return star(_DIGIT)
    zeros = len(f) - len(f.lstrip("0"))
    if zeros >= 2:
        g = f[zeros:]
        return alt(seq(counted(lit("0"), 0, zeros - 1), _NONZERO, star(_DIGIT)), seq(lit("0" * zeros), _ge(g)))
    branches = [seq(lit(f[0]), _ge(f[1:]))]
    if f[0] != "9":
        branches.append(seq(_between(str(int(f[0]) + 1), "9"), star(_DIGIT)))
    return alt(*branches)


def _le(f: str) -> Node:
    """Digit strings X (maybe empty) with 0.X <= 0.f (``f`` has no trailing zero)."""
    if not f:
        return star(lit("0"))
    zeros = len(f) - len(f.lstrip("0"))
    if zeros >= 2:
        return alt(counted(lit("0"), 0, zeros - 1), seq(lit("0" * zeros), _le(f[zeros:])))
    branches = [lit(""), seq(lit(f[0]), _le(f[1:]))]
    if f[0] != "0":
        branches.append(seq(_between("0", str(int(f[0]) - 1)), star(_DIGIT)))
    return alt(*branches)


def _fraction_at_least(f: str) -> Node:
    """Fraction digits (at least one) with 0.F >= 0.f."""
    return _ge(f) if f else repeat(_DIGIT, 1, None)


def _fraction_at_most(f: str) -> Node:
    """Fraction digits (at least one) with 0.F <= 0.f."""
    if not f:
        return repeat(lit("0"), 1, None)
    zeros = len(f) - len(f.lstrip("0"))
    if zeros >= 1:
        # At least one digit: a run of 1..zeros zeros, or the zeros then the rest.
        return alt(counted(lit("0"), 1, zeros), seq(lit("0" * zeros), _le(f[zeros:])))
    branches = [seq(lit(f[0]), _le(f[1:]))]
    branches.append(seq(_between("0", str(int(f[0]) - 1)), star(_DIGIT)))
    return alt(*branches)


def _fraction_between(f1: str, f2: str) -> Node:
    """Fraction digits (at least one) with 0.f1 <= 0.F <= 0.f2 (``f1 <= f2`` as fractions)."""
    n = max(len(f1), len(f2))
    a, b = f1.ljust(n, "0"), f2.ljust(n, "0")
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    if k == n:  # one value: f1 itself, then zeros
        return seq(lit(f1), star(lit("0"))) if f1 else repeat(lit("0"), 1, None)
    prefix = lit(a[:k])
    branches = [seq(lit(a[k]), _ge(a[k + 1 :].rstrip("0")))]
    if int(b[k]) - int(a[k]) >= 2:
        branches.append(seq(_between(str(int(a[k]) + 1), str(int(b[k]) - 1)), star(_DIGIT)))
    branches.append(seq(lit(b[k]), _le(b[k + 1 :].rstrip("0"))))
    return seq(prefix, alt(*branches))


__all__ = ["MAX_EXACT_DIGITS", "NUMBER_KEYWORDS", "Bounds", "integer_node", "number_node"]
