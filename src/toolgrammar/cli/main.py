"""``toolgrammar``: the command line's entry point (``toolgrammar.cli:main``, ``python -m toolgrammar``).

Importing the command modules adds their commands to :data:`toolgrammar.cli.app.app`; none of them imports
torch or transformers at import time (a run of ``compare`` does, when it starts).
"""

from __future__ import annotations

import sys

from toolgrammar.cli import compare, formats, grammar, parse
from toolgrammar.cli.app import app

COMMANDS = (grammar, parse, compare, formats)
"""The command modules, in the order their commands are listed."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (0 ok, 1 problems found, 2 bad input), also from tests."""
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


__all__ = ["COMMANDS", "main"]


if __name__ == "__main__":
    sys.exit(main())
