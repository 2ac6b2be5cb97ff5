"""The batched mask step (:class:`toolgrammar.runtime.masking.MaskApplier`): the same logits as one row at a time,
and a number of torch operations that does not grow with the batch, none of which reads the device back."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from toolgrammar.runtime.masking import NEG_INF, MaskApplier
from toolgrammar.runtime.token_grammar import StateMask

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


class _Ops(TorchDispatchMode):
    """Counts every torch operation dispatched (what a GPU would launch or wait for)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


READS = {"aten._local_scalar_dense", "aten.item", "aten.equal", "aten.is_nonzero"}
"""Operations that read a device value back to the host (``.item()``, ``bool(t)``, ``.tolist()`` of a scalar)."""


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
        with _Ops() as ops:
            applier.apply(logits, rows, masks, N_TOKENS)
        assert not READS & set(ops.ops), ops.ops
        counts[size] = sum(ops.ops.values())
    assert counts[8] == counts[64] == counts[256], counts
    assert counts[1] <= counts[8], counts
