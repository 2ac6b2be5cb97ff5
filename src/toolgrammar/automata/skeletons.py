"""Turn skeletons shipped with the package: the part of a turn's automaton that no tool changes.

A turn's automaton is its *skeleton* (free text, reasoning, the format's markers and separators; see
:func:`toolgrammar.automata.automaton.compile_skeleton`) with the tools' names and arguments joined in as a turn
reaches them (:mod:`toolgrammar.automata.lazy`). The skeleton depends on the format and the options only, yet
compiling it (subset construction, pruning, minimization of the whole free-text and reasoning part) was
the largest share of a small tool list's cold start: about half of compiling one tool. A process keeps
the skeletons it compiled; the ones of the configurations in :func:`configurations` also ship, compiled,
in ``data/skeletons/`` (one compressed ``.npz`` each, about 1 KB), so a new process reads them instead.

Why this cannot serve a stale automaton: a file is named by the :func:`~toolgrammar.automata.automaton.structure_key`
of the skeleton's expression tree, so a change to the grammar code that changes a skeleton changes its key,
and the old file is never asked for (a miss: the skeleton is compiled, as for any configuration not
shipped). Each file is verified as a cache entry is (:func:`toolgrammar.cache.load_file`: format version,
SHA-256 digest, shapes and ranges); a damaged one is ignored with a warning naming it, and the skeleton
compiled. ``tests/test_skeletons.py`` compiles every configuration afresh and fails, naming the command
below, while a shipped file is missing, left over, or different.

    python -m toolgrammar.automata.skeletons           # (re)write data/skeletons/ after a grammar change
    python -m toolgrammar.automata.skeletons --check   # compare only; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolgrammar import cache
from toolgrammar.automata.automaton import DFA, _dispatch_points, clear_caches, compile_skeleton, skeleton_key
from toolgrammar.errors import GrammarError

SHIPPED_DIR = Path(__file__).parent / "data" / "skeletons"
"""Where the shipped skeletons are (one ``<structure key>.npz`` each)."""
KIND = "skeletons"
"""The entries' kind, part of their digest (:func:`toolgrammar.cache.digest`)."""

SAMPLE_TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
)
"""The tools the configurations are compiled with."""
OTHER_TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "lookup_order", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    {"name": "ping"},
    {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]}},
)
"""Another list, of other names, count and types: a configuration ships only where both lists give one
skeleton. In most formats the skeleton holds no tool; where the markup outside the call's name and
arguments spells the tools (``kimi-k3`` and ``llama4-pythonic`` today, except under ``tool_choice="none"``), it
ships nothing."""

TOOL_CHOICES: tuple[str, ...] = ("auto", "required", "none", "get_weather")
REASONING: tuple[str, ...] = ("enabled", "disabled", "prefilled")
PARALLEL: tuple[bool, ...] = (True, False)


