"""What a processor option costs per constrained token: the processor with and without it, side by side.

    .venv/bin/python bench/option_cost.py                          # close_on_stop, 24 walks, both tool sets
    .venv/bin/python bench/option_cost.py --option prefix_true --walks 60

The same 49-token canonical call as ``bench/anchors.py`` (its walk: tool sets, prompt, block), walked token by token
through two ``ToolCallLogitsProcessor``s that differ only in the option (``close_on_stop``: on by default, against
off; ``prefix_true``: off by default, against on; every other option at its default); walks alternate between
the two (the first of each pair swapped every walk), so both see the same load. A fresh scores tensor
each step, made outside the timed region. Reports, per processor, p50 / mean / max over positions of each
position's median over walks (the first two walks are warm-up), and writes
``bench/results/<option>-cost-<date>-<time>.md`` / ``.json``. The first walk of each processor (its
tables built on first visit) is warm-up: what is timed is the steady step.
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

OPTIONS = ("close_on_stop", "prefix_true")


def walks(ctx: BenchContext, toolset, n_walks: int, option: str) -> dict[bool, Stats]:
    walk = make_walk(ctx, toolset)
    ids = walk.ids
    inputs = [walk.input_ids(k) for k in range(len(ids))]
    processors = {
        on: ToolCallLogitsProcessor(ctx.tokenizer, toolset.tools, max_new_tokens=512, **{option: on})
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
    parser.add_argument("--option", choices=OPTIONS, default="close_on_stop", help="the option to cost")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    rows, data = [], {"machine": machine_info(), "walks": args.walks, "option": args.option, "toolsets": {}}
    for toolset in (seed_tools(), typed_tools()):
        got = walks(ctx, toolset, args.walks, args.option)
        on, off = got[True], got[False]
        data["toolsets"][toolset.name] = {args.option: on.to_json(), "without": off.to_json()}
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
            f"# {args.option}: per-token cost of the transformers processor with and without it",
            "",
            f"`python bench/option_cost.py --option {args.option} --walks {args.walks}`; "
            f"{time.strftime('%Y-%m-%d %H:%M')}; "
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
    md, js = write_results(f"{args.option.replace('_', '-')}-cost", markdown, data)
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
