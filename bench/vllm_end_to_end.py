"""End to end on one vLLM OpenAI server: no constraint, vLLM's xgrammar with toolgrammar's structural tag, the plugin.

Run by hand in the vLLM environment (``scripts/test-vllm.sh`` builds it; ``bash scripts/main.sh`` provisions the
embedded model into toolgrammar's cache)::

    VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python bench/vllm_end_to_end.py

Starts the README's server command (``--tool-call-parser toolgrammar_hermes``, the processor named with
``--logits-processors``, plus ``--enable-per-request-metrics``) on the embedded model (Qwen2.5-Coder-0.5B-Instruct,
bfloat16) and sends the same Chat Completions requests (the first turn of a bundled task, the bundled tools,
greedy, ``max_tokens`` 256 unless ``--max-tokens``, streamed) three ways:

``unconstrained``
    ``tool_choice="none"``. vLLM runs no tool parser's ``adjust_request`` for such a request, so the plugin adds no
    constraint; the server keeps the tools in the prompt (it runs without ``--exclude-tools-when-tool-choice-none``),
    so the prompt is the one the other two ways send, token for token (checked: ``prompt_tokens`` per task). Every
    request with ``tool_choice`` ``auto``, ``required`` or a name goes through the plugin on this server, and the
    plugin has no per-request opt-out.
``structural_tag``
    ``tool_choice="none"`` and ``extra_body={"structured_outputs": {"structural_tag": TAG}}``: vLLM's own
    structured outputs (``auto`` backend, which picks xgrammar for a structural tag) enforcing
    toolgrammar's turn grammar as a structural tag (:func:`toolgrammar.integrations.vllm.turn_structural_tag` of
    the very spec the plugin builds for the request). ``tool_choice="none"`` again because the plugin refuses
    ``structured_outputs`` next to its own constraint (HTTP 400).
``plugin``
    ``tool_choice="auto"``: the plugin's parser builds the constraint from the request's tools and the processor
    enforces it (the budget included); the server returns ``tool_calls``.

With ``--tool-choice required`` the plugin's requests say ``tool_choice="required"`` and the structural tag is built
for that policy (the turn is the call), so both constrained ways write blocks and their cost inside a call is
measured; the unconstrained way is unchanged. Qwen2.5-Coder-0.5B, unsteered, writes its calls as fenced or bare JSON
rather than blocks, so under ``auto`` the two constraints only ever see free text. Written to
``vllm-end-to-end-required-<date>.*``.

The first two ways get the model's turn as ``content``; this script reads every way's turn the same way: the
streamed token ids (``return_token_ids``) decoded, then toolgrammar's strict parser (valid calls, blocks with
errors) and ``jsonschema`` on every valid call. For the plugin it also checks that the server's ``tool_calls`` are
the calls the strict parser reads. Expected tool (+ arguments): the first valid call against the bundled task's
``expected_tool`` / ``expected_arguments``, judged as ``bench/quality.py`` judges them.

Loads: (a) sequential: every task's first turn (``--limit N``: the first N tasks) one request at a time, the three
ways interleaved per task (task i: the ways in an order rotated by i); (b) concurrent: a batch of ``--batch`` (32)
requests (the first bundled tasks, cycled) sent at once, one batch per way, the ways' order rotated per round,
``--rounds`` rounds. First an untimed warm-up batch per way (``--warm-up``, 8 requests at once: grammar compiles and
first visits of masks stay out of the timings). Every pass gets its own ``cache_salt``, so no request reads a prompt
another way's pass put into vLLM's prefix cache (within a pass the shared system prompt and tools are cached).

Measures, from the stream, per request: time to first token (request sent to the first chunk, which vLLM sends as
soon as the first token is out), output tokens per second ((completion tokens - 1) / (last chunk - first chunk)),
and the server's own per-request metrics (time from scheduling to the first token, mean inter-token latency). Per
way and load: the medians, aggregate tokens/s (completion tokens of the pass / its wall time; sequential: the sum of
the way's request times), the ratios to unconstrained (of the medians, and the median of per-task ratios), and the
calls' validity. Writes ``bench/results/vllm-end-to-end-<date>.md`` and ``.json`` (machine, versions, every response)
unless ``--no-write``.

Options: ``--limit N``, ``--batch N``, ``--rounds N``, ``--max-tokens N``, ``--warm-up N``, ``--tool-choice
auto|required``, ``--no-sequential``, ``--no-concurrent``, ``--model DIR``, ``--no-write``, and
``--time-processor``: the server runs a subclass of the processor (:func:`timed_processor`, named in its place) that
times ``apply`` per step and ``update_state`` inside the engine, and this process times the plugin's front end on the
same requests and turns (the parser's ``adjust_request``, its streaming reader per token). The full run in
docs/performance.md uses ``--max-tokens 128`` (about 22 minutes on 2 cores; 256 would take about 35).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import machine_info, write_results
from vllm_server_steering import STARTUP_GRACE_S, server_command

WAYS = ("unconstrained", "structural_tag", "plugin")
LOG_NAME = "toolgrammar-vllm-end-to-end.log"
TIMES_ENV = "TOOLGRAMMAR_E2E_PROCESSOR_TIMES"
"""With ``--time-processor``: the file the server's processor writes its timings to."""
_TIMED: list[type] = []


