"""Numeric bounds (``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``) and the texts they allow.

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

This module decides which texts those are (:func:`integer_plan`, :func:`number_plan`: ranges of digit
strings, with a bound moved inward where the rules above say so) and raises :class:`ValueError` where no
text is left. The normalizer calls it to refuse such bounds when a tool is loaded;
the value grammars are built from the same plans, so the two cannot disagree.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

MAX_EXACT_DIGITS = 24
"""Longest integer bound (in digits) enforced digit by digit; longer ones move inward to a power of ten."""

MAX_FRACTION_DIGITS = 24
"""Most digits after the point a fraction-syntax bound keeps (rounded inward beyond: 1e-300 as a bound
of a fraction-syntax value becomes 1e-24, which no fraction text below it reaches)."""

MAX_FLOAT_INT_DIGITS = 17
"""Integer digits of a fraction-syntax number with no upper bound (as in ``json_grammar.finite_number``)."""

MAX_FLOAT_INT = 10**MAX_FLOAT_INT_DIGITS - 1
"""The largest integer part of a fraction-syntax number (:data:`MAX_FLOAT_INT_DIGITS` digits)."""


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


class Magnitudes(NamedTuple):
    """Unsigned decimal strings (no leading zero) the grammar writes for a range: ``0`` when ``zero``, and
    the integers of ``positive`` (``(a, b)``, ``1 <= a``, ``b=None``: unbounded; ``None``: none)."""

    zero: bool
    positive: tuple[int, int | None] | None


def magnitudes(a: int, b: int | None) -> Magnitudes | None:
    """The decimal strings of ``a..b`` (``b=None``: unbounded, ``0 <= a``) the grammar writes, a bound of more
    than :data:`MAX_EXACT_DIGITS` digits moved inward; ``None`` when there is none."""
    zero = a == 0
    if zero:
        a = 1
    if b is not None and b < a:
        return Magnitudes(True, None) if zero else None
    if b is not None and len(str(b)) > MAX_EXACT_DIGITS:
        b = 10 ** (len(str(b)) - 1) - 1  # inward: every integer with one digit fewer than b
    if len(str(a)) > MAX_EXACT_DIGITS:
        a = 10 ** len(str(a))  # inward: the next power of ten
    if b is not None and b < a:
        return Magnitudes(True, None) if zero else None
    return Magnitudes(zero, (a, b))


class IntegerPlan(NamedTuple):
    """The canonical JSON integers of a range, by sign: the magnitudes written bare, and those written after
    ``-`` (``-0`` included, as the unbounded JSON integer grammar allows it)."""

    plus: Magnitudes | None
    minus: Magnitudes | None


def integer_plan(lo: int | None, hi: int | None) -> IntegerPlan:
    """The integers in ``lo..hi`` the grammar writes; :class:`ValueError` when it writes none (an empty range,
    or one that moving a bound of more than :data:`MAX_EXACT_DIGITS` digits inward leaves empty)."""
    plus = minus = None
    if hi is None or hi >= 0:
        plus = magnitudes(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo <= 0:
        # "-" then the magnitudes: -0 is 0, so it belongs wherever 0 does.
        minus = magnitudes(0 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
    if plus is None and minus is None:
        raise ValueError(
            f"no integer from {lo} to {hi} can be written: bounds of more than {MAX_EXACT_DIGITS} digits are moved "
            "inward to a power of ten"
        )
    return IntegerPlan(plus, minus)


# --------------------------------------------------------------------------------------------------
# Numbers


class DecimalSpan(NamedTuple):
    """``I.F`` texts (canonical integer part, at least one fraction digit) from ``low`` to ``high``, each as
    (integer part, fraction digits without trailing zeros); ``high=None``: every integer part up to
    :data:`MAX_FLOAT_INT`."""

    low: tuple[int, str]
    high: tuple[int, str] | None


def decimal_span(a: Decimal, b: Decimal | None) -> DecimalSpan | None:
    """The ``I.F`` texts whose value is in ``a..b`` (``0 <= a``); ``None`` when there is none. Integer parts keep
    :data:`MAX_FLOAT_INT_DIGITS` digits at most (as ``finite_number``): a larger upper bound is as good as none."""
    low = split_decimal(a)
    if b is not None and split_decimal(b)[0] > MAX_FLOAT_INT:
        b = None
    if b is None:
        return None if low[0] > MAX_FLOAT_INT else DecimalSpan(low, None)
    return DecimalSpan(low, split_decimal(b))


class NumberPlan(NamedTuple):
    """The JSON numbers within bounds the grammar writes: integer syntax, fraction syntax (non-negative and
    negative, the latter as magnitudes after ``-``) and exponent syntax (its sign and whether zero is
    excluded); ``None`` where a syntax has no text."""

    integers: IntegerPlan | None
    plus: DecimalSpan | None
    minus: DecimalSpan | None
    exponent: tuple[str, bool] | None


def number_plan(bounds: Bounds) -> NumberPlan:
    """The numbers within ``bounds`` the grammar writes (module docstring); :class:`ValueError` when it writes
    none, or when the integers of the bounds cannot be written (:func:`integer_plan`)."""
    integers = None
    ilo, ihi = bounds.integer_range()
    if ilo is None or ihi is None or ilo <= ihi:
        integers = integer_plan(ilo, ihi)
    plus = minus = None
    decimals = bounds.float_range()
    if decimals is not None:
        lo, hi = decimals
        if hi is None or hi >= 0:
            plus = decimal_span(max(lo, Decimal(0)) if lo is not None else Decimal(0), hi)
        if lo is None or lo <= 0:
            neg_lo = Decimal(0) if hi is None or hi >= 0 else -hi
            minus = decimal_span(neg_lo, None if lo is None else -lo)
    exponent = exponent_sign(bounds)
    if integers is None and plus is None and minus is None and exponent is None:
        raise ValueError("no number inside the bounds can be written")
    return NumberPlan(integers, plus, minus, exponent)


def exponent_sign(bounds: Bounds) -> tuple[str, bool] | None:
    """Where numbers with an exponent are allowed (a bound of zero and an open other side: the sign decides),
    their sign (``""`` or ``"-"``) and whether zero is excluded; ``None`` elsewhere."""
    zero = Fraction(0)
    if bounds.lo == zero and bounds.hi is None:
        return "", bounds.lo_open
    if bounds.hi == zero and bounds.lo is None:
        return "-", bounds.hi_open
    return None


def split_decimal(d: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    sign, digits, exponent = d.as_tuple()
    assert not sign or d == 0
    text = "".join(map(str, digits))
    exp = int(exponent)
    if exp >= 0:
        return int(text + "0" * exp), ""
    whole, frac = (text[:exp] or "0"), text[exp:].rjust(-exp, "0")
    return int(whole), frac.rstrip("0")


__all__ = [
    "MAX_EXACT_DIGITS",
    "MAX_FLOAT_INT",
    "MAX_FLOAT_INT_DIGITS",
    "MAX_FRACTION_DIGITS",
    "Bounds",
    "DecimalSpan",
    "IntegerPlan",
    "Magnitudes",
    "NumberPlan",
    "decimal_span",
    "exponent_sign",
    "integer_plan",
    "magnitudes",
    "number_plan",
    "split_decimal",
]
