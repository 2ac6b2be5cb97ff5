"""Call quality per policy on the embedded model: which policy turns the model's intent into the right calls.

    .venv/bin/python bench/quality.py                         # greedy + sampled seeds 0 and 1, all 44 tasks
    .venv/bin/python bench/quality.py --settings greedy       # greedy only (about a fifth of the time)
    .venv/bin/python bench/quality.py --settings greedy --policy "auto, steered"   # one policy (repeatable)
    .venv/bin/python bench/quality.py --resume --out DIR      # continue an interrupted run
    .venv/bin/python bench/quality.py --report-only --out DIR # judge and report what DIR holds
    .venv/bin/python bench/quality.py --settings greedy --backend llama.cpp --model qwen2.5-coder-1.5b

Runs the bundled tasks (default: all 44) on the embedded model (Qwen2.5-Coder-0.5B-Instruct, CPU),
one 256-token turn, under seven generations per setting (greedy; sampled at temperature 0.7, top-p
0.8, top-k 20 with each seed), each judged by the strict parser and the other-shape reader:

| policy | prompt | grammar |
|---|---|---|
| free | the chat template's | none |
| required, prose first | the chat template's | ``tool_choice="required", prose_first=True`` (before call-first) |
| free, opener pre-filled | ... + what the grammar forces | none (the fair free side of call-first ``required``) |
| required, call first | ... + what the grammar forces | ``tool_choice="required"`` |
| auto, steered | the chat template's | ``tool_choice="auto", steer_to_blocks=True`` |
| auto, steered where name fits | the chat template's | the same, ``steer_gate="name"``
(:mod:`toolgrammar.evaluate.relevance`) |
| auto, steered where pmi+name say | the chat template's | the same, ``steer_gate="pmi+name"`` |
| required, call first, prefix-true | ... + what the grammar forces | ``tool_choice="required"``, ``prefix_true=True`` |
| auto, steered, prefix-true | the chat template's | ``tool_choice="auto", steer_to_blocks=True, prefix_true=True`` |
| llama.cpp's own, auto / required | llama-server renders it | llama.cpp's own grammar from the tools (``--backend
llama.cpp`` only) |

With ``--backend llama.cpp`` the model runs from its GGUF in llama-cpp-python (``--model qwen2.5-coder-1.5b`` too);
the gated policies run on transformers only.

Reports per policy: runs with an intended call (a block or another shape), valid calls, errors by
kind, expected tool (valid call; and named in any shape), expected tool + arguments, tokens, time;
and for steering, how many runs whose free twin wrote an other-shape call became valid blocks, and
which prose turns became calls (with examples); and the blocks the budget closed (a value that grew until
the budget ended it: what prefix-true masking, :mod:`toolgrammar.runtime.prefix_true`, is for). Writes
``OUT/generations.jsonl`` as it goes (one line per policy and setting: every run record), then
``OUT/quality.json`` and ``OUT/quality.md``.
Needs the ``compare`` extra (``bash scripts/setup.sh``). Not a timed test: one run of the five ungated
policies takes about an hour on 2 cores; the two gated ones add their gates' passes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolgrammar.evaluate.compare import (
    CompareConfig,
    HFGenerator,
    Task,
    prepare,
    rejudge_run,
    run_mode,
    summarize_side,
)
from toolgrammar.evaluate.compare.llamacpp_generation import LlamaCppGenerator, load_gguf
from toolgrammar.evaluate.models import load_model

POLICIES: dict[str, tuple[dict[str, Any], str]] = {
    "free": ({"tool_choice": "auto", "steer_to_blocks": False}, "free"),
    "required, prose first": (
        {"tool_choice": "required", "prose_first": True, "steer_to_blocks": False},
        "constrained",
    ),
    "free, opener pre-filled": ({"tool_choice": "required", "steer_to_blocks": False}, "free"),
    "required, call first": ({"tool_choice": "required", "steer_to_blocks": False}, "constrained"),
    "auto, steered": ({"tool_choice": "auto", "steer_to_blocks": True}, "constrained"),
    "required, call first, prefix-true": (
        {"tool_choice": "required", "steer_to_blocks": False, "prefix_true": True},
        "constrained",
    ),
    "auto, steered, prefix-true": (
        {"tool_choice": "auto", "steer_to_blocks": True, "prefix_true": True},
        "constrained",
    ),
    "llama.cpp's own, auto": ({"tool_choice": "auto"}, "llama-server"),
    "llama.cpp's own, required": ({"tool_choice": "required"}, "llama-server"),
    "auto, steered where name fits": (
        {"tool_choice": "auto", "steer_to_blocks": True, "steer_gate": "name"},
        "constrained",
    ),
    "auto, steered where pmi+name say": (
        {"tool_choice": "auto", "steer_to_blocks": True, "steer_gate": "pmi+name"},
        "constrained",
    ),
}
"""policy -> (config overrides, side)."""

LLAMA_CPP_ONLY = ("llama.cpp's own, auto", "llama.cpp's own, required")
"""Policies of llama.cpp's own tool-call grammar (llama-server ``--jinja``): ``--backend llama.cpp`` only."""


