"""The real model behind a real vLLM OpenAI server: plain Chat Completions requests, steered or not.

Run by hand in the vLLM environment (``scripts/test-vllm.sh`` builds it)::

    VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python bench/vllm_server_steering.py

Starts the README's server command (``--tool-call-parser toolgrammar_hermes``, the processor named)
on the embedded model (Qwen2.5-Coder-0.5B-Instruct from toolgrammar's cache: run ``bash
scripts/main.sh`` once to provision it), then sends the first turn of every bundled task (44) as a
plain ``chat.completions.create(messages, tools, tool_choice="auto")``, greedy, ``max_tokens`` 256,
eight at a time, twice: unsteered, and steered per request (``extra_body={"vllm_xargs":
{"toolgrammar_steer_to_blocks": true}}``). The server parses each turn with the strict parser into
``tool_calls`` and ``content``; this script checks every returned call against its tool's schema
(``jsonschema``) and reads ``content`` for calls written in another shape (fenced or bare JSON: an
intended call no client can run). Writes ``bench/results/vllm-server-steering-<date>.md`` and ``.json``
(every response) unless ``--no-write``.

Columns: requests answered with ``tool_calls``; calls returned (all must be valid); the expected tool
as the first call, of the tasks that name one; that call with the expected arguments too; requests
whose ``content`` holds an other-shape call; completion tokens; wall time of the pass.

With ``--suite bfcl:CATEGORY,...`` (and ``--limit N`` items of each) the requests are BFCL's items instead,
their functions as tools (mapped as ``toolgrammar compare --suite`` maps them, and loaded leniently by the
server: ``vllm_xargs`` ``toolgrammar_lenient_schemas``), and each answer is scored
with BFCL's rules (:mod:`toolgrammar.evaluate.bfcl`): its ``tool_calls`` as BFCL's Qwen reader reads blocks, and
with the calls in ``content`` read too. ``--against RUNS.jsonl`` (a ``toolgrammar compare --suite`` run of the
same items) counts, per item, whether the steered server's verdict equals that run's constrained one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import machine_info, write_results

STEER_SIDES = {"unsteered": False, "steered": True}
STARTUP_GRACE_S = 900
"""How long the server may take to come up (a liveness guard, not a speed limit)."""


def server_command(model: Path, port: int) -> list[str]:
    """The README's server command, with the embedded model and a context that fits the CPU's KV cache."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--port", str(port),
        "--enable-auto-tool-choice", "--tool-call-parser", "toolgrammar_hermes",
        "--logits-processors", "toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor",
        "--max-model-len", "4096", "--dtype", "bfloat16", "--seed", "0",
    ]  # fmt: skip


def ask(client: Any, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], steer: bool,
        max_tokens: int, *, lenient: bool = False) -> dict[str, Any]:  # fmt: skip
    from toolgrammar.integrations.serving import LENIENT_XARG, STEER_XARG

    reply = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice="auto", temperature=0, max_tokens=max_tokens,
        extra_body={"vllm_xargs": {STEER_XARG: steer, LENIENT_XARG: lenient}},
    )  # fmt: skip
    choice = reply.choices[0]
    calls = [
        {"name": tc.function.name, "arguments": json.loads(tc.function.arguments)}
        for tc in choice.message.tool_calls or []
    ]
    return {
        "content": choice.message.content,
        "calls": calls,
        "finish": choice.finish_reason,
        "tokens": reply.usage.completion_tokens,
    }


