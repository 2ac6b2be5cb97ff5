"""Time to first token under the concurrent load, per round, pooled over ``bench/vllm_end_to_end.py`` reports.

    .venv/bin/python bench/vllm_rounds.py bench/results/vllm-end-to-end-*.json

In a round the server prefills the whole batch of concurrent requests in one step, so every request of a round gets
its first token at nearly the same moment, and that step's length swings from round to round (2 to 5 s on 2 shared
cores) whatever the way. A way's median over its requests is therefore one or two rounds' luck; this script takes
each round's medians instead (client TTFT; the server's own, scheduling to first token; their difference, the front
end and transport) and pools the rounds of every report given, with the per-round ratio to the unconstrained batch of
the same round. Prints a markdown table; reads only the reports' JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

WAYS = ("unconstrained", "structural_tag", "plugin")


def rounds_of(report: dict[str, Any]) -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per way, per round: the medians of client TTFT, the server's TTFT and their difference (seconds)."""
    out: dict[str, dict[int, tuple[float, float, float]]] = {}
    for way, data in report["loads"].get("concurrent", {}).get("ways", {}).items():
        by_round: dict[int, list[tuple[float, float]]] = {}
        for run in data["runs"]:
            server = (run.get("server_metrics") or {}).get("time_to_first_token_ms")
            if run.get("ttft_s") is None or server is None:
                continue
            by_round.setdefault(run["round"], []).append((run["ttft_s"], server / 1000))
        out[way] = {
            r: (
                statistics.median(c for c, _ in xs),
                statistics.median(s for _, s in xs),
                statistics.median(c - s for c, s in xs),
            )
            for r, xs in by_round.items()
        }
    return out


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    pooled: dict[str, list[tuple[float, float, float, float]]] = {w: [] for w in WAYS}
    for path in paths:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        ways = rounds_of(report)
        base = ways.get("unconstrained", {})
        for way in WAYS:
            for r, (client, server, front) in sorted(ways.get(way, {}).items()):
                if r in base:
                    pooled[way].append((client, server, front, client / base[r][0]))
    print(f"Rounds pooled from {len(paths)} report(s): " + ", ".join(Path(p).name for p in paths))
    print()
    print("| way | rounds | TTFT p50 of the rounds | range | server TTFT | front end | ratio to unconstrained |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for way, rows in pooled.items():
        if not rows:
            continue
        client, server, front, ratio = (list(col) for col in zip(*rows, strict=True))
        print(
            f"| {way} | {len(rows)} | {statistics.median(client):.2f} s | {min(client):.2f}-{max(client):.2f} s "
            f"| {statistics.median(server):.2f} s | {statistics.median(front):.2f} s | {statistics.median(ratio):.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