def _settings(names: list[str], seeds: list[int]) -> list[tuple[str, float, int]]:
    out = []
    for name in names:
        if name == "greedy":
            out.append(("greedy", 0.0, 0))
        elif name == "sampled":
            out += [(f"sampled seed {s}", 0.7, s) for s in seeds]
        else:
            raise SystemExit(f"--settings: unknown setting {name!r} (greedy, sampled)")
    return out


def _policies(chosen: list[str] | None, backend: str) -> list[str]:
    unknown = [p for p in chosen or () if p not in POLICIES]
    if unknown:
        raise SystemExit(f"--policy: unknown {', '.join(map(repr, unknown))}; known: {', '.join(map(repr, POLICIES))}")

    def runs_on(policy: str) -> bool:
        gated = POLICIES[policy][0].get("steer_gate", "none") != "none"
        return not gated if backend == "llama.cpp" else policy not in LLAMA_CPP_ONLY

    if chosen:
        refused = [p for p in chosen if not runs_on(p)]
        if refused:
            raise SystemExit(
                f"--policy {', '.join(map(repr, refused))}: not on --backend {backend} (the relevance gates run on "
                "transformers, llama.cpp's own grammar on llama.cpp)"
            )
        return list(chosen)
    return [p for p in POLICIES if runs_on(p)]


