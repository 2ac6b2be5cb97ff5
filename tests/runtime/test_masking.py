"""The batched mask step (:class:`toolgrammar.runtime.masking.MaskApplier`): the same logits as one row at a time,
and a number of torch operations that does not grow with the batch, none of which reads the device back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolgrammar.runtime.masking import NEG_INF, MaskApplier
from toolgrammar.runtime.prefix_true import PrefixTable
from toolgrammar.runtime.token_grammar import StateMask
from toolgrammar.testing.dispatch import DispatchCounter, host_reads

N_TOKENS, WIDTH = 1000, 1024
"""A vocabulary narrower than the logits: the padding columns must be masked in every constrained row."""


def _masks(rng: np.random.Generator, count: int) -> list[StateMask]:
    """A few distinct masks of every kind (a grammar caches one per state, so rows share them)."""
    kinds = []
    for k in range(count):
        ids = np.sort(rng.choice(N_TOKENS, size=int(rng.integers(1, 400)), replace=False)).astype(np.int64)
        ids.setflags(write=False)  # the grammar's cached arrays are read-only
        if k % 3 == 0:
            kinds.append(StateMask(False, ids, None, N_TOKENS - len(ids), 0))
        elif k % 3 == 1:
            kinds.append(StateMask(False, None, ids, len(ids), 0))
        else:
            kinds.append(StateMask(True, None, None, N_TOKENS, 0))
    return kinds


def _batch(rng: np.random.Generator, size: int, kinds: list[StateMask]) -> tuple[list[int], list[StateMask]]:
    rows = sorted(rng.choice(size + 3, size=size, replace=False).tolist())  # some rows of the batch unconstrained
    return rows, [kinds[int(rng.integers(len(kinds)))] for _ in rows]


def _reference(logits: torch.Tensor, rows: list[int], masks: list[StateMask]) -> torch.Tensor:
    out = logits.clone()
    for r, m in zip(rows, masks, strict=True):
        out[r, N_TOKENS:] = NEG_INF
        if m.banned is not None:
            out[r, torch.from_numpy(m.banned.copy())] = NEG_INF
        elif m.allowed is not None:
            keep = torch.full((WIDTH,), True)
            keep[torch.from_numpy(m.allowed.copy())] = False
            out[r, keep] = NEG_INF
    return out


@pytest.mark.parametrize("size", [1, 2, 8, 64])
def test_a_batch_is_masked_as_each_row_alone(size: int) -> None:
    rng = np.random.default_rng(size)
    kinds = _masks(rng, 6)
    applier = MaskApplier()
    for _ in range(3):
        rows, masks = _batch(rng, size, kinds)
        logits = torch.randn(size + 3, WIDTH)
        expected = _reference(logits, rows, masks)
        applier.apply(logits, rows, masks, N_TOKENS)
        assert torch.equal(logits, expected)


def test_the_step_s_operations_do_not_grow_with_the_batch() -> None:
    rng = np.random.default_rng(0)
    kinds = _masks(rng, 9)
    applier = MaskApplier()
    counts = {}
    for size in (1, 8, 64, 256):
        rows = list(range(size))
        masks = [kinds[i % len(kinds)] for i in rows]  # every kind in every batch of 8 rows or more
        logits = torch.randn(size, WIDTH)
        applier.apply(logits, rows, masks, N_TOKENS)  # warm: the caches a steady step finds
        with DispatchCounter() as ops, host_reads() as reads:
            applier.apply(logits, rows, masks, N_TOKENS)
        assert not ops.reads and not reads, (ops.ops, reads)
        counts[size] = sum(ops.ops.values())
    assert counts[8] == counts[64] == counts[256], counts
    assert counts[1] <= counts[8], counts


# -- close_on_stop, steering and stops on the device -------------------------------------------------


def _closers(rng: np.random.Generator, logits: torch.Tensor, rows: list[int]) -> list[np.ndarray]:
    """Each row's closing tokens, some masked (``-inf``), some rows with all of them masked, ties included."""
    out = []
    for r in rows:
        ids = np.sort(rng.choice(N_TOKENS, size=int(rng.integers(1, 6)), replace=False)).astype(np.int64)
        ids.setflags(write=False)
        kind = rng.integers(4)
        if kind == 0:
            logits[r, torch.from_numpy(ids.copy())] = NEG_INF
        elif kind == 1 and len(ids) > 1:
            logits[r, int(ids[1])] = logits[r, int(ids[0])]  # a tie: the first one is the closer
        out.append(ids)
    return out


