"""Applying cached state masks to a batch of logits (torch), shared by the transformers and vLLM adapters.

One batched operation per mask kind, whatever the batch size: the banned ids of every row (and the
padding columns from ``n_tokens`` on, always masked) in one ``index_fill_`` over the flattened logits;
the allowed ids of every row by saving their logits (``index_select``), filling those rows with
``-inf`` and copying the saved logits back. The batch's ids are assembled on the host (numpy, each
row's cached mask plus its row offset) and sent to the device in one transfer; a single row uses the
mask's id array, sent once and kept on the device (masks are cached by the grammar, so the set is small).
Why not a boolean mask or a bitmask: on a fresh scores tensor, ``masked_fill_`` over all 151,936
columns costs several times an ``index_fill_`` of a few thousand ids (270 vs 39 µs, the
floors of ``bench/anchors.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from toolgrammar.runtime.closing import NEGLIGIBLE, choose, pooled
from toolgrammar.runtime.steering import CallOpeners
from toolgrammar.runtime.token_grammar import StateMask

NEG_INF = float("-inf")


class MaskApplier:
    """Applies per-row :class:`~toolgrammar.runtime.token_grammar.StateMask` values to ``(rows, width)`` logits in
    place."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, Any], torch.Tensor] = {}
        self._keep: dict[int, object] = {}  # keeps each array alive, so its id() is never reused
        self._with_padding: dict[tuple[int, int, int], np.ndarray] = {}

    def const(self, arr: np.ndarray, device: torch.device) -> torch.Tensor:
        """``arr`` (an id array: a mask's, a grammar's closing tokens) on ``device``, sent once and kept."""
        key = (id(arr), device)
        t = self._ids.get(key)
        if t is None:
            t = _device_ids(arr, device)
            self._ids[key] = t
            self._keep[id(arr)] = arr
        return t

    def apply(self, logits: torch.Tensor, rows: Sequence[int], masks: Sequence[StateMask], n_tokens: int) -> None:
        """Mask row ``rows[i]`` of ``logits`` with ``masks[i]``, and the padding columns of those rows."""
        if not rows:
            return
        width = logits.shape[1]
        if len(rows) == 1:
            row = logits[rows[0]]
            if width > n_tokens:
                row[n_tokens:] = NEG_INF
            self.apply_row(row, masks[0])
            return
        if not logits.is_contiguous():  # rare: a view; one row at a time
            for r, m in zip(rows, masks, strict=True):
                row = logits[r]
                if width > n_tokens:
                    row[n_tokens:] = NEG_INF
                self.apply_row(row, m)
            return
        # The whole batch's ids in one host array, sent in one transfer: banned ids (and padding columns) with
        # their rows' offsets, then allowed ids, then the rows those belong to. Four device operations follow,
        # however many rows there are (an index built per row on the device is a kernel launch per row).
        banned: list[np.ndarray] = []
        allowed: list[np.ndarray] = []
        allowed_rows: list[int] = []
        for r, m in zip(rows, masks, strict=True):
            base = r * width
            if m.banned is not None or m.all_allowed:
                ids = self._banned_with_padding(m, width, n_tokens)
                if len(ids):
                    banned.append(ids + base)
            else:
                assert m.allowed is not None
                allowed.append(m.allowed + base)
                allowed_rows.append(r)
        n_banned = sum(len(ids) for ids in banned)
        n_allowed = sum(len(ids) for ids in allowed)
        if not n_banned and not allowed_rows:
            return
        host = np.concatenate([*banned, *allowed, np.asarray(allowed_rows, dtype=np.int64)])
        ids = _to_device(host, logits.device)
        flat = logits.view(-1)
        if n_banned:
            flat.index_fill_(0, ids[:n_banned], NEG_INF)
        if allowed_rows:
            idx = ids[n_banned : n_banned + n_allowed]
            kept = flat.index_select(0, idx)
            logits.index_fill_(0, ids[n_banned + n_allowed :], NEG_INF)
            flat.index_copy_(0, idx, kept)

    def _banned_with_padding(self, m: StateMask, width: int, n_tokens: int) -> np.ndarray:
        """A banned (or all-allowed) mask's ids and the padding columns ``n_tokens..width``, cached per mask."""
        key = (id(m.banned) if m.banned is not None else -1, width, n_tokens)
        ids = self._with_padding.get(key)
        if ids is None:
            ids = m.banned if m.banned is not None else np.empty(0, dtype=np.int64)
            if width > n_tokens:
                ids = np.concatenate([ids, np.arange(n_tokens, width, dtype=np.int64)])
            self._with_padding[key] = ids
            if m.banned is not None:
                self._keep[id(m.banned)] = m
        return ids

    def apply_row(self, row: torch.Tensor, m: StateMask) -> None:
        """Mask one row (a 1-D view)."""
        if m.all_allowed:
            return
        if m.banned is not None:
            row.index_fill_(0, self.const(m.banned, row.device), NEG_INF)
        else:
            ids = self.const(m.allowed, row.device)
            kept = row.index_select(0, ids)
            row.fill_(NEG_INF)
            row.index_copy_(0, ids, kept)

    def apply_host_row(self, row: np.ndarray, m: StateMask | None, n_tokens: int) -> None:
        """Mask one host row (a float32 numpy view of the logits) and its padding columns, in one write.

        A banned list carries the padding columns (cached per mask and width); an allowed list fills
        the whole row anyway; only an all-allowed (or ``None``: finished) row writes the padding alone.
        """
        width = row.shape[0]
        if m is None or m.all_allowed:
            if width > n_tokens:
                row[n_tokens:] = NEG_INF
        elif m.banned is not None:
            row[self._banned_with_padding(m, width, n_tokens)] = NEG_INF
        else:
            kept = row[m.allowed]
            row.fill(NEG_INF)
            row[m.allowed] = kept

    def steer(self, logits: torch.Tensor, rows: Sequence[int], openers: CallOpeners) -> int:
        """Pool the other-shape openers' probability onto the steering token (the block opener's first
        token, ``openers.block_opener``) in rows ``rows`` (masked already).

        The steering token's logit becomes the log-sum-exp of its own and the openers' logits, which are
        set to ``-inf``; every other logit is left as it is, so every other token keeps its
        log-probability exactly. A row whose steering token is masked, or whose openers all are, is
        left unchanged. Returns how many rows were changed. See :mod:`toolgrammar.runtime.steering`.
        """
        if not rows:
            return 0
        device = logits.device
        key = (id(openers), device)
        pooled_ids = self._ids.get(key)
        if pooled_ids is None:
            pooled_ids = torch.from_numpy(openers.steered).to(device)
            self._ids[key] = pooled_ids
            self._keep[id(openers)] = openers
        index = torch.tensor(list(rows), device=device)
        pooled = logits.index_select(0, index).index_select(1, pooled_ids)
        opener_live = pooled[:, 0] > NEG_INF
        other_live = (pooled[:, 1:] > NEG_INF).any(dim=1)
        go = opener_live & other_live
        if not bool(go.any()):
            return 0
        index = index[go]
        total = torch.logsumexp(pooled[go].double(), dim=1).to(logits.dtype)
        logits[index, openers.block_opener] = total
        logits[index.unsqueeze(1), pooled_ids[1:].unsqueeze(0)] = NEG_INF
        return len(index)

    def pool_stops(
        self, logits: torch.Tensor, rows: Sequence[int], banned: Sequence[np.ndarray], ends: np.ndarray
    ) -> None:
        """:func:`toolgrammar.runtime.stops.pool_stops` on masked rows ``rows`` of ``logits``, on the device.

        Per row, the stop tokens ``banned[i]`` give their probability to the end-of-turn token (of
        ``ends``) with the highest logit, and are masked. One gather, one log-sum-exp and two writes for
        the batch; nothing is read back to the host. A row whose end-of-turn tokens are all masked
        (never the case where the turn may end) is left unchanged.
        """
        live = [i for i, ids in enumerate(banned) if len(ids)]
        if not live:
            return
        device = logits.device
        width = logits.shape[1]
        ends_t = self.const(ends, device)
        index = torch.tensor([rows[i] for i in live], device=device)
        end_logits = logits.index_select(0, index).index_select(1, ends_t)
        best = ends_t[end_logits.argmax(dim=1)]  # per row, its best end-of-turn id
        lengths = [len(banned[i]) for i in live]
        flat_ids = torch.from_numpy(np.concatenate([banned[i] + rows[i] * width for i in live])).to(
            device, non_blocking=True
        )
        flat = logits.reshape(-1) if logits.is_contiguous() else None
        values = (
            flat.index_select(0, flat_ids)
            if flat is not None
            else torch.cat([logits[rows[i]].index_select(0, _device_ids(banned[i], device)) for i in live])
        )
        owner = torch.repeat_interleave(torch.arange(len(live), device=device), torch.tensor(lengths, device=device))
        top = end_logits.max(dim=1).values.double()
        # A row's log-sum-exp over its banned values and its best end, shifted by the row's largest of them.
        shift = top.clone().scatter_reduce_(0, owner, values.double(), reduce="amax")
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
        sums = torch.zeros(len(live), dtype=torch.float64, device=device)
        sums.index_add_(0, owner, torch.exp(values.double() - shift[owner]))
        total = shift + torch.log(sums + torch.exp(top - shift))
        go = top > NEG_INF
        new = torch.where(go, total, top).to(logits.dtype)
        logits[index, best] = new
        if flat is not None:
            keep = go[owner]
            flat.index_fill_(0, flat_ids[keep], NEG_INF)
        else:
            for k, i in enumerate(live):
                if bool(go[k]):
                    logits[rows[i]].index_fill_(0, _device_ids(banned[i], device), NEG_INF)

    def stop_logits(self, logits: torch.Tensor, rows: Sequence[int], ids: np.ndarray) -> torch.Tensor:
        """Per row of ``rows``: the log-sum-exp of its logits at ``ids`` (the stop tokens), before masking (float64)."""
        device = logits.device
        index = torch.tensor(list(rows), device=device)
        picked = logits.index_select(0, index).index_select(1, self.const(ids, device))
        return torch.logsumexp(picked.double(), dim=1)

    def close(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        stops: torch.Tensor,
        closers: Sequence[np.ndarray],
        closing: Sequence[float],
    ) -> list[tuple[int, float] | None]:
        """:func:`toolgrammar.runtime.closing.close_row` on masked rows ``rows`` of ``logits`` (in place).

        ``stops``: :meth:`stop_logits` of those rows before masking; ``closing``: each row's carried
        closing probability. One gather and one write for the batch, with one read to the host (two
        where some row carries a decision: its masked row's log-sum-exp). Returns per row what
        ``close_row`` returns.
        """
        out: list[tuple[int, float] | None] = [None] * len(rows)
        live = [i for i, ids in enumerate(closers) if len(ids)]
        if not live:
            return out
        device = logits.device
        width = logits.shape[1]
        flat_ids = torch.cat([self.const(closers[i], device) + rows[i] * width for i in live])
        values = logits.reshape(-1).index_select(0, flat_ids) if logits.is_contiguous() else None
        if values is None:  # a view: one gather per row
            values = torch.cat([logits[rows[i]].index_select(0, self.const(closers[i], device)) for i in live])
        host = torch.cat([values.double(), stops.to(device).double()]).tolist()
        found, stop_at = host[: len(values)], host[len(values) :]
        carried = [i for i in live if closing[i] > 0.0]
        allowed: dict[int, float] = {}
        if carried:
            index = torch.tensor([rows[i] for i in carried], device=device)
            sums = torch.logsumexp(logits.index_select(0, index).double(), dim=1).tolist()
            allowed = dict(zip(carried, sums, strict=True))
        write_rows: list[int] = []
        write_ids: list[int] = []
        write_values: list[float] = []
        offset = 0
        for i in live:
            n = len(closers[i])
            mine = found[offset : offset + n]
            offset += n
            best = choose(np.array(mine), stop_at[i], closing[i])
            if best is None:
                continue
            new, taken = pooled(mine[best], stop_at[i], closing[i], allowed.get(i, -math.inf))
            token = int(closers[i][best])
            write_rows.append(rows[i])
            write_ids.append(token)
            write_values.append(new)
            out[i] = (token, taken if taken >= NEGLIGIBLE else 0.0)
        if write_rows:
            logits[torch.tensor(write_rows, device=device), torch.tensor(write_ids, device=device)] = torch.tensor(
                write_values, dtype=logits.dtype, device=device
            )
        return out


def _to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """``host`` (a fresh int64 array) on ``device``: shared memory on the CPU; else one copy from pinned memory
    that does not wait for the device (the operations that read it are queued after it)."""
    t = torch.from_numpy(host)
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def _device_ids(ids: np.ndarray, device: torch.device) -> torch.Tensor:
    """A copy of ``ids`` on ``device`` (the cached id arrays are read-only, which ``torch.from_numpy`` warns about)."""
    return torch.as_tensor(np.array(ids, dtype=np.int64)).to(device)
