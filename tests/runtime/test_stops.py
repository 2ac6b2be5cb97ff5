"""Stop strings and stop token ids where the turn may end (:mod:`toolgrammar.runtime.stops`).

- Which tokens stop: :meth:`StopRule.banned` against a brute-force search over the real Qwen3
  vocabulary, for random tails, and along a written text kept by :meth:`StopRule.extend` only.
- What a stop does to a row: :func:`pool_stops` (numpy, one row) and ``MaskApplier.pool_stops``
  (torch, a batch) agree; untouched columns keep their logits bit for bit, the best end-of-turn
  token gets the log-sum-exp, rows with nothing live to stop are left as they were.
- :func:`checked_stops` refuses what cannot be a stop, naming where.
"""

from __future__ import annotations

import bisect
import itertools
import random

import numpy as np
import pytest
import torch

from toolgrammar.errors import ProcessorError
from toolgrammar.runtime.closing import stop_ids
from toolgrammar.runtime.masking import MaskApplier
from toolgrammar.runtime.stops import MAX_STOP_BYTES, MAX_STOPS, StopRule, checked_stops, pool_stops, stop_rule

STOP_SETS = [
    pytest.param(["}"], [], id="brace"),
    pytest.param(["lo wo", "\n\n"], [], id="spanning"),
    pytest.param(["</tool_call>", "é!"], [], id="markup-and-multibyte"),
    pytest.param(["END"], [13, 151_645], id="ids-and-an-end-token"),
]


def brute_banned(vocab, strings: list[str], token_ids: list[int], tail: bytes) -> list[int]:
    """Every token, not an end-of-turn one, that is a stop id or completes a stop string after ``tail``.

    An occurrence counts when it ends inside the token: it then starts at most ``len(w) - 1`` bytes back,
    so a plain search of the tail's last ``len(w) - 1`` bytes plus the token finds exactly those. The
    search runs over every token at once: all of them, each after that piece of tail, joined by NULs."""
    found = set(token_ids)
    for string in strings:
        word = string.encode("utf-8")
        assert b"\0" not in word  # an occurrence never spans two tokens
        back = tail[max(0, len(tail) - (len(word) - 1)) :] if len(word) > 1 else b""
        pieces = [back + text for text in vocab.token_bytes]
        starts = [0, *itertools.accumulate(len(piece) + 1 for piece in pieces)]
        joined = b"\0".join(pieces)
        at = joined.find(word)
        while at >= 0:
            token = bisect.bisect_right(starts, at) - 1
            found.add(token)
            at = joined.find(word, starts[token + 1])
    return sorted(found - vocab.eos_ids)


def _tails(strings: list[str], rng: random.Random, vocab) -> list[bytes]:
    """Random tails: random token texts, half of them ending in a proper prefix of a stop string."""
    tails = [b""]
    for n in range(6):
        text = b"".join(vocab.token_bytes[rng.randrange(vocab.n_tokens)] for _ in range(rng.randrange(1, 4)))
        word = rng.choice(strings).encode("utf-8")
        if n % 2 and len(word) > 1:
            text += word[: rng.randrange(1, len(word))]
        tails.append(text)
    return tails


@pytest.mark.parametrize(("strings", "token_ids"), STOP_SETS)
def test_banned_is_the_brute_force_set_for_random_tails(qwen3_vocab, strings, token_ids):
    rule = StopRule(qwen3_vocab, strings, token_ids)
    rng = random.Random(7)
    for tail in _tails(strings, rng, qwen3_vocab):
        got = rule.banned(tail)
        assert got.dtype == np.int64 and list(got) == sorted(got)
        assert got.tolist() == brute_banned(qwen3_vocab, strings, token_ids, tail), tail
    assert not set(rule.banned(b"")) & qwen3_vocab.eos_ids  # an end-of-turn token is never taken from the turn


def test_the_kept_tail_is_enough_along_a_written_text(qwen3_vocab):
    """Tokens written one by one, the tail kept by ``extend`` only: each step's set is the one the whole text gives."""
    strings = ["lo wo", "x}"]
    rule = stop_rule(qwen3_vocab, strings, [])
    assert rule is not None and rule.keep == len("lo wo") - 1
    pieces = ["Hel", "lo", " w", "orld", " x", "}", "Hello", " ", "wo"]
    ids = [qwen3_vocab.token_id(p) for p in pieces]
    assert None not in ids
    written, tail = b"", b""
    for token in ids:
        assert rule.banned(tail).tolist() == brute_banned(qwen3_vocab, strings, [], written), written
        written += qwen3_vocab.token_bytes[token]
        tail = rule.extend(tail, token)
        assert len(tail) <= rule.keep and written.endswith(tail)
    # "Hel" + "lo" then " world": the stop completes across two tokens, so " world" is banned there only
    after = rule.extend(rule.extend(b"", ids[0]), ids[1])
    world = qwen3_vocab.token_id(" world")
    assert world in rule.banned(after) and world not in rule.banned(rule.extend(b"", ids[0]))


def test_stop_rule_is_built_once_and_none_without_stops(qwen3_vocab):
    assert stop_rule(qwen3_vocab, [], []) is None
    first = stop_rule(qwen3_vocab, ["}"], [5])
    assert stop_rule(qwen3_vocab, ["}"], [5]) is first
    assert stop_rule(qwen3_vocab, ["}"], [6]) is not first
    only_ids = stop_rule(qwen3_vocab, [], [5, 151_645])
    assert only_ids is not None and only_ids.keep == 0
    assert only_ids.banned(b"anything").tolist() == [5]  # the end-of-turn id needs no pooling
    assert only_ids.extend(b"", 100) == b""


