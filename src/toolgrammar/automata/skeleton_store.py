"""Shipped and cached skeletons, read and written: the package's ``data/skeletons/`` and the on-disk cache.

A turn's automaton is its *skeleton* (free text, reasoning, the format's markers and separators; see
:func:`toolgrammar.automata.skeleton.compile_skeleton`) with the tools' names and arguments joined in as a
turn reaches them (:mod:`toolgrammar.automata.lazy`). The skeleton depends on the format and the options
only, yet compiling it was the largest share of a small tool list's cold start. The skeletons of the common
configurations therefore ship, compiled, in ``data/skeletons/`` (one compressed ``.npz`` each, about 1 KB),
written by :mod:`toolgrammar.turn.shipped_skeletons`; the others go to the on-disk cache.

Why this cannot serve a stale automaton: a file is named by the
:func:`~toolgrammar.automata.nodes.structure_key` of the skeleton's expression tree, so a change to the
grammar code that changes a skeleton changes its key, and the old file is never asked for. Each file is
verified as a cache entry is (:func:`toolgrammar.cache.load_file`: format version, SHA-256 digest, shapes and
ranges); a damaged one is ignored with a warning naming it, and the skeleton compiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from toolgrammar import cache
from toolgrammar.automata.dfa import DFA, check_dfa_arrays
from toolgrammar.automata.holes import dispatch_points

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "skeletons"
"""Where the shipped skeletons are (one ``<structure key>.npz`` each)."""
KIND = "skeletons"
"""The entries' kind, part of their digest (:func:`toolgrammar.cache.digest`)."""


def shipped_skeleton(key: str, n_dispatches: int) -> tuple[DFA, tuple[tuple[int, int, int], ...]] | None:
    """The shipped skeleton named ``key`` (its DFA and dispatch points), or ``None``: none ships under that
    key, or the file is damaged (warned about; the caller compiles it)."""
    path = SHIPPED_DIR / f"{key}.npz"
    if not path.is_file():
        return None
    return _read(cache.load_file(path, KIND, key, check=_checker(n_dispatches)), n_dispatches)


def cached_skeleton(key: str, n_dispatches: int) -> tuple[DFA, tuple[tuple[int, int, int], ...]] | None:
    """The skeleton named ``key`` from the on-disk cache (a configuration that does not ship, compiled by an
    earlier process), or ``None``: a miss, or a damaged entry (warned about; the caller compiles it)."""
    return _read(cache.load(KIND, key, check=_checker(n_dispatches)), n_dispatches)


def save_skeleton(key: str, dfa: DFA, points: Sequence[tuple[int, int, int]]) -> None:
    """Keep a skeleton compiled here in the on-disk cache, under its key (one entry per skeleton)."""
    cache.save(KIND, key, skeleton_arrays(dfa, points))


def _checker(n_dispatches: int) -> cache.Check:
    def check(entry: dict[str, np.ndarray]) -> str | None:
        problem = check_dfa_arrays(entry)
        if problem is None:
            stored = tuple((int(p), int(e), int(j)) for p, e, j in entry["points"].tolist())
            points = dispatch_points(_dfa(entry), n_dispatches)
            if stored != points:
                problem = f"dispatch points {stored} where its automaton has {points}"
        return problem

    return check


def _read(
    entry: dict[str, np.ndarray] | None, n_dispatches: int
) -> tuple[DFA, tuple[tuple[int, int, int], ...]] | None:
    if entry is None:
        return None
    # The stored points, which the check found equal to the automaton's own (found again, not trusted).
    return _dfa(entry), tuple((int(p), int(e), int(j)) for p, e, j in entry["points"].tolist())


def _dfa(entry: dict[str, np.ndarray]) -> DFA:
    t = entry["transitions"]
    return DFA(
        transitions=t,
        start=int(entry["start"]),
        accepting=entry["accepting"],
        safe=entry["safe"],
        stats={"dfa_states": int(t.shape[0]), "shipped": True},
    )


def skeleton_arrays(dfa: DFA, points: Sequence[tuple[int, int, int]]) -> dict[str, np.ndarray]:
    return {
        "transitions": dfa.transitions,
        "accepting": dfa.accepting,
        "safe": dfa.safe,
        "start": np.int64(dfa.start),
        "points": np.array(points, dtype=np.int64).reshape(-1, 3),
    }


__all__ = ["KIND", "SHIPPED_DIR", "cached_skeleton", "save_skeleton", "shipped_skeleton", "skeleton_arrays"]
