"""textkit: small helpers for text and numbers."""

from .chunks import chunk, flatten
from .config import load_config, parse_config
from .stats import mean, median, variance
from .strings import is_palindrome, slugify, truncate, word_count

__version__ = "0.3.1"

__all__ = [
    "chunk",
    "flatten",
    "is_palindrome",
    "load_config",
    "mean",
    "median",
    "parse_config",
    "slugify",
    "truncate",
    "variance",
    "word_count",
]
