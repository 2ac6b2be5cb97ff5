"""Per-row state that a batched step keeps where the logits are, so that a step never waits for the device.

A close decision (:mod:`toolgrammar.runtime.closing`) is made from logits; carried to the next step, it
meets the token that was sampled, which the host knows. Reading the decision back to the host would make
every such step wait for the device. Instead the decisions of a batch step stay on the device
(:class:`OnDevice`, one element of the step's tensor), the next step's :func:`follow_on_device` turns them
and the sampled tokens into what each row carries on (on the device too), and the blocks a stop closed are
counted there (:class:`Tally`), read only when someone asks.

A row's state may also be on the host (a ``float``, a ``(token, q)`` pair): the one-row path on the CPU
(:func:`toolgrammar.runtime.closing.close_row`) makes those, and where the "device" is the CPU reading an
:class:`OnDevice` back (:func:`host_closing`, :func:`host_pending`) waits for nothing.

:class:`HostPack` assembles a step's host values (ids, rows, flags, float64 bits) in one array, sent in
one transfer from pinned memory that does not wait for the device.

Import boundary: numpy; torch is imported by the functions that run a step (the adapters that import this
module without torch, vLLM's before it runs, only touch the host forms).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from toolgrammar.runtime.closing import follow

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class OnDevice:
    """Element ``index`` (along the last dimension) of ``values``, a tensor one batch step left on the device.

    A carried closing probability: ``values`` is ``(rows,)`` float64. A pending decision: ``values`` is
    ``(2, rows)`` float64, the closer's id (``-1``: nothing moved) over the closing probability if it is taken.
    """

    values: torch.Tensor
    index: int


Closing = float | OnDevice
"""A row's carried closing probability."""
Pending = tuple[int, float] | OnDevice | None
"""A row's decision of this step: ``(closer, q if it is taken)``, or ``None`` (nothing moved)."""


def host_closing(closing: Closing) -> float:
    """``closing`` as a float (an :class:`OnDevice` is read back: only where the device is the CPU)."""
    if isinstance(closing, OnDevice):
        return float(closing.values[closing.index])
    return closing


def host_pending(pending: Pending) -> tuple[int, float] | None:
    """``pending`` as ``(closer, q)`` or ``None`` (an :class:`OnDevice` is read back: only where the device is
    the CPU)."""
    if not isinstance(pending, OnDevice):
        return pending
    token, taken = pending.values[:, pending.index].tolist()
    return None if token < 0 else (int(token), taken)