def __getattr__(name: str) -> Any:
    # The server resolves ``--logits-processors vllm_end_to_end:TimedProcessor`` through this (``--time-processor``).
    if name == "TimedProcessor":
        return timed_processor()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def timed_processor() -> type:
    """toolgrammar's processor with ``apply`` and ``update_state`` timed (``--time-processor``).

    The methods are wrapped on the class itself, so whichever copy is active (the entry point's or the named one)
    is timed. Per batch size (the processor's rows), the steps and their nanoseconds; per ``update_state``, the
    requests added and its nanoseconds. Written to the file :data:`TIMES_ENV` names, after every ``update_state``
    that adds requests and every 20 steps.
    """
    if _TIMED:
        return _TIMED[0]
    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor as base

    apply, update = base.apply, base.update_state
    path = Path(os.environ[TIMES_ENV])
    stats: dict[str, Any] = {"apply": {}, "update_state": []}
    steps = [0]

    def dump() -> None:
        path.write_text(json.dumps(stats), encoding="utf-8")

    def timed_apply(self: Any, logits: Any) -> Any:
        if not self.active or not self.rows:
            return apply(self, logits)
        rows = len(self.rows)
        t = time.perf_counter_ns()
        out = apply(self, logits)
        entry = stats["apply"].setdefault(str(rows), [0, 0])
        entry[0] += 1
        entry[1] += time.perf_counter_ns() - t
        steps[0] += 1
        if steps[0] % 20 == 0:
            dump()
        return out

    def timed_update(self: Any, batch_update: Any) -> None:
        t = time.perf_counter_ns()
        try:
            update(self, batch_update)
        finally:
            if self.active and batch_update is not None and batch_update.added:
                stats["update_state"].append([len(batch_update.added), time.perf_counter_ns() - t])
                dump()

    base.apply = timed_apply
    base.update_state = timed_update
    _TIMED.append(type("TimedProcessor", (base,), {"__module__": __name__}))
    return _TIMED[0]


def plugin_runs(loads: dict[str, Any]) -> list[dict[str, Any]]:
    """The plugin's answered requests of every load."""
    return [r for load in loads.values() for r in load["ways"]["plugin"]["runs"] if "error" not in r]


