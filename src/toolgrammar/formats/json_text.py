"""Reading JSON out of model text, shared by the formats whose calls hold JSON.

:class:`JsonValueScanner` finds where a JSON value ends as the text grows (string and escape aware, so a
closing marker inside a string stays in it); :func:`loads` is strict JSON (``NaN`` / ``Infinity``
refused, as they are not JSON); :func:`json_error_kind` tells a raw line break inside a string
(``raw-newline-in-string``, the seed's most common failure) from any other JSON error.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

_JSON_WS = " \t\n\r"
_STRING_STOP = re.compile(r'[\\"]')
_STRUCTURE = re.compile(r'["{}\[\]]')


class JsonValueScanner:
    """Finds where the JSON value that starts a block body ends, fed piece by piece.

    It reads only as much as it must: whitespace, then one object, array or string, tracking
    bracket depth, string state and backslash escapes (``\\"`` does not end a string). It does not
    validate the JSON; ``json.loads`` does that once the block is cut out.
    """

    __slots__ = ("_depth", "_escape", "_in_string", "state")

    def __init__(self) -> None:
        self.state: Literal["before", "value", "done", "broken"] = "before"
        self._depth = 0
        self._in_string = False
        self._escape = False

    def feed(self, text: str, start: int = 0) -> int:
        """Scan ``text[start:]``. Returns the offset just past the value once it is complete, ``-1``
        while it is still open (or not begun), ``-2`` when the body does not start like an object,
        array or string (the block end then falls back to the first closing marker)."""
        if self.state == "done" or self.state == "broken":
            raise ValueError(f"scanner already {self.state}")
        i, n = start, len(text)
        if self.state == "before":
            while i < n and text[i] in _JSON_WS:
                i += 1
            if i == n:
                return -1
            first = text[i]
            i += 1
            if first in "{[":
                self._depth = 1
            elif first == '"':
                self._in_string = True
            else:
                self.state = "broken"
                return -2
            self.state = "value"
        while i < n:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    i += 1
                    continue
                m = _STRING_STOP.search(text, i)
                if m is None:
                    return -1
                i = m.end()
                if m.group() == "\\":
                    self._escape = True
                    continue
                self._in_string = False
                if self._depth == 0:
                    self.state = "done"
                    return i
            else:
                m = _STRUCTURE.search(text, i)
                if m is None:
                    return -1
                i = m.end()
                ch = m.group()
                if ch == '"':
                    self._in_string = True
                elif ch in "{[":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        self.state = "done"
                        return i
        return -1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str) -> Any:
    """Strict JSON (``NaN`` / ``Infinity`` refused)."""
    return json.loads(text, parse_constant=_reject_constant)


def json_error_kind(error: Exception) -> Literal["raw-newline-in-string", "invalid-json"]:
    """``raw-newline-in-string`` exactly when json stopped at a literal line break inside a string.

    ``json`` reports a control character in a string as ``Invalid control character at`` with
    ``pos`` on that character (CPython's scanner, 3.11+); a line break is ``\\n`` or ``\\r``.
    """
    if (
        isinstance(error, json.JSONDecodeError)
        and error.msg.startswith("Invalid control character")
        and 0 <= error.pos < len(error.doc)
        and error.doc[error.pos] in "\n\r"
    ):
        return "raw-newline-in-string"
    return "invalid-json"


__all__ = ["JsonValueScanner", "json_error_kind", "loads"]
