"""JSON Schema's ``format`` as regular languages (what the grammar generates for each format).

Each supported format is written as an anchored pattern in the dialect of
:mod:`toolgrammar.schema.patterns` and compiled like a ``pattern``:

- ``date``: RFC 3339 ``full-date`` (``YYYY-MM-DD``), exact: the days of each month, February 29
  in leap years only, and no year 0000 (Python's ``date`` starts at year 1).
- ``time``: RFC 3339 ``full-time``: ``HH:MM:SS``, an optional fraction of 1 to 9 digits, and the
  offset, which RFC 3339 requires (``Z`` or ``+HH:MM``/``-HH:MM``); no leap second (``:60``).
- ``date-time``: ``date`` ``T`` ``time`` (upper-case ``T`` and ``Z``, as everyone writes them).
- ``uuid``: ``8-4-4-4-12`` hex digits, either case.
- ``ipv4``: dotted quad, each part 0-255 without leading zeros (what Python's ``ipaddress`` takes).
- ``ipv6``: RFC 4291 text form: eight groups of 1-4 hex digits, one ``::`` for one or more zero
  groups, an IPv4 tail for the last two groups; no zone (``%eth0``).
- ``email``: a practical subset of RFC 5321: ``dot-atom@domain`` with an ASCII local part (the
  RFC 5322 ``atext`` characters, dots between runs) and a domain of at least two LDH labels.
- ``uri``: RFC 3986 ``URI`` (a scheme, then ``//authority`` or a path, optional query and
  fragment), with IPv6 and IPv4 hosts; ``IPvFuture`` hosts and non-ASCII characters (IRIs) left out.

The strict parser judges formats with :data:`~toolgrammar.schema.format_checker.FORMAT_CHECKER`: the
full RFC languages, of which these are subsets.
"""

from __future__ import annotations

from functools import lru_cache

from toolgrammar.schema.patterns import Rx, StringSchemaError, parse_pattern

_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_HOUR = r"(?:[01][0-9]|2[0-3])"
_TIME = rf"{_HOUR}:[0-5][0-9]:[0-5][0-9](?:\.[0-9]{{1,9}})?(?:Z|[+\-]{_HOUR}:[0-5][0-9])"
_HEX = "[0-9a-fA-F]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"


def _ipv6() -> str:
    """Every RFC 4291 spelling: ``k`` groups, ``::``, ``m`` groups with ``k + m`` below the slots."""
    h = f"{_HEX}{{1,4}}"
    forms = []
    for slots, tail in ((8, ""), (6, _IPV4)):
        # No compression: all the slots written.
        forms.append(f"(?:{h}:){{{slots - 1}}}{h}" if not tail else f"(?:{h}:){{{slots}}}{tail}")
        for k in range(slots):  # k groups before the "::"
            left = "" if k == 0 else (f"(?:{h}:){{{k - 1}}}{h}" if k > 1 else h)
            room = slots - 1 - k  # groups the right side may hold (the "::" stands for at least one)
            if tail:
                right = f"(?:{h}:){{0,{room}}}{tail}"
            elif room == 0:
                right = ""
            else:
                right = f"(?:{h}(?::{h}){{0,{room - 1}}})?"
            forms.append(f"{left}::{right}")
    return "(?:" + "|".join(forms) + ")"


_IPV6 = _ipv6()
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
_EMAIL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+"
_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@\-]|%[0-9a-fA-F]{2})"
_REG_NAME = r"(?:[A-Za-z0-9._~!$&'()*+,;=\-]|%[0-9a-fA-F]{2})*"
_USERINFO = r"(?:[A-Za-z0-9._~!$&'()*+,;=:\-]|%[0-9a-fA-F]{2})*"
_HOST = rf"(?:\[{_IPV6}\]|{_IPV4}|{_REG_NAME})"
_AUTHORITY = rf"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_HIER = rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|)"
_URI = rf"[A-Za-z][A-Za-z0-9+.\-]*:{_HIER}(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"

FORMAT_PATTERNS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}T{_TIME}",
    "uuid": rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "email": _EMAIL,
    "uri": _URI,
}
"""Each supported format's language, as the body of an anchored pattern (the grammar's exact language)."""

FORMATS: tuple[str, ...] = tuple(FORMAT_PATTERNS)
"""The ``format`` values the grammar enforces."""


@lru_cache(maxsize=16)
def format_language(name: str) -> Rx:
    """The strings of format ``name`` (:class:`~toolgrammar.schema.patterns.Rx`); refuses unknown names."""
    if name not in FORMAT_PATTERNS:
        raise StringSchemaError(
            "format",
            f"format {name!r} is not enforced by the grammar; supported formats: {', '.join(FORMATS)} "
            "(describe other formats in 'description', or use a pattern)",
        )
    return parse_pattern(f"^(?:{FORMAT_PATTERNS[name]})$")


__all__ = ["FORMATS", "FORMAT_PATTERNS", "format_language"]
