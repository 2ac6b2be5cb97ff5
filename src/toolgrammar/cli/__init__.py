"""The ``toolgrammar`` command: a typer app (:mod:`toolgrammar.cli.app`), one module per command."""

from toolgrammar.cli.app import main

__all__ = ["main"]
