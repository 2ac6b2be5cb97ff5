"""A tokenizer's vocabulary as flat arrays for vectorized walks through a byte automaton: the token table.

Built once per vocabulary (about a second for 151k tokens, then cached in memory and on disk), it holds every
token's symbols (bytes; ``SPECIAL``/``EOS`` for control tokens), a trie over them, and what each walk from a
free-text state learned (text exits). It knows nothing of tools or grammars: it walks whatever transition table
it is handed. Import boundary: numpy only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgrammar import caches
from toolgrammar import native as native_core
from toolgrammar.automata.nodes import DEAD, EOS, N_SYMBOLS, SPECIAL
from toolgrammar.errors import TokenizerError

if TYPE_CHECKING:
    from types import ModuleType

    from toolgrammar.vocab import Vocabulary


TRIE_MIN_SYMBOLS = 32
"""States accepting more symbols than this (text) get their masks from :meth:`TokenTable.walk_trie`."""


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
        return self.node_states(transitions, state)[self.trie_leaf]

    @property
    def trie_parent(self) -> np.ndarray:
        """Every trie node's parent (-1 at the first level), node ids as in :meth:`_build_trie`."""
        got = self.__dict__.get("_trie_parent")
        if got is None:
            got = np.concatenate([p.astype(np.int64) for p in self.trie_parents])
            got[: self.trie_levels[1]] = -1
            self.__dict__["_trie_parent"] = got
        return got

    @property
    def trie_symbol(self) -> np.ndarray:
        """Every trie node's symbol, node ids as in :meth:`_build_trie`."""
        got = self.__dict__.get("_trie_symbol")
        if got is None:
            got = np.concatenate(self.trie_symbols)
            self.__dict__["_trie_symbol"] = got
        return got

    @property
    def tokens_by_leaf(self) -> tuple[np.ndarray, np.ndarray]:
        """``(order, leaves)``: token ids sorted by the trie node that ends them, and those nodes (sorted), so
        the tokens ending at a node are one :func:`numpy.searchsorted` away."""
        got = self.__dict__.get("_tokens_by_leaf")
        if got is None:
            order = np.argsort(self.trie_leaf, kind="stable")
            got = (order, self.trie_leaf[order])
            self.__dict__["_tokens_by_leaf"] = got
        return got

    def node_states(self, transitions: np.ndarray, state: int) -> np.ndarray:
        """The state every trie node's bytes lead to from ``state`` (DEAD where rejected): :meth:`walk_trie`
        before its last gather."""
        flat = transitions.reshape(-1)
        lv = self.trie_levels
        cur = np.empty(lv[-1], dtype=np.int32)
        cur[: lv[1]] = transitions[state, self.trie_symbols[0]]
        for d in range(1, len(lv) - 1):
            p = cur[self.trie_parents[d]]
            p *= N_SYMBOLS
            p += self.trie_symbols[d]
            cur[lv[d] : lv[d + 1]] = flat[p]
        return cur

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
            setattr(self, name, splice_rows(getattr(self, name), lo, rows, changed, row[0]))
        self.utf8_memo = splice_rows(self.utf8_memo, lo, np.full(n - lo, -1, dtype=np.int8), changed, -1)
        self._utf8.pop(changed, None)
        self._transitions = transitions

    def utf8_returns(self, state: int) -> bool:
        got = self._utf8.get(state)
        if got is None:
            got = self._utf8[state] = _utf8_returns(self._transitions, state)
        return got


def splice_rows(old: np.ndarray, lo: int, rows: np.ndarray, changed: int, value: Any) -> np.ndarray:
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


caches.register("runtime.text_exits", clear_text_exits, scope="tokenizer")


def token_table(vocab: Vocabulary) -> TokenTable:
    """The table of ``vocab``, built once per process."""
    key = vocab.fingerprint
    with _tables_lock:
        table = _tables.get(key)
        if table is None:
            table = TokenTable(vocab)
            _tables[key] = table
        return table


__all__ = [
    "MAX_TEXT_EXITS",
    "TEXT_EXITS_CAP",
    "TRIE_MIN_SYMBOLS",
    "Loops",
    "SubTrie",
    "TokenTable",
    "clear_text_exits",
    "splice_rows",
    "token_table",
]
