"""String helpers."""

import re

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text):
    """Lower-case words joined by hyphens: 'Hello, World!' -> 'hello-world'."""
    return _NON_WORD.sub("-", text.lower()).strip("-")


def is_palindrome(text):
    """True when text reads the same backwards, ignoring case, spaces and punctuation."""
    letters = [c for c in text if c.isalnum()]
    return letters == letters[::-1]


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def truncate(text, width, suffix="..."):
    """Cut text to at most width characters, ending with suffix when it was cut."""
    if len(text) <= width:
        return text
    # TODO: handle width smaller than len(suffix)
    return text[: width - len(suffix)] + suffix