def _done(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
            out[(record["policy"], record["setting"])] = record
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    args.policies = _policies(args.policy, args.backend)
    base = CompareConfig(
        model=args.model, limit=args.limit or None, max_new_tokens=args.max_new_tokens, progress=False,
        mode="strings", format="hermes", backend=args.backend,
    )  # fmt: skip
    tools, tasks = prepare(base)
    loaded: Any = None
    if not args.report_only:
        loaded = load_gguf(base.model) if args.backend == "llama.cpp" else load_model(base.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    generations = out / "generations.jsonl"
    args.resume = args.resume or args.report_only
    done = _done(generations) if args.resume else {}
    settings = _settings(args.settings.split(","), [int(s) for s in args.seeds.split(",")])
    if not args.resume:
        generations.write_text("", encoding="utf-8")
    started = time.perf_counter()
    for setting, temperature, seed in settings:
        for policy, (overrides, side) in POLICIES.items():
            if (policy, setting) in done or args.report_only or policy not in args.policies:
                continue
            config = replace(base, temperature=temperature, **overrides)
            generator = make_generator(loaded, tools, config)
            t0 = time.perf_counter()
            print(f"[{time.perf_counter() - started:7.0f} s] {setting}: {policy} ...", file=sys.stderr, flush=True)
            records, timings = run_mode(
                generator, tasks, mode=side, seed=seed, batch_index=0, tools=tools, config=config,  # type: ignore[arg-type]
                on_step=lambda what, step: None,
            )  # fmt: skip
            record = {
                "policy": policy,
                "setting": setting,
                "temperature": temperature,
                "seed": seed,
                "seconds": time.perf_counter() - t0,
                "timings": timings,
                "runs": [{"task": t.to_dict(), **r} for t, r in zip(tasks, records, strict=True)],
            }
            with open(generations, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            done[(policy, setting)] = record
            close = getattr(generator, "close", None)
            if close is not None:
                close()  # the llama-server its policy started
    source = loaded.source if loaded is not None else f"{base.model} (report of earlier generations)"
    return report(done, tools, [s for s, _, _ in settings], out, base, source)


def make_generator(loaded: Any, tools: Any, config: CompareConfig) -> Any:
    """The backend's generator of one policy on the model loaded once."""
    if config.backend == "llama.cpp":
        return LlamaCppGenerator(loaded, tools, config)
    return HFGenerator(loaded, tools, config)


def report(
    done: dict[tuple[str, str], dict[str, Any]],
    tools: Any,
    settings: list[str],
    out: Path,
    base: CompareConfig,
    source: str,
) -> dict[str, Any]:
    tool_names = tools.names
    for record in done.values():  # every run judged by the current judge, whenever it was generated
        record["runs"] = [
            {"task": run["task"], **rejudge_run(run, Task(**run["task"]), tools, base)} for run in record["runs"]
        ]
    summaries: dict[str, Any] = {}
    for policy in POLICIES:
        records = [r for s in settings if (policy, s) in done for r in done[(policy, s)]["runs"]]
        timings = [t for s in settings if (policy, s) in done for t in done[(policy, s)]["timings"]]
        if records:
            summaries[policy] = summarize_side(records, timings, tool_names)
    steering = _steering(done, settings)
    result = {"settings": settings, "summaries": summaries, "steering": steering, "model_source": source,
              "max_new_tokens": base.max_new_tokens}  # fmt: skip
    (out / "quality.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    markdown = markdown_report(result)
    (out / "quality.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return result


def _steering(done: dict[tuple[str, str], dict[str, Any]], settings: list[str]) -> dict[str, Any]:
    """Free twin vs steered run, task by task: other-shape calls that became blocks, prose that became calls."""
    other_shape, converted, prose, prose_to_call, examples, lost = 0, 0, 0, 0, [], []
    for setting in settings:
        free, steered = done.get(("free", setting)), done.get(("auto, steered", setting))
        if not free or not steered:
            continue
        for a, b in zip(free["runs"], steered["runs"], strict=True):
            became_call = b["valid_calls"] > 0
            if a["other_shape_calls"]:
                other_shape += 1
                converted += became_call
                if not became_call:
                    lost.append({"setting": setting, "task": a["task"]["id"], "free": a["turns"][0]["text"][:160]})
            elif not a["blocks"]:
                prose += 1
                if became_call:
                    prose_to_call += 1
                    examples.append({
                        "setting": setting, "task": a["task"]["id"], "free": a["turns"][0]["text"][:200],
                        "steered": b["turns"][0]["text"][:200],
                    })  # fmt: skip
    return {
        "free_runs_with_other_shape_call": other_shape,
        "of_those_valid_blocks_when_steered": converted,
        "free_prose_runs": prose,
        "of_those_calls_when_steered": prose_to_call,
        "prose_to_call_examples": examples,
        "other_shape_not_converted": lost,
    }


def _rate(hits: int, n: int) -> str:
    return f"{hits}/{n} ({hits / n:.0%})" if n else "n/a"


def markdown_report(result: dict[str, Any]) -> str:
    s = result["summaries"]
    lines = [
        f"Settings: {', '.join(result['settings'])}; {result['max_new_tokens']} tokens, one turn. "
        f"Model: {result['model_source']}.",
        "",
        "| policy | runs | intended call | valid calls | errors (calls that cannot run) | expected tool, valid call | "
        "expected tool, any shape | expected tool + arguments, valid call | ... any shape | blocks the budget closed | "
        "tokens | time (s) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, m in s.items():
        kinds = ", ".join(f"{k} {v}" for k, v in m["intended_error_kinds"].items()) or "0"
        inner = ", ".join(f"{k} {v}" for k, v in m["other_shape_inner_kinds"].items())
        if inner:
            kinds += f" (inside other shapes: {inner})"
        unclosed = ", ".join(f"{k} {v}" for k, v in m["unclosed_inner_kinds"].items())
        if unclosed:
            kinds += f" (inside truncated blocks: {unclosed}; valid {m['unclosed_valid_inside']})"
        lines.append(
            f"| {policy} | {m['runs']} | {m['runs_with_intended_call']} | {m['valid_calls']} | "
            f"{m['intended_errors']}: {kinds} | "
            f"{_rate(m['expected_tool_hits'], m['expected_tool_tasks'])} | "
            f"{_rate(m['expected_tool_any_shape_hits'], m['expected_tool_tasks'])} | "
            f"{_rate(m['expected_arguments_hits'], m['expected_arguments_tasks'])} | "
            f"{_rate(m['expected_arguments_any_shape_hits'], m['expected_arguments_tasks'])} | "
            f"{m['budget_closed_blocks']} | {m['tokens']:,} | {m['generate_seconds']:.0f} |"
        )
    st = result["steering"]
    if not st["free_runs_with_other_shape_call"] and not st["free_prose_runs"]:
        return "\n".join(lines) + "\n"  # the free and steered policies were not both run
    lines += [
        "",
        f"Steering: of {st['free_runs_with_other_shape_call']} runs whose free twin wrote an other-shape call, "
        f"{st['of_those_valid_blocks_when_steered']} became valid blocks when steered "
        f"({_rate(st['of_those_valid_blocks_when_steered'], st['free_runs_with_other_shape_call'])}); of "
        f"{st['free_prose_runs']} free prose runs (no intended call), {st['of_those_calls_when_steered']} "
        "became calls.",
    ]
    for example in st["prose_to_call_examples"][:5]:
        lines.append(f"- `{example['task']}` ({example['setting']}): free {example['free']!r} -> steered "
                     f"{example['steered']!r}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="greedy,sampled", help="greedy, sampled, or both (comma-separated)")
    parser.add_argument("--seeds", default="0,1", help="seeds of the sampled setting")
    parser.add_argument("--limit", type=int, default=0, help="first N tasks (0: all 44)")
    parser.add_argument(
        "--policy", action="append", help=f"run only this policy (repeatable; default all: {', '.join(POLICIES)})"
    )
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument(
        "--backend",
        choices=("transformers", "llama.cpp"),
        default="transformers",
        help="transformers (the de-quantized model) or llama.cpp (the model's GGUF; adds llama.cpp's own grammar, "
        "needs scripts/llama-server.sh; no relevance gates)",
    )
    parser.add_argument(
        "--model", default="qwen2.5-coder-0.5b", help="qwen2.5-coder-0.5b, or with llama.cpp qwen2.5-coder-1.5b"
    )
    parser.add_argument("--out", default=f"bench/results/quality-{time.strftime('%Y-%m-%d')}")
    parser.add_argument("--resume", action="store_true", help="keep the generations already in OUT")
    parser.add_argument("--report-only", action="store_true", help="generate nothing: judge and report what OUT holds")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
