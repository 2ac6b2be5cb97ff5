"""The strings a node's string keywords allow: ``pattern``, ``format``, ``minLength``/``maxLength`` together.

:func:`string_language` reads the keywords of one node into the language of decoded strings
(:class:`~toolgrammar.schema.patterns.Rx`), or refuses a combination the grammar cannot enforce
exactly with a :class:`~toolgrammar.schema.patterns.StringSchemaError`. The normalizer calls it to
check a schema; the value grammars spell what it returns.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from toolgrammar.schema.keywords import STRING_KEYWORDS
from toolgrammar.schema.patterns import ANY, Chars, Rep, Rx, StringSchemaError, parse_pattern, restrict
from toolgrammar.schema.string_formats import format_language


def string_language(schema: dict[str, Any]) -> Rx | None:
    """The decoded strings valid against ``schema``'s string keywords; ``None`` when it has none.

    Raises :class:`StringSchemaError` for a combination that cannot be enforced exactly.
    """
    if not any(k in schema for k in STRING_KEYWORDS):
        return None
    return _language(
        schema.get("pattern"), schema.get("format"), int(schema.get("minLength", 0)), schema.get("maxLength")
    )


@lru_cache(maxsize=256)
def _language(pattern: str | None, fmt: str | None, lo: int, hi: int | None) -> Rx:
    if pattern is not None and fmt is not None:
        raise StringSchemaError(
            "format",
            f"format {fmt!r} together with a pattern: the grammar enforces one or the other, not both at once; "
            "keep one (a pattern can spell the format)",
        )
    if pattern is not None:
        rx = parse_pattern(pattern)
    elif fmt is not None:
        rx = format_language(fmt)
    else:
        return Rep(Chars(ANY), lo, hi)
    if lo == 0 and hi is None:
        return rx
    got = restrict(rx, lo, hi)
    if got is None:
        what = f"pattern {pattern!r}" if pattern is not None else f"format {fmt!r}"
        raise StringSchemaError(
            "maxLength" if hi is not None else "minLength",
            f"{what} together with minLength/maxLength: the grammar combines a length bound only with a pattern "
            "whose variable-length part is a single repetition (like ^[a-z0-9_]+$ or ^https?://); write the "
            "length into the pattern (e.g. {1,64}) or drop minLength/maxLength",
        )
    return got


__all__ = ["string_language"]
