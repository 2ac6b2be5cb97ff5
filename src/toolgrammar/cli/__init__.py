"""The ``toolgrammar`` command: a typer app (:mod:`toolgrammar.cli.app`), one module per command
(:mod:`~toolgrammar.cli.grammar`, :mod:`~toolgrammar.cli.parse`, :mod:`~toolgrammar.cli.compare`), run by
:func:`toolgrammar.cli.main.main`."""

from toolgrammar.cli.main import main

__all__ = ["main"]
