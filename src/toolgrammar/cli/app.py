"""The ``toolgrammar`` command line.

The typer app every command module adds its command to (:mod:`toolgrammar.cli.grammar`,
:mod:`toolgrammar.cli.parse`, :mod:`toolgrammar.cli.compare`); :mod:`toolgrammar.cli.main` runs it.
Exit codes: 0 success; 1 the command ran and found problems (a parse with errors, a constrained run
with errors); 2 bad input (missing files, bad tools, bad options).
"""

from __future__ import annotations

import typer

from toolgrammar import __version__

app = typer.Typer(
    name="toolgrammar",
    help="Valid tool calls from open models: compile tool schemas to a token grammar, parse turns strictly, "
    "and compare free and constrained sampling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"toolgrammar {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Valid tool calls from open models (see README.md)."""


__all__ = ["app"]
