"""The token engine: a turn grammar's byte automaton lifted to a tokenizer's vocabulary.

Compile once, walk cheaply (the split outlines-core and xgrammar use):

- :class:`TokenTable` is built once per vocabulary (about a second for 151k tokens, then cached in
  memory and on disk). It holds every token's symbols (bytes; ``SPECIAL``/``EOS`` for control
  tokens) in flat arrays for vectorized walks.
- :class:`TokenGrammar` joins a :class:`~toolgrammar.turn.grammar.TurnGrammar` and a table. It is
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
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgrammar import cache as disk_cache
from toolgrammar import native as native_core
from toolgrammar.automata.automaton import DEAD, EOS, N_SYMBOLS, SPECIAL, literal_bytes
from toolgrammar.errors import TokenizerError
from toolgrammar.turn.grammar import tool_literals

if TYPE_CHECKING:
    from types import ModuleType

    from toolgrammar.turn.grammar import TurnGrammar
    from toolgrammar.vocab import Vocabulary

TRIE_MIN_SYMBOLS = 32
"""States accepting more symbols than this (text) get their masks from :meth:`TokenTable.walk_trie`."""
STEP_MEMO = 1 << 17
"""Most (state, token) pairs :meth:`TokenGrammar.step` remembers (about 13 MB)."""

MAX_NEEDS_STATES = 128
"""States whose per-token budget needs (one byte per token: 152 KB for Qwen3) are kept, least recently
used first out: at most about 19 MB, where keeping every state's grew without bound (45 MB at 300)."""

INF = np.iinfo(np.int32).max // 2
"""``dist`` of a state that cannot leave its block (never allowed to be entered under a budget)."""
MAX_EDGE_TRIES = 32
"""Tries of the bound's token sets kept per grammar for the items of long repeats (see ``_token_edges``)."""


# ----------------------------------------------------------------------------------------------
# Vocabulary side (once per tokenizer)
# ----------------------------------------------------------------------------------------------


