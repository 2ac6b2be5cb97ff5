"""``python -m toolgrammar.exports write|check grammars/``: the command that writes and checks the golden exports.

A stable command path (the golden files name it); the exports live in :mod:`toolgrammar.turn.exports`.
"""

from toolgrammar.turn.exports import export, golden_files, main, without_grammar

__all__ = ["export", "golden_files", "main", "without_grammar"]

if __name__ == "__main__":
    raise SystemExit(main())