def judge(answer: dict[str, Any], task: Any, tools: Any, config: Any) -> dict[str, Any]:
    """The answer's verdicts: calls valid by jsonschema, expected tool / arguments, other-shape calls in content."""
    import jsonschema

    from toolgrammar.evaluate.compare.judging import arguments_match, judge_turn

    schemas = {t.name: t.parameters for t in tools}
    invalid = []
    for call in answer["calls"]:
        try:
            jsonschema.validate(call["arguments"], schemas[call["name"]])
        except (KeyError, jsonschema.ValidationError) as error:
            invalid.append(f"{call['name']}: {type(error).__name__}: {str(error)[:200]}")
    first = answer["calls"][0] if answer["calls"] else None
    tool_hit = None if task.expected_tool is None else bool(first and first["name"] == task.expected_tool)
    arguments_hit = None
    if task.expected_tool is not None and task.expected_arguments is not None:
        arguments_hit = bool(tool_hit and arguments_match(task.expected_arguments, first["arguments"]))
    other = judge_turn(answer["content"] or "", tools, config)["other_shape_calls"]
    return {"invalid": invalid, "tool_hit": tool_hit, "arguments_hit": arguments_hit, "other_shape_calls": other}


def run_side(client: Any, model: str, tasks: list[Any], tools: Any, config: Any, steer: bool,
             max_tokens: int) -> dict[str, Any]:  # fmt: skip
    from toolgrammar.evaluate.compare.running import initial_messages

    openai_tools = tools.to_openai()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda t: ask(client, model, initial_messages(t, config), openai_tools, steer, max_tokens), tasks)
        )
    seconds = time.perf_counter() - started
    runs = [{"task": t.id, **a, **judge(a, t, tools, config)} for t, a in zip(tasks, answers, strict=True)]
    return {"seconds": seconds, "runs": runs}


def summarize(side: dict[str, Any]) -> dict[str, Any]:
    runs = side["runs"]
    tool = [r["tool_hit"] for r in runs if r["tool_hit"] is not None]
    args = [r["arguments_hit"] for r in runs if r["arguments_hit"] is not None]
    return {
        "requests": len(runs),
        "with_tool_calls": sum(bool(r["calls"]) for r in runs),
        "calls": sum(len(r["calls"]) for r in runs),
        "invalid_calls": sum(len(r["invalid"]) for r in runs),
        "expected_tool": [sum(tool), len(tool)],
        "expected_arguments": [sum(args), len(args)],
        "other_shape_in_content": sum(bool(r["other_shape_calls"]) for r in runs),
        "tokens": sum(r["tokens"] for r in runs),
        "seconds": side["seconds"],
    }


def bfcl_plan(suite: str, limit: int) -> list[tuple[Any, Any]]:
    """BFCL's items of the suite's categories (the first ``limit`` of each), with their tools loaded for the grammar
    (:func:`toolgrammar.evaluate.bfcl.grammar_tools`: what ``compare --suite`` loads; its sources are what is sent)."""
    from toolgrammar.evaluate import bfcl
    from toolgrammar.evaluate.bfcl_suite import parse_suite

    plan = []
    for category in parse_suite(suite):
        items = bfcl.load_category(category)
        for item in items[:limit] if limit else items:
            toolset, _ = bfcl.grammar_tools(bfcl.to_openai_tools(item.functions, category), mode="schema")
            plan.append((item, toolset))
    return plan


def bfcl_side(client: Any, model: str, plan: list[tuple[Any, Any]], config: Any, steer: bool,
              max_tokens: int) -> dict[str, Any]:  # fmt: skip
    """Every item once; each answer scored by BFCL's rules, as blocks and with other-shape calls read too."""
    from toolgrammar.evaluate.bfcl_suite import score_turn
    from toolgrammar.evaluate.compare.judging import judge_turn
    from toolgrammar.formats import get_format

    hermes = get_format("hermes")

    def one(entry: tuple[Any, Any]) -> dict[str, Any]:
        item, toolset = entry
        # Many BFCL tools need lenient loading (format "float" on a number, "optional"...), as in compare --suite.
        answer = ask(client, model, list(item.messages), toolset.to_openai(), steer, max_tokens, lenient=True)
        blocks = "\n".join(hermes.render_call(c["name"], c["arguments"]) for c in answer["calls"])
        content = answer["content"] or ""
        turn = {"text": content + ("\n" if content and blocks else "") + blocks,
                "other_shape_calls": judge_turn(content, toolset, config)["other_shape_calls"]}  # fmt: skip
        return {"task": item.id, "category": item.category, **answer, "bfcl": score_turn(item, turn)}

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = list(pool.map(one, plan))
    return {"seconds": time.perf_counter() - started, "runs": runs}


