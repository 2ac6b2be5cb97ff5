"""What ``close_on_stop`` costs per constrained token: the processor with and without it, side by side.

    .venv/bin/python bench/close_on_stop_cost.py            # 24 walks each, five string tools and typed tools
    .venv/bin/python bench/close_on_stop_cost.py --walks 60

The same 49-token canonical call as ``bench/anchors.py`` (its walk: tool sets, prompt, block), walked token by token
through two ``ToolCallLogitsProcessor``s that differ only in ``close_on_stop``; walks alternate between
the two (the first of each pair swapped every walk), so both see the same load. A fresh scores tensor
each step, made outside the timed region. Reports, per processor, p50 / mean / max over positions of each
position's median over walks (the first two walks are warm-up), and writes
``bench/results/close-on-stop-cost-<date>-<time>.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import time

import torch
from anchors import make_walk
from common import (
    BenchContext,
    Stats,
    fresh_scores,
    machine_info,
    markdown_table,
    now_ns,
    per_position,
    seed_tools,
    typed_tools,
    write_results,
)

from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
from toolgrammar.vocab import qwen3_vocabulary


def walks(ctx: BenchContext, toolset, n_walks: int) -> dict[bool, Stats]:
    walk = make_walk(ctx, toolset)
    ids = walk.ids
    inputs = [walk.input_ids(k) for k in range(len(ids))]
    processors = {
        on: ToolCallLogitsProcessor(ctx.tokenizer, toolset.tools, max_new_tokens=512, close_on_stop=on)
        for on in (True, False)
    }
    times: dict[bool, list[list[int]]] = {True: [], False: []}
    for walk in range(n_walks + 2):
        for on in (True, False) if walk % 2 else (False, True):
            processor = processors[on]
            processor.reset()
            scores = [fresh_scores() for _ in ids]
            steps = []
            for x, s in zip(inputs, scores, strict=True):
                t0 = now_ns()
                processor(x, s)
                steps.append(now_ns() - t0)
            if walk >= 2:
                times[on].append(steps)
    return {on: per_position(times[on]) for on in (True, False)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--walks", type=int, default=24, help="timed walks per processor and tool set (default 24)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    rows, data = [], {"machine": machine_info(), "walks": args.walks, "toolsets": {}}
    for toolset in (seed_tools(), typed_tools()):
        got = walks(ctx, toolset, args.walks)
        on, off = got[True], got[False]
        data["toolsets"][toolset.name] = {"close_on_stop": on.to_json(), "without": off.to_json()}
        rows.append(
            [
                toolset.name,
                f"{on.p50:.1f} / {on.mean:.1f} / {on.max:.0f}",
                f"{off.p50:.1f} / {off.mean:.1f} / {off.max:.0f}",
                f"{on.p50 - off.p50:+.1f} / {on.mean - off.mean:+.1f}",
            ]
        )
    machine = data["machine"]
    markdown = "\n".join(
        [
            "# close_on_stop: per-token cost of the transformers processor with and without it",
            "",
            f"`python bench/close_on_stop_cost.py --walks {args.walks}`; {time.strftime('%Y-%m-%d %H:%M')}; "
            f"{machine.get('cpu', '')}, load average {machine.get('load_average', '')} at the start; source "
            f"{machine.get('git', '')}.",
            "",
            markdown_table(
                ["tool set", "with (p50 / mean / max µs)", "without (p50 / mean / max µs)", "difference p50 / mean µs"],
                rows,
            ),
            "",
        ]
    )
    print(markdown)
    md, js = write_results("close-on-stop-cost", markdown, data)
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
