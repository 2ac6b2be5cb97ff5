"""Numbers within bounds as grammar nodes: the plans of :mod:`toolgrammar.schema.bounds` spelled digit by digit.

:func:`~toolgrammar.schema.bounds.integer_plan` and :func:`~toolgrammar.schema.bounds.number_plan` decide
which texts a bounded value may take (and refuse bounds that leave none); this module builds those texts
as regex engines build numeric ranges, so what loading accepts and what the grammar writes come from the
same decisions.
"""

from __future__ import annotations

from toolgrammar.automata.nodes import Node, alt, chars, lit, opt, repeat, seq, star
from toolgrammar.schema.bounds import (
    MAX_FLOAT_INT,
    MAX_FLOAT_INT_DIGITS,
    Bounds,
    DecimalSpan,
    IntegerPlan,
    Magnitudes,
    integer_plan,
    magnitudes,
    number_plan,
)
from toolgrammar.values.strings import counted

_DIGIT = chars("0123456789", "[0-9]")
_NONZERO = chars("123456789", "[1-9]")


# --------------------------------------------------------------------------------------------------
# Integers


def integer_node(lo: int | None, hi: int | None) -> Node:
    """Canonical JSON integers (``-0`` included, as :func:`~toolgrammar.values.json_grammar.json_integer`)
    whose value is in ``lo..hi``; :class:`ValueError` when none can be written
    (:func:`~toolgrammar.schema.bounds.integer_plan`)."""
    return _integers(integer_plan(lo, hi))


def _integers(plan: IntegerPlan) -> Node:
    parts: list[Node] = []
    if plan.plus is not None:
        parts.append(_magnitudes(plan.plus))
    if plan.minus is not None:
        parts.append(seq(lit("-"), _magnitudes(plan.minus)))
    return alt(*parts)


def _range(a: int, b: int | None) -> Node | None:
    """The decimal strings (no sign, no leading zero) of ``a..b``; ``None`` when there is none."""
    got = magnitudes(a, b)
    return None if got is None else _magnitudes(got)


def _magnitudes(m: Magnitudes) -> Node:
    """The decimal strings of ``m``."""
    parts: list[Node] = [lit("0")] if m.zero else []
    if m.positive is None:
        return alt(*parts)
    a, b = m.positive
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
    """JSON numbers within ``bounds``; ``base`` is the unbounded number grammar (returned when open).
    :class:`ValueError` when none can be written (:func:`~toolgrammar.schema.bounds.number_plan`)."""
    if not bounds.any:
        return base
    plan = number_plan(bounds)
    parts: list[Node] = []
    if plan.integers is not None:
        parts.append(_integers(plan.integers))
    if plan.plus is not None:
        parts.append(_decimal_magnitudes(plan.plus))
    if plan.minus is not None:
        parts.append(seq(lit("-"), _decimal_magnitudes(plan.minus)))
    if plan.exponent is not None:
        parts.append(_exponent_forms(*plan.exponent))
    return alt(*parts)


def _exponent_forms(sign: str, strict: bool) -> Node:
    """Numbers with an exponent, where a bound of zero and an open other side decide by the sign alone
    (:func:`~toolgrammar.schema.bounds.exponent_sign`); ``strict``: zero excluded."""
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


def _decimal_magnitudes(span: DecimalSpan) -> Node:
    """The ``I.F`` texts of ``span`` (:func:`~toolgrammar.schema.bounds.decimal_span`)."""
    (ai, af), high = span
    digits_plus = repeat(_DIGIT, 1, None)
    parts: list[Node] = []
    top = MAX_FLOAT_INT
    if high is None:
        parts.append(seq(_int_text(ai), lit("."), _fraction_at_least(af)))
        middle = _range(ai + 1, top) if ai + 1 <= top else None
        if middle is not None:
            parts.append(seq(middle, lit("."), digits_plus))
        return alt(*parts)
    bi, bf = high
    if ai == bi:
        return seq(_int_text(ai), lit("."), _fraction_between(af, bf))
    parts.append(seq(_int_text(ai), lit("."), _fraction_at_least(af)))
    middle = _range(ai + 1, bi - 1) if ai + 1 <= bi - 1 else None
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


__all__ = ["integer_node", "number_node"]