class TokenTable:
    """Every token's symbols, laid out for vectorized walks through a byte automaton."""

    def __init__(self, vocab: Vocabulary, *, native: bool | None = None):
        self.vocab = vocab
        n = vocab.n_tokens
        self.n_tokens = n
        self.all_ids = np.arange(n)
        """Every token id (read-only; shared by every grammar over this vocabulary)."""
        self.all_ids.flags.writeable = False
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
        self.id_of_bytes: dict[bytes, int] = vocab._id_of_bytes
        """Token bytes -> id (the budget bound's literal tokens): per tokenizer, like the rest of the table."""
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
        # Cheaper test for states that loop on text (inside a string, in free text): ASCII bytes
        # against the loop set (2 words), and whole UTF-8 characters against the state's UTF-8
        # behaviour, computed once per state (:func:`_utf8_returns`).
        self.low0 = np.ascontiguousarray(words[:, 0])
        self.low1 = np.ascontiguousarray(words[:, 1])
        self.has_high = (words[:, 2] | words[:, 3]) != 0
        self.is_control = marker != 0
        self.control_ids = np.flatnonzero(marker != 0)
        self.control_symbol = np.where(marker == 1, SPECIAL, np.where(marker == 2, EOS, -1)).astype(np.int16)
        whole = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(self.has_high).tolist():
            try:
                vocab.token_bytes[i].decode("utf-8")
            except UnicodeDecodeError:
                continue
            whole[i] = True
        self.utf8_whole = whole
        # The same, for each token's tail after its first character: a token that enters a looping
        # state on its first character (a quote opening a string, a letter or a CJK character
        # starting free text) and whose tail loops there ends there, without being walked.
        first_len = np.zeros(n, dtype=np.int64)
        first_byte = np.where(marker == 0, flat[offsets], 0).astype(np.int64)
        first_len[first_byte < 0x80] = 1
        first_len[(first_byte >= 0xC2) & (first_byte <= 0xDF)] = 2
        first_len[(first_byte >= 0xE0) & (first_byte <= 0xEF)] = 3
        first_len[(first_byte >= 0xF0) & (first_byte <= 0xF4)] = 4
        first_len[marker != 0] = 1
        first_len[first_len > lengths] = 0  # a partial character: no shortcut
        pos_in_token = np.arange(len(flat)) - np.repeat(offsets, lengths)
        tail = pos_in_token >= np.repeat(np.maximum(first_len, 1), lengths)
        tail_words = np.zeros((n, 5), dtype=np.uint64)
        np.bitwise_or.at(
            tail_words, (token_of_pos[tail], sym[tail] // 64), (np.uint64(1) << (sym[tail] % 64).astype(np.uint64))
        )
        self.first_char_len = first_len
        self.tail_low0 = np.ascontiguousarray(tail_words[:, 0])
        self.tail_low1 = np.ascontiguousarray(tail_words[:, 1])
        self.tail_has_high = (tail_words[:, 2] | tail_words[:, 3]) != 0
        tail_whole = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(self.tail_has_high & (first_len > 0)).tolist():
            try:
                vocab.token_bytes[i][int(first_len[i]) :].decode("utf-8")
            except UnicodeDecodeError:
                continue
            tail_whole[i] = True
        self.tail_utf8_whole = tail_whole
        self.first_symbol = flat[offsets].astype(np.int64)
        second = np.where(lengths > 1, flat[np.minimum(offsets + 1, len(flat) - 1)], N_SYMBOLS).astype(np.int64)
        self.first_pair = self.first_symbol * (N_SYMBOLS + 1) + second
        self.first_symbol_counts = np.bincount(self.first_symbol, minlength=N_SYMBOLS)
        """How many tokens start with each symbol (the most a state's first symbols can let through)."""
        self.eos_ids = np.array(sorted(vocab.eos_ids), dtype=np.int64)
        self.single_symbol_tokens = self._single_symbol_tokens()
        self._build_trie()
        core = native_core.module() if native is None else (native_core.module() if native else None)
        if native and core is None:
            raise TokenizerError(f"the C core was asked for, but {native_core.describe()}")
        self.native = core
        """The C core (:mod:`toolgrammar.native`) when it walks this table's tokens; ``None``: numpy walks."""
        self._text_exits: OrderedDict[tuple[int, int], tuple[np.ndarray, int]] = OrderedDict()
        self._text_exits_lock = threading.Lock()
        if core is not None:
            self._build_preorder(core)

    def text_exits(self, loops: tuple[int, int]) -> tuple[np.ndarray, int] | None:
        """The exits of a text state's walk with these loop words (see :meth:`remember_text_exits`), or None."""
        with self._text_exits_lock:
            got = self._text_exits.get(loops)
            if got is not None:
                self._text_exits.move_to_end(loops)
            return got

    def remember_text_exits(self, loops: tuple[int, int], exits: np.ndarray, has_pure: int) -> None:
        """Keep what the C core recorded of a dense text state's walk: the trie nodes where a path leaves the
        state (a string's closing quote, an escape, a control byte, a character cut short), as
        ``(node, end, prefix)`` rows. Every state with the same loop words (and whole UTF-8 characters
        returning to it) walks the rest of the trie the same way, so the next such state's mask walks only
        these ranges: a JSON string's first visit costs a few thousand nodes, not the vocabulary's trie.
        Per tokenizer, like the trie itself, and bounded (:data:`MAX_TEXT_EXITS` loop sets)."""
        with self._text_exits_lock:
            self._text_exits[loops] = (exits, has_pure)
            self._text_exits.move_to_end(loops)
            while len(self._text_exits) > MAX_TEXT_EXITS:
                self._text_exits.popitem(last=False)

    def forget_text_exits(self) -> None:
        with self._text_exits_lock:
            self._text_exits.clear()

    def _build_trie(self) -> None:
        """The tokens as a trie of symbols, by depth (~0.1 s for Qwen3, 333k nodes for 976k symbols).

        Node ids are grouped by depth (``trie_levels[d]:trie_levels[d + 1]``); ``trie_parents[d]`` and
        ``trie_symbols[d]`` give each node of depth ``d`` its parent and symbol; ``trie_leaf[t]`` is the
        node that ends token ``t``. :meth:`walk_trie` walks it one gather per depth.
        """
        n = self.n_tokens
        lengths = self.lengths.astype(np.int64)
        node_of_token = np.full(n, -1, dtype=np.int64)
        leaf = np.empty(n, dtype=np.int64)
        parents, symbols, levels = [], [], [0]
        active = np.arange(n)
        for d in range(int(lengths.max())):
            active = active[lengths[active] > d]
            key = (node_of_token[active] + 1) * (N_SYMBOLS + 1) + self.flat[self.offsets[active] + d]
            uniq, inv = np.unique(key, return_inverse=True)
            parents.append((uniq // (N_SYMBOLS + 1) - 1).astype(np.intp))
            symbols.append((uniq % (N_SYMBOLS + 1)).astype(np.int32))
            node_of_token[active] = levels[-1] + inv
            ends = lengths[active] == d + 1
            leaf[active[ends]] = levels[-1] + inv[ends]
            levels.append(levels[-1] + len(uniq))
        self.trie_parents, self.trie_symbols, self.trie_levels, self.trie_leaf = parents, symbols, levels, leaf

    def _build_preorder(self, core: ModuleType) -> None:
        """The trie again, in preorder for the C core's depth-first walk (``pre_end[i]``: where node ``i``'s
        subtree ends; ``pre_tokens[pre_start[i]:pre_start[i + 1]]``: the tokens that end at node ``i``)."""
        trie = self.sub_trie(self.all_ids)
        self.pre_sym, self.pre_depth, self.pre_end = trie.sym, trie.depth, trie.end
        self.pre_start, self.pre_tokens, self.pre_max_depth = trie.start, trie.tokens, trie.max_depth
        self.pre_whole = trie.whole
        self.trie_leaf_pre = trie.leaf
        nodes = len(trie.sym)
        self.pre_sub_low0 = np.empty(nodes, dtype=np.uint64)
        self.pre_sub_low1 = np.empty(nodes, dtype=np.uint64)
        self.pre_sub_high = np.empty(nodes, dtype=np.uint8)
        core.trie_symbols(self.pre_sym, self.pre_end, self.pre_sub_low0, self.pre_sub_low1, self.pre_sub_high)
        self._build_text_index(core)

    def sub_trie(self, tokens: np.ndarray) -> SubTrie:
        """The trie of ``tokens`` (ids), laid out for the core: the whole vocabulary's for the masks, the
        bound's tokens alone for its edges (a few thousand tokens walked from every state: a shared prefix
        is walked once, a rejected one skipped)."""
        core = self.native
        if core is None:
            raise RuntimeError("sub_trie needs the C core (TokenTable.native is None)")
        n = len(tokens)
        offsets = np.ascontiguousarray(self.offsets[tokens])
        lengths = np.ascontiguousarray(self.lengths[tokens])
        total = int(lengths.sum())
        order = np.empty(n, dtype=np.int64)
        sym = np.empty(total, dtype=np.int16)
        depth = np.empty(total, dtype=np.int32)
        end = np.empty(total, dtype=np.int32)
        leaf = np.empty(n, dtype=np.int32)
        whole = np.empty(total, dtype=np.uint8)
        nodes = core.trie_build(self.flat, offsets, lengths, order, sym, depth, end, leaf, whole)
        start = np.searchsorted(leaf[order], np.arange(nodes + 1)).astype(np.int32)
        return SubTrie(
            sym[:nodes].copy(),
            depth[:nodes].copy(),
            end[:nodes].copy(),
            start,
            np.asarray(tokens)[order],
            int(depth[:nodes].max(initial=0)),
            leaf,
            whole[:nodes].copy(),
        )

    def _build_text_index(self, core: ModuleType) -> None:
        """What :meth:`text_pieces` and :meth:`greedy_tokens` read: the trie's first two levels as tables, and per
        node the id ``Vocabulary._id_of_bytes`` gives its bytes (-1: none, or a special token, which literals
        never use), so the core returns exactly the ids the dictionary lookups would."""
        vocab, depth, sym = self.vocab, self.pre_depth, self.pre_sym
        nodes = len(sym)
        top = np.flatnonzero(depth == 0)
        self.text_root = np.full(256, -1, dtype=np.int32)
        text_top = top[sym[top] < 256]
        self.text_root[sym[text_top]] = text_top
        second = np.flatnonzero(depth == 1)
        parent = top[np.searchsorted(top, second, side="right") - 1]
        keep = (sym[parent] < 256) & (sym[second] < 256)
        self.text_level2 = np.full(65536, -1, dtype=np.int32)
        self.text_level2[sym[parent[keep]].astype(np.int64) * 256 + sym[second[keep]]] = second[keep]
        # Lowest id among ordinary tokens; then the tokens drawn as control symbols, whose bytes may also be
        # an ordinary token's (placed by their bytes); then added tokens win, in id order (as _id_of_bytes).
        best = np.full(nodes, np.iinfo(np.int64).max, dtype=np.int64)
        text = np.flatnonzero(~self.is_control)
        np.minimum.at(best, self.trie_leaf_pre[text], text)
        node_token = np.where(best == np.iinfo(np.int64).max, -1, best).astype(np.int32)
        self.text_index_exact = True
        self.node_token = node_token
        special = vocab.special_ids
        for i in self.control_ids.tolist():
            node = self._text_node(core, vocab.token_bytes[i])
            if node >= 0 and (node_token[node] < 0 or i < node_token[node]):
                node_token[node] = i
            elif (
                node < 0
                and vocab.token_bytes[i]
                and i not in special
                and vocab._id_of_bytes.get(vocab.token_bytes[i]) == i
            ):
                self.text_index_exact = False  # an id literals may use that no byte path reaches
        for i in sorted(vocab.added_ids):
            node = int(self.trie_leaf_pre[i]) if not self.is_control[i] else self._text_node(core, vocab.token_bytes[i])
            if node >= 0:
                node_token[node] = i
        node_token[np.isin(node_token, np.fromiter(special, dtype=np.int64, count=len(special)))] = -1

    def _text_tokens(self, core: ModuleType, data: bytes, mode: int, max_len: int, out: np.ndarray) -> int:
        """The core's ``text_tokens`` over this table's byte index (see ``_native.c`` for the modes)."""
        return int(
            core.text_tokens(
                np.frombuffer(data, dtype=np.uint8),
                mode,
                max_len,
                self.text_root,
                self.text_level2,
                self.pre_sym,
                self.pre_depth,
                self.pre_end,
                self.node_token,
                out,
            )
        )

    def _text_node(self, core: ModuleType, data: bytes) -> int:
        """The node that spells ``data`` by its bytes, or -1."""
        return self._text_tokens(core, data, 2, len(data), np.empty(0, dtype=np.int64)) if data else -1

    def text_pieces(self, data: bytes, max_len: int = 32) -> np.ndarray | None:
        """Every token (ids, with repeats) that spells ``data[i:j]``, ``j - i <= max_len``, as
        ``Vocabulary._id_of_bytes`` names it, special tokens left out; ``None`` without the core."""
        core = self.native
        if core is None or not self.text_index_exact:
            return None
        out = np.empty(max(1, len(data) * max_len), dtype=np.int64)
        return out[: self._text_tokens(core, data, 0, max_len, out)]

    def greedy_pieces(self, data: bytes, max_len: int = 32) -> list[int] | int | None:
        """``data`` cut into the longest tokens first (as :meth:`text_pieces` names them): the ids, or the
        position of a byte no token starts with; ``None`` without the core."""
        core = self.native
        if core is None or not self.text_index_exact:
            return None
        out = np.empty(max(1, len(data)), dtype=np.int64)
        k = self._text_tokens(core, data, 1, max_len, out)
        return -1 - k if k < 0 else out[:k].tolist()

    def walk_native(self, transitions: np.ndarray, state: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every token accepted from ``state``, by the C core: ``(dense, ids, ends)``, where ``dense[t]`` is
        token ``t``'s end state (DEAD where rejected) and ``ids``/``ends`` list the accepted tokens alone
        (in trie order, not sorted)."""
        core = self.native
        if core is None:
            raise RuntimeError("walk_native needs the C core (TokenTable.native is None)")
        n = self.n_tokens
        dense = np.full(n, DEAD, dtype=np.int32)
        ids = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int32)
        t = np.ascontiguousarray(transitions, dtype=np.int32)
        k = core.trie_walk(
            t,
            t.shape[1],
            state,
            self.pre_max_depth,
            self.pre_sym,
            self.pre_depth,
            self.pre_end,
            self.pre_start,
            self.pre_tokens,
            dense,
            ids,
            ends,
        )
        return dense, ids[:k], ends[:k]

    def walk_trie(self, transitions: np.ndarray, state: int) -> np.ndarray:
        """:meth:`walk`'s result by walking the trie: a prefix shared by many tokens is walked once, and
        nothing is compacted (a dead parent, -1, indexes the table's last row: the dead row). Several times
        faster than :meth:`walk` where most tokens are text (free text, reasoning, strings)."""
        flat = transitions.reshape(-1)
        lv = self.trie_levels
        cur = np.empty(lv[-1], dtype=np.int32)
        cur[: lv[1]] = transitions[state, self.trie_symbols[0]]
        for d in range(1, len(lv) - 1):
            p = cur[self.trie_parents[d]]
            p *= N_SYMBOLS
            p += self.trie_symbols[d]
            cur[lv[d] : lv[d + 1]] = flat[p]
        return cur[self.trie_leaf]

    def _single_symbol_tokens(self) -> dict[int, int]:
        """symbol -> one token id made of that symbol alone (for the budget bound)."""
        out: dict[int, int] = {}
        for i in np.flatnonzero(self.lengths == 1).tolist():
            out.setdefault(int(self.flat[self.offsets[i]]), i)
        return out

    def symbols(self, token: int) -> np.ndarray:
        o = self.offsets[token]
        return self.flat[o : o + self.lengths[token]]

    def candidates(self, transitions: np.ndarray, state: int) -> np.ndarray:
        """Tokens whose first two symbols the automaton accepts from ``state`` (bool per token)."""
        row = transitions[state]
        # Valid two-symbol prefixes (column N_SYMBOLS: the token ends after one symbol).
        pair_ok = np.empty((N_SYMBOLS, N_SYMBOLS + 1), dtype=bool)
        pair_ok[:, :N_SYMBOLS] = transitions[row] >= 0
        pair_ok[:, N_SYMBOLS] = row >= 0
        return pair_ok.reshape(-1)[self.first_pair]

    def walk(self, transitions: np.ndarray, state: int, loops: Loops | None = None) -> np.ndarray:
        """End state of every token from ``state`` (DEAD where rejected). ``transitions`` has a dead last row.

        Cheap filters before any walking: tokens whose first two symbols are rejected are dead (in
        a literal state that is nearly all of them); tokens made of symbols (and whole UTF-8
        characters) that loop on the state stay in it (inside a string, most of them); tokens that
        enter a looping state on their first symbol and loop there after it end there. Only the
        rest are walked (:meth:`walk_ids`).
        """
        if self.native is not None:
            return self.walk_native(transitions, state)[0]
        out = np.full(self.n_tokens, DEAD, dtype=np.int32)
        candidates = self.candidates(transitions, state)
        if loops is not None and loops.any[state]:
            outside = self.low0 & ~loops.low0[state]
            outside |= self.low1 & ~loops.low1[state]
            stays = outside == 0
            stays &= ~self.has_high | (self.utf8_whole & loops.utf8_returns(state))
            cs = self.control_symbol[self.control_ids]
            stays[self.control_ids] = ((cs == SPECIAL) & loops.special[state]) | ((cs == EOS) & loops.eos[state])
            out[stays] = state
            candidates &= ~stays
        ids = np.flatnonzero(candidates)
        out[ids] = self.walk_ids(transitions, state, ids, loops)
        return out

    def walk_ids(self, transitions: np.ndarray, state: int, ids: np.ndarray, loops: Loops | None = None) -> np.ndarray:
        """End state of each token in ``ids`` from ``state`` (DEAD where rejected)."""
        result = np.full(len(ids), DEAD, dtype=np.int32)
        if not len(ids):
            return result
        pending = np.ones(len(ids), dtype=bool)
        row = transitions[state]
        if loops is not None:
            # One character, then a looping state whose loop holds the rest of the token.
            flen = self.first_char_len[ids]
            offs = self.offsets[ids]
            q = np.where(flen > 0, row[self.first_symbol[ids]], DEAD)
            for k in (1, 2, 3):
                more = flen > k
                if more.any():
                    q[more] = transitions[q[more], self.flat[offs[more] + k]]
            enter = (q >= 0) & loops.any[np.maximum(q, 0)] & ~self.is_control[ids]
            where = np.flatnonzero(enter)
            if len(where):
                sub, qs = ids[where], q[where]
                fits = ((self.tail_low0[sub] & ~loops.low0[qs]) | (self.tail_low1[sub] & ~loops.low1[qs])) == 0
                high = self.tail_has_high[sub]
                if high.any():
                    ok_state = np.zeros(len(loops.any), dtype=bool)
                    for x in np.flatnonzero(np.bincount(qs[high], minlength=len(loops.any))).tolist():
                        ok_state[x] = loops.utf8_returns(x)
                    fits &= ~high | (self.tail_utf8_whole[sub] & ok_state[qs])
                result[where[fits]] = qs[fits]
                pending[where[fits]] = False
        rest = np.flatnonzero(pending)
        if len(rest):
            order = rest[np.argsort(-self.lengths[ids[rest]], kind="stable")]
            result[order] = self._walk_sorted(transitions, state, ids[order])
        return result

    def _walk_sorted(self, transitions: np.ndarray, state: int, ids: np.ndarray) -> np.ndarray:
        """Walk ``ids`` (sorted by length, longest first) symbol by symbol; returns their end states."""
        result = np.full(len(ids), DEAD, dtype=np.int32)
        position = np.arange(len(ids))  # where each still-walking token's result goes
        lens = self.lengths[ids]
        offs = self.offsets[ids]
        cur = np.full(len(ids), state, dtype=np.int32)
        neg_lens = -lens
        j = 0
        # active[j]: how many tokens are longer than j (lens sorted descending).
        active = np.searchsorted(neg_lens, -np.arange(int(-neg_lens[0]) + 1), side="left")
        while len(ids):
            n_active = int(active[j]) if j < len(active) else 0
            if n_active == 0:
                break
            if n_active <= 16:
                # A few long tokens left (runs of spaces, dashes...): numpy's per-call overhead would
                # dominate, so finish them one by one.
                for k in range(n_active):
                    state_k = int(cur[k])
                    for x in self.flat[offs[k] + j : offs[k] - neg_lens[k]].tolist():
                        state_k = int(transitions[state_k, x])
                        if state_k < 0:
                            break
                    cur[k] = state_k
                break
            cur[:n_active] = transitions[cur[:n_active], self.flat[offs[:n_active] + j]]
            j += 1
            alive = cur[:n_active] >= 0
            n_alive = int(np.count_nonzero(alive))
            if n_alive * 2 < n_active:
                # Drop dead tokens (their result is DEAD already; dead ones kept so far stay dead
                # through the dead row) and write the finished ones out.
                result[position[n_active:]] = cur[n_active:]
                ids, offs, cur = ids[:n_active][alive], offs[:n_active][alive], cur[:n_active][alive]
                position = position[:n_active][alive]
                neg_lens = neg_lens[:n_active][alive]
                if not len(ids):
                    break
                active = np.zeros(j, dtype=np.int64)
                active = np.concatenate([active, np.searchsorted(neg_lens, -np.arange(j, int(-neg_lens[0]) + 1))])
        result[position] = cur
        return result


@dataclass(frozen=True)
class SubTrie:
    """A trie of some tokens in preorder (:meth:`TokenTable.sub_trie`): node ``i`` spells ``sym[i]`` at
    ``depth[i]``, its subtree ends at ``end[i]``, and ``tokens[start[i]:start[i + 1]]`` end at it."""

    sym: np.ndarray
    depth: np.ndarray
    end: np.ndarray
    start: np.ndarray
    tokens: np.ndarray
    max_depth: int
    leaf: np.ndarray
    """The node that ends each token, in the order the tokens were given."""
    whole: np.ndarray
    """Per node: every token of its subtree is whole UTF-8 characters from the node on."""


class Loops:
    """What each state of an automaton loops on, for :meth:`TokenTable.walk`'s shortcuts."""

    def __init__(self, transitions: np.ndarray):
        n = transitions.shape[0]  # includes the dead row
        self.low0, self.low1, self.special, self.eos, self.any = self._rows(transitions, 0, n)
        self._transitions = transitions
        self._utf8: dict[int, bool] = {}
        self.utf8_memo = np.full(n, -1, dtype=np.int8)
        """The C core's memo of :meth:`utf8_returns` per state (-1: not known yet)."""

    @staticmethod
    def _rows(transitions: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """``(low0, low1, special, eos, any)`` of rows ``lo..hi-1``; the last row of the table is the dead row."""
        loop = transitions[lo:hi] == np.arange(lo, hi, dtype=np.int32)[:, None]
        if hi == transitions.shape[0]:
            loop[-1] = False
        # Bit j of word k: symbol 64k + j loops (packed in place: no (n, 64) uint64 temporaries).
        low = np.packbits(loop[:, :128], axis=1, bitorder="little").view("<u8").astype(np.uint64)
        return (
            np.ascontiguousarray(low[:, 0]),
            np.ascontiguousarray(low[:, 1]),
            loop[:, SPECIAL].copy(),
            loop[:, EOS].copy(),
            loop.any(axis=1),
        )

    def grow(self, transitions: np.ndarray, lo: int, changed: int) -> None:
        """After rows ``lo..`` were appended (where the dead row was) and row ``changed`` was rewritten."""
        n = transitions.shape[0]
        new = self._rows(transitions, lo, n)
        one = self._rows(transitions, changed, changed + 1)
        for name, rows, row in zip(("low0", "low1", "special", "eos", "any"), new, one, strict=True):
            setattr(self, name, _spliced(getattr(self, name), lo, rows, changed, row[0]))
        self.utf8_memo = _spliced(self.utf8_memo, lo, np.full(n - lo, -1, dtype=np.int8), changed, -1)
        self._utf8.pop(changed, None)
        self._transitions = transitions

    def utf8_returns(self, state: int) -> bool:
        got = self._utf8.get(state)
        if got is None:
            got = self._utf8[state] = _utf8_returns(self._transitions, state)
        return got


def _relax_native(core: Any, d: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
    """``d[s] <= d[t] + 1`` along every token edge ``s -> t``, least such ``d`` under its starting values
    (in place; the core buckets the edges by ``t`` itself)."""
    core.relax(d, np.ascontiguousarray(dst, dtype=np.int64), np.ascontiguousarray(src, dtype=np.int64), INF)


def _spliced(old: np.ndarray, lo: int, rows: np.ndarray, changed: int, value: Any) -> np.ndarray:
    """A per-state array after a tail was appended: ``old``'s first ``lo`` entries, then ``rows`` (the new
    states'), with entry ``changed`` (the stub whose row was rewritten) set to ``value``."""
    out = np.concatenate([old[:lo], rows])
    out[changed] = value
    return out


_UTF8_PATTERNS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((0xC2, 0xDF), (0x80, 0xBF)),
    ((0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)),
    ((0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)),
    ((0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)),
)
"""Every well-formed UTF-8 multi-byte character, as byte ranges per position (RFC 3629)."""


def _utf8_returns(transitions: np.ndarray, state: int) -> bool:
    """Whether every well-formed multi-byte UTF-8 character leads from ``state`` back to ``state``.

    Then a token made of whole characters and of ASCII bytes that loop on the state stays in it,
    without being walked (inside a JSON string, that is nearly every CJK or emoji token).
    """
    for pattern in _UTF8_PATTERNS:
        cur = np.array([state], dtype=np.int64)
        for lo, hi in pattern:
            nxt = transitions[cur][:, lo : hi + 1]
            if (nxt < 0).any():
                return False
            cur = np.unique(nxt)
        if not (cur == state).all():
            return False
    return True


MAX_TEXT_EXITS = 64
"""Loop sets whose text-state exits a :class:`TokenTable` keeps (a few KB to a few hundred KB each)."""

TEXT_EXITS_CAP = 1 << 17
"""The most exits recorded for one loop set (past that the state's walks stay whole walks)."""

_tables: dict[str, TokenTable] = {}
_tables_lock = threading.Lock()


def clear_text_exits() -> None:
    """Forget every token table's text-state exits (:meth:`TokenTable.remember_text_exits`): what a new
    process knows, its tokenizer's table aside."""
    for table in list(_tables.values()):
        table.forget_text_exits()


def clear_compiled() -> None:
    """Forget everything this process compiled from tool lists: token grammars, validated tool lists,
    schema trees, shared sub-automata and turn skeletons, tool tails. What a new process knows, except the
    disk cache and the token tables (the tokenizer's data and its text-state exits, see
    :func:`clear_text_exits`)."""
    from toolgrammar.automata import automaton, lazy
    from toolgrammar.schema import tools
    from toolgrammar.values import json_grammar

    _grammars.clear()
    tools.clear_recent()
    json_grammar.any_value.cache_clear()
    json_grammar.clear_part_cache()
    automaton.clear_caches()
    lazy.clear_tail_cache()


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
        from toolgrammar.automata.lazy import LazyAutomaton

        self.grammar = grammar
        self.vocab = vocab
        self.table = token_table(vocab)
        self.auto = LazyAutomaton(grammar.skeleton)
        self.start = self.auto.start
        self._lock = threading.RLock()
        self._refresh()
        self._steps: dict[int, int] = {}
        # The tokens the budget bound walks: every single symbol, and every token spelling a piece of
        # a literal (markers, names, JSON punctuation; a tool's keys once its tail is built), so the
        # bound follows the paths a tokenizer really takes through literals.
        self._dist_tokens: set[int] = set(self.table.single_symbol_tokens.values())
        m = grammar.format.markers
        markup = [m.block_open, m.block_close, m.think_open, m.think_close, m.call_separator]
        self._add_literal_tokens([*markup, *_JSON_PUNCTUATION, *grammar.format.budget_literals()])
        self._add_literal_tokens(literal_bytes(grammar.node, tails=False))
        # One tool's rendered call spells the joins every call shares (opener, name key, closer).
        self._selected = grammar.options.selected_tools(grammar.tools) if grammar.options.tool_choice != "none" else []
        if self._selected:
            self._add_literal_tokens(list(tool_literals(self._selected[0], grammar.format)))
        self._root_tokens: dict[int, set[int]] | None = None  # per tool, once the base set is final
        self._edge_tries: OrderedDict[object, Any] = OrderedDict()  # see _token_edges
        for stub in list(self.auto.expanded):  # built with the grammar (one tool): part of the base
            self._dist_tokens |= self._tail_tokens(stub)
        # A stub not built yet costs the tokens of its tail's shortest string, tokenized greedily
        # (a real path); those tokens join the bound's walk so the bound after building is no larger.
        self._stub_weights: dict[int, int] = {}
        self._stub_tokens: dict[int, list[int]] = {}
        for stub, witness in self.auto.witnesses.items():
            self._weigh(stub, witness)
            self._dist_tokens.update(self._stub_tokens[stub])
        self._root_tokens = {}
        # The per-state table below is only valid for this numbering of the states: the digest of the
        # automaton as it stands (the skeleton and the tails built with it) keys it too, so a compiler
        # that numbers states otherwise never reads a stale table. (The skeleton alone was not enough:
        # a tail built up front is numbered by the compiler too.)
        numbering = hashlib.sha256(memoryview(np.ascontiguousarray(self.auto.transitions))).hexdigest()
        self.key = hashlib.sha256((grammar.fingerprint + vocab.fingerprint + numbering).encode()).hexdigest()
        on_disk = self.n_states >= DIST_ON_DISK_FROM
        cached = disk_cache.load("token-grammars", self.key) if on_disk else None
        if cached is not None and cached["dist"].shape == (self.n_states,):
            self.dist = cached["dist"]
        else:
            self.dist = self._distances()
            if on_disk:
                disk_cache.save("token-grammars", self.key, {"dist": self.dist})
        self._masks: dict[int, StateMask] = {}
        self._same_row: dict[int, int] = {}  # state -> the representative of its row (see _representative)
        self._rows_seen: dict[tuple[bytes, bool, bool], int] = {}
        self._needs: OrderedDict[int, np.ndarray] = OrderedDict()  # LRU: one byte per token each
        self._budget_masks: OrderedDict[tuple[int, int], StateMask] = OrderedDict()
        self._closers: dict[int, np.ndarray] = {}  # state -> closing_tokens (shared by a row's states)
        self._dist_ids = np.empty(0, dtype=np.int64)  # _dist_tokens sorted, rebuilt when the set grows
        self.n_walks = 0
        self.n_expansions = 0

    def _refresh(self) -> None:
        """Derived arrays of the automaton as it stands."""
        auto = self.auto
        self.transitions = auto.transitions
        self.n_states = auto.n_states
        self.loops = Loops(self.transitions)
        self.n_symbols, finished, self.eos_allowed, self.safe = self._derived(0, self.n_states)
        self._finished = finished.tolist()

    def _grown(self, lo: int, stub: int) -> None:
        """:meth:`_refresh` for states ``lo..`` (a tail appended) and ``stub`` (its row rewritten) only: the
        rows before did not change, and a pass over the whole table per tail was most of a tail's cost."""
        auto = self.auto
        self.transitions = auto.transitions
        self.n_states = auto.n_states
        self.loops.grow(self.transitions, lo, stub)
        new = self._derived(lo, self.n_states)
        one = self._derived(stub, stub + 1)
        for i, name in ((0, "n_symbols"), (2, "eos_allowed"), (3, "safe")):
            setattr(self, name, _spliced(getattr(self, name), lo, new[i], stub, one[i][0]))
        self._finished[lo:] = new[1].tolist()
        self._finished[stub] = bool(one[1][0])

    def _derived(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(n_symbols, finished, eos_allowed, safe)`` of states ``lo..hi-1``."""
        auto = self.auto
        # The trap (and every stub's row, which leads there) stands for rows not built yet: no symbol,
        # no end of turn, never safe.
        real = self.transitions[lo:hi]
        live = (real >= 0) & (real != auto.trap)
        eos = live[:, EOS]
        finished = auto.accepting[lo:hi] & ~live[:, :N_SYMBOLS].any(axis=1)
        safe = (auto.safe[lo:hi] | eos | auto.accepting[lo:hi]) & (np.arange(lo, hi) != auto.trap)
        return live.sum(axis=1), finished, eos, safe

    def build_all(self) -> None:
        """Build every tool's tail now, every long repeat's items included (the engine otherwise builds a
        tail when a walk first reaches it)."""
        while self.auto.stubs:
            self._expand(set(self.auto.stubs))

    def _add_literal_tokens(self, texts: list[str | bytes]) -> None:
        self._dist_tokens |= self._literal_tokens(texts)

    def _literal_tokens(self, texts: list[str | bytes]) -> set[int]:
        """Every token that spells a piece (up to 32 bytes) of one of ``texts``."""
        if self.table.native is not None and self.table.text_index_exact:
            data = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
            return set(np.concatenate([self.table.text_pieces(d) for d in data] or [np.empty(0, np.int64)]).tolist())
        id_of = self.table.id_of_bytes
        special = self.vocab.special_ids
        out: set[int] = set()
        for text in texts:
            data = text.encode("utf-8") if isinstance(text, str) else text
            for i in range(len(data)):
                for j in range(i + 1, min(len(data), i + 32) + 1):
                    tid = id_of.get(data[i:j])
                    if tid is not None and tid not in special:
                        out.add(tid)
        return out

    def _greedy_tokens(self, data: bytes) -> list[int]:
        """``data`` cut into the longest tokens first (every byte is a token in byte-level vocabularies)."""
        got = self.table.greedy_pieces(data)
        if isinstance(got, int):
            raise TokenizerError(f"byte {data[got]:#x} is not a token of {self.vocab.name!r}")
        if got is not None:
            return got
        id_of = self.table.id_of_bytes
        special = self.vocab.special_ids
        out: list[int] = []
        i = 0
        while i < len(data):
            for j in range(min(len(data), i + 32), i, -1):
                tid = id_of.get(data[i:j])
                if tid is not None and tid not in special:
                    out.append(tid)
                    i = j
                    break
            else:
                raise TokenizerError(f"byte {data[i]:#x} is not a token of {self.vocab.name!r}")
        return out

    def _weigh(self, stub: int, witness: bytes) -> None:
        """A stub's weight: its tail's shortest string cut into real tokens (kept: they join the walk of
        the bound where that tail is built, so the bound there is no larger)."""
        tokens = self._greedy_tokens(witness)
        self._stub_tokens[stub] = tokens
        self._stub_weights[stub] = len(tokens)

    def _tail_tokens(self, stub: int) -> set[int]:
        """The bound's tokens for one tail: the base set and the pieces of that tool's literals; a long
        repeat's next item (a stub inside a tail) takes its tool's set and its own weight's tokens."""
        root = self.auto.root_of.get(stub)
        if root is not None:
            return self._tool_tokens(root) | set(self._stub_tokens[stub])
        return self._tool_tokens(stub)

    def _tokens_key(self, stub: int) -> object:
        """What names :meth:`_tail_tokens`' set for a stub inside a tail (the same for every next item of a
        repeat), or None for a tool's tail (built once)."""
        root = self.auto.root_of.get(stub)
        return None if root is None else (root, tuple(self._stub_tokens[stub]))

    def _tool_tokens(self, stub: int) -> set[int]:
        got = self._root_tokens.get(stub) if self._root_tokens is not None else None
        if got is not None:
            return got
        _e, j, b = self.auto.expanded[stub]
        d = self.auto.dispatches[j]
        texts: list[str | bytes] = list(literal_bytes(d.tails[b]))
        if len(self._selected) == len(d.keys):  # the format's dispatch is over the selected tools, in order
            texts.extend(tool_literals(self._selected[b], self.grammar.format))
        got = self._literal_tokens(texts) | self._dist_tokens
        if self._root_tokens is not None:  # the base set is final: kept per tool
            self._root_tokens[stub] = got
        return got

    def _expand(self, stubs: set[int]) -> None:
        """Build the tails behind ``stubs`` and bound their new states.

        Nothing computed before changes: the states that existed keep their bound (a stub keeps the
        cost of its tail's shortest string), and each tail's states are bounded from the tail alone
        and the states it leads back to. So masks, budgets and bounds do not depend on which tools
        earlier turns happened to build: the same prompt and seed give the same tokens.
        """
        with self._lock:
            for stub in sorted(stubs):
                before = self.auto.n_states
                inner = self.auto.expand(stub)
                if inner is None:
                    continue
                self.n_expansions += 1
                for s in inner:
                    self._weigh(s, self.auto.witnesses[s])
                self._grown(before, stub)
                tail = self._tail_distances(
                    before, self.auto.n_states, self._tail_tokens(stub), inner, self._tokens_key(stub)
                )
                self.dist = np.concatenate([self.dist, tail])

    def _tail_distances(
        self, lo: int, hi: int, tokens: set[int], inner: tuple[int, ...] = (), key: object = None
    ) -> np.ndarray:
        """The bound of states ``lo..hi-1`` (one tail): token edges inside it, and out of it to states
        whose bound is known (the grammar after the dispatch). A stub ``inner`` to the tail (a long
        repeat's next item) costs its weight more than the state after it, as stubs do in
        :meth:`_distances`; the joins are applied between passes until nothing moves."""
        src, dst = self._token_edges(np.arange(lo, hi, dtype=np.int32), tokens, key)
        d = np.full(hi - lo, INF, dtype=np.int64)
        d[self.safe[lo:hi]] = 0
        out = (dst < lo) | (dst >= hi)
        known = out & (dst < len(self.dist))
        if known.any():
            np.minimum.at(d, src[known] - lo, self.dist[dst[known]].astype(np.int64) + 1)
        s_in, d_in = src[~out] - lo, dst[~out] - lo
        stubs = np.array(inner, dtype=np.int64) - lo
        after = np.array([self.auto.stubs[s][0] for s in inner], dtype=np.int64) - lo
        weights = np.array([self._stub_weights[s] for s in inner], dtype=np.int64)
        core = self.table.native
        while True:
            if core is not None and len(s_in):
                # d[s] <= d[t] + 1 along each edge s -> t inside the tail: shortest paths from the exits, in C.
                _relax_native(core, d, s_in, d_in)
            else:
                while len(s_in):
                    new = d.copy()
                    np.minimum.at(new, s_in, d[d_in] + 1)
                    if np.array_equal(new, d):
                        break
                    d = new
            if not len(stubs):
                break
            joined = np.minimum(d[after] + weights, INF)
            lower = joined < d[stubs]
            if not lower.any():
                break
            d[stubs[lower]] = joined[lower]
        return np.minimum(d, INF).astype(np.int32)

    def _token_edges(self, states: np.ndarray, tokens: set[int], key: object = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) of every token of ``tokens`` from every state of ``states`` that accepts it
        (an end of turn ends no edge; walks into the trap, through a stub not built yet, are dropped).
        ``key`` names a token set asked for again (each next item of a long repeat): its trie is kept."""
        t = self.transitions
        core = self.table.native
        if core is not None:
            sub = self._edge_tries.get(key) if key is not None else None
            if sub is None:
                sub = self.table.sub_trie(np.array(sorted(tokens), dtype=np.int64))
                if key is not None:
                    self._edge_tries[key] = sub
                    while len(self._edge_tries) > MAX_EDGE_TRIES:
                        self._edge_tries.popitem(last=False)
            else:
                self._edge_tries.move_to_end(key)
            pairs = core.trie_edges(
                np.ascontiguousarray(t, dtype=np.int32),
                N_SYMBOLS,
                np.ascontiguousarray(states, dtype=np.int32),
                sub.max_depth,
                sub.sym,
                sub.depth,
                sub.end,
                sub.start,
                self.auto.trap,
                EOS,
            )
            edges = np.frombuffer(pairs, dtype=np.int64).reshape(-1, 2)
            return edges[:, 0].copy(), edges[:, 1].copy()
        src_list, dst_list = [], []
        for tok in sorted(tokens):
            cur = states.copy()
            for x in self.table.symbols(tok).tolist():
                if x == EOS:
                    cur[:] = DEAD
                    break
                cur = t[cur, x]
            ok = (cur >= 0) & (cur != self.auto.trap)
            src_list.append(states[ok])
            dst_list.append(cur[ok])
        return np.concatenate(src_list).astype(np.int64), np.concatenate(dst_list).astype(np.int64)

    def _stubs_hit(self, state: int, tokens: np.ndarray) -> set[int]:
        """The stubs that ``tokens`` (walked from ``state`` into the trap) pass through."""
        # All at once, a symbol position at a time (a token stops at the first stub it meets): where many
        # tokens cross into a stub (tens of thousands start with a space), one token at a time was most of
        # the mask.
        found: set[int] = set()
        t = self.transitions
        is_stub = np.zeros(t.shape[0], dtype=bool)
        is_stub[np.fromiter(self.auto.stubs, dtype=np.int64, count=len(self.auto.stubs))] = True
        offsets = self.table.offsets[tokens]
        lengths = self.table.lengths[tokens]
        cur = np.full(len(tokens), state, dtype=np.int64)
        walking = lengths > 0
        for i in range(int(lengths.max(initial=0))):
            walking &= lengths > i
            hit = walking & is_stub[cur]
            if hit.any():
                found.update(np.unique(cur[hit]).tolist())
                walking &= ~hit
            if not walking.any():
                break
            cur[walking] = t[cur[walking], self.table.flat[offsets[walking] + i]]
            walking &= cur >= 0
        return found

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Pickled as what it is built from: the unpickling process rebuilds (or finds) its own copy,
        # with its own lock and caches.
        return token_grammar, (self.grammar, self.vocab)

    def __deepcopy__(self, memo: dict[int, object]) -> TokenGrammar:
        return self  # shared and immutable from the outside (its caches are guarded by its lock)

    # -- budget bound ------------------------------------------------------------------------

    def _distances(self) -> np.ndarray:
        """Upper bound on tokens needed from each state to reach a safe state (0 for safe states)."""
        src, dst = self._token_edges(np.arange(self.n_states, dtype=np.int32), self._dist_tokens)
        dist = np.full(self.n_states, INF, dtype=np.int64)
        dist[self.safe] = 0
        core = self.table.native
        if core is not None:
            return self._distances_native(core, src, dst, dist)
        # A stub not built yet counts as its tail's shortest string cut into real tokens, then the
        # state after the dispatch: an upper bound, so the guarantee holds before the tail exists.
        after: dict[int, list[tuple[int, int]]] = {}
        for stub, (e, _j, _b) in self.auto.stubs.items():
            after.setdefault(e, []).append((stub, self._stub_weights[stub]))
        scheduled: dict[int, list[int]] = {}

        def settle(states: np.ndarray, level: int) -> None:
            for s in states.tolist():
                for stub, weight in after.get(s, ()):
                    scheduled.setdefault(level + weight, []).append(stub)

        # Backward BFS over the token edges (unit cost), stubs joining at their level.
        order = np.argsort(dst, kind="stable")
        src_sorted, dst_sorted = src[order], dst[order]
        bounds = np.searchsorted(dst_sorted, np.arange(self.n_states + 1))
        frontier = np.flatnonzero(self.safe)
        settle(frontier, 0)
        level = 0
        while len(frontier) or scheduled:
            level += 1
            preds = (
                np.concatenate([src_sorted[bounds[s] : bounds[s + 1]] for s in frontier])
                if len(frontier)
                else np.empty(0, dtype=np.int64)
            )
            joining = scheduled.pop(level, [])
            if joining:
                preds = np.concatenate([preds, np.array(joining, dtype=preds.dtype)])
            preds = np.unique(preds)
            new = preds[dist[preds] == INF]
            dist[new] = level
            settle(new, level)
            frontier = new
        return dist.astype(np.int32)

    def _distances_native(self, core: Any, src: np.ndarray, dst: np.ndarray, dist: np.ndarray) -> np.ndarray:
        """:meth:`_distances` by the C core's shortest paths (the Python breadth-first search above visits
        every state in a Python loop: most of a 200-tool bound). The same least fixpoint: a state is at
        most one more than a state a token leads to, a stub at most its weight more than the state after
        its dispatch; the stubs' joins are applied between passes until nothing moves (the state after a
        dispatch rarely depends on another stub, so two passes are the rule)."""
        src, dst = np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64)
        stubs = np.fromiter(self.auto.stubs, dtype=np.int64, count=len(self.auto.stubs))
        after = np.array([e for e, _j, _b in self.auto.stubs.values()], dtype=np.int64)
        weights = np.array([self._stub_weights[s] for s in self.auto.stubs], dtype=np.int64)
        while True:
            _relax_native(core, dist, src, dst)
            if not len(stubs):
                break
            joined = np.minimum(dist[after] + weights, INF)
            lower = joined < dist[stubs]
            if not lower.any():
                break
            dist[stubs[lower]] = joined[lower]
        return np.minimum(dist, INF).astype(np.int32)

    # -- masks ---------------------------------------------------------------------------------

    def mask(self, state: int, remaining: int | None = None) -> StateMask:
        """The allowed tokens in ``state`` with ``remaining`` tokens left (``None``: no budget)."""
        m = self._masks.get(state)
        if m is None:
            with self._lock:
                m = self._masks.get(state)
                if m is None:
                    rep = self._representative(state)
                    m = self._masks.get(rep) if rep != state else None
                    if m is None:
                        m = self._compute(state)
                    self._masks[state] = m
        if remaining is None or remaining - 1 >= m.max_need:
            return m
        return self._budget_mask(self._same_row.get(state, state), remaining - 1)

    def _representative(self, state: int) -> int:
        """The first state seen with ``state``'s row and flags: the two accept the same tokens, with the
        same needs after them, so they share every mask.

        Tails are not minimized (see :func:`toolgrammar.automata.lazy.tail_dfa`), and subset construction
        leaves equivalent states with identical rows behind (a string's first character and the ones after
        it): without this, each would walk the vocabulary on its first visit. A stub's row stands for a
        tail not built yet, so a stub is only ever its own representative."""
        rep = self._same_row.get(state)
        if rep is None:
            rep = state
            if state not in self.auto.stubs:
                key = (self.transitions[state].tobytes(), bool(self.auto.accepting[state]), bool(self.auto.safe[state]))
                rep = self._rows_seen.setdefault(key, state)
            self._same_row[state] = rep
        return rep

    def _walk(self, state: int) -> np.ndarray:
        self.n_walks += 1
        return self.table.walk(self.transitions, state, self.loops)

    def _compute(self, state: int) -> StateMask:
        """The state's mask; the tails its tokens reach are built first (then its walk is redone)."""
        while True:
            if state in self.auto.stubs:
                self._expand({state})
            try:
                return self._compute_built(state)
            except _Unbuilt as unbuilt:
                self._expand(unbuilt.stubs)

    def _check_built(self, state: int, ids: np.ndarray, nxt: np.ndarray) -> None:
        """Raise :class:`_Unbuilt` when some token (``ids[i]`` ended in ``nxt[i]``) went through a stub.

        A token that ends in the trap without a stub on its way (only from the trap itself, which no
        cursor ever reaches) is rejected: ``nxt`` is changed in place to DEAD there."""
        trapped = nxt == self.auto.trap
        if trapped.any():
            stubs = self._stubs_hit(state, ids[trapped]) if self.auto.stubs else set()
            if stubs:
                raise _Unbuilt(stubs)
            nxt[trapped] = DEAD

    def _compute_built(self, state: int) -> StateMask:
        table = self.table
        if table.native is not None:
            return self._compute_native(state)
        if self.n_symbols[state] > TRIE_MIN_SYMBOLS:
            # A text state: walk the trie, then the budget bookkeeping on the allowed tokens only.
            self.n_walks += 1
            nxt = table.walk_trie(self.transitions, state)
            self._check_built(state, self.table.all_ids, nxt)
            idx = np.flatnonzero(nxt >= 0)
            need = self.dist[nxt[idx]]
            fin = need < INF
            max_need = int(need[fin].max()) if fin.any() else 0
            ok = np.zeros(table.n_tokens, dtype=bool)
            ok[idx[fin]] = True
            return _make_mask(ok, max_need)
        if not self.loops.any[state]:
            # A literal state: few tokens can even start here, so stay sparse (no vocabulary-wide arrays).
            candidates = np.flatnonzero(table.candidates(self.transitions, state))
            if len(candidates) * 4 <= table.n_tokens:
                self.n_walks += 1
                nxt = table.walk_ids(self.transitions, state, candidates, self.loops)
                self._check_built(state, candidates, nxt)
                need = np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)
                ok = need < INF
                allowed = candidates[ok].astype(np.int64)
                max_need = int(need[ok].max()) if ok.any() else 0
                return StateMask(False, None, allowed, len(allowed), max_need)
        nxt = self._walk(state)
        self._check_built(state, self.table.all_ids, nxt)
        ok = nxt >= 0
        need = np.where(ok, self.dist[np.maximum(nxt, 0)], INF)
        finite = need[ok & (need < INF)]
        max_need = int(finite.max()) if len(finite) else 0
        # Tokens leading to states that can never close are treated as banned (none exist after pruning).
        ok &= need < INF
        return _make_mask(ok, max_need)

    def _compute_native(self, state: int) -> StateMask:
        """:meth:`_compute_built` by the C core: one depth-first walk of the trie makes the mask on the way
        (a literal state stays sparse, a text state is one vocabulary-wide array)."""
        self.n_walks += 1
        table = self.table
        n = table.n_tokens
        # Where most tokens start with a symbol the state takes (a text state), start from "all allowed" and
        # write what is left out; elsewhere write what is allowed.
        dense = int(table.first_symbol_counts[self.transitions[state] >= 0].sum()) * 2 > n
        ok = np.ones(n, dtype=np.uint8) if dense else np.zeros(n, dtype=np.uint8)
        ids = np.empty(n, dtype=np.int64)
        trapped = np.empty(n, dtype=np.int64)
        t = np.ascontiguousarray(self.transitions, dtype=np.int32)
        loops = (int(self.loops.low0[state]), int(self.loops.low1[state]))
        exits = table.text_exits(loops) if dense else None
        record = np.empty((TEXT_EXITS_CAP, 3), dtype=np.int32) if dense and exits is None else None
        k, max_need, n_trapped, n_recorded, has_pure = table.native.trie_mask(
            t,
            t.shape[1],
            state,
            table.pre_max_depth,
            table.pre_sym,
            table.pre_depth,
            table.pre_end,
            table.pre_start,
            table.pre_tokens,
            np.ascontiguousarray(self.dist, dtype=np.int32),
            INF,
            self.auto.trap,
            self.loops.low0,
            self.loops.low1,
            table.pre_sub_low0,
            table.pre_sub_low1,
            table.pre_sub_high,
            table.pre_whole,
            self.loops.utf8_memo,
            int(dense),
            ok,
            ids,
            trapped,
            exits[0] if exits is not None else None,
            exits[1] if exits is not None else 0,
            record,
        )
        if n_recorded >= 0 and record is not None:
            table.remember_text_exits(loops, record[:n_recorded].copy(), has_pure)
        if n_trapped:
            stubs = self._stubs_hit(state, trapped[:n_trapped]) if self.auto.stubs else set()
            if stubs:
                raise _Unbuilt(stubs)
        if k * 4 <= n and not dense:  # ids lists every allowed token (the core lists up to n / 4 + 1)
            return StateMask(False, None, np.sort(ids[:k]), k, max_need)
        if k == n:
            return StateMask(True, None, None, k, max_need)
        if dense and (n - k) * 4 <= n:  # ids lists every token left out
            return StateMask(False, np.sort(ids[: n - k]), None, k, max_need)
        if k * 2 >= n:
            return StateMask(False, np.flatnonzero(ok == 0), None, k, max_need)
        return StateMask(False, None, np.flatnonzero(ok), k, max_need)

    def _budget_mask(self, state: int, budget: int) -> StateMask:
        key = (state, budget)
        with self._lock:
            m = self._budget_masks.get(key)
            if m is not None:
                self._budget_masks.move_to_end(key)
                return m
            # Per state, each token's need as one byte (255: that many or more, or never), so a
            # state costs 152 KB rather than 607 KB; the rare budgets of 255 or more re-walk.
            need = self._needs.get(state)
            exact: np.ndarray | None = None
            if need is None:
                exact = self._exact_needs(state)
                need = np.minimum(exact, 255).astype(np.uint8)
                self._needs[state] = need
                if len(self._needs) > MAX_NEEDS_STATES:
                    self._needs.popitem(last=False)
            else:
                self._needs.move_to_end(state)
            if budget < 255:
                ok = need <= budget
            else:
                exact = self._exact_needs(state) if exact is None else exact
                ok = exact <= budget
            if not ok.any():
                # Nothing can finish in time (the budget was too small from the start, e.g.
                # tool_choice="required" with a handful of tokens): head for the exit as fast as
                # possible rather than leave the sampler with no token at all.
                exact = self._exact_needs(state) if exact is None else exact
                ok = exact == exact.min()
            m = _make_mask(ok, budget)
            self._budget_masks[key] = m
            if len(self._budget_masks) > 4096:
                self._budget_masks.popitem(last=False)
            return m

    def closing_tokens(self, state: int) -> np.ndarray:
        """Where the call in an open block is complete, the tokens that take ``state`` nearest to leaving
        the block (sorted ids); elsewhere none.

        Complete: optional whitespace, the format's ``call_end`` (unless written already) and its
        ``block_close`` lead out of the block from here (after the last brace of a hermes call, not
        inside its arguments). The tokens: of those the budget bound walks in every state (single
        bytes, markers, JSON punctuation), the ones after which ``dist`` is least. Computed on first
        asking and kept per state. Call :meth:`mask` for the state first: the tails its tokens reach are
        built then; a token whose walk would reach a tail not built yet is left out."""
        got = self._closers.get(state)
        if got is None:
            with self._lock:
                rep = self._representative(state)
                got = self._closers.get(rep)
                if got is None:
                    got = self._closing_tokens(rep)
                    self._closers[rep] = got
                self._closers[state] = got
        return got

    def _closing_tokens(self, state: int) -> np.ndarray:
        if self.safe[state] or not self._call_complete(state):
            return np.empty(0, dtype=np.int64)
        if len(self._dist_ids) != len(self._dist_tokens):
            self._dist_ids = np.array(sorted(self._dist_tokens), dtype=np.int64)
        ids = self._dist_ids
        nxt = self.table.walk_ids(self.transitions, state, ids, self.loops)
        nxt[nxt == self.auto.trap] = DEAD
        need = np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)
        best = int(need.min()) if len(need) else INF
        if best >= INF:
            return np.empty(0, dtype=np.int64)
        return ids[need == best]

    def _call_complete(self, state: int) -> bool:
        fmt = self.grammar.format
        close = fmt.markers.block_close
        for text in {f"{space}{end}{close}" for space in ("", "\n", " ") for end in (fmt.call_end, "")}:
            after = self._walk_text(state, np.frombuffer(text.encode(), dtype=np.uint8))
            if after >= 0 and self.safe[after]:
                return True
        return False

    def _exact_needs(self, state: int) -> np.ndarray:
        """Each token's ``dist`` after it from ``state`` (INF where rejected)."""
        nxt = self._walk(state)
        return np.where(nxt >= 0, self.dist[np.maximum(nxt, 0)], INF)

    # -- stepping ------------------------------------------------------------------------------

    def step(self, state: int, token: int) -> int:
        """The state after ``token`` (DEAD if the grammar rejects it); recent pairs are remembered."""
        n = self.table.n_tokens
        if not 0 <= token < n:
            return DEAD
        key = state * n + token
        got = self._steps.get(key)
        if got is not None:
            return got
        with self._lock:  # a tail appended meanwhile rewrites rows in place (see LazyAutomaton.expand)
            got = self._step(state, token)
        if len(self._steps) >= STEP_MEMO:
            self._steps.clear()
        self._steps[key] = got
        return got

    def _step(self, state: int, token: int) -> int:
        while True:
            t = self.transitions
            got = state
            for x in self.table.symbols(token).tolist():
                got = int(t[got, x])
                if got < 0:
                    return DEAD
            if got != self.auto.trap:
                return got
            stubs = self._stubs_hit(state, np.array([token])) if self.auto.stubs else set()
            if not stubs:  # the trap itself: never a real path
                return DEAD
            self._expand(stubs)

    def walk_text(self, text: str, state: int | None = None) -> int:
        """The state after the UTF-8 bytes of ``text`` from ``state`` (default: the start); DEAD if rejected.

        For text the prompt already put into the assistant turn (a harness that pre-fills the block
        opener): the grammar continues from there.
        """
        first = self.start if state is None else state
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        with self._lock:
            return self._walk_text(first, data)

    def _walk_text(self, first: int, data: np.ndarray) -> int:
        # A stub on the way is built where the walk meets it, and the walk goes on from there (a text that
        # crosses 200 array items builds 200 of them: starting over after each was quadratic).
        got, stubs = first, self.auto.stubs
        for x in data.tolist():
            if got in stubs:
                self._expand({got})
            got = int(self.transitions[got, x])
            if got < 0:
                return DEAD
        return DEAD if got == self.auto.trap else got  # the trap itself: never a real path

    def is_finished(self, state: int) -> bool:
        """True once the turn has ended (after an end-of-turn token)."""
        return self._finished[state]

    def in_block(self, state: int) -> bool:
        """True while a block is open (the turn may not be cut here)."""
        return not bool(self.safe[state])

    @property
    def cache_bytes(self) -> int:
        """Memory held by cached masks (ids arrays), in bytes."""
        total = 0
        shared = {id(m): m for m in list(self._masks.values()) + list(self._budget_masks.values())}
        for m in shared.values():
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


class _Unbuilt(Exception):
    """A walk went through stubs whose tails are not built yet (see :mod:`toolgrammar.automata.lazy`)."""

    def __init__(self, stubs: set[int]):
        super().__init__(f"stubs {sorted(stubs)} not built")
        self.stubs = stubs


def _make_mask(ok: np.ndarray, max_need: int) -> StateMask:
    n_allowed = int(ok.sum())
    if n_allowed == len(ok):
        return StateMask(True, None, None, n_allowed, max_need)
    if n_allowed * 2 >= len(ok):
        return StateMask(False, np.flatnonzero(~ok).astype(np.int64), None, n_allowed, max_need)
    return StateMask(False, None, np.flatnonzero(ok).astype(np.int64), n_allowed, max_need)


_JSON_PUNCTUATION = (
    '{"a": "", "b": 0, "c": [], "d": {}, "e": ["", 0, {}], "f": true, "g": false, "h": null, "i": -1.5e+2}',
    '"}}\n',
    '"]}}\n',
    "]}}\n",
    "}}}\n",
    '""}}\n',
    '"}, "',
    '"], "',
    "}, {",
)


# ----------------------------------------------------------------------------------------------
# Caching compiled grammars
# ----------------------------------------------------------------------------------------------

_grammars: OrderedDict[str, TokenGrammar] = OrderedDict()
_grammars_lock = threading.Lock()
MAX_CACHED_GRAMMARS = 32


DIST_ON_DISK_FROM = 8_192
"""States from which a turn's per-state budget bound is kept in the on-disk cache (keyed by the tool list).

Below, computing it is cheaper than the disk: measured, 0.8-4 ms for 250-4,000 states (1 to 200 tools,
a named tool's tail built up front), against about 2 ms to write an entry and 0.4 to look for one; and an
entry per tool list would grow the cache by one file per new list a server sees."""


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
