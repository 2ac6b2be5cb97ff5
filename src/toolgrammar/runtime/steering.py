"""Steering: the model's own decision to call, written in another shape, becomes a real block.

Small instruct models often mean to call a tool but write the call as a fenced JSON block
(```` ```json ````) or as bare JSON instead of the format's ``<tool_call>`` block; such a call never
runs. With steering on (``steer_to_blocks=True``), at a *call point* the probability the model gives
to tokens that open another call shape is moved onto the block opener, so the grammar then makes that
call a valid block. Nothing else changes:

- A *call point* is a position where a block may open and the free text written since the region
  began is only whitespace: the start of the turn, just after the reasoning (``</think>``, then
  optional whitespace), just after a block and its separator. Mid-prose positions are not call points:
  a model that explains first and then writes a fenced call is left alone, and so is a code block in
  an answer.
- At a call point, every token that is neither an other-shape opener nor the block opener keeps its
  logit bit for bit, so its log-probability under the processor's output is exactly what it was (the
  normaliser is unchanged: the block opener's new logit is the log-sum-exp of its own and the openers'
  logits, which are then removed). Outside call points the logits are untouched.
- A block opener the mask has removed (the policy, or the budget) is never brought back: then
  nothing is steered.

Other-shape openers (the same for every format, since they are the shapes a model writes *instead*
of the format): every non-control token whose text, after leading spaces, tabs and line breaks,
starts with ```` ``` ```` (a code fence, any language tag), ``{`` (bare JSON) or ``[{`` (a bare JSON
list of calls). The block opener is the format's ``block_open`` marker, which must be a single token
of the vocabulary (it is in every Qwen vocabulary): steering is refused with a clear error otherwise.

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
    """The tokens steering works with, for one vocabulary and one format."""

    block_opener: int
    """The id of the block opener's single token."""
    other: np.ndarray
    """Sorted ids of the tokens that open another call shape (int64)."""
    whitespace: np.ndarray
    """Per token id: its text is whitespace only (bool; such a token keeps a call point a call point)."""

    @property
    def steered(self) -> np.ndarray:
        """The block opener followed by the other-shape openers: the ids whose mass is pooled."""
        return np.concatenate([np.array([self.block_opener], dtype=np.int64), self.other])


_cache: dict[tuple[str, str], CallOpeners] = {}


def call_openers(vocab: Vocabulary, block_open: str) -> CallOpeners:
    """The block opener's token and the other-shape openers of ``vocab`` (built once per vocabulary).

    Raises :class:`~toolgrammar.errors.ProcessorError` when the opener is not one token.
    """
    key = (vocab.fingerprint, block_open)
    found = _cache.get(key)
    if found is None:
        found = _cache[key] = _call_openers(vocab, block_open)
    return found


def _call_openers(vocab: Vocabulary, block_open: str) -> CallOpeners:
    opener = vocab.token_id(block_open.encode("utf-8"))
    if opener is None:
        raise ProcessorError(
            f"steer_to_blocks needs the block opener {block_open!r} as a single token of the vocabulary, and this "
            "tokenizer has none; turn steering off for this tokenizer"
        )
    control = vocab.special_ids | vocab.eos_ids
    other: list[int] = []
    whitespace = np.zeros(vocab.n_tokens, dtype=bool)
    for i, data in enumerate(vocab.token_bytes):
        if i in control or i == opener or not data:
            continue
        stripped = data.lstrip(_WHITESPACE)
        if not stripped:
            whitespace[i] = True
        elif stripped.startswith(OTHER_SHAPE_PREFIXES):
            other.append(i)
    return CallOpeners(opener, np.array(sorted(other), dtype=np.int64), whitespace)


class CallPoints:
    """Tracks, per sequence, whether it stands at a call point (see the module docstring).

    ``update`` is called with each row's state before and after its new token; ``at_call_point``
    says whether to steer now. A row is *fresh* when every token since its current free region
    began was whitespace; a region begins where a block may open and could not one token before
    (the start of the turn counts).
    """

    def __init__(self, grammar: TokenGrammar, openers: CallOpeners):
        self.grammar = grammar
        self.openers = openers
        self._may_open: dict[int, bool] = {}

    def block_may_open(self, state: int) -> bool:
        """Whether the block opener token leads from ``state`` into a block."""
        got = self._may_open.get(state)
        if got is None:
            nxt = self.grammar.step(state, self.openers.block_opener)
            got = nxt >= 0 and self.grammar.in_block(nxt)
            self._may_open[state] = got
        return got

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
    """Pool the other-shape openers' probability onto the block opener in one row of logits (in place).

    ``row`` has already been masked. Returns False (and changes nothing) when the block opener is
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


__all__ = ["OTHER_SHAPE_PREFIXES", "CallOpeners", "CallPoints", "call_openers", "steer_row"]
