"""Format description files (``formats/<format>/format.toml``), read at run time.

A format's markers and block shape are data, not strings buried in code: the grammar and the parser
of a format both read them from the description file in the format's own folder.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from toolgrammar.errors import GrammarError
from toolgrammar.formats.markers import Markers

_TUPLE_MARKERS = ("leak", "end_of_turn")


@cache
def format_spec(package: str) -> dict[str, Any]:
    """The parsed ``format.toml`` of the format package ``package`` (``toolgrammar.formats.hermes``)."""
    where = f"{package.replace('.', '/')}/format.toml"
    try:
        text = resources.files(package).joinpath("format.toml").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as error:
        raise GrammarError(f"no description file {where}") from error
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GrammarError(f"{where} is not valid TOML: {error}") from error


def markers_of(package: str) -> Markers:
    """The markers of the format package ``package``, from its description file."""
    raw = dict(format_spec(package)["markers"])
    for key in _TUPLE_MARKERS:
        if key in raw:
            raw[key] = tuple(raw[key])
    try:
        return Markers(**raw)
    except TypeError as error:
        raise GrammarError(f"{package.replace('.', '/')}/format.toml: bad [markers] table: {error}") from error