def bfcl_summary(side: dict[str, Any]) -> dict[str, dict[str, int]]:
    by: dict[str, dict[str, int]] = {}
    for r in side["runs"]:
        c = by.setdefault(r["category"], {"items": 0, "right": 0, "right_any_shape": 0, "with_tool_calls": 0})
        c["items"] += 1
        c["right"] += bool(r["bfcl"]["verdict"]["valid"])
        c["right_any_shape"] += bool(r["bfcl"]["any_shape"]["valid"])
        c["with_tool_calls"] += bool(r["calls"])
    return by


def agreement(side: dict[str, Any], against: Path) -> dict[str, int]:
    """Items whose BFCL verdict here equals the constrained verdict of a ``toolgrammar compare --suite`` run.
    Only the items that run steered count: the server has no relevance gate, so an item a gate held back there
    is not comparable."""
    theirs = {}
    for line in against.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        gate = record.get("constrained", {}).get("steer_gate")
        if record.get("type") == "run" and (gate is None or gate["relevant"]):
            theirs[record["task_id"]] = bool(record["constrained"]["bfcl"]["verdict"]["valid"])
    mine = {r["task"]: bool(r["bfcl"]["verdict"]["valid"]) for r in side["runs"]}
    shared = sorted(set(mine) & set(theirs))
    return {"items": len(shared), "same_verdict": sum(mine[t] == theirs[t] for t in shared)}


def _header(results: dict[str, Any], title: str, requests: str) -> list[str]:
    """The report's title, machine, model, command and what was sent."""
    env = results["environment"]
    versions = ", ".join(f"{name} {version}" for name, version in env["versions"].items() if version)
    return [
        f"# {title} ({results['date']})",
        "",
        f"Machine: {env['cpu']}, {env['nproc']} cores; {versions}; commit {env['git']}. Model: {results['model']}. "
        f"Produced by `{results['command']}`; server start-up {results['startup_s']:.0f} s.",
        f'Requests: {requests}, `tool_choice="auto"`, greedy, `max_tokens` {results["max_tokens"]}, eight at a time.',
        "",
    ]


def bfcl_markdown(results: dict[str, Any]) -> str:
    requests = (
        f"BFCL's items ({results['suite']}, the first {results['limit'] or 'all'} of each; accuracy by BFCL's "
        "rules), plain Chat Completions with the items' functions as tools"
    )
    lines = [
        *_header(results, "BFCL through a real vLLM server, the embedded model, steered or not", requests),
        "| category | unsteered | steered | unsteered, calls in `content` read too | steered: with `tool_calls` |",
        "|---|---:|---:|---:|---:|",
    ]
    un, st = results["bfcl"]["unsteered"], results["bfcl"]["steered"]
    total = {"u": 0, "s": 0, "a": 0, "n": 0}
    for category, u in un.items():
        s = st[category]
        lines.append(
            f"| {category} | {u['right']}/{u['items']} | {s['right']}/{s['items']} | "
            f"{u['right_any_shape']}/{u['items']} | {s['with_tool_calls']}/{s['items']} |"
        )
        total["u"] += u["right"]
        total["s"] += s["right"]
        total["a"] += u["right_any_shape"]
        total["n"] += u["items"]
    n = total["n"]
    lines.append(f"| sum | {total['u']}/{n} | {total['s']}/{n} | {total['a']}/{n} | |")
    seconds = {name: side["seconds"] for name, side in results["sides"].items()}
    lines += ["", f"Wall time: unsteered {seconds['unsteered']:.0f} s, steered {seconds['steered']:.0f} s."]
    if "agreement" in results:
        a = results["agreement"]
        lines.append(
            f"Steered verdicts equal to `{results['against']}`'s constrained ones, on the items it steered: "
            f"{a['same_verdict']} of {a['items']} items."
        )
    return "\n".join(lines) + "\n"


