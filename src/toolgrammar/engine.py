"""The token engine: a turn grammar's byte automaton lifted to a tokenizer's vocabulary.

Compile once, walk cheaply (the split outlines-core and xgrammar use):

- :class:`TokenTable` is built once per vocabulary (about a second for 151k tokens, then cached in
  memory and on disk). It holds every token's symbols (bytes; ``SPECIAL``/``EOS`` for control
  tokens) in flat arrays for vectorized walks.
- :class:`TokenGrammar` joins a :class:`~toolgrammar.grammar.TurnGrammar` and a table. It is
  immutable from the outside and shared by every sequence and every ``generate`` call that uses the
  same tools and options. For each automaton state it computes, on first visit, which tokens are
  allowed (one vectorized walk of the vocabulary through the byte automaton) and keeps the result;
  later visits reuse it. It also knows, for every state, an upper bound on the number of tokens
  needed to leave any block (``dist``), which is what makes the budget guarantee possible.
- :class:`Cursor` is the per-sequence state: where in the automaton, how many tokens are left.

Error policy (written once, here): a bad grammar or tool set fails at compile time with a
:class:`~toolgrammar.errors.ToolgrammarError`. During generation nothing raises on a token: a token
the grammar rejects (possible only when something after the processor changed the scores) puts the
cursor in a sticky error state (``Cursor.error``), after which that row is left unconstrained and
the error is reported, never silently dropped.

Budget: with ``remaining`` tokens left (the current one included), a token is allowed only if the
state it leads to can leave every block within ``remaining - 1`` tokens. ``dist`` is computed with a
subset of the vocabulary (every single-byte token plus the tokens of the grammar's literals), so it
is an upper bound on the true distance: the guarantee is kept, at the price of closing a little
earlier than strictly necessary. Every single byte is a token in byte-level BPE vocabularies, so
every state has a finite bound.

Import boundary: numpy only (no torch, no transformers).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import cache as disk_cache
from .automaton import DEAD, EOS, N_SYMBOLS, SPECIAL
from .errors import TokenizerError

if TYPE_CHECKING:
    from .grammar import TurnGrammar
    from .vocab import Vocabulary

INF = np.iinfo(np.int32).max // 2
"""``dist`` of a state that cannot leave its block (never allowed to be entered under a budget)."""


# ----------------------------------------------------------------------------------------------
# Vocabulary side (once per tokenizer)
# ----------------------------------------------------------------------------------------------


class TokenTable:
    """Every token's symbols, laid out for vectorized walks through a byte automaton."""

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        n = vocab.n_tokens
        self.n_tokens = n
        lengths = np.empty(n, dtype=np.int32)
        chunks: list[bytes] = []
        special_like = vocab.special_ids | vocab.eos_ids
        marker = np.zeros(n, dtype=np.int8)  # 0 text, 1 SPECIAL, 2 EOS
        for i, data in enumerate(vocab.token_bytes):
            if i in special_like:
                lengths[i] = 1
                marker[i] = 2 if i in vocab.eos_ids else 1
                chunks.append(b"\x00")
            else:
                lengths[i] = len(data)
                chunks.append(data)
        flat = np.frombuffer(b"".join(chunks), dtype=np.uint8).astype(np.int16)
        offsets = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        flat[offsets[marker == 1]] = SPECIAL
        flat[offsets[marker == 2]] = EOS
        self.flat = flat
        self.offsets = offsets
        self.lengths = lengths
        if (lengths == 0).any():
            empty = np.flatnonzero(lengths == 0)[:5].tolist()
            raise TokenizerError(f"tokens with no bytes cannot be walked: ids {empty}...")
        # Tokens sorted by length (longest first): at walk position j the tokens still walking are a prefix.
        self.by_length = np.argsort(-lengths, kind="stable").astype(np.int64)
        # Per token, the set of symbols it holds, as 5 x 64-bit words: a token whose symbols all
        # loop on a state stays in that state, without walking it.
        words = np.zeros((n, 5), dtype=np.uint64)
        token_of_pos = np.repeat(np.arange(n), lengths)
        sym = flat.astype(np.int64)
        np.bitwise_or.at(words, (token_of_pos, sym // 64), (np.uint64(1) << (sym % 64).astype(np.uint64)))
        self.symbol_words = words
        self.first_symbol = flat[offsets].astype(np.int64)
        second = np.where(lengths > 1, flat[np.minimum(offsets + 1, len(flat) - 1)], N_SYMBOLS).astype(np.int64)
        self.first_pair = self.first_symbol * (N_SYMBOLS + 1) + second
        self.eos_ids = np.array(sorted(vocab.eos_ids), dtype=np.int64)
        self.single_symbol_tokens = self._single_symbol_tokens()

    def _single_symbol_tokens(self) -> dict[int, int]:
        """symbol -> one token id made of that symbol alone (for the budget bound)."""
        out: dict[int, int] = {}
        for i in np.flatnonzero(self.lengths == 1).tolist():
            out.setdefault(int(self.flat[self.offsets[i]]), i)
        return out

    def symbols(self, token: int) -> np.ndarray:
        o = self.offsets[token]
        return self.flat[o : o + self.lengths[token]]

    def walk(self, transitions: np.ndarray, state: int, self_loop: np.ndarray | None = None) -> np.ndarray:
        """End state of every token from ``state`` (DEAD where rejected). ``transitions`` has a dead last row.

        Three cheap filters before any walking: tokens whose first symbol is rejected are dead (in a
        literal state that is nearly all of them); tokens made only of symbols that loop on the state
        stay in it (inside a string that is most of them); only the rest are walked, symbol by
        symbol, longest first, dropping tokens as they die.
        """
        out = np.full(self.n_tokens, DEAD, dtype=np.int32)
        row = transitions[state]
        # Valid two-symbol prefixes (column N_SYMBOLS: the token ends after one symbol).
        pair_ok = np.empty((N_SYMBOLS, N_SYMBOLS + 1), dtype=bool)
        pair_ok[:, :N_SYMBOLS] = transitions[row] >= 0
        pair_ok[:, N_SYMBOLS] = row >= 0
        candidates = pair_ok.reshape(-1)[self.first_pair]
        if self_loop is not None and self_loop.any():
            loop_words = np.zeros(5, dtype=np.uint64)
            for s in np.flatnonzero(self_loop).tolist():
                loop_words[s // 64] |= np.uint64(1) << np.uint64(s % 64)
            outside = self.symbol_words[:, 0] & ~loop_words[0]
            for k in range(1, 5):
                outside |= self.symbol_words[:, k] & ~loop_words[k]
            stays = outside == 0
            out[stays] = state
            candidates &= ~stays
        n_candidates = int(np.count_nonzero(candidates))
        if n_candidates < 16384:
            ids = np.flatnonzero(candidates)
            ids = ids[np.argsort(-self.lengths[ids], kind="stable")]
        else:
            ids = self.by_length[candidates[self.by_length]]
        if not len(ids):
            return out
        lens = self.lengths[ids]
        offs = self.offsets[ids]
        cur = np.full(len(ids), state, dtype=np.int32)
        neg_lens = -lens
        j = 0
        while len(ids):
            n_active = int(np.searchsorted(neg_lens, -j, side="left"))  # lens sorted descending: lens > j
            if n_active == 0:
                break
            cur[:n_active] = transitions[cur[:n_active], self.flat[offs[:n_active] + j]]
            j += 1
            alive = cur[:n_active] >= 0
            if not alive.all():
                # Drop dead tokens (their result is DEAD already) and write the finished ones out.
                out[ids[n_active:]] = cur[n_active:]
                ids, offs, cur = ids[:n_active][alive], offs[:n_active][alive], cur[:n_active][alive]
                neg_lens = neg_lens[:n_active][alive]
        out[ids] = cur
        return out


_tables: dict[str, TokenTable] = {}
_tables_lock = threading.Lock()


def token_table(vocab: Vocabulary) -> TokenTable:
    """The table of ``vocab``, built once per process."""
    key = vocab.fingerprint
    with _tables_lock:
        table = _tables.get(key)
        if table is None:
            table = TokenTable(vocab)
            _tables[key] = table
        return table


# ----------------------------------------------------------------------------------------------
# Grammar side (once per tools + options + tokenizer)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateMask:
    """The tokens allowed in one state, in the representation cheapest to apply.

    Exactly one of ``banned`` / ``allowed`` is set unless ``all_allowed`` (then neither). Ids are
    sorted int64 arrays over the tokenizer's ids; logit columns beyond the tokenizer are always
    masked by the caller.
    """

    all_allowed: bool
    banned: np.ndarray | None
    allowed: np.ndarray | None
    n_allowed: int
    max_need: int
    """The largest ``dist`` of a state an allowed token leads to: a budget at least this large changes nothing."""


class TokenGrammar:
    """A turn grammar over one vocabulary: per-state masks (cached), the budget bound, stepping."""

    def __init__(self, grammar: TurnGrammar, vocab: Vocabulary):
        self.grammar = grammar
        self.vocab = vocab
        self.table = token_table(vocab)
        dfa = grammar.dfa
        self.dfa = dfa
        # A dead row at the end: index -1 (DEAD) maps to it, so walks need no masking.
        self.transitions = np.vstack([dfa.transitions, np.full((1, N_SYMBOLS), DEAD, dtype=np.int32)])
        self.start = dfa.start
        self.n_states = dfa.n_states
        self.self_loop = dfa.transitions == np.arange(dfa.n_states, dtype=np.int32)[:, None]
        self.eos_allowed = dfa.transitions[:, EOS] >= 0
        self.safe = dfa.safe | self.eos_allowed | dfa.accepting
        self.key = hashlib.sha256((grammar.fingerprint + vocab.fingerprint).encode()).hexdigest()
        cached = disk_cache.load("token-grammars", self.key)
        if cached is not None and cached["dist"].shape == (self.n_states,):
            self.dist = cached["dist"]
        else:
            self.dist = self._distances()
            disk_cache.save("token-grammars", self.key, {"dist": self.dist})
        self._masks: dict[int, StateMask] = {}
        self._needs: dict[int, np.ndarray] = {}
        self._budget_masks: OrderedDict[tuple[int, int], StateMask] = OrderedDict()
        self._lock = threading.Lock()
        self.n_walks = 0

    # -- budget bound ------------------------------------------------------------------------

    def _distances(self) -> np.ndarray:
        """Upper bound on tokens needed from each state to reach a safe state (0 for safe states)."""
        table = self.table
        t = self.transitions
        tokens: set[int] = set(table.single_symbol_tokens.values())
        # Every token spelling a piece of a literal of the grammar (markers, names, keys, JSON
        # punctuation): the bound then follows the paths a tokenizer really takes through literals.
        for text in (*self.grammar.literals, *_JSON_PUNCTUATION):
            data = text.encode("utf-8")
            for i in range(len(data)):
                for j in range(i + 1, min(len(data), i + 32) + 1):
                    tid = self.vocab.token_id(data[i:j])
                    if tid is not None and tid not in self.vocab.special_ids:
                        tokens.add(tid)
        states = np.arange(self.n_states, dtype=np.int32)
        src_list, dst_list = [], []
        for tok in sorted(tokens):
            cur = states.copy()
            for x in table.symbols(tok).tolist():
                if x == EOS:
                    cur[:] = DEAD
                    break
                cur = t[cur, x]
            ok = cur >= 0
            src_list.append(states[ok])
            dst_list.append(cur[ok])
        src = np.concatenate(src_list)
        dst = np.concatenate(dst_list)
        dist = np.full(self.n_states, INF, dtype=np.int64)
        dist[self.safe] = 0
        # Backward BFS over the token edges (unit cost).
        order = np.argsort(dst, kind="stable")
        src_sorted, dst_sorted = src[order], dst[order]
        bounds = np.searchsorted(dst_sorted, np.arange(self.n_states + 1))
        frontier = np.flatnonzero(self.safe)
        level = 0
        while len(frontier):
            level += 1
            preds = np.concatenate([src_sorted[bounds[s] : bounds[s + 1]] for s in frontier]) if len(frontier) else []
            preds = np.unique(preds)
            new = preds[dist[preds] == INF]
            dist[new] = level
            frontier = new
        return dist.astype(np.int32)

    # -- masks ---------------------------------------------------------------------------------

    def mask(self, state: int, remaining: int | None = None) -> StateMask:
        """The allowed tokens in ``state`` with ``remaining`` tokens left (``None``: no budget)."""
        m = self._masks.get(state)
        if m is None:
            with self._lock:
                m = self._masks.get(state)
                if m is None:
                    m = self._compute(state)
                    self._masks[state] = m
        if remaining is None or remaining - 1 >= m.max_need:
            return m
        return self._budget_mask(state, remaining - 1)

    def _walk(self, state: int) -> np.ndarray:
        self.n_walks += 1
        return self.table.walk(self.transitions, state, self.self_loop[state])

    def _compute(self, state: int) -> StateMask:
        nxt = self._walk(state)
        ok = nxt >= 0
        need = np.where(ok, self.dist[np.maximum(nxt, 0)], INF)
        finite = need[ok & (need < INF)]
        max_need = int(finite.max()) if len(finite) else 0
        # Tokens leading to states that can never close are treated as banned (none exist after pruning).
        ok &= need < INF
        return _make_mask(ok, max_need)

    def _budget_mask(self, state: int, budget: int) -> StateMask:
        key = (state, budget)
        with self._lock:
            m = self._budget_masks.get(key)
            if m is not None:
                self._budget_masks.move_to_end(key)
                return m
            need = self._needs.get(state)
            if need is None:
                nxt = self._walk(state)
                need = np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF).astype(np.int32)
                self._needs[state] = need
            ok = need <= budget
            if not ok.any():
                # Nothing can finish in time (the budget was too small from the start, e.g.
                # tool_choice="required" with a handful of tokens): head for the exit as fast as
                # possible rather than leave the sampler with no token at all.
                ok = need == need.min()
            m = _make_mask(ok, budget)
            self._budget_masks[key] = m
            if len(self._budget_masks) > 4096:
                self._budget_masks.popitem(last=False)
            return m

    # -- stepping ------------------------------------------------------------------------------

    def step(self, state: int, token: int) -> int:
        """The state after ``token`` (DEAD if the grammar rejects it)."""
        if not 0 <= token < self.table.n_tokens:
            return DEAD
        t = self.transitions
        for x in self.table.symbols(token).tolist():
            state = int(t[state, x])
            if state < 0:
                return DEAD
        return state

    def is_finished(self, state: int) -> bool:
        """True once the turn has ended (after an end-of-turn token)."""
        return bool(self.dfa.accepting[state]) and not (self.transitions[state, :N_SYMBOLS] >= 0).any()

    def in_block(self, state: int) -> bool:
        """True while a block is open (the turn may not be cut here)."""
        return not bool(self.safe[state])

    @property
    def cache_bytes(self) -> int:
        """Memory held by cached masks (ids arrays), in bytes."""
        total = 0
        for m in list(self._masks.values()) + list(self._budget_masks.values()):
            for arr in (m.banned, m.allowed):
                if arr is not None:
                    total += arr.nbytes
        total += sum(a.nbytes for a in self._needs.values())
        return total

    def stats(self) -> dict[str, int]:
        return {
            "dfa_states": self.n_states,
            "cached_states": len(self._masks),
            "budget_masks": len(self._budget_masks),
            "walks": self.n_walks,
            "cache_bytes": self.cache_bytes,
        }


def _make_mask(ok: np.ndarray, max_need: int) -> StateMask:
    n_allowed = int(ok.sum())
    if n_allowed == len(ok):
        return StateMask(True, None, None, n_allowed, max_need)
    if n_allowed * 2 >= len(ok):
        return StateMask(False, np.flatnonzero(~ok).astype(np.int64), None, n_allowed, max_need)
    return StateMask(False, None, np.flatnonzero(ok).astype(np.int64), n_allowed, max_need)


_JSON_PUNCTUATION = (
    '{"a": "", "b": 0, "c": [], "d": {}, "e": ["", 0, {}], "f": true, "g": false, "h": null, "i": -1.5e+2}',
    '"}}\n', '"]}}\n', "]}}\n", "}}}\n", '""}}\n', '"}, "', '"], "', "}, {", "\n</tool_call>",
)


# ----------------------------------------------------------------------------------------------
# Caching compiled grammars
# ----------------------------------------------------------------------------------------------

_grammars: OrderedDict[str, TokenGrammar] = OrderedDict()
_grammars_lock = threading.Lock()
MAX_CACHED_GRAMMARS = 32


def token_grammar(grammar: TurnGrammar, vocab: Vocabulary) -> TokenGrammar:
    """The token grammar for ``grammar`` over ``vocab``, shared process-wide (LRU of 32)."""
    key = grammar.fingerprint + vocab.fingerprint
    with _grammars_lock:
        tg = _grammars.get(key)
        if tg is not None:
            _grammars.move_to_end(key)
            return tg
    tg = TokenGrammar(grammar, vocab)
    with _grammars_lock:
        _grammars[key] = tg
        while len(_grammars) > MAX_CACHED_GRAMMARS:
            _grammars.popitem(last=False)
    return tg


# ----------------------------------------------------------------------------------------------
# Per-sequence cursor
# ----------------------------------------------------------------------------------------------


class Cursor:
    """Where one sequence is in the grammar. Cheap to create, copy and reset."""

    __slots__ = ("error", "grammar", "max_tokens", "n_tokens", "state")

    def __init__(self, grammar: TokenGrammar, max_tokens: int | None = None):
        self.grammar = grammar
        self.max_tokens = max_tokens
        self.reset()

    def reset(self) -> None:
        self.state = self.grammar.start
        self.n_tokens = 0
        self.error: str | None = None

    def fork(self) -> Cursor:
        c = Cursor.__new__(Cursor)
        c.grammar, c.max_tokens, c.state, c.n_tokens, c.error = (
            self.grammar,
            self.max_tokens,
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
