"""Splitting and joining lists."""


def chunk(items, size):
    """Split items into lists of length size; the last one may be shorter."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]


def flatten(nested):
    """One level of flattening: [[1, 2], [3]] -> [1, 2, 3]."""
    return [item for group in nested for item in group]