def markdown(results: dict[str, Any]) -> str:
    requests = f"the first turn of the {results['tasks']} bundled tasks, plain Chat Completions with the tools"
    lines = [
        *_header(results, "A real vLLM server, the embedded model, steered or not", requests),
        "| requests | with `tool_calls` | calls (invalid) | expected tool | expected tool + arguments "
        "| other-shape call in `content` | tokens | wall time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in results["summary"].items():
        lines.append(
            f"| {name} | {s['with_tool_calls']}/{s['requests']} | {s['calls']} ({s['invalid_calls']}) "
            f"| {s['expected_tool'][0]} of {s['expected_tool'][1]} | {s['expected_arguments'][0]} of "
            f"{s['expected_arguments'][1]} | {s['other_shape_in_content']} | {s['tokens']} | {s['seconds']:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded model)")
    parser.add_argument("--limit", type=int, default=0, help="first N tasks (BFCL: of each category) only (0: all)")
    parser.add_argument("--suite", default=None, help="bfcl:CATEGORY,... : BFCL's items instead of the bundled tasks")
    parser.add_argument("--against", type=Path, default=None, help="with --suite: a compare --suite bfcl-runs.jsonl")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--no-write", action="store_true", help="print the table, write no files")
    args = parser.parse_args(argv)

    import openai

    from toolgrammar.evaluate.compare import CompareConfig, prepare
    from toolgrammar.evaluate.models import provision_qwen25_coder
    from toolgrammar.testing.vllm_server import ServerError, start_openai_server, stop_server

    model = args.model or provision_qwen25_coder()
    config = CompareConfig(limit=args.limit or None, max_new_tokens=args.max_tokens, progress=False, format="hermes")
    if args.against is not None and args.suite is None:
        parser.error("--against needs --suite")
    plan = bfcl_plan(args.suite, args.limit) if args.suite else None
    tools, tasks = prepare(config)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "toolgrammar-vllm-server-steering.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    t0 = time.perf_counter()
    try:
        proc, base = start_openai_server(
            lambda port: server_command(Path(model), port), log, grace_s=STARTUP_GRACE_S, env=env
        )
    except ServerError as error:
        raise SystemExit(str(error)) from error
    startup = time.perf_counter() - t0
    print(f"server up in {startup:.0f} s (log: {log})", file=sys.stderr, flush=True)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=1800)
    sides: dict[str, Any] = {}
    try:
        for name, steer in STEER_SIDES.items():
            print(f"{name} ...", file=sys.stderr, flush=True)
            if plan is not None:
                sides[name] = bfcl_side(client, str(model), plan, config, steer, args.max_tokens)
            else:
                sides[name] = run_side(client, str(model), tasks, tools, config, steer, args.max_tokens)
    finally:
        stop_server(proc)
    date = dt.date.today().isoformat()
    command = "VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python bench/vllm_server_steering.py"
    for flag, value in (("--suite", args.suite), ("--limit", args.limit or None), ("--against", args.against)):
        command += f" {flag} {value}" if value is not None else ""
    results: dict[str, Any] = {
        "date": date,
        "command": command,
        "environment": machine_info(),
        "model": "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M de-quantized, bfloat16 in vLLM)"
        if args.model is None
        else str(model),
        "max_tokens": args.max_tokens,
        "startup_s": startup,
        "sides": sides,
    }
    if plan is not None:
        results.update(suite=args.suite, limit=args.limit, bfcl={n: bfcl_summary(side) for n, side in sides.items()})
        if args.against is not None:
            results.update(against=str(args.against), agreement=agreement(sides["steered"], args.against))
        text = bfcl_markdown(results)
    else:
        results.update(tasks=len(tasks), summary={name: summarize(side) for name, side in sides.items()})
        text = markdown(results)
    print(text)
    if not args.no_write:
        md, _ = write_results(f"vllm-server-steering{'-bfcl' if plan is not None else ''}", text, results)
        print(f"wrote {md} and its .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
