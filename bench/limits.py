"""Issue 12's two remaining cost checks, measured (not timed tests).

1. Per-token cost against context length: ``ToolCallLogitsProcessor`` called as ``generate`` calls
   it, one step at a time, after prompts of 1k, 32k and 128k tokens (the processor compares a bounded
   window of the input, so its cost should not grow with the context); each step's time is divided by
   one ``scores.add_(row)`` pass over the same row, measured right after it.
2. The schemas the issue lists as exploding: each is compiled from an empty cache in a fresh
   subprocess, into the engine a turn calling it uses (the vocabulary and its token table built first,
   outside the clock);
   where it compiles, the largest call it allows is then walked (every array item built). Reported are
   wall time, peak RSS and the outcome (compiled, or the refusal's message naming the part and the remedy).

    .venv/bin/python bench/limits.py            # about a minute on 2 cores
    .venv/bin/python bench/limits.py --no-write

Writes ``bench/results/limits-<date>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, markdown_table, write_results

CONTEXTS = (1_000, 32_000, 128_000)
STEPS = 48


def per_token_vs_context() -> list[dict[str, Any]]:
    from toolgrammar.integrations.hf import ToolCallLogitsProcessor
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    tokenizer = load_qwen3_tokenizer()
    tools = json.loads((Path(__file__).resolve().parents[1] / "examples" / "tools" / "seed_tools.json").read_text())
    rows = []
    rng = torch.Generator().manual_seed(0)
    for n in CONTEXTS:
        proc = ToolCallLogitsProcessor(tokenizer, tools, max_new_tokens=STEPS + 8)
        ids = torch.randint(0, 150_000, (1, n), generator=rng)
        text_token = tokenizer.encode(" the", add_special_tokens=False)[0]
        row = torch.randn(1, 151_936)
        ratios, times, controls = [], [], []
        for _ in range(STEPS):
            scores = torch.randn(1, 151_936)
            # Control: what any processor pays here (a view of the newest ids) under the same cache
            # pressure (generate re-creates input_ids, 1 MB at 128k tokens, every step).
            c0 = time.perf_counter_ns()
            _ = ids.numpy()[:, -16:].copy()
            c1 = time.perf_counter_ns()
            controls.append((c1 - c0) / 1e3)
            t0 = time.perf_counter_ns()
            proc(ids, scores)
            t1 = time.perf_counter_ns()
            floor = torch.randn(1, 151_936)
            f0 = time.perf_counter_ns()
            floor.add_(row)
            f1 = time.perf_counter_ns()
            times.append((t1 - t0) / 1e3)
            ratios.append((t1 - t0) / max(f1 - f0, 1))
            ids = torch.cat([ids, torch.tensor([[text_token]])], dim=1)  # free text: the processor follows
        rows.append(
            {
                "context": n,
                "step_us_median": statistics.median(times[4:]),
                "control_us_median": statistics.median(controls[4:]),
                "over_add_median": statistics.median(ratios[4:]),
            }
        )
    base = rows[0]["step_us_median"]
    for r in rows:
        r["vs_1k"] = r["step_us_median"] / base
    return rows


SCHEMAS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "1,000 optional string properties": (
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1000)}},
        {},
    ),
    "200 optional properties, qwen-xml": (
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(200)}},
        {"format": "qwen-xml"},
    ),
    "array maxItems 200 of 3-property objects": (
        {
            "type": "object",
            "properties": {
                "rows": {
                    "type": "array",
                    "maxItems": 200,
                    "items": {
                        "type": "object",
                        "properties": {"x": {"type": "string"}, "y": {"type": "integer"}, "z": {"type": "boolean"}},
                        "required": ["x", "y", "z"],
                    },
                }
            },
            "required": ["rows"],
        },
        {},
    ),
    "arrays nested 3 deep, maxItems 10": (
        {
            "type": "object",
            "properties": {
                "a": {
                    "type": "array",
                    "maxItems": 10,
                    "items": {
                        "type": "array",
                        "maxItems": 10,
                        "items": {"type": "array", "maxItems": 10, "items": {"type": "string"}},
                    },
                }
            },
            "required": ["a"],
        },
        {},
    ),
}

# The largest value each schema allows: a call that builds every item an array may hold.
LARGEST: dict[str, dict[str, Any]] = {
    "array maxItems 200 of 3-property objects": {"rows": [{"x": f"r{i}", "y": i, "z": i % 2 == 0} for i in range(200)]},
    "arrays nested 3 deep, maxItems 10": {"a": [[[f"s{i}"] * 10] * 10 for i in range(10)]},
}

_CHILD = """
import json, sys, time
schema, options, call = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats import get_format
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.vocab import qwen3_vocabulary

