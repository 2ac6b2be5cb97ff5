"""Closing a block where the model means to stop.

Inside a block the end-of-turn tokens are masked: the block has to close first. Masking alone
spreads the probability the model gave to stopping over every allowed token, in proportion to their
own, and forgets it. The embedded model (Qwen2.5-Coder-0.5B), after a call steering turned into a
block, gives stopping a probability near 1 right after the call's last brace; hermes allows only the
newline there, and on the next step, having seen ``}}\n``, the model prefers a second JSON object: it
writes the close marker in pieces (``<``, ``/tool``, ``_call``, ``>``) and then the calls again
(BFCL's ``parallel_multiple_4``: integral, derivative, integral, derivative, ... until the budget
ended the turn).

With ``close_on_stop`` (on by default in :class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor` and in
:class:`~toolgrammar.integrations.vllm.VllmToolCallLogitsProcessor`, per request there) a stop
where the block's call is complete (:meth:`~toolgrammar.runtime.token_grammar.TokenGrammar.closing_tokens`: after a
hermes call's last brace, never inside its arguments) is kept as a decision to close:

- The stop tokens' probability, read before masking, goes to the *closer*: of the tokens that take
  the block nearest to its end (:meth:`~toolgrammar.runtime.token_grammar.TokenGrammar.closing_tokens`), the one the
  model rates highest. Its new logit is the log-sum-exp of its own and the stop tokens' logits, so the
  row's normaliser is its allowed tokens' and the stop's; every other token keeps its logit bit for bit.
- The decision is carried while the row follows the close. Taking the closer, the row is *closing*
  with probability ``q``, the posterior that the stop, not the closer's own mass, chose it (Bayes on
  the distribution just sampled from). On the next step the closer of that state gets ``q`` of the
  probability on top of the rest scaled by ``1 - q``: the mixture of "closing" (the close path, taken
  for sure) and "not closing" (the model's masked distribution, its new stop pooled as above). Any
  other token ends the decision (``q`` = 0), and so does leaving the block. So a stop decided where
  only the newline was allowed still closes the block on the next step, in the proportion the model
  gave it, and a model that did not mean to stop is left as it was.

Outside blocks nothing changes: there the end of the turn is allowed (and taken as it is) or refused
by the policy (``required``: the turn must call), and a stop is not a call. vLLM's structured-outputs
route (route 1) has bitmasks, no logits, so it cannot do this; its logits processor (route 2) does.

Import boundary: numpy only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from toolgrammar.vocab import Vocabulary

NEGLIGIBLE = 2.0**-24
"""A closing probability below this (float32's resolution of 1) is dropped: it moves no logit."""
MOST_CLOSING = 1.0 - 1e-12
"""The largest closing probability used: ``q`` is kept below 1, so its odds stay finite."""

_cache: dict[str, np.ndarray] = {}


def stop_ids(vocab: Vocabulary) -> np.ndarray:
    """Sorted ids of ``vocab``'s end-of-turn tokens (built once per vocabulary)."""
    found = _cache.get(vocab.fingerprint)
    if found is None:
        found = _cache[vocab.fingerprint] = np.array(
            sorted(i for i in vocab.eos_ids if 0 <= i < vocab.n_tokens), dtype=np.int64
        )
    return found


def log_sum(values: np.ndarray) -> float:
    """``log(sum(exp(values)))`` in float64; ``-inf`` for no values or all ``-inf`` (``+inf``/NaN: ``-inf``)."""
    if not len(values):
        return -math.inf
    values = values.astype(np.float64)
    top = float(values.max())
    if not math.isfinite(top):
        return -math.inf
    return top + math.log(float(np.exp(values - top).sum()))


def pooled(closer: float, stop: float, closing: float, allowed: float) -> tuple[float, float]:
    """The closer's new logit and the closing probability if it is taken.

    ``closer``: its logit (masked row); ``stop``: the stop tokens' log-sum-exp before masking;
    ``closing``: the row's closing probability ``q``; ``allowed``: the log-sum-exp of the masked row
    (read only where ``closing`` > 0). See the module docstring for the mixture.
    """
    if closing <= 0.0:
        new = float(np.logaddexp(closer, stop))
        taken = 1.0 / (1.0 + math.exp(closer - stop)) if stop > -math.inf else 0.0
        return new, taken
    q = min(closing, MOST_CLOSING)
    total = float(np.logaddexp(allowed, stop))
    odds = math.log(q) - math.log1p(-q)
    own = float(np.logaddexp(closer, stop))
    new = float(np.logaddexp(own, total + odds))
    chosen = q + (1.0 - q) * math.exp(own - total)
    deciding = q + (1.0 - q) * (math.exp(stop - total) if stop > -math.inf else 0.0)
    return new, deciding / chosen


def choose(values: np.ndarray, stop: float, closing: float) -> int | None:
    """The index of the closer among the closing tokens' masked logits ``values``, or ``None`` when
    nothing is to be moved: no closing token live, or no stop and no closing decision carried."""
    if not len(values) or (closing <= 0.0 and not stop > -math.inf) or not stop < math.inf:
        return None
    best = int(np.argmax(values))
    return best if values[best] > -math.inf else None


def follow(pending: tuple[int, float] | None, token: int, in_block: bool, valid: bool) -> tuple[float, bool]:
    """After a row took ``token``: the closing probability it carries on, and whether a stop closed its block.

    ``pending``: what :func:`close_row` returned for the row on the step before (``None``: nothing moved);
    ``in_block``/``valid``: the row after the token (still in the block; not in error). A decision lasts
    only while the row takes the close it was given; leaving the block by a closer that the stop, more
    likely than not, chose counts as a stop-closed block.
    """
    if pending is None:
        return 0.0, False
    taken = pending[1] if token == pending[0] else 0.0
    if in_block:
        return taken, False
    return 0.0, taken >= 0.5 and valid


def close_row(row: np.ndarray, stop: float, closers: np.ndarray, closing: float) -> tuple[int, float] | None:
    """Pool a stop onto the closer of one masked row (in place); ``stop`` as read before masking.

    Returns ``(closer, q if it is taken)``, or ``None`` (row unchanged) where :func:`choose` finds
    nothing to move.
    """
    best = choose(row[closers], stop, closing)
    if best is None:
        return None
    allowed = log_sum(row) if closing > 0.0 else -math.inf
    new, taken = pooled(float(row[closers[best]]), stop, closing, allowed)
    token = int(closers[best])
    row[token] = np.float32(new)
    return token, taken if taken >= NEGLIGIBLE else 0.0


__all__ = ["MOST_CLOSING", "NEGLIGIBLE", "choose", "close_row", "follow", "log_sum", "pooled", "stop_ids"]
