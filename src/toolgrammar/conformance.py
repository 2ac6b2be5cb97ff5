"""CanIToolCall's engine path: ``canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter``.

A stable path (published results name it); the adapter lives in :mod:`toolgrammar.evaluate.conformance`.
``python -m toolgrammar.conformance table RESULTS.json [--matrix]`` prints a run's pass table.
"""

from toolgrammar.evaluate.conformance import CanIToolCallAdapter, main

__all__ = ["CanIToolCallAdapter", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