def front_end_times(bench: Bench, tasks: list[Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The plugin's work in the server's front end, timed here on the same requests and turns (``--time-processor``):
    the parser's ``adjust_request`` per request (the constraint built and checked; the first one, which compiles,
    apart) and its streaming reader per token, fed the plugin's own turns token by token."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from toolgrammar.integrations.serving import StreamingCallExtractor, compiled_turn
    from toolgrammar.integrations.vllm_tool_parser import PARSER_CLASSES

    parser = next(cls for cls in PARSER_CLASSES.values() if cls.format_name == "hermes")
    adjust = []
    for task in tasks:
        kwargs = bench.request("plugin", task, "front-end")
        fields = {k: v for k, v in kwargs.items() if k not in ("stream", "stream_options", "extra_body")}
        request = ChatCompletionRequest(**fields)
        t = time.perf_counter_ns()
        parser(bench.tokenizer, None).adjust_request(request)
        adjust.append(time.perf_counter_ns() - t)
    feed = []
    for run in runs:
        reader = StreamingCallExtractor(
            compiled_turn(bench._spec(bench.messages(next(t for t in tasks if t.id == run["task"])))).tools,
            format="hermes",
            stream_arguments=True,
        )
        for token in run["token_ids"]:
            piece = bench.tokenizer.decode([token], skip_special_tokens=False)
            t = time.perf_counter_ns()
            reader.feed(piece)
            feed.append(time.perf_counter_ns() - t)
        reader.finish()
    return {
        "adjust_request_first_ms": adjust[0] / 1e6 if adjust else None,
        "adjust_request_p50_ms": _median([a / 1e6 for a in adjust[1:]]),
        "stream_feed_mean_us": statistics.mean(feed) / 1000 if feed else None,
        "stream_feed_p50_us": _median([f / 1000 for f in feed]),
        "tokens_fed": len(feed),
    }


def processor_times(path: Path) -> dict[str, Any] | None:
    """The timings a ``--time-processor`` server wrote (:func:`summarize_times`), or ``None``."""
    try:
        return summarize_times(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError):
        return None


def summarize_times(stats: dict[str, Any]) -> dict[str, Any]:
    """Mean ``apply`` per step by rows (buckets); ``update_state`` totals, the longest call (the plugin's first
    request, whose grammar it compiles) apart."""
    buckets = {"1": (1, 1), "2-8": (2, 8), "9-24": (9, 24), "25-32": (25, 32), "33+": (33, 10**9)}
    out: dict[str, Any] = {"raw": stats, "apply_us_per_step": {}}
    for name, (lo, hi) in buckets.items():
        calls = sum(c for rows, (c, _) in stats["apply"].items() if lo <= int(rows) <= hi)
        ns = sum(n for rows, (_, n) in stats["apply"].items() if lo <= int(rows) <= hi)
        if calls:
            out["apply_us_per_step"][name] = {"steps": calls, "mean_us": ns / calls / 1000}
    calls = sorted(stats["update_state"], key=lambda call: call[1])
    later = calls[:-1]
    out["update_state"] = {
        "longest_ms": calls[-1][1] / 1e6 if calls else None,
        "calls": len(later),
        "requests_added": sum(added for added, _ in later),
        "ms": sum(ns for _, ns in later) / 1e6,
        "max_ms": max((ns for _, ns in later), default=0) / 1e6,
    }
    return out


def served(command: list[str], timed: bool) -> list[str]:
    """The README's server command with per-request metrics (and, timed, the processor's timed subclass)."""
    command = [str(part) for part in command]
    if timed:
        command[command.index("--logits-processors") + 1] = "vllm_end_to_end:TimedProcessor"
    return [*command, "--enable-per-request-metrics"]


def shown_command(model: Path, timed: bool) -> list[str]:
    """The server command as started, its free port written ``PORT``."""
    command = served(server_command(model, 0), timed)
    command[command.index("--port") + 1] = "PORT"
    return command


def rotated(i: int) -> tuple[str, ...]:
    """The three ways, starting at way ``i % 3``: each way goes first, second and third equally often."""
    k = i % len(WAYS)
    return WAYS[k:] + WAYS[:k]


class Bench:
    """The server's client, the tools, the structural tag, and how to send and judge one request."""

    def __init__(
        self, client: Any, model: str, tokenizer: Any, tools: Any, config: Any, max_tokens: int, tool_choice: str
    ) -> None:
        from toolgrammar.evaluate.compare.running import initial_messages
        from toolgrammar.integrations.serving import compiled_turn, constraint_spec, prompt_reasoning
        from toolgrammar.integrations.vllm import turn_structural_tag

        self.client, self.model, self.tokenizer, self.tools, self.config = client, model, tokenizer, tools, config
        self.max_tokens = max_tokens
        self.tool_choice = tool_choice
        self.openai_tools = tools.to_openai()
        self.messages = lambda task: initial_messages(task, config)
        self.end_ids = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        self.tags: dict[str, str] = {}
        self._spec = lambda messages: constraint_spec(
            self.openai_tools,
            format="hermes",
            tool_choice=tool_choice,
            parallel_tool_calls=None,
            reasoning=prompt_reasoning(tokenizer, messages, format="hermes", tools=self.openai_tools),
        )
        self._tag = lambda spec: json.dumps(turn_structural_tag(compiled_turn(spec)), ensure_ascii=False)

    def tag(self, task: Any) -> str:
        """The structural tag of the spec the plugin builds for this request (one per distinct spec)."""
        spec = self._spec(self.messages(task))
        key = json.dumps(spec, sort_keys=True)
        if key not in self.tags:
            self.tags[key] = self._tag(spec)
        return self.tags[key]

    def request(self, way: str, task: Any, salt: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"return_token_ids": True, "cache_salt": salt}
        if way == "structural_tag":
            extra["structured_outputs"] = {"structural_tag": self.tag(task)}
        return {
            "model": self.model,
            "messages": self.messages(task),
            "tools": self.openai_tools,
            "tool_choice": self.tool_choice if way == "plugin" else "none",
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": extra,
        }

    def send(self, way: str, task: Any, salt: str, origin: float) -> dict[str, Any]:
        """One streamed request: its timings, tokens, text and the server's calls (never raises)."""
        kwargs = self.request(way, task, salt)
        sent = time.perf_counter()
        record: dict[str, Any] = {"task": task.id, "way": way, "sent_s": sent - origin}
        first = last = None
        ids: list[int] = []
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        try:
            for chunk in self.client.chat.completions.create(**kwargs):
                now = time.perf_counter()
                extra = chunk.model_extra or {}
                if chunk.usage is not None:
                    record["completion_tokens"] = chunk.usage.completion_tokens
                    record["prompt_tokens"] = chunk.usage.prompt_tokens
                if extra.get("metrics"):
                    record["server_metrics"] = extra["metrics"]
                if not chunk.choices:
                    continue
                first = now if first is None else first
                last = now
                choice = chunk.choices[0]
                ids.extend((choice.model_extra or {}).get("token_ids") or [])
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                for tc in delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                    if tc.function is not None:
                        call["name"] += tc.function.name or ""
                        call["arguments"] += tc.function.arguments or ""
                if choice.finish_reason:
                    record["finish"] = choice.finish_reason
        except Exception as error:  # a failed request is a result, not a crash of the bench
            record["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        done = time.perf_counter()
        record["e2e_s"] = done - sent
        record["ttft_s"] = None if first is None else first - sent
        record["decode_s"] = None if first is None or last is None else last - first
        tokens = record.get("completion_tokens", len(ids))
        record["completion_tokens"] = tokens
        decode = record["decode_s"]
        record["tok_s"] = (tokens - 1) / decode if decode and tokens > 1 else None
        while ids and ids[-1] in self.end_ids:
            ids.pop()
        record["token_ids"] = ids
        record["text"] = self.tokenizer.decode(ids, skip_special_tokens=False)
        record["content"] = "".join(content) or None
        record["server_calls"] = [calls[i] for i in sorted(calls)]
        return {**record, **self.judge(record, task)}

    def judge(self, record: dict[str, Any], task: Any) -> dict[str, Any]:
        """The turn read by the strict parser; every valid call checked with jsonschema; the expected tool."""
        import jsonschema

        from toolgrammar.evaluate.compare.judging import arguments_match, parse_and_judge_turn

        _, verdict = parse_and_judge_turn(record["text"], self.tools, self.config)
        blocks = verdict["parse"]["blocks"]
        calls = verdict["parse"]["tool_calls"]
        schemas = {t.name: t.parameters for t in self.tools}
        invalid = []
        for call in calls:
            try:
                jsonschema.validate(call["arguments"], schemas[call["name"]])
            except (KeyError, jsonschema.ValidationError) as error:
                invalid.append(f"{call['name']}: {type(error).__name__}: {str(error)[:200]}")
        first = calls[0] if calls else None
        tool_hit = None if task.expected_tool is None else bool(first and first["name"] == task.expected_tool)
        arguments_hit = None
        if task.expected_tool is not None and task.expected_arguments is not None:
            arguments_hit = bool(tool_hit and first and arguments_match(task.expected_arguments, first["arguments"]))
        out: dict[str, Any] = {
            "calls": calls,
            "blocks": len(blocks),
            "block_errors": [b["error"]["kind"] for b in blocks if b["call"] is None],
            "schema_invalid": invalid,
            "tool_hit": tool_hit,
            "arguments_hit": arguments_hit,
            "other_shape_calls": len(verdict["other_shape_calls"]),
        }
        if record["way"] == "plugin" and "error" not in record:
            try:
                server = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in record["server_calls"]]
            except json.JSONDecodeError:
                server = None
            out["server_calls_match"] = server == calls
        return out


# ------------------------------------------------------------------------------------------ the loads


def warm_up(bench: Bench, batch: list[Any]) -> dict[str, Any]:
    """One untimed concurrent batch per way: compiles, first visits, the shared prefix in each way's cache."""
    out = {}
    for way in WAYS:
        print(f"  warm-up {way} ...", file=sys.stderr, flush=True)
        origin = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            runs = list(pool.map(lambda t, w=way, o=origin: bench.send(w, t, f"warm-{w}", o), batch))
        out[way] = {"wall_s": time.perf_counter() - origin, "runs": runs}
    return out


def sequential(bench: Bench, tasks: list[Any]) -> dict[str, Any]:
    """Every task once per way, one request at a time, the ways interleaved per task in rotating order."""
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    origin = time.perf_counter()
    for i, task in enumerate(tasks):
        for position, way in enumerate(rotated(i)):
            record = bench.send(way, task, f"seq-{way}", origin)
            record["position"] = position
            runs[way].append(record)
        if (i + 1) % 5 == 0 or i + 1 == len(tasks):
            print(f"  sequential {i + 1}/{len(tasks)} ({time.perf_counter() - origin:.0f} s)", file=sys.stderr)
    return {
        "wall_s": time.perf_counter() - origin,
        "ways": {way: {"wall_s": sum(r["e2e_s"] for r in rs), "runs": rs} for way, rs in runs.items()},
    }


def concurrent(bench: Bench, batch: list[Any], rounds: int) -> dict[str, Any]:
    """``rounds`` rounds; each sends the batch at once per way, one way after the other in rotating order."""
    ways: dict[str, dict[str, Any]] = {way: {"wall_s": 0.0, "batches": [], "runs": []} for way in WAYS}
    origin = time.perf_counter()
    for r in range(rounds):
        for position, way in enumerate(rotated(r)):
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                runs = list(pool.map(lambda t, w=way, r=r: bench.send(w, t, f"r{r}-{w}", origin), batch))
            wall = time.perf_counter() - started
            for record in runs:
                record.update(round=r, position=position)
            ways[way]["wall_s"] += wall
            ways[way]["batches"].append({"round": r, "position": position, "wall_s": wall,
                                         "tokens": sum(x["completion_tokens"] for x in runs)})  # fmt: skip
            ways[way]["runs"].extend(runs)
            print(f"  concurrent round {r + 1}/{rounds} {way}: {wall:.0f} s", file=sys.stderr, flush=True)
    return {"wall_s": time.perf_counter() - origin, "ways": ways}


# ------------------------------------------------------------------------------------------ the numbers


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _quantile(values: list[float | None], q: float) -> float | None:
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return None
    return kept[min(len(kept) - 1, round(q * (len(kept) - 1)))]


def _server(run: dict[str, Any], key: str) -> float | None:
    value = (run.get("server_metrics") or {}).get(key)
    return None if value is None else value / 1000


def summarize(load: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per way: timings, their ratios to unconstrained (of the medians, and per-task medians), validity."""
    base = {(r["task"], r.get("round")): r for r in load["ways"]["unconstrained"]["runs"]}
    tagged = {(r["task"], r.get("round")): r for r in load["ways"]["structural_tag"]["runs"]}
    out = {}
    for way, side in load["ways"].items():
        runs = side["runs"]
        ok = [r for r in runs if "error" not in r]
        tokens = sum(r["completion_tokens"] for r in ok)
        tool = [r["tool_hit"] for r in ok if r["tool_hit"] is not None]
        args = [r["arguments_hit"] for r in ok if r["arguments_hit"] is not None]
        pairs = [(r, base.get((r["task"], r.get("round")))) for r in ok]
        pairs = [(r, b) for r, b in pairs if b is not None and "error" not in b]
        out[way] = {
            "requests": len(runs),
            "failed": len(runs) - len(ok),
            "failures": sorted({r["error"] for r in runs if "error" in r}),
            "ttft_p50_s": _median([r["ttft_s"] for r in ok]),
            "ttft_p90_s": _quantile([r["ttft_s"] for r in ok], 0.9),
            "server_ttft_p50_s": _median([_server(r, "time_to_first_token_ms") for r in ok]),
            "server_queue_p50_s": _median([_server(r, "queue_time_ms") for r in ok]),
            "tok_s_p50": _median([r["tok_s"] for r in ok]),
            "server_itl_p50_s": _median([_server(r, "mean_itl_ms") for r in ok]),
            "tokens": tokens,
            "wall_s": side["wall_s"],
            "aggregate_tok_s": tokens / side["wall_s"] if side["wall_s"] else None,
            "paired_ttft_ratio_p50": _median(
                [r["ttft_s"] / b["ttft_s"] for r, b in pairs if r["ttft_s"] and b["ttft_s"]]
            ),
            "paired_tok_s_ratio_p50": _median([r["tok_s"] / b["tok_s"] for r, b in pairs if r["tok_s"] and b["tok_s"]]),
            "same_tokens_as_unconstrained": sum(r["token_ids"] == b["token_ids"] for r, b in pairs),
            "same_tokens_as_structural_tag": sum(
                r["token_ids"] == tagged[(r["task"], r.get("round"))]["token_ids"]
                for r in ok
                if (r["task"], r.get("round")) in tagged
            ),
            "prompt_tokens_differ": sum(r.get("prompt_tokens") != b.get("prompt_tokens") for r, b in pairs),
            "with_valid_call": sum(bool(r["calls"]) for r in ok),
            "valid_calls": sum(len(r["calls"]) for r in ok),
            "schema_invalid_calls": sum(len(r["schema_invalid"]) for r in ok),
            "blocks": sum(r["blocks"] for r in ok),
            "blocks_with_errors": sum(len(r["block_errors"]) for r in ok),
            "block_error_kinds": sorted({k for r in ok for k in r["block_errors"]}),
            "other_shape_in_content": sum(bool(r["other_shape_calls"]) for r in ok),
            "expected_tool": [sum(tool), len(tool)],
            "expected_arguments": [sum(args), len(args)],
            "cut_by_budget": sum(r.get("finish") == "length" for r in ok),
            "server_calls_mismatch": sum(r.get("server_calls_match") is False for r in ok),
        }
    unc = out["unconstrained"]
    for s in out.values():
        s["ttft_ratio"] = _ratio(s["ttft_p50_s"], unc["ttft_p50_s"])
        s["tok_s_ratio"] = _ratio(s["tok_s_p50"], unc["tok_s_p50"])
        s["aggregate_ratio"] = _ratio(s["aggregate_tok_s"], unc["aggregate_tok_s"])
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    versions = ", ".join(f"{name} {version}" for name, version in env["versions"].items() if version)
    lines = [
        f"# End to end on a vLLM server: no constraint, xgrammar + toolgrammar's structural tag, the plugin "
        f"({results['date']})",
        "",
        f"Machine: {env['cpu']}, {env['nproc']} cores, no GPU; {versions}; commit {env['git']}. "
        f"Model: {results['model']}. Produced by `{results['command']}`; server start-up {results['startup_s']:.0f} s, "
        f"whole run {results['wall_s'] / 60:.1f} min.",
        f"Requests: the first turn of a bundled task with the bundled tools, greedy, `max_tokens` "
        f"{results['max_tokens']}, streamed; the plugin's `tool_choice` and the structural tag's policy: "
        f"`{results['tool_choice']}` (unconstrained: `none`). Sequential: {results['tasks']} tasks one at a time, the "
        f"ways interleaved per task; concurrent: {results['batch']} requests at once, {results['rounds']} round(s), "
        f"the ways' order rotated per round. First an untimed warm-up batch of {results['warm_up_requests']} per way.",
        "",
        "TTFT: request sent to the first streamed chunk (client side); server TTFT: scheduled to first token "
        "(vLLM's per-request metrics). tok/s: per request, (completion tokens - 1) / (last chunk - first chunk), "
        "median; aggregate: completion tokens of the pass / its wall time. Ratios to unconstrained: of the medians, "
        "then [the median of per-task ratios].",
        "",
        "| load | way | TTFT p50 | TTFT p90 | server TTFT p50 | TTFT ratio | tok/s p50 | tok/s ratio | aggregate tok/s "
        "| aggregate ratio | tokens | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for load, summary in results["summary"].items():
        for way, s in summary.items():
            lines.append(
                f"| {load} | {way} | {_f(s['ttft_p50_s'] and s['ttft_p50_s'] * 1000, '.0f')} ms "
                f"| {_f(s['ttft_p90_s'] and s['ttft_p90_s'] * 1000, '.0f')} ms "
                f"| {_f(s['server_ttft_p50_s'] and s['server_ttft_p50_s'] * 1000, '.0f')} ms "
                f"| {_f(s['ttft_ratio'], '.2f')} [{_f(s['paired_ttft_ratio_p50'], '.2f')}] "
                f"| {_f(s['tok_s_p50'], '.1f')} "
                f"| {_f(s['tok_s_ratio'], '.2f')} [{_f(s['paired_tok_s_ratio_p50'], '.2f')}] "
                f"| {_f(s['aggregate_tok_s'], '.1f')} | {_f(s['aggregate_ratio'], '.2f')} | {s['tokens']} "
                f"| {s['failed']} |"
            )
    lines += [
        "",
        "| load | way | requests with a valid call | valid calls (jsonschema-invalid) | blocks with errors (kinds) "
        "| expected tool | expected tool + arguments | other-shape call in content | cut by `max_tokens` "
        "| same tokens as unconstrained / as structural tag |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for load, summary in results["summary"].items():
        for way, s in summary.items():
            kinds = f" ({', '.join(s['block_error_kinds'])})" if s["block_error_kinds"] else ""
            lines.append(
                f"| {load} | {way} | {s['with_valid_call']}/{s['requests'] - s['failed']} "
                f"| {s['valid_calls']} ({s['schema_invalid_calls']}) | {s['blocks_with_errors']}{kinds} "
                f"| {s['expected_tool'][0]} of {s['expected_tool'][1]} "
                f"| {s['expected_arguments'][0]} of {s['expected_arguments'][1]} | {s['other_shape_in_content']} "
                f"| {s['cut_by_budget']} | {s['same_tokens_as_unconstrained']} / {s['same_tokens_as_structural_tag']} |"
            )
    notes = []
    for load, summary in results["summary"].items():
        for way, s in summary.items():
            if s["prompt_tokens_differ"]:
                notes.append(f"{load}, {way}: {s['prompt_tokens_differ']} prompt(s) unlike unconstrained's in length.")
            if s["server_calls_mismatch"]:
                notes.append(f"{load}, {way}: {s['server_calls_mismatch']} `tool_calls` unlike the strict parse's.")
            for failure in s["failures"]:
                notes.append(f"{load}, {way}: failed: {failure}")
    timed = results.get("processor_times")
    if timed:
        per_step = ", ".join(
            f"{rows} row(s) {v['mean_us']:.0f} µs ({v['steps']} steps)"
            for rows, v in timed["apply_us_per_step"].items()
        )
        u = timed["update_state"]
        lines += [
            "",
            f"The processor inside the server (`--time-processor`, warm-up included): `apply` per step, by the rows "
            f"it holds: {per_step}; `update_state` where requests join the batch (every way's): {u['ms']:.1f} ms "
            f"in all for {u['requests_added']} requests ({u['calls']} calls, the longest {u['max_ms']:.1f} ms), "
            f"besides the call that compiled the grammar ({_f(u['longest_ms'], '.0f')} ms, in the warm-up).",
        ]
    front = results.get("front_end_times")
    if front:
        lines.append(
            f"The plugin's front end, timed in this process on the same requests and turns: `adjust_request` "
            f"{_f(front['adjust_request_p50_ms'], '.2f')} ms per request at p50 (the first, which compiles, "
            f"{_f(front['adjust_request_first_ms'], '.0f')} ms); the streaming reader "
            f"{_f(front['stream_feed_mean_us'], '.1f')} µs per token on average ({front['tokens_fed']} tokens)."
        )
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded model)")
    parser.add_argument("--limit", type=int, default=0, help="sequential load: the first N bundled tasks (0: all)")
    parser.add_argument("--batch", type=int, default=32, help="concurrent load: the first N tasks (cycled), at once")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrent load (one batch per way each)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--warm-up", type=int, default=8, help="requests of the untimed warm-up batch per way")
    parser.add_argument(
        "--tool-choice",
        choices=("auto", "required"),
        default="auto",
        help="the plugin's tool_choice and the structural tag's policy (unconstrained: always none)",
    )
    parser.add_argument("--no-sequential", action="store_true", help="skip the sequential load")
    parser.add_argument("--no-concurrent", action="store_true", help="skip the concurrent load")
    parser.add_argument(
        "--time-processor",
        action="store_true",
        help="time the processor's apply and update_state inside the server (a subclass named in its place)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the tables, write no files")
    args = parser.parse_args(argv)

    import openai
    from transformers import AutoTokenizer

    from toolgrammar.evaluate.compare import CompareConfig, prepare
    from toolgrammar.evaluate.models import provision_qwen25_coder
    from toolgrammar.testing.vllm_server import ServerError, start_openai_server, stop_server

    started = time.perf_counter()
    model = Path(args.model or provision_qwen25_coder())
    config = CompareConfig(limit=None, max_new_tokens=args.max_tokens, progress=False, format="hermes")
    tools, every = prepare(config)
    tasks = every[: args.limit] if args.limit else every
    batch = [every[i % len(every)] for i in range(args.batch)]
    warm = [every[i % len(every)] for i in range(args.warm_up)]
    tokenizer = AutoTokenizer.from_pretrained(model)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / LOG_NAME
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    times = Path(os.environ.get("TMPDIR", "/tmp")) / "toolgrammar-vllm-end-to-end-processor-times.json"
    if args.time_processor:
        times.unlink(missing_ok=True)
        here = str(Path(__file__).resolve().parent)
        env.update({TIMES_ENV: str(times), "PYTHONPATH": os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))})
    t0 = time.perf_counter()
    try:
        proc, base = start_openai_server(
            lambda port: served(server_command(model, port), args.time_processor), log,
            grace_s=STARTUP_GRACE_S, env=env,
        )  # fmt: skip
    except ServerError as error:
        raise SystemExit(str(error)) from error
    startup = time.perf_counter() - t0
    print(f"server up in {startup:.0f} s (log: {log})", file=sys.stderr, flush=True)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=1800)
    bench = Bench(client, str(model), tokenizer, tools, config, args.max_tokens, args.tool_choice)
    loads: dict[str, Any] = {}
    try:
        print("warm-up ...", file=sys.stderr, flush=True)
        warmed = warm_up(bench, warm)
        if not args.no_sequential:
            print("sequential ...", file=sys.stderr, flush=True)
            before = os.getloadavg()
            loads["sequential"] = sequential(bench, tasks)
            loads["sequential"]["load_average"] = [round(x, 2) for x in (*before, *os.getloadavg())]
        if not args.no_concurrent:
            print("concurrent ...", file=sys.stderr, flush=True)
            before = os.getloadavg()
            loads["concurrent"] = concurrent(bench, batch, args.rounds)
            loads["concurrent"]["load_average"] = [round(x, 2) for x in (*before, *os.getloadavg())]
    finally:
        stop_server(proc)
    # The raw responses first, in case the summary fails: a long run is not lost.
    raw = Path(os.environ.get("TMPDIR", "/tmp")) / "toolgrammar-vllm-end-to-end-raw.json"
    raw.write_text(json.dumps({"warm_up": warmed, "loads": loads}, ensure_ascii=False), encoding="utf-8")
    line = "VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python bench/vllm_end_to_end.py"
    options = (("--limit", args.limit, 0), ("--batch", args.batch, 32), ("--rounds", args.rounds, 3),
               ("--max-tokens", args.max_tokens, 256), ("--warm-up", args.warm_up, 8),
               ("--tool-choice", args.tool_choice, "auto"))  # fmt: skip
    for flag, value, default in options:
        line += f" {flag} {value}" if value != default else ""
    line += " --no-sequential" * args.no_sequential + " --no-concurrent" * args.no_concurrent
    line += " --time-processor" * args.time_processor
    environment = machine_info()
    environment["versions"]["openai"] = importlib.metadata.version("openai")
    results: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "command": line,
        "server_command": shown_command(model, args.time_processor),
        "environment": environment,
        "model": "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M de-quantized, bfloat16 in vLLM)"
        if args.model is None
        else str(model),
        "max_tokens": args.max_tokens,
        "tasks": len(tasks),
        "batch": args.batch,
        "rounds": args.rounds,
        "warm_up_requests": args.warm_up,
        "tool_choice": args.tool_choice,
        "startup_s": startup,
        "structural_tags": list(bench.tags.values()),
        "summary": {name: summarize(load) for name, load in loads.items()},
        "warm_up": warmed,
        "loads": loads,
        "processor_times": processor_times(times) if args.time_processor else None,
        "front_end_times": front_end_times(bench, every, plugin_runs(loads)) if args.time_processor else None,
        "wall_s": time.perf_counter() - started,
    }
    text = markdown(results)
    print(text)
    if not args.no_write:
        stem = "vllm-end-to-end" + ("" if args.tool_choice == "auto" else f"-{args.tool_choice}")
        md, _ = write_results(stem, text, results)
        print(f"wrote {md} and its .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