def hwm_mb():  # this process's own peak (ru_maxrss would report the parent's, kept across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0

# The vocabulary and its token table (built once per process, for any grammar) come before the clock and
# the memory baseline: they are not the schema's cost.
vocab = qwen3_vocabulary()
TokenGrammar(compile_turn([{"name": "warm_up", "parameters": {"type": "object", "properties": {}}}]), vocab)
rss0 = hwm_mb()
t0 = time.perf_counter()
walk_ms = None
try:
    turn = compile_turn([{"name": "f", "parameters": schema}], tool_choice="f", **options)
    engine = TokenGrammar(turn, vocab)  # a named tool: its arguments are built now
    outcome = f"compiled ({engine.n_states:,} states built)"
    if call is not None:
        text = get_format(turn.options.format).render_call("f", call)
        w0 = time.perf_counter()
        state = engine.walk_text(text)
        walk_ms = (time.perf_counter() - w0) * 1000
        assert state >= 0, "the largest call was refused"
        outcome += f"; the largest call ({len(text):,} characters) walked: {engine.n_states:,} states built"
except ToolgrammarError as error:
    outcome = f"refused: {error}"
elapsed = time.perf_counter() - t0
rss1 = hwm_mb()
print(json.dumps({"seconds": elapsed, "walk_ms": walk_ms, "peak_rss_mb": rss1, "rss_growth_mb": rss1 - rss0,
                  "outcome": outcome}))
"""


def schema_limits() -> list[dict[str, Any]]:
    rows = []
    for name, (schema, options) in SCHEMAS.items():
        env = {**os.environ, "TOOLGRAMMAR_CACHE": tempfile.mkdtemp(prefix="tg-limits-")}
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(schema), json.dumps(options), json.dumps(LARGEST.get(name))],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            rows.append({"schema": name, "error": proc.stderr[-2000:]})
            continue
        rows.append({"schema": name, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    context = per_token_vs_context()
    limits = schema_limits()
    md = ["## Per-token cost against context length (hf processor, one row, free text)", ""]
    md.append(
        markdown_table(
            ["prompt tokens", "step (us, median)", "step / one add_ pass", "vs 1k", "control (us)"],
            [[f"{r['context']:,}", f"{r['step_us_median']:.0f}", f"{r['over_add_median']:.2f}x", f"{r['vs_1k']:.2f}x",
              f"{r['control_us_median']:.1f}"] for r in context],
        )
    )
    md += ["", "## Schemas that used to explode (compile from an empty cache, fresh process)", ""]
    md.append(
        markdown_table(
            ["schema", "time (of which the largest call's walk)", "peak RSS (growth)", "outcome"],
            [[r["schema"], f"{r.get('seconds', 0) * 1000:.0f} ms"
              + (f" ({r['walk_ms']:.0f} ms)" if r.get("walk_ms") is not None else ""),
              f"{r.get('peak_rss_mb', 0):.0f} MB ({r.get('rss_growth_mb', 0):.1f} MB)",
              r.get("outcome", r.get("error", ""))[:400]] for r in limits],
        )
    )
    text = "\n".join(md)
    print(text)
    if not args.no_write:
        paths = write_results("limits", text, {"machine": machine_info(), "context": context, "limits": limits})
        print("\nwrote", *paths)


if __name__ == "__main__":
    main()