def configurations() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``(format, options)`` whose skeleton ships: each built-in format under each tool choice
    (a named tool too), reasoning mode (``prefilled`` where the format has reasoning markers) and parallel
    setting, the other options at their defaults."""
    from toolgrammar.formats import FORMATS, get_format

    for fmt, choice, reasoning, parallel in itertools.product(sorted(FORMATS), TOOL_CHOICES, REASONING, PARALLEL):
        if reasoning == "prefilled" and not get_format(fmt).markers.think_open:
            continue  # refused for such a format: nothing to ship
        yield fmt, {"tool_choice": choice, "reasoning": reasoning, "parallel_tool_calls": parallel}


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
    cache.save(KIND, key, _arrays(dfa, points))


def _checker(n_dispatches: int) -> cache.Check:
    from toolgrammar.turn.grammar import _check_cached_dfa

    def check(entry: dict[str, np.ndarray]) -> str | None:
        problem = _check_cached_dfa(entry)
        if problem is None:
            stored = tuple((int(p), int(e), int(j)) for p, e, j in entry["points"].tolist())
            points = _dispatch_points(_dfa(entry), n_dispatches)
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


def _arrays(dfa: DFA, points: Sequence[tuple[int, int, int]]) -> dict[str, np.ndarray]:
    return {
        "transitions": dfa.transitions,
        "accepting": dfa.accepting,
        "safe": dfa.safe,
        "start": np.int64(dfa.start),
        "points": np.array(points, dtype=np.int64).reshape(-1, 3),
    }


def compiled() -> dict[str, tuple[list[str], dict[str, np.ndarray]]]:
    """Every configuration's skeleton compiled now (not read from anywhere): key -> (the configurations
    that share it, its arrays as a shipped file holds them)."""
    from toolgrammar.formats import get_format
    from toolgrammar.schema.tools import load_tools
    from toolgrammar.turn.grammar import options_from_kwargs, turn_node

    tools, other_tools = load_tools(list(SAMPLE_TOOLS)), load_tools(list(OTHER_TOOLS))
    out: dict[str, tuple[list[str], dict[str, np.ndarray]]] = {}
    for fmt, options in configurations():
        name = f"{fmt} " + " ".join(f"{k}={v}" for k, v in options.items())
        try:
            opts = options_from_kwargs(format=fmt, **options)
            node = turn_node(tools, opts, get_format(fmt))
            other_options = {**options, "tool_choice": "ping"} if opts.named_tool else options  # a tool of that list
            other = turn_node(other_tools, options_from_kwargs(format=fmt, **other_options), get_format(fmt))
        except GrammarError as error:  # pragma: no cover - configurations() lists only what compiles
            raise GrammarError(f"skeleton configuration {name}: {error}") from error
        if skeleton_key(node) != skeleton_key(other):
            continue  # this format's skeleton spells the tools: no file would ever be read
        clear_caches()  # compiled, never taken from this process's cache (which may hold shipped ones)
        skeleton = compile_skeleton(node, shipped=False, disk=False)
        names, _ = out.setdefault(skeleton.key, ([], _arrays(skeleton.dfa, skeleton.points)))
        names.append(name)
    return out


def differences(folder: Path = SHIPPED_DIR) -> list[str]:
    """What ``folder`` lacks, holds in excess, or holds otherwise than a fresh compile (empty: up to date)."""
    fresh = compiled()
    problems = []
    for key, (names, arrays) in fresh.items():
        path = folder / f"{key}.npz"
        if not path.is_file():
            problems.append(f"missing {path.name} ({names[0]})")
            continue
        with np.load(path, allow_pickle=False) as data:
            stored = {k: data[k] for k in data.files}
        expected = cache.stamped(KIND, key, arrays)
        if set(stored) != set(expected) or any(not np.array_equal(stored[k], v) for k, v in expected.items()):
            problems.append(f"{path.name} differs from a fresh compile ({names[0]})")
    problems += [f"left over: {p.name}" for p in sorted(folder.glob("*.npz")) if p.stem not in fresh]
    return problems


def write(folder: Path = SHIPPED_DIR) -> tuple[int, int]:
    """Compile every configuration into ``folder`` (compressed), removing files of no configuration;
    returns (configurations, distinct skeletons)."""
    fresh = compiled()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.npz"):
        if stale.stem not in fresh:
            stale.unlink()
    for key, (_names, arrays) in fresh.items():
        with open(folder / f"{key}.npz", "wb") as handle:
            np.savez_compressed(handle, **cache.stamped(KIND, key, arrays))
    return sum(len(names) for names, _ in fresh.values()), len(fresh)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolgrammar.automata.skeletons", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare the shipped files with a fresh compile only")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{len(problems)} difference(s) in {SHIPPED_DIR}")
        return 1 if problems else 0
    configs, keys = write()
    print(f"wrote {keys} skeletons ({configs} configurations) to {SHIPPED_DIR}")
    return 0


__all__ = [
    "KIND",
    "SHIPPED_DIR",
    "cached_skeleton",
    "configurations",
    "differences",
    "save_skeleton",
    "shipped_skeleton",
    "write",
]


if __name__ == "__main__":
    raise SystemExit(main())
