"""Whether a processor's input continues the one it saw last, from two windows of ids.

A logits processor is handed the whole sequence every step. It must tell a step of its generation (the
last input plus one token) from a new generation, without comparing the whole sequence each time (that is
O(context) a token, quadratic over a long generation). :class:`InputWindow` keeps the first
:data:`WINDOW` ids of the prompt and the last :data:`WINDOW` ids of the last input; an input one id longer
that repeats both is the next step, and its last id is the token taken. A new ``generate()`` call whose input
is one id longer and agrees on both windows but not in between is not a case that happens (a processor's
``reset()`` marks a new call for certain).

The check runs in the C core (``follow_ids``, which also reads a CPU tensor by address) or, where the core
is off, in numpy; both keep the ids as int64 bytes, so they give the same answers.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

WINDOW = 16
"""Ids kept at each end."""
_ITEM = 8  # int64


class InputWindow:
    """One row's record of the last input: its length (-1: none yet) and the ids at both ends."""

    def __init__(self) -> None:
        self.length = -1
        self._head = b""
        self._tail = bytearray(WINDOW * _ITEM)

    def forget(self) -> None:
        """The next input starts a new generation, whatever it holds."""
        self.length = -1

    def restart(self, ids: np.ndarray, prompt_length: int) -> None:
        """Keep a new generation's input ``ids`` (one row, 1-D), of which ``prompt_length`` ids are the prompt."""
        row = np.ascontiguousarray(ids, dtype=np.int64)
        length = row.shape[0]
        self._head = row[: min(WINDOW, prompt_length)].tobytes()
        kept = min(WINDOW, length)
        self._tail[: kept * _ITEM] = row[length - kept :].tobytes()
        self.length = length

    def follows(self, ids: int | np.ndarray, length: int, core: ModuleType | None) -> int:
        """The id ``ids`` adds to the last input, or -1 where it is not that input plus one id.

        ``ids``: one row of ``length`` ids, as a 1-D numpy array or, with the C core ``core``, as the address of
        a CPU int64 tensor the caller checked (contiguous, outside autograd, ``length`` long). Where it follows,
        the windows move on to this input."""
        before = self.length
        if core is not None:
            token = int(core.follow_ids(ids, length, before, self._head, self._tail))
        else:
            token = self._follows_numpy(np.asarray(ids), length, before)
        if token >= 0:
            self.length = length
        return token

    def _follows_numpy(self, ids: np.ndarray, length: int, before: int) -> int:
        head, tail = self._head, self._tail
        if before <= 0 or before + 1 != length or len(head) // _ITEM > before or ids.shape != (length,):
            return -1
        row = ids.astype(np.int64, copy=False)
        kept = min(WINDOW, before)
        if row[: len(head) // _ITEM].tobytes() != head or row[before - kept : before].tobytes() != tail[: kept * _ITEM]:
            return -1
        now = min(WINDOW, length)
        tail[: now * _ITEM] = row[length - now :].tobytes()
        return int(row[-1])


__all__ = ["WINDOW", "InputWindow"]
