"""Summarize several ``anchors.py`` runs (their ``.json``) into the targets tables of ``bench/RESULTS.md``.

    .venv/bin/python bench/summarize.py bench/results/anchors-2026-11-30-0920*.json ...

Each figure is shown per run and as the median over the runs; ratios are taken within each run (every
run measures toolgrammar, the anchors and the floors under the same load), then their median.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

TOOLSETS = ("five string tools", "typed tools")


def _tag(name: str) -> str:
    return "toolgrammar" if name.startswith("toolgrammar") else name.split()[0]


def _load(path: str) -> dict[str, Any]:
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    d["by"] = {(_tag(r["name"]), r["toolset"]): r for r in d["rows"] if not r.get("skipped")}
    d["path"] = Path(path).name
    return d


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _cells(xs: list[float], fmt: str) -> str:
    """``median (run1 / run2 / ...)``."""
    return f"{fmt.format(_med(xs))} ({' / '.join(fmt.format(x) for x in xs)})"


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def summarize(paths: list[str]) -> str:
    runs = [_load(p) for p in paths]
    out: list[str] = []
    m0 = runs[0]["machine"]
    loads = ", ".join(
        f"{r['machine']['load_average'][0]:.1f} -> {r['machine']['load_average_end'][0]:.1f}" for r in runs
    )
    out += [
        f"Runs: {', '.join(r['path'] for r in runs)} "
        f"(source {', '.join(sorted({r['machine']['git'] for r in runs}))}). "
        f"Machine: {m0['cpu']}, {m0['nproc']} cores, torch threads {m0['torch_threads']}, Python {m0['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m0["versions"].items() if v)
        + f". 1-minute load average at the start -> end of each run: {loads} (the run "
        "itself accounts for about 1 of it). Cells: median over the runs (each run's value in brackets).",
        "",
    ]

    def get(tag: str, ts: str, *keys: str) -> list[float]:
        vals = []
        for r in runs:
            x: Any = r["by"].get((tag, ts))
            for k in keys:
                x = None if x is None else x.get(k)
            if x is None:
                return []
            vals.append(float(x))
        return vals

    def ratio(a: list[float], b: list[float]) -> list[float]:
        return [x / y for x, y in zip(a, b, strict=True)]

    # 1
    out += ["### 1. Per constrained token, batch 1 (whole processor call, fresh scores each step)", ""]
    rows = []
    for ts in TOOLSETS:
        x = get("xgrammar", ts, "mask", "p50_us")
        xf = get("xgrammar", ts, "floor", "p50_us")
        t = get("toolgrammar", ts, "mask", "p50_us")
        if not t:
            continue
        tf = get("toolgrammar", ts, "floor", "p50_us")
        rx = ratio(t, x)
        rxn = [(a / af) / (b / bf) for a, af, b, bf in zip(t, tf, x, xf, strict=True)]
        rf = ratio(t, tf)
        rows.append(
            [
                f"{ts}, steady",
                _cells(t, "{:.0f}"),
                _cells(get("toolgrammar", ts, "mask", "mean_us"), "{:.0f}"),
                _cells(get("toolgrammar", ts, "mask", "max_us"), "{:.0f}"),
                _cells(x, "{:.0f}"),
                f"{_cells(rx, '{:.2f}')} {_met(_med(rx) <= 0.4)}; load-normalized {_med(rxn):.2f}x",
                _cells(tf, "{:.0f}"),
                f"{_cells(rf, '{:.2f}')} {_met(_med(rf) <= 1.5)}",
            ]
        )
        t = get("toolgrammar", ts, "first_visit", "p50_us")
        xv = get("xgrammar", ts, "first_visit", "p50_us")
        rows.append(
            [
                f"{ts}, first visit",
                _cells(t, "{:.0f}"),
                _cells(get("toolgrammar", ts, "first_visit", "mean_us"), "{:.0f}"),
                _cells([v / 1000 for v in get("toolgrammar", ts, "first_visit", "max_us")], "{:.1f} ms"),
                _cells(xv, "{:.0f}"),
                f"{_cells(ratio(t, xv), '{:.2f}')} (no target)",
                "",
                "",
            ]
        )
    out += _table(
        [
            "walk",
            "p50 µs",
            "mean µs",
            "max µs",
            "xgrammar p50 µs",
            "vs xgrammar (target <= 0.4x)",
            "add_ floor p50 µs",
            "vs add_ floor (target <= 1.5x)",
        ],
        rows,
    )

    # 2
    out += ["### 2. Outside blocks (58 tokens of reasoning and prose)", ""]
    rows = []

    def tg(*keys: str) -> list[float]:
        vals = []
        for r in runs:
            x: Any = r["toolgrammar"]
            for k in keys:
                x = None if x is None else x.get(k)
            if x is None:
                return []
            vals.append(float(x))
        return vals

    nothing = tg("outside", "nothing", "p50_us")
    tail = tg("outside", "tail", "p50_us")
    p = tg("outside", "processor", "p50_us")
    gap = [a - b for a, b in zip(p, nothing, strict=True)]
    rows.append(
        [
            "processor call",
            _cells(p, "{:.0f}"),
            f"{_cells(gap, '{:.0f}')} {_met(_med(gap) <= 5)}",
            _cells([a - b for a, b in zip(p, tail, strict=True)], "{:.0f}"),
        ]
    )
    rows.append(["doing nothing (a Python call)", _cells(nothing, "{:.1f}"), "", ""])
    rows.append(["floor: `scores[:, 151669:] = -inf` alone", _cells(tail, "{:.0f}"), "", ""])
    out += _table(["measure", "p50 µs", "minus doing nothing (target: a few µs)", "minus the tail-write floor"], rows)

    # 3
    out += ["### 3. Cold start for a new tool set (build + the first walk through the 49-token block)", ""]
    rows = []
    for ts in TOOLSETS:
        lg = get("llguidance", ts, "cold_ms")
        c = get("toolgrammar", ts, "cold_ms")
        if not c:
            continue
        comp = get("toolgrammar", ts, "compile_ms")
        r = ratio(c, lg)
        disk = tg("disk", ts, "ready_ms")
        rows.append(
            [
                ts,
                _cells(comp, "{:.0f}"),
                _cells([a - b for a, b in zip(c, comp, strict=True)], "{:.0f}"),
                _cells(c, "{:.0f}"),
                _cells(lg, "{:.0f}"),
                f"{_cells(r, '{:.1f}')} {_met(_med(r) <= 1)}",
                f"{_cells(disk, '{:.1f}')} {_met(_med(disk) < 5)}",
                _cells(tg("disk", ts, "ready_plus_walk_ms"), "{:.0f}"),
            ]
        )
    out += _table(
        [
            "tool set",
            "build ms",
            "first 49 calls ms",
            "cold start ms",
            "llguidance compile + 49 masks ms",
            "vs llguidance (target <= 1x)",
            "ready from disk cache ms (target < 5)",
            "from disk + first 49 calls ms",
        ],
        rows,
    )

    # 4
    out += ["### 4. Batch 64, one decode step, every row inside a block", ""]
    rows = []
    for ts in TOOLSETS:
        x = get("xgrammar", ts, "batch64", "p50_us")
        xb = get("xgrammar", ts, "batch64_par", "p50_us")
        t = get("toolgrammar", ts, "batch64", "p50_us")
        if not t:
            continue
        r = ratio(t, x)
        rows.append(
            [
                ts,
                _cells([v / 1000 for v in t], "{:.1f}"),
                _cells([v / 1000 for v in x], "{:.1f}"),
                _cells([v / 1000 for v in xb], "{:.1f}") if xb else "",
                f"{_cells(r, '{:.2f}')} {_met(_med(r) <= 1)}",
            ]
        )
    f64 = [r["floors"]["batch 64: scores.add_(rows)"]["fresh"]["p50_us"] / 1000 for r in runs]
    rows.append(["floor: one `add_` over the (64, 151936) batch", _cells(f64, "{:.1f}"), "", "", ""])
    out += _table(
        [
            "tool set",
            "toolgrammar ms",
            "xgrammar 64 fills + apply ms",
            "xgrammar BatchGrammarMatcher ms",
            "vs xgrammar (target <= 1x)",
        ],
        rows,
    )

    # 5
    out += ["### 5. Memory of cached masks (`TokenGrammar.cache_bytes`, MB)", ""]
    rows = []
    for ts in TOOLSETS:
        mem = [r["toolgrammar"]["memory"][ts] for r in runs]
        a = [m["after_walks"]["cache_bytes"] / 2**20 for m in mem]
        e = [m["every_state"]["cache_bytes"] / 2**20 for m in mem]
        t = [m["tight_budgets"]["cache_bytes"] / 2**20 for m in mem]
        worst = max(max(a), max(e), max(t))
        rows.append(
            [
                ts,
                f"{_med(a):.2f} ({mem[0]['after_walks']['cached_states']} of "
                f"{mem[0]['after_walks']['dfa_states']} states)",
                f"{_med(e):.2f}",
                f"{_med(t):.2f} (+{mem[0]['tight_budgets']['budget_masks']} budget masks)",
                _met(worst < 64) if ts == TOOLSETS[0] else "(no target)",
            ]
        )
    out += _table(
        [
            "tool set",
            "after the walks",
            "every automaton state visited",
            "+ the walk under 16 tight budgets",
            "target < 64 MB (five tools)",
        ],
        rows,
    )
    return "\n".join(out)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return [*lines, ""]


if __name__ == "__main__":
    print(summarize(sys.argv[1:]))
