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
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch

from toolgrammar.runtime.closing import MOST_CLOSING, NEGLIGIBLE
from toolgrammar.runtime.device_state import Closing, HostPack, OnDevice, Tally, closing_values, to_device
from toolgrammar.runtime.host_row import HostMasker
from toolgrammar.runtime.prefix_true import PrefixTable
from toolgrammar.runtime.steering import CallOpeners
from toolgrammar.runtime.token_grammar import StateMask

NEG_INF = float("-inf")


class MaskApplier:
    """Applies per-row :class:`~toolgrammar.runtime.token_grammar.StateMask` values to ``(rows, width)`` logits in
    place."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, Any], torch.Tensor] = {}
        self._keep: dict[int, object] = {}  # keeps each array alive, so its id() is never reused
        self.host = HostMasker()
        """The one-row host form (numpy), which also keeps the banned ids with the padding columns."""

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
                ids = self.host.banned_with_padding(m, width, n_tokens)
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
        ids = to_device(host, logits.device)
        flat = logits.view(-1)
        if n_banned:
            flat.index_fill_(0, ids[:n_banned], NEG_INF)
        if allowed_rows:
            idx = ids[n_banned : n_banned + n_allowed]
            kept = flat.index_select(0, idx)
            logits.index_fill_(0, ids[n_banned + n_allowed :], NEG_INF)
            flat.index_copy_(0, idx, kept)

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

    def apply_host_row(
        self, row: np.ndarray, m: StateMask | None, n_tokens: int, core: ModuleType | None = None
    ) -> None:
        """Mask one host row (a float32 numpy view of the logits) and its padding columns, in one write, in the
        C core ``core`` or in numpy (:meth:`toolgrammar.runtime.host_row.HostMasker.apply`)."""
        self.host.apply(row, m, n_tokens, core)

    def gather_donors(self, logits: torch.Tensor, rows: Sequence[int], tables: Sequence[PrefixTable]) -> Pouring | None:
        """Prefix-true masking, before the mask: read the donors' logits of rows ``rows`` (``tables[i]``: row
        ``rows[i]``'s :meth:`~toolgrammar.runtime.token_grammar.TokenGrammar.prefix_table`) and send the batch's
        tables to the device, in one transfer. ``None`` where no row has a donor. Give the result to
        :meth:`pour` once the rows are masked."""
        live = [i for i, table in enumerate(tables) if not table.empty]
        if not live:
            return None
        pack = HostPack()
        donor_rows, donor_cols, donor_groups = [], [], []
        receiver_rows, receiver_cols, pair_slots, pair_groups = [], [], [], []
        n_groups = n_receivers = 0
        for i in live:
            table, r = tables[i], rows[i]
            donor_rows.append(np.full(len(table.donors), r, dtype=np.int64))
            donor_cols.append(table.donors)
            donor_groups.append(table.donor_group + n_groups)
            receiver_rows.append(np.full(len(table.receivers), r, dtype=np.int64))
            receiver_cols.append(table.receivers)
            pair_slots.append(table.receiver_slot + n_receivers)
            pair_groups.append(table.receiver_group + n_groups)
            n_groups += table.n_groups
            n_receivers += len(table.receivers)
        at = [
            pack.add(np.concatenate(parts))
            for parts in (donor_rows, donor_cols, donor_groups, receiver_rows, receiver_cols, pair_slots, pair_groups)
        ]
        pack.send(logits.device)
        d_rows, d_cols, d_group, r_rows, r_cols, slot, group = (pack.ints(a) for a in at)
        return Pouring(logits[d_rows, d_cols], d_group, r_rows, r_cols, slot, group, n_groups, n_receivers)

    def pour(self, logits: torch.Tensor, pouring: Pouring) -> None:
        """Prefix-true masking, after the mask: each group's donors give their probability to the group's
        receivers, in proportion to the receivers' own (:func:`toolgrammar.runtime.prefix_true.pour_host_row`,
        for the whole batch on the device: a fixed number of operations, nothing read back)."""
        device = logits.device
        kept = logits[pouring.receiver_rows, pouring.receiver_cols]
        received = kept.double()
        pair = received[pouring.pair_slot]
        donor = pouring.donor_logits.double()
        shift = torch.full((pouring.n_groups,), NEG_INF, dtype=torch.float64, device=device)
        shift.scatter_reduce_(0, pouring.donor_group, donor, "amax")
        shift.scatter_reduce_(0, pouring.pair_group, pair, "amax")
        shift = torch.where(torch.isfinite(shift), shift, 0.0)
        given = torch.zeros(pouring.n_groups, dtype=torch.float64, device=device)
        given.index_add_(0, pouring.donor_group, torch.exp(donor - shift[pouring.donor_group]))
        held = torch.zeros(pouring.n_groups, dtype=torch.float64, device=device)
        held.index_add_(0, pouring.pair_group, torch.exp(pair - shift[pouring.pair_group]))
        ratio = torch.where(held > 0.0, given / torch.where(held > 0.0, held, 1.0), 0.0)
        gain = torch.zeros(pouring.n_receivers, dtype=torch.float64, device=device)
        gain.index_add_(0, pouring.pair_slot, ratio[pouring.pair_group])
        logits[pouring.receiver_rows, pouring.receiver_cols] = (received + torch.log1p(gain)).to(logits.dtype)

    def steer(self, logits: torch.Tensor, rows: Sequence[int], openers: CallOpeners, steered: Tally) -> None:
        """Pool the other-shape openers' probability onto the steering token (the block opener's first
        token, ``openers.block_opener``) in rows ``rows`` (masked already).

        The steering token's logit becomes the log-sum-exp of its own and the openers' logits, which are
        set to ``-inf``; every other logit is left as it is, so every other token keeps its
        log-probability exactly. A row whose steering token is masked, or whose openers all are, is
        left unchanged. The rows changed are counted in ``steered`` (on the device: nothing is read back).
        See :mod:`toolgrammar.runtime.steering`.
        """
        if not rows:
            return
        device = logits.device
        key = (id(openers), device)
        pooled_ids = self._ids.get(key)
        if pooled_ids is None:
            pooled_ids = torch.from_numpy(openers.steered).to(device)
            self._ids[key] = pooled_ids
            self._keep[id(openers)] = openers
        index = to_device(np.asarray(rows, dtype=np.int64), device)
        pooled = logits.index_select(0, index).index_select(1, pooled_ids)
        opener_live = pooled[:, 0] > NEG_INF
        other_live = (pooled[:, 1:] > NEG_INF).any(dim=1)
        go = opener_live & other_live
        total = torch.logsumexp(pooled.double(), dim=1).to(logits.dtype)
        logits[index, openers.block_opener] = torch.where(go, total, pooled[:, 0])
        others = torch.where(go.unsqueeze(1), NEG_INF, pooled[:, 1:])
        logits[index.unsqueeze(1), pooled_ids[1:].unsqueeze(0)] = others
        steered.add_on_device(go)

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
        ends_t = self.const(ends, device)
        pack = HostPack()
        at_rows = pack.add([rows[i] for i in live])
        lengths = [len(banned[i]) for i in live]
        ids_at = pack.add(np.concatenate([banned[i] for i in live]))
        owners_at = pack.add(np.repeat(np.arange(len(live), dtype=np.int64), lengths))
        pack.send(device)
        index, ids, owner = pack.ints(at_rows), pack.ints(ids_at), pack.ints(owners_at)
        end_logits = logits.index_select(0, index).index_select(1, ends_t)
        best = ends_t[end_logits.argmax(dim=1)]  # per row, its best end-of-turn id
        stop_rows = index[owner]
        values = logits[stop_rows, ids]
        top = end_logits.max(dim=1).values.double()
        # A row's log-sum-exp over its banned values and its best end, shifted by the row's largest of them.
        shift = top.clone().scatter_reduce_(0, owner, values.double(), reduce="amax")
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
        sums = torch.zeros(len(live), dtype=torch.float64, device=device)
        sums.index_add_(0, owner, torch.exp(values.double() - shift[owner]))
        total = shift + torch.log(sums + torch.exp(top - shift))
        go = top > NEG_INF
        logits[index, best] = torch.where(go, total, top).to(logits.dtype)
        logits[stop_rows, ids] = torch.where(go[owner], NEG_INF, values)

    def stop_logits(self, logits: torch.Tensor, rows: Sequence[int], ids: np.ndarray) -> torch.Tensor:
        """Per row of ``rows``: the log-sum-exp of its logits at ``ids`` (the stop tokens), before masking (float64)."""
        device = logits.device
        index = to_device(np.asarray(rows, dtype=np.int64), device)
        picked = logits.index_select(0, index).index_select(1, self.const(ids, device))
        return torch.logsumexp(picked.double(), dim=1)

    def close(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        stops: torch.Tensor,
        closers: Sequence[np.ndarray],
        closings: Sequence[Closing],
    ) -> list[OnDevice]:
        """:func:`toolgrammar.runtime.closing.close_row` on masked rows ``rows`` of ``logits`` (in place), on the
        device.

        ``stops``: :meth:`stop_logits` of those rows before masking; ``closers``: each row's closing tokens (not
        empty); ``closings``: each row's carried closing probability. One gather, the rule for the whole batch
        (each row's closer is its first highest closing token), one write; nothing is read back to the host.
        Returns per row its decision, on the device (``(closer or -1, q if it is taken)``: see
        :class:`~toolgrammar.runtime.device_state.OnDevice`).
        """
        n = len(rows)
        device = logits.device
        lengths = [len(ids) for ids in closers]
        pack = HostPack()
        tokens_at = pack.add(np.concatenate(closers))
        owners_at = pack.add(np.repeat(np.arange(n, dtype=np.int64), lengths))
        rows_at = pack.add(np.asarray(rows, dtype=np.int64))
        closing_at, carried = closing_values(closings, pack)
        maybe_carried = bool(carried) or any(isinstance(c, float) and c > 0.0 for c in closings)
        pack.send(device)
        tokens, owner, index = pack.ints(tokens_at), pack.ints(owners_at), pack.ints(rows_at)
        closing = carried.fill(pack.floats(closing_at))
        found = logits[index[owner], tokens].double()
        # Each row's first highest closing token, as np.argmax picks it.
        top = torch.full((n,), NEG_INF, dtype=torch.float64, device=device).scatter_reduce_(0, owner, found, "amax")
        positions = torch.arange(len(found), device=device)
        first = torch.where(found == top[owner], positions, len(found))
        best = torch.full((n,), len(found), dtype=torch.int64, device=device).scatter_reduce_(0, owner, first, "amin")
        closer, token = found[best], tokens[best]
        stop = stops.to(device).double()
        go = (closer > NEG_INF) & (stop < math.inf) & ((closing > 0.0) | (stop > NEG_INF))
        own = torch.logaddexp(closer, stop)
        new, taken = own, torch.sigmoid(stop - closer)
        if maybe_carried:  # the mixture of closing (q) and not: see closing.pooled
            allowed = torch.logsumexp(logits.index_select(0, index).double(), dim=1)
            q = closing.clamp(max=MOST_CLOSING)
            total = torch.logaddexp(allowed, stop)
            odds = torch.log(q) - torch.log1p(-q)
            chosen = q + (1.0 - q) * torch.exp(own - total)
            deciding = q + (1.0 - q) * torch.exp(stop - total)
            on = closing > 0.0
            new = torch.where(on, torch.logaddexp(own, total + odds), own)
            taken = torch.where(on, deciding / chosen, taken)
        taken = torch.where(taken >= NEGLIGIBLE, taken, 0.0)
        logits[index, token] = torch.where(go, new, closer).to(logits.dtype)
        decided = torch.stack([torch.where(go, token.double(), -1.0), torch.where(go, taken, 0.0)])
        return [OnDevice(decided, i) for i in range(n)]


@dataclass(frozen=True)
class Pouring:
    """A batch's prefix-true tables on the device, and its donors' logits read before masking (see
    :meth:`MaskApplier.gather_donors`); groups and receiver slots are numbered across the batch."""

    donor_logits: torch.Tensor
    donor_group: torch.Tensor
    receiver_rows: torch.Tensor
    receiver_cols: torch.Tensor
    pair_slot: torch.Tensor
    pair_group: torch.Tensor
    n_groups: int
    n_receivers: int


def _device_ids(ids: np.ndarray, device: torch.device) -> torch.Tensor:
    """A copy of ``ids`` on ``device`` (the cached id arrays are read-only, which ``torch.from_numpy`` warns about)."""
    return torch.as_tensor(np.array(ids, dtype=np.int64)).to(device)
