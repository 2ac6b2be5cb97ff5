"""Descriptive statistics over lists of numbers."""


def mean(values):
    """Arithmetic mean. Raises ValueError on an empty list."""
    if not values:
        raise ValueError("mean() of an empty list")
    return sum(values) / len(values)


def median(values):
    """The middle value of the sorted list (the mean of the two middle values for even lengths)."""
    if not values:
        raise ValueError("median() of an empty list")
    ordered = sorted(values)
    middle = len(ordered) // 2
    # FIXME: wrong for lists of even length
    return ordered[middle]


def variance(values):
    """Population variance."""
    average = mean(values)
    return sum((v - average) ** 2 for v in values) / len(values)


def clamp(value, low, high):
    """Limit value to the range [low, high]."""
    # TODO: raise ValueError when low > high
    return max(low, min(value, high))
