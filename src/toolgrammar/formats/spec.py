"""Format description files (``toolgrammar/grammars/<format>.toml``), read at run time.

A format's markers and block shape are data, not strings buried in code: the grammar and the parser
of a format both read them from its file.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from ..errors import GrammarError
from .base import Markers


@cache
def format_spec(name: str) -> dict[str, Any]:
    """The parsed description file of format ``name``."""
    try:
        text = resources.files("toolgrammar").joinpath("grammars", f"{name}.toml").read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise GrammarError(f"no description file grammars/{name}.toml for format {name!r}") from error
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GrammarError(f"grammars/{name}.toml is not valid TOML: {error}") from error


def markers_of(name: str) -> Markers:
    """The markers of format ``name``, from its description file."""
    raw = dict(format_spec(name)["markers"])
    if "leak" in raw:
        raw["leak"] = tuple(raw["leak"])
    try:
        return Markers(**raw)
    except TypeError as error:
        raise GrammarError(f"grammars/{name}.toml: bad [markers] table: {error}") from error
