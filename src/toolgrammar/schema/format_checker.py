"""JSON Schema's ``format`` as the judge reads it: the format checker of the strict parser and of the normalizer.

The strict parser judges formats with :data:`FORMAT_CHECKER`: ``jsonschema``'s own Draft 2020-12
checks (``date``, ``email``, ``ipv4``, ``ipv6``, ``uuid``...), plus RFC 3339 ``date-time`` and
``time`` and RFC 3986 ``uri`` written here, because ``jsonschema`` checks those only when optional
packages are installed, and a judge must not change with what happens to be installed. Every string
the grammar generates passes them (the tests check it, and against ``jsonschema``'s checker): the
grammar's languages (:mod:`toolgrammar.schema.string_formats`) are subsets of the RFC languages
checked here.
"""

from __future__ import annotations

import re

import jsonschema

from toolgrammar.schema.string_formats import FORMAT_PATTERNS

_DATE = FORMAT_PATTERNS["date"]
_IPV6 = FORMAT_PATTERNS["ipv6"]
_URI = FORMAT_PATTERNS["uri"]

_CHECK_TIME = re.compile(
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[zZ]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    re.ASCII,
)
_CHECK_DATE = re.compile(rf"{_DATE}", re.ASCII)
_CHECK_URI = re.compile(
    _URI.replace(rf"\[{_IPV6}\]", rf"\[(?:{_IPV6}|[vV][0-9a-fA-F]+\.[A-Za-z0-9._~!$&'()*+,;=:\-]+)\]"),
    re.ASCII,
)


def is_time(instance: object) -> bool:
    """RFC 3339 ``full-time`` (a leap second ``:60`` and lower-case ``z`` allowed, as the RFC allows)."""
    return not isinstance(instance, str) or _CHECK_TIME.fullmatch(instance) is not None


def is_date_time(instance: object) -> bool:
    """RFC 3339 ``date-time``: ``full-date`` ``T`` ``full-time`` (``T`` in either case)."""
    if not isinstance(instance, str):
        return True
    date, sep, time = instance[:10], instance[10:11], instance[11:]
    return _CHECK_DATE.fullmatch(date) is not None and sep in ("T", "t") and is_time(time)


def is_uri(instance: object) -> bool:
    """RFC 3986 ``URI`` (``IPvFuture`` hosts included), ASCII only."""
    return not isinstance(instance, str) or _CHECK_URI.fullmatch(instance) is not None


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers.update(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks("time")(is_time)
    checker.checks("date-time")(is_date_time)
    checker.checks("uri")(is_uri)
    return checker


FORMAT_CHECKER: jsonschema.FormatChecker = _format_checker()
"""The format checker of the strict parser and of the normalizer's enum/const checks (see the module docstring)."""


__all__ = ["FORMAT_CHECKER", "is_date_time", "is_time", "is_uri"]