class HostPack:
    """Host arrays for one step, sent to the device together: :meth:`add` each, :meth:`send` once, then read
    each back with :meth:`ints` / :meth:`floats` (slices of the one device array)."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._size = 0
        self._sent: torch.Tensor | None = None

    def add(self, values: np.ndarray | Sequence[int]) -> slice:
        """Add int64 values (or float64: their bits travel as int64); returns where they are."""
        arr = np.asarray(values)
        if arr.dtype == np.float64:
            arr = arr.view(np.int64)
        elif arr.dtype != np.int64:
            arr = arr.astype(np.int64)
        where = slice(self._size, self._size + len(arr))
        self._parts.append(arr)
        self._size += len(arr)
        return where

    def send(self, device: torch.device) -> None:
        host = np.concatenate(self._parts) if self._parts else np.empty(0, dtype=np.int64)
        self._sent = to_device(host, device)

    def ints(self, where: slice) -> torch.Tensor:
        assert self._sent is not None, "send() first"
        return self._sent[where]

    def floats(self, where: slice) -> torch.Tensor:
        import torch

        return self.ints(where).view(torch.float64)


class GatherPlan:
    """Where the :class:`OnDevice` values of a list (closing probabilities, decisions) come from: grouped by
    source tensor (one group when every row's value comes from the last batch step), each group's positions
    in the list and indices into its tensor added to a :class:`HostPack`."""

    def __init__(self, values: Sequence[object], pack: HostPack) -> None:
        groups: dict[int, tuple[torch.Tensor, list[int], list[int]]] = {}
        for position, value in enumerate(values):
            if isinstance(value, OnDevice):
                group = groups.setdefault(id(value.values), (value.values, [], []))
                group[1].append(position)
                group[2].append(value.index)
        self._groups = [(source, pack.add(pos), pack.add(idx)) for source, pos, idx in groups.values()]
        self._pack = pack

    def __bool__(self) -> bool:
        return bool(self._groups)

    def fill(self, out: torch.Tensor) -> torch.Tensor:
        """Copy each group's values into ``out`` (along its last dimension) at their positions; returns ``out``."""
        dim = out.dim() - 1
        for source, positions, indices in self._groups:
            picked = source.index_select(dim, self._pack.ints(indices))
            out.index_copy_(dim, self._pack.ints(positions), picked)
        return out


def closing_values(closings: Sequence[Closing], pack: HostPack) -> tuple[slice, GatherPlan]:
    """Add the rows' carried closing probabilities to ``pack``: the host floats (``0`` for the others) and
    the plan that fills in the device ones. After ``pack.send``: ``plan.fill(pack.floats(where))``."""
    floats = np.array([0.0 if isinstance(c, OnDevice) else c for c in closings], dtype=np.float64)
    return pack.add(floats), GatherPlan(closings, pack)


class Tally:
    """Counts per slot (a row, or one slot for a total), added on the host or on the device; the device
    counts are read only by :meth:`counts` (never on the per-token path)."""

    def __init__(self, size: int = 1) -> None:
        self._host = np.zeros(size, dtype=np.int64)
        self._device: torch.Tensor | None = None

    def add(self, slot: int = 0, count: int = 1) -> None:
        self._host[slot] += count

    def add_on_device(self, counts: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        """Add ``counts`` (a device tensor) at ``slots`` (one per count; ``None``: all to slot 0)."""
        import torch

        if self._device is None or self._device.device != counts.device:
            if self._device is not None:
                self._host += self._device.cpu().numpy()
            self._device = torch.zeros(len(self._host), dtype=torch.int64, device=counts.device)
        if slots is None:
            self._device[0] += counts.sum()
        else:
            self._device.index_add_(0, slots, counts.to(torch.int64))

    def absorb(self, other: Tally) -> None:
        """Add all of ``other``'s counts to slot 0 (on the device where they are there: nothing is read)."""
        self._host[0] += other._host.sum()
        if other._device is not None:
            self.add_on_device(other._device)

    def counts(self) -> list[int]:
        out = self._host.copy()
        if self._device is not None:
            out += self._device.cpu().numpy()
        return [int(c) for c in out]

    def total(self) -> int:
        return sum(self.counts())

    def reorder(self, parents: Sequence[int]) -> None:
        """Slot ``i`` takes slot ``parents[i]``'s counts (beam search reorders its rows)."""
        self._host = self._host[list(parents)]
        if self._device is not None:
            order = to_device(np.asarray(parents, dtype=np.int64), self._device.device)
            self._device = self._device.index_select(0, order)


@dataclass(slots=True)
class Follow:
    """A row whose decision of the last step is on the device, and the token it then took."""

    pending: OnDevice
    token: int
    in_block: bool
    """Whether the row is still in the block after the token."""
    counted: bool
    """Whether a close taken here counts (the row is not in error, and this is not a replay)."""
    slot: int = 0
    """The :class:`Tally` slot a close counts in."""


def follow_on_device(follows: Sequence[Follow], closes: Tally) -> list[Closing]:
    """:func:`~toolgrammar.runtime.closing.follow` for rows whose decisions are on the device, in one batch:
    what each row carries on (an :class:`OnDevice`, or ``0.0`` where it left the block), and the closes
    taken added to ``closes``. Nothing is read back to the host."""
    import torch

    if not follows:
        return []
    device = follows[0].pending.values.device
    n = len(follows)
    pack = HostPack()
    tokens = pack.add([f.token for f in follows])
    in_block = pack.add([f.in_block for f in follows])
    counted = pack.add([f.counted for f in follows])
    slots = pack.add([f.slot for f in follows])
    plan = GatherPlan([f.pending for f in follows], pack)
    pack.send(device)
    decided = plan.fill(torch.empty((2, n), dtype=torch.float64, device=device))
    taken = torch.where(decided[0] == pack.ints(tokens).double(), decided[1], 0.0)
    inside = pack.ints(in_block).bool()
    carried = torch.where(inside, taken, 0.0)
    closed = ~inside & pack.ints(counted).bool() & (taken >= 0.5)
    closes.add_on_device(closed, pack.ints(slots))
    return [OnDevice(carried, i) if f.in_block else 0.0 for i, f in enumerate(follows)]


def follow_row(pending: Pending, token: int, in_block: bool, valid: bool) -> tuple[Closing, bool] | Follow:
    """One row's follow: done on the host (``(closing, closed)``) where its decision is there, else the
    :class:`Follow` to run with the batch (:func:`follow_on_device`)."""
    if isinstance(pending, OnDevice):
        return Follow(pending, token, in_block, valid)
    return follow(pending, token, in_block, valid)


def to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """``host`` (a fresh int64 array) on ``device``: shared memory on the CPU; else one copy from pinned memory
    that does not wait for the device (the operations that read it are queued after it)."""
    import torch

    t = torch.from_numpy(host)
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


__all__ = [
    "Closing",
    "Follow",
    "GatherPlan",
    "HostPack",
    "OnDevice",
    "Pending",
    "Tally",
    "closing_values",
    "follow_on_device",
    "follow_row",
    "host_closing",
    "host_pending",
    "to_device",
]