@pytest.mark.parametrize("size", [1, 2, 9, 40])
def test_the_batched_close_is_close_row_for_each_row(size: int) -> None:
    """``MaskApplier.close`` (on the device) gives every row the logits and the decision that
    :func:`~toolgrammar.runtime.closing.close_row` (numpy, one row) gives it: carried decisions on the host
    and on the device, stops of ``-inf``, and rows with every closing token masked."""
    from toolgrammar.runtime.closing import close_row, log_sum
    from toolgrammar.runtime.device_state import OnDevice, host_pending

    rng = np.random.default_rng(size)
    applier = MaskApplier()
    stop_ids = np.array([3, 17, 999], dtype=np.int64)
    checked = moved = 0
    for _ in range(6):
        logits = torch.randn(size + 2, WIDTH) * 3
        rows = sorted(rng.choice(size + 2, size=size, replace=False).tolist())
        if size > 1:
            logits[rows[0], torch.from_numpy(stop_ids)] = NEG_INF  # a row whose stop is -inf
        stops_raw = [log_sum(logits[r].numpy()[stop_ids]) for r in rows]
        masked = logits > float(np.quantile(logits.numpy(), 0.4))
        logits[~masked] = NEG_INF
        closers = _closers(rng, logits, rows)
        carried_source = torch.from_numpy(rng.random(size + 1))
        closings: list = []
        for i in range(size):
            kind = i % 3
            closings.append(0.0 if kind == 0 else float(rng.random()) if kind == 1 else OnDevice(carried_source, i + 1))
        expected = logits.clone().numpy()
        want = []
        for i, r in enumerate(rows):
            q = closings[i] if isinstance(closings[i], float) else float(carried_source[i + 1])
            want.append(close_row(expected[r], stops_raw[i], closers[i], q))
        stops = torch.tensor(stops_raw, dtype=torch.float64)
        got = applier.close(logits, rows, stops, closers, closings)
        np.testing.assert_array_max_ulp(logits.numpy(), expected, maxulp=1)
        for w, g in zip(want, got, strict=True):
            h = host_pending(g)
            checked += 1
            if w is None:
                assert h is None
                continue
            moved += 1
            assert h is not None and h[0] == w[0]
            assert h[1] == pytest.approx(w[1], rel=1e-12, abs=1e-300)
    assert checked == 6 * size and moved >= 2  # rows where a closer gained, beside the ones left as they were


def test_follow_on_device_is_follow() -> None:
    """What a row carries on and the closes counted, for decisions followed in one batch on the device, are
    :func:`~toolgrammar.runtime.closing.follow`'s, row by row."""
    from toolgrammar.runtime.closing import follow
    from toolgrammar.runtime.device_state import Follow, OnDevice, Tally, follow_on_device, host_closing

    rng = np.random.default_rng(4)
    decided = torch.tensor([[5.0, -1.0, 7.0, 7.0, 9.0, 2.0], [0.9, 0.0, 0.3, 0.8, 0.6, 0.55]], dtype=torch.float64)
    follows, expected, closes = [], [], Tally(6)
    for _ in range(200):
        k = int(rng.integers(6))
        token = int(decided[0, k]) if rng.random() < 0.7 else 11
        in_block, valid = bool(rng.random() < 0.5), bool(rng.random() < 0.8)
        follows.append(Follow(OnDevice(decided, k), token, in_block, valid, slot=k))
        pending = None if decided[0, k] < 0 else (int(decided[0, k]), float(decided[1, k]))
        expected.append((k, *follow(pending, token, in_block, valid)))
    carried = follow_on_device(follows, closes)
    assert [host_closing(c) for c in carried] == [e[1] for e in expected]
    counts = [0] * 6
    for k, _, closed in expected:
        counts[k] += closed
    assert closes.counts() == counts and sum(counts) > 10


