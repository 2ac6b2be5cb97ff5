"""Helpers for testing grammars and processors, public so users can test their own tool sets.

- :func:`accepts` / :func:`check_grammar`: does a turn grammar accept a text? No tokenizer needed
  (the grammar runs on bytes).
- :func:`random_walk`: a fake "model" that picks uniformly among the tokens the grammar allows,
  which is how the soundness invariant is tested (DESIGN.md, invariant 1).
- :func:`replay`: feed recorded token ids through a cursor and report the first masked one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from toolgrammar.automata.nodes import EOS
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.token_grammar import StateMask, TokenGrammar
from toolgrammar.turn.grammar import TurnGrammar


def accepts(grammar: TurnGrammar, text: str | bytes, *, complete: bool = True) -> bool:
    """Whether ``text`` is a turn of ``grammar``.

    ``complete=True``: the whole turn, so the end of turn must be allowed right after it.
    ``complete=False``: a prefix of some turn (a partial generation).
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    dfa = grammar.dfa
    state = dfa.step(dfa.start, data)
    if state < 0:
        return False
    if not complete:
        return True
    end = int(dfa.transitions[state, EOS])
    return end >= 0 and bool(dfa.accepting[end])


def check_grammar(grammar: TurnGrammar, passing: Iterable[str], failing: Iterable[str]) -> None:
    """Raise AssertionError naming every text that is misjudged (all of them, not the first)."""
    wrong = [f"should accept: {t!r}" for t in passing if not accepts(grammar, t)]
    wrong += [f"should reject: {t!r}" for t in failing if accepts(grammar, t)]
    if wrong:
        raise AssertionError(f"grammar misjudged {len(wrong)} text(s):\n  " + "\n  ".join(wrong))


def allowed_ids(mask: StateMask | None, n_tokens: int) -> np.ndarray:
    """The allowed token ids of a mask, as a sorted array (all ids when unconstrained)."""
    if mask is None or mask.all_allowed:
        return np.arange(n_tokens)
    if mask.allowed is not None:
        return mask.allowed
    keep = np.ones(n_tokens, dtype=bool)
    keep[mask.banned] = False
    return np.flatnonzero(keep)


def is_allowed(mask: StateMask | None, token: int) -> bool:
    if mask is None or mask.all_allowed:
        return True
    if mask.allowed is not None:
        i = np.searchsorted(mask.allowed, token)
        return bool(i < len(mask.allowed) and mask.allowed[i] == token)
    i = np.searchsorted(mask.banned, token)
    return not bool(i < len(mask.banned) and mask.banned[i] == token)


@dataclass(frozen=True)
class Walk:
    """One random walk: the tokens, and whether the turn ended (end-of-turn token) or ran out of budget."""

    tokens: tuple[int, ...]
    ended: bool
    in_block_at_end: bool


def random_walk(
    grammar: TokenGrammar,
    rng: np.random.Generator,
    *,
    max_tokens: int,
    prefer: Sequence[int] | Callable[[list[int]], Sequence[int]] = (),
    prefer_probability: float = 1.0,
    eos_weight: float = 0.02,
) -> Walk:
    """Generate with a uniformly random 'model': each step picks uniformly among the allowed tokens.

    ``prefer`` lists tokens picked, with ``prefer_probability``, whenever allowed (to steer walks
    into blocks, e.g. the opener, or out of strings, e.g. a closing quote); it may be a function of
    the tokens so far. End-of-turn tokens are picked with probability ``eos_weight`` when allowed,
    so that walks are not all cut by the budget.
    """
    cursor = Cursor(grammar, max_tokens)
    n = grammar.table.n_tokens
    eos = set(grammar.table.eos_ids.tolist())
    out: list[int] = []
    ended = False
    ids_cache: dict[int, tuple[StateMask | None, np.ndarray]] = {}
    for _ in range(max_tokens):
        mask = cursor.mask()
        choice = None
        wanted = prefer(out) if callable(prefer) else prefer
        if wanted and rng.random() < prefer_probability:
            choice = next((t for t in wanted if is_allowed(mask, t)), None)
        if choice is None:
            eos_ok = [t for t in eos if is_allowed(mask, t)]
            if eos_ok and rng.random() < eos_weight:
                choice = eos_ok[0]
            else:
                # Keyed by identity, holding the mask: the grammar drops its cached masks when it
                # builds a tool's tail, and a freed mask's id can be reused.
                hit = ids_cache.get(id(mask))
                if hit is None or hit[0] is not mask:
                    hit = ids_cache[id(mask)] = (mask, allowed_ids(mask, n))
                ids = hit[1]
                if eos_ok and len(ids) > len(eos_ok):
                    ids = ids[~np.isin(ids, eos_ok)]
                choice = int(ids[rng.integers(len(ids))])
        if not cursor.advance(choice):
            raise AssertionError(f"random walk chose token {choice}, which its own mask allowed, and was rejected")
        out.append(choice)
        if choice in eos:
            ended = True
            break
    return Walk(tuple(out), ended, cursor.in_block)


@dataclass(frozen=True)
class Replay:
    """The result of replaying recorded tokens: the index of the first masked token, if any."""

    first_masked: int | None
    cursor: Cursor


def replay(grammar: TokenGrammar, tokens: Sequence[int], *, max_tokens: int | None = None) -> Replay:
    """Feed ``tokens`` one by one, checking each against the mask before consuming it."""
    cursor = Cursor(grammar, max_tokens)
    for i, t in enumerate(tokens):
        if not is_allowed(cursor.mask(), t):
            return Replay(i, cursor)
        cursor.advance(t)
    return Replay(None, cursor)


__all__ = ["Replay", "Walk", "accepts", "allowed_ids", "check_grammar", "is_allowed", "random_walk", "replay"]
