"""Small text helpers shared by the formats' streaming parsers."""

from __future__ import annotations


class Trimmed:
    """Emits text so that everything emitted is always a prefix of ``"".join(all pushed).strip()``."""

    __slots__ = ("_pending", "_started")

    def __init__(self) -> None:
        self._started = False
        self._pending: list[str] = []  # whitespace held back; a list, so a long run streams in linear time

    def push(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._pending.append(text)
            return ""
        out = "".join(self._pending) + body
        self._pending = [text[len(body) :]]
        return out


def partial_suffix(text: str, marker: str, start: int) -> int:
    """Length of the longest proper prefix of ``marker`` that ``text[start:]`` ends with."""
    for k in range(min(len(marker) - 1, len(text) - start), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0
