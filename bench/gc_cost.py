"""What Python's garbage collector adds to a cold start in a server's process (issue 12), side by side.

    .venv/bin/python bench/gc_cost.py                      # 20 new lists of 200 varied tools per engine
    .venv/bin/python bench/gc_cost.py --tools 50 --lists 40 --engines toolgrammar,llguidance

``bench/cold_start.py`` collects garbage before every measurement, so a full collection never lands inside
one of its cells. A server does not: torch and transformers keep some 200,000 tracked objects in the
process, a full collection walks all of them, and CPython starts one when the objects that survived the
young generations since the last one reach a quarter of the old generation. toolgrammar compiles in
Python, so the objects its compiles keep (tool copies, grammar trees) bring the next full collection
closer; the Rust and C++ engines keep few Python objects.

Here each engine walks ``--lists`` new tool lists in a row (the same measurement as ``cold_start.py``:
compile from empty caches, then the first turn), with no collection between them, in a process holding
torch, transformers and the three engines. Reported per engine: the mean and median of the first call
(a mean holds the collections that landed, a median mostly not), the time spent in collections per list
(``gc.callbacks``), and how many were full ones.
"""

from __future__ import annotations

import argparse
import gc
import secrets
import statistics
import sys
import time
import warnings
from typing import Any

import cold_start
import common
import torch
import transformers  # noqa: F401  (a server's process holds it)
from common import REPO, BenchContext, markdown_table, write_results
from toolsets_cold import SHAPES, toolset

warnings.filterwarnings("ignore")


class CollectorClock:
    """Time spent in collections, and how many were full (generation 2), since :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self.young = 0
        self._started = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        if info["generation"] == 2:
            self.full += 1
        else:
            self.young += 1

    def reset(self) -> None:
        self.seconds, self.full, self.young = 0.0, 0, 0


def run(engines: list[str], shape: str, tools: int, lists: int, warm: int) -> tuple[list[dict[str, Any]], int]:
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.vocab import qwen3_vocabulary

    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    runners = cold_start.make_runners(engines)
    for r in runners:
        why = r.unavailable()
        if why:
            raise SystemExit(f"{r.name}: {why}")
        r.setup(ctx)
    free = cold_start.free_ids(ctx)
    turns = [
        cold_start.make_turn(ctx, toolset(shape, tools, f"g{k}{secrets.token_hex(3)}"), free)
        for k in range(warm + lists)
    ]
    cold_start._trim = lambda: None  # as a server: collections land where they fall
    clock = CollectorClock()
    gc.collect()
    tracked = len(gc.get_objects())
    rows = []
    for r in runners:
        for t in turns[:warm]:  # first-call costs of the process, not of a tool list
            cold_start.measure_once(r, t)
        gc.collect()  # every engine starts with no debt
        clock.reset()
        totals = []
        for k, t in enumerate(turns[warm:]):
            print(f"... {r.name}: list {k + 1}/{lists}", file=sys.stderr, flush=True)
            s = cold_start.measure_once(r, t)
            if s.total_ms is None:
                raise SystemExit(f"{r.name}: {s.error}")
            totals.append(s.total_ms)
        rows.append(
            {
                "engine": r.name,
                "mean_ms": statistics.mean(totals),
                "median_ms": statistics.median(totals),
                "max_ms": max(totals),
                "gc_ms_per_list": clock.seconds * 1e3 / lists,
                "full_collections": clock.full,
                "young_collections": clock.young,
                "samples_ms": totals,
            }
        )
        if hasattr(r, "cleanup"):
            r.cleanup()
    return rows, tracked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--shape", default="varied", choices=SHAPES)
    p.add_argument("--tools", type=int, default=200, help="tools per list (default 200)")
    p.add_argument("--lists", type=int, default=20, help="new lists per engine, in a row (default 20)")
    p.add_argument("--warm", type=int, default=3, help="untimed lists per engine first (default 3)")
    p.add_argument("--engines", default=",".join(cold_start.ENGINES))
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    args = p.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in cold_start.ENGINES:
            p.error(f"unknown engine {e!r} (one of {', '.join(cold_start.ENGINES)})")
    if args.tools < 1 or args.lists < 1 or args.warm < 0:
        p.error("--tools and --lists must be at least 1, --warm at least 0")
    torch.set_num_threads(1)
    common._git_state = cold_start.source_state
    info = common.machine_info()
    started = time.perf_counter()
    rows, tracked = run(engines, args.shape, args.tools, args.lists, args.warm)
    cmd = "python bench/gc_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown_table(
        ["engine", "first call, mean (ms)", "median (ms)", "max (ms)", "in collections, per list (ms)", "full ones"],
        [
            [
                r["engine"],
                f"{r['mean_ms']:,.1f}",
                f"{r['median_ms']:,.1f}",
                f"{r['max_ms']:,.1f}",
                f"{r['gc_ms_per_list']:,.1f}",
                f"{r['full_collections']} in {args.lists}",
            ]
            for r in rows
        ],
    )
    md = (
        f"# Garbage collection in a server's process: {args.lists} new lists of {args.tools} {args.shape} tools "
        f"per engine, in a row\n\n`{cmd.strip()}`\n\n{info['date']}, {info['cpu']}, {info['nproc']} cores, "
        f"load average {info['load_average'][0]}, commit {info['git']}.\n\n"
        f"Tracked objects in the process before the runs: {tracked:,}.\n\n{table}\n\n"
        f"Total run: {time.perf_counter() - started:.0f} s."
    )
    print(md)
    if not args.no_write:
        data = {"machine": info, "command": cmd.strip(), "tracked_objects": tracked, "rows": rows, **vars(args)}
        md_path, js_path = write_results("gc-cost", md, data)
        print(f"\nwrote {md_path.relative_to(REPO)} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
