"""Counting what a torch step asks of the device, without a device: the operations it dispatches (each one a
kernel launch on a GPU, but for those on a tensor's shape alone) and every read of a tensor back to the host.

On the CPU nothing waits, so a read is found by what asks for one: the dispatched ops that return a Python
value (``item``, ``bool()``, ``torch.equal``) and the ``Tensor`` methods that hand over host memory or a
Python list (``tolist``, ``numpy``, which dispatch nothing on the CPU), plus ``torch.tensor`` built from a
Python list (on a GPU, a blocking copy from pageable memory).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READ_OPS = frozenset({"aten._local_scalar_dense", "aten.item", "aten.equal", "aten.is_nonzero"})
"""Dispatched operations that return a device value to the host."""
SHAPE_OPS = frozenset(
    {"aten.view", "aten._unsafe_view", "aten.unsqueeze", "aten.squeeze", "aten.expand", "aten.slice", "aten.select"}
)
"""Operations on a tensor's shape alone: they launch nothing (how many a step runs depends on shapes)."""
READ_METHODS = ("tolist", "numpy", "item", "__bool__", "__float__", "__int__")


class DispatchCounter(TorchDispatchMode):
    """Counts every torch operation dispatched while active, by name (``aten.index_fill_``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def launches(self) -> int:
        """The operations that would launch work on a device (all but :data:`SHAPE_OPS`)."""
        return sum(n for op, n in self.ops.items() if op not in SHAPE_OPS)

    @property
    def reads(self) -> Counter[str]:
        return Counter({op: n for op, n in self.ops.items() if op in READ_OPS})


@contextmanager
def host_reads() -> Iterator[Counter[str]]:
    """While active, counts calls of the ``Tensor`` methods that read a tensor to the host and of
    ``torch.tensor`` (yielded: a Counter by name); restored on exit."""
    calls: Counter[str] = Counter()
    saved: dict[str, Any] = {name: getattr(torch.Tensor, name) for name in READ_METHODS}
    own = {name for name in READ_METHODS if name in vars(torch.Tensor)}  # the others are TensorBase's
    factory = torch.tensor

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return original(*args, **kwargs)

        return counted

    try:
        for name, original in saved.items():
            setattr(torch.Tensor, name, counting(name, original))
        torch.tensor = counting("torch.tensor", factory)
        yield calls
    finally:
        for name, original in saved.items():
            if name in own:
                setattr(torch.Tensor, name, original)
            else:
                delattr(torch.Tensor, name)
        torch.tensor = factory


__all__ = ["READ_METHODS", "READ_OPS", "SHAPE_OPS", "DispatchCounter", "host_reads"]
