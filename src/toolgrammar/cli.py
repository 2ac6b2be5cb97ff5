"""The ``toolgrammar`` command line.

Exit codes: 0 success; 1 the command ran and found problems (a parse with errors, a constrained run
with errors); 2 bad input (missing files, bad tools, bad options).
Each subcommand lives beside the code it drives and is registered here.
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="toolgrammar",
    help="Valid tool calls from open models: compile tool schemas to a token grammar, parse turns strictly, "
    "and compare free and constrained sampling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Each command module adds its command to ``app``; imports stay light (no torch at import time).
    from . import cli_parse  # noqa: F401

    for optional in ("cli_grammar", "cli_compare"):
        try:
            __import__(f"{__package__}.{optional}")
        except ModuleNotFoundError as error:  # a command module not written yet
            if error.name != f"{__package__}.{optional}":
                raise


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also usable from tests)."""
    _register()
    try:
        app(args=argv, standalone_mode=False)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except typer.Exit as exit_:
        return exit_.exit_code
    except Exception as error:  # click usage errors carry their own exit code
        import click

        if isinstance(error, click.exceptions.ClickException):
            error.show()
            return error.exit_code
        if isinstance(error, click.exceptions.Abort):
            return 1
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
