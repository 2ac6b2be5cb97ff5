"""Stop strings and stop token ids, honoured where the turn may end and nowhere else.

A client's ``stop`` (strings) and ``stop_token_ids`` end generation wherever they appear, and an
engine matches them on the whole output: inside a tool call they cut it (``stop: ["}"]`` leaves
``{"name": "run_tests", "arguments": {`` behind, a 200 with a broken call). Under a tool-call
grammar a stop means what the client wants it to mean only where the turn may end anyway: in free
text under ``tool_choice="auto"``, after the calls under ``required``. So the constraint takes them
over from the engine (the vLLM front end moves them out of the request; the transformers entry
takes ``stop_strings`` out of ``generate``'s hands) and applies them itself:

- **Where the grammar allows the end of the turn** (the end-of-turn token is allowed: never inside
  a block, never before the call a policy forces, never inside the reasoning part), every allowed
  token that would complete a stop string (given the text written since that region began) or is a
  stop token id gives its probability to the end of the turn: the end-of-turn token the model rates
  highest gets the log-sum-exp of its own and their logits, and they are masked. Sampling then ends
  the turn exactly as often as the engine's own stop would have; the stop's text is never written
  (the engine's default, ``include_stop_str_in_output=False``; the rest of the token that would have
  completed it is not written either). Every other logit is left as it is.
- **Anywhere else** a stop string or a stop token is text like any other: the grammar decides.

The text a region's first token brings in with it (the block's closer, ``</think>``) is not searched:
an occurrence counts when it lies wholly in text written where the turn may end.

Import boundary: numpy only (the torch side is :meth:`toolgrammar.runtime.masking.MaskApplier.pool_stops`).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from toolgrammar.errors import ProcessorError
from toolgrammar.runtime.closing import log_sum

if TYPE_CHECKING:
    from toolgrammar.vocab import Vocabulary

MAX_STOPS = 64
"""At most this many stop strings, and as many stop token ids, per rule (OpenAI allows 4)."""
MAX_STOP_BYTES = 256
"""The longest stop string, in UTF-8 bytes."""

_NONE = np.empty(0, dtype=np.int64)
_NONE.flags.writeable = False


class StopRule:
    """One request's stop strings and stop token ids over one vocabulary: which tokens stop, given the tail.

    Built once per (vocabulary, strings, ids) by :func:`stop_rule`. :meth:`banned` is the sorted id
    array of the tokens that stop after a tail of free text; :meth:`extend` keeps that tail (the last
    ``longest - 1`` bytes, all a match can need).
    """

    def __init__(self, vocab: Vocabulary, strings: Sequence[str], token_ids: Sequence[int]) -> None:
        self.strings = tuple(strings)
        self.token_ids = tuple(token_ids)
        self._vocab = vocab
        words = [s.encode("utf-8") for s in self.strings]
        self.keep = max((len(w) for w in words), default=1) - 1
        ends = vocab.eos_ids
        texts = vocab.token_bytes
        # Tokens that stop whatever came before: a stop token id, or a token whose own bytes hold a stop string.
        always = {i for i in self.token_ids if i not in ends}
        for i, text in enumerate(texts):
            if i not in ends and text and any(w in text for w in words):
                always.add(i)
        self._always = np.array(sorted(always), dtype=np.int64)
        # Tokens that complete a stop string the tail has begun: the tail ends with w[:k], the token starts with w[k:].
        order = sorted(range(len(texts)), key=texts.__getitem__)
        keys = [texts[i] for i in order]
        completing: dict[bytes, set[int]] = {}
        for w in words:
            for k in range(1, len(w)):
                rest = w[k:]
                at = bisect.bisect_left(keys, rest)
                found = completing.setdefault(w[:k], set())
                while at < len(keys) and keys[at].startswith(rest):
                    if order[at] not in ends:
                        found.add(order[at])
                    at += 1
        self._completing = {p: ids for p, ids in completing.items() if ids}
        self._banned: dict[tuple[bytes, ...], np.ndarray] = {}

    def banned(self, tail: bytes) -> np.ndarray:
        """Sorted ids of the tokens that would stop after free text ending in ``tail`` (cached per match)."""
        matched = tuple(p for p in self._completing if tail.endswith(p))
        found = self._banned.get(matched)
        if found is None:
            if not matched:
                found = self._always
            else:
                ids = set(self._always.tolist()).union(*(self._completing[p] for p in matched))
                found = np.array(sorted(ids), dtype=np.int64)
            found.flags.writeable = False
            if len(self._banned) < 4096:
                self._banned[matched] = found
        return found

    def extend(self, tail: bytes, token: int) -> bytes:
        """The tail after ``token`` is written in free text where the turn may end."""
        if not self.keep or not 0 <= token < len(self._vocab.token_bytes):
            return b""
        return (tail + self._vocab.token_bytes[token])[-self.keep :]


def checked_stops(strings: object, token_ids: object, n_tokens: int, *, where: str) -> tuple[list[str], list[int]]:
    """Stop strings and stop token ids as lists, checked; :class:`ProcessorError` naming ``where`` otherwise.

    ``strings`` may be ``None``, one string, or a list of non-empty strings; ``token_ids`` ``None`` or a
    list of ids in ``0 .. n_tokens - 1``.
    """
    if strings is None:
        strings = []
    elif isinstance(strings, str):
        strings = [strings]
    if not isinstance(strings, list | tuple) or not all(isinstance(s, str) for s in strings):
        raise ProcessorError(f"{where}: stop must be a string or a list of strings, got {strings!r:.200}")
    bad = [s for s in strings if not s or len(s.encode("utf-8")) > MAX_STOP_BYTES]
    if bad:
        raise ProcessorError(f"{where}: each stop string must be 1 to {MAX_STOP_BYTES} bytes long, got {bad[0]!r:.300}")
    if token_ids is None:
        token_ids = []
    if not isinstance(token_ids, list | tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in token_ids
    ):
        raise ProcessorError(f"{where}: stop_token_ids must be a list of token ids, got {token_ids!r:.200}")
    out = [i for i in token_ids if not 0 <= i < n_tokens]
    if out:
        raise ProcessorError(
            f"{where}: stop_token_ids holds {out[0]}, not a token id of this vocabulary (0..{n_tokens - 1})"
        )
    if len(strings) > MAX_STOPS or len(token_ids) > MAX_STOPS:
        raise ProcessorError(f"{where}: at most {MAX_STOPS} stop strings and {MAX_STOPS} stop token ids")
    return list(dict.fromkeys(strings)), sorted(set(token_ids))


_rules: OrderedDict[tuple[str, tuple[str, ...], tuple[int, ...]], StopRule] = OrderedDict()
_rules_lock = threading.Lock()
_MAX_RULES = 64


def stop_rule(vocab: Vocabulary, strings: Sequence[str], token_ids: Sequence[int]) -> StopRule | None:
    """The :class:`StopRule` of checked stops over ``vocab`` (``None`` when there are none); built once,
    the last 64 kept."""
    if not strings and not token_ids:
        return None
    key = (vocab.fingerprint, tuple(strings), tuple(token_ids))
    with _rules_lock:
        rule = _rules.get(key)
        if rule is not None:
            _rules.move_to_end(key)
            return rule
    rule = StopRule(vocab, strings, token_ids)
    with _rules_lock:
        _rules[key] = rule
        while len(_rules) > _MAX_RULES:
            _rules.popitem(last=False)
    return rule


def pool_stops(row: np.ndarray, banned: np.ndarray, ends: np.ndarray) -> bool:
    """Move the probability of ``banned`` onto the best of ``ends`` in one masked row (in place).

    The end-of-turn token with the highest logit gets the log-sum-exp of its own logit and the banned
    tokens'; the banned tokens are masked. Nothing changes (``False``) when no banned token is live or
    no end-of-turn token is.
    """
    if not len(banned) or not len(ends):
        return False
    stop = log_sum(row[banned])
    if not stop > -np.inf:
        return False
    best = int(ends[int(np.argmax(row[ends]))])
    if not row[best] > -np.inf:
        return False
    row[best] = np.float32(np.logaddexp(float(row[best]), stop))
    row[banned] = -np.inf
    return True


__all__ = ["MAX_STOPS", "MAX_STOP_BYTES", "StopRule", "checked_stops", "pool_stops", "stop_rule"]
