"""The turn skeletons that ship with the package, written and checked: ``data/skeletons/``.

Which configurations ship (:func:`configurations`: each built-in format under each tool choice, reasoning
mode and parallel setting), compiled afresh and compared with the files (:func:`differences`) or written
(:func:`write`). Reading them at run time is :mod:`toolgrammar.automata.skeleton_store`'s job.
``tests/turn/test_skeletons.py`` compiles every configuration afresh and fails, naming the command below,
while a shipped file is missing, left over, or different.

    python -m toolgrammar.turn.shipped_skeletons           # (re)write data/skeletons/ after a grammar change
    python -m toolgrammar.turn.shipped_skeletons --check   # compare only; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolgrammar import cache, caches
from toolgrammar.automata.skeleton import compile_skeleton, skeleton_key
from toolgrammar.automata.skeleton_store import KIND, SHIPPED_DIR, skeleton_arrays
from toolgrammar.errors import GrammarError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.formats.options import options_from_kwargs
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import turn_node

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
    for fmt, choice, reasoning, parallel in itertools.product(sorted(FORMATS), TOOL_CHOICES, REASONING, PARALLEL):
        if reasoning == "prefilled" and not get_format(fmt).markers.think_open:
            continue  # refused for such a format: nothing to ship
        yield fmt, {"tool_choice": choice, "reasoning": reasoning, "parallel_tool_calls": parallel}


def compiled() -> dict[str, tuple[list[str], dict[str, np.ndarray]]]:
    """Every configuration's skeleton compiled now (not read from anywhere): key -> (the configurations
    that share it, its arrays as a shipped file holds them)."""
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
        caches.clear("automata")  # compiled, never taken from this process's cache (which may hold shipped ones)
        skeleton = compile_skeleton(node, shipped=False, disk=False)
        names, _ = out.setdefault(skeleton.key, ([], skeleton_arrays(skeleton.dfa, skeleton.points)))
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
    parser = argparse.ArgumentParser(
        prog="python -m toolgrammar.turn.shipped_skeletons", description=__doc__.split("\n", 1)[0]
    )
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


__all__ = ["configurations", "differences", "write"]


if __name__ == "__main__":
    raise SystemExit(main())
