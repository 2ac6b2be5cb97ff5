"""How far each constrained sampler moves the model's own calls: the log-probability it gives them, with and
without prefix-true masking (:mod:`toolgrammar.runtime.prefix_true`).

    .venv/bin/python bench/prefix_true_distortion.py             # free runs of bench/results/quality-2026-11-30
    .venv/bin/python bench/prefix_true_distortion.py --from DIR  # another bench/quality.py output

The calls: every free run (policy ``free``, each setting) of a ``bench/quality.py`` output whose turn holds a
valid call, in any shape (the free model writes fenced JSON; the other-shape reader reads it and the strict
checks judge it). Each is written as the canonical block the grammar allows (``<tool_call>\\n{"name": ...,
"arguments": {...}}\\n</tool_call>``) after the ``required``, call-first prompt (the chat template's, the
opener pre-filled), and scored token by token by one forward pass of the embedded model: its own
log-probability of the call (no mask), and the log-probability each constrained sampler
(:class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor`, ``tool_choice="required"``, ``close_on_stop``
on, as in ``bench/quality.py``) gives it, with ``prefix_true`` off and on. Higher is closer to what the
model meant. Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from toolgrammar.evaluate.compare import CompareConfig, HFGenerator, prepare
from toolgrammar.evaluate.compare.generation import assistant_opening
from toolgrammar.evaluate.compare.running import initial_messages
from toolgrammar.evaluate.models import load_model
from toolgrammar.integrations.hf import ToolCallLogitsProcessor


def free_calls(generations: Path) -> list[dict[str, Any]]:
    """Per free run with a valid call: the task id, the setting and its first valid call (``{"name", "arguments"}``)."""
    out = []
    for line in generations.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["policy"] != "free":
            continue
        for run in record["runs"]:
            turn = run["turns"][0]
            calls = [*turn["parse"]["tool_calls"], *(c["call"] for c in turn["other_shape_calls"] if c.get("call"))]
            if calls:
                out.append({"task": run["task"]["id"], "setting": record["setting"], "call": calls[0]})
    return out


def score(model: Any, tokenizer: Any, prompt: str, text: str, processors: dict[str, Any]) -> dict[str, float]:
    """The log-probability of ``text`` after ``prompt``: the model's own, and under each processor."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + text_ids])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    out = {"model": float(torch.log_softmax(logits, -1)[torch.arange(len(text_ids)), torch.tensor(text_ids)].sum())}
    for name, make in processors.items():
        processor = make()
        total = 0.0
        for k, token in enumerate(text_ids):
            scores = processor(ids[:, : len(prompt_ids) + k], logits[k].clone().unsqueeze(0))
            total += float(torch.log_softmax(scores[0].double(), -1)[token])
            if total == -math.inf:
                break
        out[name] = total
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", default="bench/results/quality-2026-11-30", help="a quality.py output")
    parser.add_argument("--out", default=f"bench/results/prefix-true-distortion-{time.strftime('%Y-%m-%d')}")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    config = CompareConfig(tool_choice="required", mode="strings", format="hermes", steer_to_blocks=False, limit=None)
    tools, tasks = prepare(config)
    by_id = {t.id: t for t in tasks}
    loaded = load_model(config.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    opening = assistant_opening(config, tools)
    openai_tools = tools.to_openai()
    generator = HFGenerator(loaded, tools, config)
    calls = free_calls(Path(args.source) / "generations.jsonl")
    print(f"{len(calls)} free runs with a valid call", file=sys.stderr)

    def sampler(prefix_true: bool) -> Any:
        return lambda: ToolCallLogitsProcessor(
            tokenizer, tools, max_new_tokens=args.max_new_tokens, mode=config.mode, tool_choice="required",
            reasoning=config.reasoning, assistant_prefix=opening, prefix_true=prefix_true,
        )  # fmt: skip

    processors = {"renormalized": sampler(False), "prefix-true": sampler(True)}
    rows = []
    for i, item in enumerate(calls):
        task = by_id[item["task"]]
        prompt = generator.render(initial_messages(task, config), openai_tools)
        block = json.dumps({"name": item["call"]["name"], "arguments": item["call"]["arguments"]}, ensure_ascii=False)
        text = f"{block}\n</tool_call>"
        if not opening.endswith('{"name": "'):
            raise SystemExit(f"unexpected opening {opening!r}")
        text = text[len('{"name": "') :]  # the opening holds the block's first bytes
        got = score(model, tokenizer, prompt + opening, text, processors)
        rows.append({**item, **got})
        print(f"[{i + 1}/{len(calls)}] {item['task']} ({item['setting']}): {got}", file=sys.stderr, flush=True)
    result = summarize(rows)
    result["source"] = args.source
    result["model_source"] = loaded.source
    Path(args.out + ".json").write_text(json.dumps({**result, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    markdown = markdown_report(result, rows)
    Path(args.out + ".md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    finite = [r for r in rows if all(math.isfinite(r[k]) for k in ("model", "renormalized", "prefix-true"))]
    out: dict[str, Any] = {"calls": len(rows), "scored": len(finite)}
    for key in ("model", "renormalized", "prefix-true"):
        out[key] = {
            "mean": statistics.fmean(r[key] for r in finite) if finite else None,
            "impossible": sum(r[key] == -math.inf for r in rows),
        }
    if finite:
        gaps = [r["prefix-true"] - r["renormalized"] for r in finite]
        out["gap_mean"] = statistics.fmean(gaps)
        out["gap_median"] = statistics.median(gaps)
        out["prefix_true_higher"] = sum(g > 1e-9 for g in gaps)
        out["prefix_true_lower"] = sum(g < -1e-9 for g in gaps)
    return out


def markdown_report(result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Calls: {result['calls']} free runs with a valid call ({result['source']}); scored where every sampler can "
        f"write the call: {result['scored']}. Model: {result['model_source']}.",
        "",
        "| sampler | mean log-probability of the model's call | calls it cannot write |",
        "|---|---:|---:|",
    ]
    for key in ("model", "renormalized", "prefix-true"):
        mean = result[key]["mean"]
        shown = f"{mean:.3f}" if mean is not None else "n/a"
        lines.append(f"| {key} | {shown} | {result[key]['impossible']} |")
    if "gap_mean" in result:
        lines += [
            "",
            f"prefix-true minus renormalized: mean {result['gap_mean']:+.4f}, median {result['gap_median']:+.4f} "
            f"nats; higher on {result['prefix_true_higher']} calls, lower on {result['prefix_true_lower']}.",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
