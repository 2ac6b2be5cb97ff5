"""Target 5's worst case: the memory of every state's mask and budget bookkeeping, not just what walks reach.

    .venv/bin/python bench/memory_worst_case.py             # writes bench/results/memory-worst-case-<date>.md/.json
    .venv/bin/python bench/memory_worst_case.py --no-write

For each tool set of ``anchors.py`` (the seed's five string tools; the typed set) it builds the processor
(``max_new_tokens=512``, format ``hermes``, mode ``schema``; the on-disk cache off, so nothing of an earlier
run is reused) and, on its ``TokenGrammar``, in one process:

1. *every mask*: ``mask(s)`` for every automaton state ``s``;
2. *+ one budget per state* (the worst case of target 5): then, for every state whose ``max_need`` is > 0,
   ``mask(s, remaining=max_need)``: the largest budget that still differs from the unbudgeted mask, so the
   state's per-token need array (``_needs``, one byte per token) is built and one budget mask is cached;
3. *+ every budget* (beyond the target's definition, for reference): ``mask(s, remaining=r)`` for every
   ``r`` from 1 to ``max_need``: every budget mask a generation can ask for (the budget masks are an LRU of
   4,096 entries, so this is bounded).

After each step it reads ``TokenGrammar.cache_bytes`` and splits it into unbudgeted masks (id arrays),
need arrays and budget masks. Target 5 (issue 3): cached masks < 64 MB for the five-tool set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from common import machine_info, markdown_table, seed_tools, typed_tools, write_results

LIMIT_MB = 64.0


def _ids_bytes(masks: Any) -> int:
    return sum(a.nbytes for m in masks for a in (m.banned, m.allowed) if a is not None)


def _split(g: Any) -> dict[str, Any]:
    return {
        "cache_bytes": g.cache_bytes,
        "mask_bytes": _ids_bytes(g._masks.values()),
        "needs_bytes": sum(a.nbytes for a in g._needs.values()),
        "budget_mask_bytes": _ids_bytes(g._budget_masks.values()),
        "cached_states": len(g._masks),
        "need_arrays": len(g._needs),
        "budget_masks": len(g._budget_masks),
    }


def measure(tokenizer: Any, toolset: Any) -> dict[str, Any]:
    from toolgrammar.integrations.hf import ToolCallLogitsProcessor

    proc = ToolCallLogitsProcessor(tokenizer, toolset.tools, max_new_tokens=512)
    g = proc.grammar
    out: dict[str, Any] = {"toolset": toolset.name, "dfa_states": g.n_states}

    t0 = time.perf_counter()
    needs = [g.mask(s).max_need for s in range(g.n_states)]
    out["every_mask"] = {**_split(g), "seconds": time.perf_counter() - t0}

    t0 = time.perf_counter()
    for s, need in enumerate(needs):
        if need > 0:
            g.mask(s, remaining=need)
    out["one_budget_per_state"] = {**_split(g), "seconds": time.perf_counter() - t0}

    t0 = time.perf_counter()
    for s, need in enumerate(needs):
        for r in range(1, need + 1):
            g.mask(s, remaining=r)
    out["every_budget"] = {
        **_split(g),
        "seconds": time.perf_counter() - t0,
        "budgets_asked": sum(needs),
        "max_need": max(needs),
    }
    return out


def _mb(b: int) -> str:
    return f"{b / 2**20:.2f} MB"


def report(results: list[dict[str, Any]], info: dict[str, Any], cmd: str) -> str:
    out = [
        f"# Target 5, worst case: {info['date'][:10]}",
        "",
        f"Command: `{cmd}` (source: {info['git']}). Machine: {info['cpu']}, {info['nproc']} cores, load average "
        f"{info['load_average'][0]} at the start, {info['load_average_end'][0]} at the end; Python {info['python']}, "
        f"numpy {info['versions']['numpy']}.",
        "",
    ]
    header = [
        "tool set", "step", "cache_bytes", "masks", "need arrays", "budget masks", "time",
        f"target < {LIMIT_MB:.0f} MB (five tools)",
    ]  # fmt: skip
    body = []
    for i, r in enumerate(results):
        labels = (
            ("every_mask", "mask(s), every state"),
            ("one_budget_per_state", "+ mask(s, remaining=max_need), every state with max_need > 0"),
            ("every_budget", "+ mask(s, remaining=r), r = 1..max_need (reference)"),
        )
        for key, label in labels:
            m = r[key]
            met = ""
            if i == 0 and key != "every_budget":
                met = "**met**" if m["cache_bytes"] / 2**20 < LIMIT_MB else "**missed**"
            body.append(
                [
                    f"{r['toolset']} ({r['dfa_states']} states)",
                    label,
                    _mb(m["cache_bytes"]),
                    f"{_mb(m['mask_bytes'])} ({m['cached_states']})",
                    f"{_mb(m['needs_bytes'])} ({m['need_arrays']})",
                    f"{_mb(m['budget_mask_bytes'])} ({m['budget_masks']})",
                    f"{m['seconds']:.1f} s",
                    met,
                ]
            )
    out += [markdown_table(header, body), ""]
    out += [
        "Steps are cumulative, on one `TokenGrammar` per tool set. Counts in brackets. The third step asks "
        + "; ".join(f"{r['toolset']}: {r['every_budget']['budgets_asked']:,} budgets" for r in results)
        + f" (largest max_need: {', '.join(str(r['every_budget']['max_need']) for r in results)}).",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    args = p.parse_args(argv)
    os.environ["TOOLGRAMMAR_CACHE"] = "off"  # build everything in this process: nothing of an earlier run reused

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    info = machine_info()
    tok = load_qwen3_tokenizer()
    results = []
    for ts in (seed_tools(), typed_tools()):
        print(f"... {ts.name}", file=sys.stderr, flush=True)
        results.append(measure(tok, ts))
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    cmd = ("python bench/memory_worst_case.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    md = report(results, info, cmd)
    print(md)
    if not args.no_write:
        md_path, js_path = write_results("memory-worst-case", md, {"machine": info, "results": results})
        print(f"\nwrote {md_path.relative_to(md_path.parents[2])} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
