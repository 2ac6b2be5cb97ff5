"""The ``toolgrammar`` command line.

Exit codes: 0 success; 1 the command ran and found problems (a parse with errors, a constrained run
with errors); 2 bad input (missing files, bad tools, bad options).
Each subcommand lives beside the code it drives and is registered here.
"""

from __future__ import annotations

import importlib
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


def _print_version(value: bool) -> None:
    if value:
        from toolgrammar import __version__

        typer.echo(f"toolgrammar {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Valid tool calls from open models (see README.md)."""


_registered = False


def _register() -> None:
    # Each command module adds its command to ``app``; imports stay light (no torch at import time).
    global _registered
    if _registered:
        return
    from toolgrammar.cli import grammar, parse  # noqa: F401

    try:
        importlib.import_module("toolgrammar.cli.compare")
    except ModuleNotFoundError as error:  # only while the compare command is not installed
        if error.name != "toolgrammar.cli.compare":
            raise

    _registered = True


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (0 ok, 1 problems found, 2 bad input), also from tests."""
    _register()
    try:
        result = app(args=argv, standalone_mode=False, prog_name="toolgrammar")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    except Exception as error:
        # typer vendors click (typer._click) in recent releases; match either by name and shape.
        show = getattr(error, "show", None)
        code = getattr(error, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        if type(error).__name__ == "Abort":
            return 1
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
