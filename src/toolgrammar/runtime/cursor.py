"""The per-sequence state of a constrained generation: where in the token grammar, how many tokens are left."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    pass
from toolgrammar.runtime.token_grammar import StateMask, TokenGrammar

_NO_TOKENS = np.empty(0, dtype=np.int64)


_NO_TOKENS.flags.writeable = False


class Cursor:
    """Where one sequence is in the grammar. Cheap to create, copy and reset."""

    __slots__ = ("error", "grammar", "max_tokens", "n_tokens", "start", "state")

    def __init__(self, grammar: TokenGrammar, max_tokens: int | None = None, start: int | None = None):
        self.grammar = grammar
        self.max_tokens = max_tokens
        self.start = grammar.start if start is None else start
        self.reset()

    def reset(self) -> None:
        self.state = self.start
        self.n_tokens = 0
        self.error: str | None = None

    def fork(self) -> Cursor:
        c = Cursor.__new__(Cursor)
        c.grammar, c.max_tokens, c.start, c.state, c.n_tokens, c.error = (
            self.grammar,
            self.max_tokens,
            self.start,
            self.state,
            self.n_tokens,
            self.error,
        )
        return c

    @property
    def remaining(self) -> int | None:
        return None if self.max_tokens is None else self.max_tokens - self.n_tokens

    @property
    def finished(self) -> bool:
        return self.error is None and self.grammar.is_finished(self.state)

    @property
    def in_block(self) -> bool:
        return self.error is None and self.grammar.in_block(self.state)

    def closing_tokens(self) -> np.ndarray:
        """:meth:`TokenGrammar.closing_tokens` of the current state inside a block; none elsewhere."""
        if self.error is None and self.grammar.in_block(self.state):
            return self.grammar.closing_tokens(self.state)
        return _NO_TOKENS

    def mask(self) -> StateMask | None:
        """The allowed tokens now; ``None`` when the row is unconstrained (finished or in error)."""
        if self.error is not None or self.grammar.is_finished(self.state):
            return None
        return self.grammar.mask(self.state, self.remaining)

    def advance(self, token: int) -> bool:
        """Consume ``token``. False (and a sticky error) if the grammar rejects it."""
        self.n_tokens += 1
        if self.error is not None or self.grammar.is_finished(self.state):
            return self.error is None
        nxt = self.grammar.step(self.state, token)
        if nxt < 0:
            self.error = f"token {token} rejected in state {self.state} after {self.n_tokens - 1} tokens"
            return False
        self.state = nxt
        return True

    def accepts(self, tokens: list[int]) -> bool:
        """Whether ``tokens`` can be consumed from here (does not move the cursor)."""
        c = self.fork()
        return all(c.advance(t) for t in tokens)


__all__ = ["Cursor"]
