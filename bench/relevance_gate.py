"""A relevance gate alone (``toolgrammar.evaluate.relevance``): does it let steering act where a tool fits, and only
there?

    nice -n 15 .venv/bin/python bench/relevance_gate.py     # pmi, items 5-44: bench/results/relevance-gate-pmi-<date>.*
    nice -n 15 .venv/bin/python bench/relevance_gate.py --method question
    nice -n 15 .venv/bin/python bench/relevance_gate.py --method pmi+name --start 45 --stop 125
        # each part's verdict is kept; other items: bench/results/relevance-gate-pmi+name-items-45-124-<date>.*
    nice -n 15 .venv/bin/python bench/relevance_gate.py --start 5 --stop 10 --no-write   # a smoke run

Items: BFCL v4 (the installed ``bfcl-eval`` data, found as :func:`toolgrammar.evaluate.bfcl.locate_data` finds it),
``irrelevance`` (no function fits: the gate should say no) and ``simple_python``, ``multiple``, ``live_simple``
(one function fits: it should say yes); items ``--start`` to ``--stop - 1`` of each, by default 5 to 44, so none
of the first five items the README's side-by-side table reports. Each item is shown to the gate as
``toolgrammar compare --suite bfcl:...`` shows it: its messages, its functions converted as BFCL converts them for
an OpenAI-style model and loaded as the suite loads them (:func:`toolgrammar.evaluate.bfcl.grammar_tools`), then
``ToolSet.to_openai()``. The gate's prompts and thresholds are the module's constants, fixed before this was run.

Reported per category: items, how many the gate let through (score >= threshold), accuracy against what the category
wants, and the score distribution; overall accuracy; every item's score in the JSON file. The embedded model
(Qwen2.5-Coder-0.5B-Instruct, CPU) unless ``--model``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolgrammar.evaluate import bfcl  # noqa: E402
from toolgrammar.evaluate.relevance import (  # noqa: E402
    DEFAULT_THRESHOLDS,
    METHODS,
    NEUTRAL_HEADER,
    PMI_HEADER,
    QUESTION,
    RelevanceError,
    RelevanceGate,
    describe_gate,
    gate_methods,
    score_text,
)

CATEGORIES: dict[str, bool] = {"irrelevance": False, "simple_python": True, "multiple": True, "live_simple": True}
"""Category -> whether a tool fits its items (what the gate should answer)."""


def items_for(category: str, start: int, stop: int, data: Any) -> list[tuple[str, list[dict[str, Any]], Any]]:
    """``(id, messages, openai tools)`` of items ``start..stop-1``, as the BFCL suite presents them."""
    out = []
    for item in bfcl.load_category(category, data)[start:stop]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lenient loading's notes: the suite records them, the gate does not care
            toolset, _ = bfcl.grammar_tools(bfcl.to_openai_tools(item.functions, category), mode="schema")
        out.append((item.id, list(item.messages), toolset.to_openai()))
    return out


def score_range(rows: list[dict[str, Any]], parts: tuple[str, ...]) -> str:
    """Median (min-max) of the scores, per method for a combined gate."""

    def one(scores: list[float]) -> str:
        return f"{statistics.median(scores):.2f} ({min(scores):.2f}-{max(scores):.2f})"

    if len(parts) == 1:
        return one([r["score"] for r in rows])
    return "; ".join(f"{m} {one([r['parts'][k]['score'] for r in rows])}" for k, m in enumerate(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--method", default="pmi", help=f"the gate: one of {', '.join(METHODS)}, or several joined by '+' (default pmi)"
    )
    parser.add_argument("--start", type=int, default=5)
    parser.add_argument("--stop", type=int, default=45)
    parser.add_argument("--batch-size", type=int, default=4, help="conversations per forward pass")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    try:
        parts = gate_methods(args.method)
    except RelevanceError as exc:
        parser.error(str(exc))

    from toolgrammar.evaluate.models import load_model

    data = bfcl.locate_data()
    loaded = load_model(args.model)
    gate = RelevanceGate(loaded.model, loaded.tokenizer, method=args.method)
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for category, want in CATEGORIES.items():
        items = items_for(category, args.start, args.stop, data)
        t0 = time.perf_counter()
        verdicts = gate([(messages, tools) for _, messages, tools in items], batch_size=args.batch_size)
        seconds = time.perf_counter() - t0
        results[category] = [
            {"id": item_id, **v.to_dict(), "want": want, "correct": v.relevant == want}
            for (item_id, _, _), v in zip(items, verdicts, strict=True)
        ]
        right = sum(r["correct"] for r in results[category])
        print(f"{category}: {right}/{len(items)} correct ({seconds:.0f} s)", flush=True)
    total_seconds = time.perf_counter() - started

    command = "nice -n 15 .venv/bin/python bench/relevance_gate.py" + (
        "" if args.method == "pmi" else f" --method {args.method}") + (
        "" if (args.start, args.stop, args.model) == (5, 45, "qwen2.5-coder-0.5b") else
        f" --model {args.model} --start {args.start} --stop {args.stop}"
    )  # fmt: skip
    threshold = DEFAULT_THRESHOLDS[args.method] if len(parts) == 1 else None
    prompts = {
        "pmi": f"headers {PMI_HEADER!r} and {NEUTRAL_HEADER!r}",
        "question": f'question "{QUESTION}"',
        "name": "the chat template with the tools, then the hermes call as far as the name",
    }
    described = f"says yes {describe_gate(args.method, threshold)}; " + "; ".join(f"{p}: {prompts[p]}" for p in parts)

    lines = [
        f"# Relevance gate alone: BFCL items {args.start}-{args.stop - 1}",
        "",
        f"- Command: `{command}` ({total_seconds:.0f} s)",
        f"- Model: `{args.model}` ({loaded.source})",
        f"- Data: {data.source}",
        f"- Gate: `toolgrammar.evaluate.relevance`, method `{args.method}`: {described}",
        "- None of these items is in the README's 5-item table (items 0-4).",
        "",
        "| category | want | items | gate says yes | accuracy | score median (min-max) |",
        "|---|---|---:|---:|---:|---|",
    ]
    all_right = all_n = 0
    for category, rows in results.items():
        right = sum(r["correct"] for r in rows)
        yes = sum(r["relevant"] for r in rows)
        all_right, all_n = all_right + right, all_n + len(rows)
        lines.append(
            f"| {category} | {'yes' if CATEGORIES[category] else 'no'} | {len(rows)} | {yes} | "
            f"{right}/{len(rows)} ({right / len(rows):.0%}) | {score_range(rows, parts)} |"
        )
    lines += ["", f"Overall: {all_right}/{all_n} ({all_right / all_n:.0%}) correct.", ""]
    wrong = [(c, r) for c, rows in results.items() for r in rows if not r["correct"]]
    if wrong:
        lines += ["Wrong verdicts:", ""]
        lines += [f"- `{r['id']}` ({c}): score {score_text(r)}" for c, r in wrong]
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        items = "" if (args.start, args.stop) == (5, 45) else f"-items-{args.start}-{args.stop - 1}"
        stem = ROOT / "bench" / "results" / f"relevance-gate-{args.method}{items}-{dt.date.today().isoformat()}"
        stem.with_suffix(".md").write_text(text, encoding="utf-8")
        payload = {
            "command": command,
            "method": args.method,
            "seconds": total_seconds,
            "threshold": threshold,
            "results": results,
        }
        stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