# -- pooling: numpy row and torch batch -----------------------------------------------------------------------


def _batch(seed: int, rows: int = 6, width: int = 600) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Masked random logits, each row's banned ids, and the end ids; some rows have nothing live to stop."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, size=(rows, width)).astype(np.float32)
    logits[rng.random((rows, width)) < 0.4] = -np.inf  # the grammar's mask
    ends = np.array([width - 7, width - 3], dtype=np.int64)
    banned = []
    for row in range(rows):
        ids = np.sort(rng.choice(width - 10, size=int(rng.integers(5, 40)), replace=False)).astype(np.int64)
        logits[row, ids[0]] = 1.0  # something live to stop
        logits[row, ends] = rng.normal(0, 3, size=len(ends))  # the turn may end here
        if row == 1:
            logits[row, ids] = -np.inf  # banned, but all masked: nothing to pool
        if row == 2:
            logits[row, ends] = -np.inf  # no end of turn allowed: left alone
        banned.append(ids)
    banned[3] = np.empty(0, dtype=np.int64)
    logits[4, ends[0]] = logits[4, ends[1]]  # a tie between the ends: the first one wins, on both sides
    return logits, banned, ends


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_and_torch_pooling_agree(seed):
    logits, banned, ends = _batch(seed)
    host = logits.copy()
    changed = [pool_stops(host[row], banned[row], ends) for row in range(len(host))]
    device = torch.from_numpy(logits.copy())
    rows = list(range(len(host)))
    MaskApplier().pool_stops(device, rows, banned, ends)
    got = device.numpy()
    for row in rows:
        before, mine, theirs = logits[row], host[row], got[row]
        if not changed[row]:
            assert np.array_equal(mine, before) and np.array_equal(theirs, before, equal_nan=True), row
            continue
        best = int(ends[int(np.argmax(before[ends]))])
        touched = np.zeros(len(before), dtype=bool)
        touched[banned[row]] = True
        touched[best] = True
        assert np.array_equal(mine[~touched], before[~touched]) and np.array_equal(theirs[~touched], before[~touched])
        assert np.isneginf(mine[banned[row]]).all() and np.isneginf(theirs[banned[row]]).all()
        expected = np.logaddexp.reduce(np.concatenate([[before[best]], before[banned[row]]]).astype(np.float64))
        assert mine[best] == pytest.approx(expected, rel=1e-6) and theirs[best] == pytest.approx(expected, rel=1e-6)
    assert changed == [True, False, False, False, True, True]


def test_torch_pooling_on_a_view_and_on_chosen_rows_only():
    logits, banned, ends = _batch(5)
    wide = torch.full((len(logits), logits.shape[1] + 20), 1.5)
    wide[:, : logits.shape[1]] = torch.from_numpy(logits)
    view = wide[:, : logits.shape[1]]  # not contiguous: the per-row route
    MaskApplier().pool_stops(view, [0, 2], [banned[0], banned[2]], ends)
    expected = logits.copy()
    pool_stops(expected[0], banned[0], ends)
    pool_stops(expected[2], banned[2], ends)
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(view.numpy()), finite)
    assert np.allclose(view.numpy()[finite], expected[finite], rtol=1e-6)
    assert np.array_equal(view.numpy()[[1, 3, 4, 5]], logits[[1, 3, 4, 5]])  # rows not named are untouched
    assert (wide[:, logits.shape[1] :] == 1.5).all()  # columns past the view too


def test_pooling_moves_exactly_the_stop_mass_to_the_end_of_turn():
    row = np.log(np.array([0.1, 0.2, 0.3, 0.15, 0.25], dtype=np.float32))
    assert pool_stops(row, np.array([1, 2]), np.array([3, 4]))
    probs = np.exp(row.astype(np.float64))
    assert probs[[1, 2]].tolist() == [0.0, 0.0]
    assert probs[4] == pytest.approx(0.75, rel=1e-6) and probs[3] == pytest.approx(0.15, rel=1e-6)
    assert probs.sum() == pytest.approx(1.0, rel=1e-6)  # the distribution is the same size: nothing lost


# -- checked_stops --------------------------------------------------------------------------------------------


def test_checked_stops_normalises():
    assert checked_stops(None, None, 10, where="here") == ([], [])
    assert checked_stops("}", (3, 1, 3), 10, where="here") == (["}"], [1, 3])
    assert checked_stops(["a", "b", "a"], [], 10, where="here") == (["a", "b"], [])


@pytest.mark.parametrize(
    ("strings", "token_ids", "match"),
    [
        (5, None, "here: stop must be a string or a list of strings, got 5"),
        (["ok", 3], None, "stop must be a string or a list of strings"),
        ([""], None, f"each stop string must be 1 to {MAX_STOP_BYTES} bytes long, got ''"),
        (["é" * 129], None, f"1 to {MAX_STOP_BYTES} bytes long"),
        (None, 7, "stop_token_ids must be a list of token ids, got 7"),
        (None, [True], "stop_token_ids must be a list of token ids"),
        (None, [10], r"stop_token_ids holds 10, not a token id of this vocabulary \(0..9\)"),
        (None, [-1], "stop_token_ids holds -1"),
        ([f"s{i}" for i in range(MAX_STOPS + 1)], None, f"at most {MAX_STOPS} stop strings"),
    ],
)
def test_checked_stops_refuses_with_where_and_why(strings, token_ids, match):
    with pytest.raises(ProcessorError, match=match):
        checked_stops(strings, token_ids, 10, where="here")


def test_the_end_ids_pooled_onto_are_the_vocabularys(qwen3_vocab):
    assert stop_ids(qwen3_vocab).tolist() == sorted(qwen3_vocab.eos_ids)