class _Step:
    """A processor's batch step with every feature acting on every row of a batch of ``size``."""

    STOP_IDS = np.array([3, 17, 999], dtype=np.int64)
    ENDS = np.array([17, 999], dtype=np.int64)

    def __init__(self, size: int, kinds: list[StateMask], openers) -> None:
        from toolgrammar.runtime.device_state import Tally

        self.applier = MaskApplier()
        self.closes, self.steered = Tally(size), Tally()
        self.rows = list(range(size))
        self.masks = [kinds[i % len(kinds)] for i in self.rows]
        self.closers = [np.array([11 + i % 7, 40 + i % 5], dtype=np.int64) for i in self.rows]
        self.banned = [np.array([20 + i % 3], dtype=np.int64) for i in self.rows]
        self.openers = openers
        ids = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
        self.prefixes = [  # prefix-true tables of two shapes: two groups sharing a receiver, one group
            PrefixTable(ids(100, 101 + i % 3), ids(0, 1), ids(200, 201 + i % 4), ids(0, 1, 1), ids(0, 0, 1), 2)
            if i % 2
            else PrefixTable(ids(120 + i % 5), ids(0), ids(210), ids(0), ids(0), 1)
            for i in self.rows
        ]

    def __call__(self, pending: list, logits: torch.Tensor) -> list:
        """Follow last step's decisions, read the stops and the donors, mask, pour, close, pool stop strings,
        steer."""
        from toolgrammar.runtime.device_state import Follow, follow_on_device

        follows = [Follow(p, int(11 + i % 7), i % 2 == 0, True, slot=i) for i, p in enumerate(pending)]
        carried = follow_on_device(follows, self.closes) if pending else [0.0] * len(self.rows)
        stop = self.applier.stop_logits(logits, self.rows, self.STOP_IDS)
        pouring = self.applier.gather_donors(logits, self.rows, self.prefixes)
        self.applier.apply(logits, self.rows, self.masks, N_TOKENS)
        assert pouring is not None
        self.applier.pour(logits, pouring)
        decided = self.applier.close(logits, self.rows, stop, self.closers, carried)
        self.applier.pool_stops(logits, self.rows, self.banned, self.ENDS)
        self.applier.steer(logits, self.rows, self.openers, self.steered)
        return decided


def test_a_step_with_closes_steering_and_stops_does_not_grow_with_the_batch() -> None:
    """The whole batch step a processor runs, with every feature (prefix-true masking's pour included) acting on
    every row: the torch operations it
    dispatches do not grow with the batch, and nothing is read back to the host (no ``.tolist()``, ``.item()``,
    ``bool()``, and no tensor built from a Python list)."""
    from toolgrammar.runtime.steering import CallOpeners

    rng = np.random.default_rng(1)
    kinds = _masks(rng, 9)
    openers = CallOpeners(
        block_opener=5,
        other=np.array([6, 7, 8], dtype=np.int64),
        whitespace=np.zeros(N_TOKENS, dtype=bool),
        block_open="<tool_call>",
        opener_tokens=(5,),
        rest=b"",
    )
    counts = {}
    for size in (8, 64, 256):
        step = _Step(size, kinds, openers)
        pending = step(step([], torch.randn(size, WIDTH)), torch.randn(size, WIDTH))  # warm: a steady step's caches
        with DispatchCounter() as ops, host_reads() as reads:
            step(pending, torch.randn(size, WIDTH))
        assert not reads and not ops.reads, (reads, ops.ops)
        counts[size] = sum(ops.ops.values())
        assert step.closes.total() > 0 and step.steered.total() > 0  # the features acted
    assert counts[8] == counts[64] == counts[256], counts
