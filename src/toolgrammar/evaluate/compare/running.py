"""Running: conversations batch by batch in both modes, the output directory, resume, and :func:`run_compare`."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toolgrammar.bundled import bundled_tasks_path, bundled_tools_path
from toolgrammar.errors import ToolgrammarError, ToolSchemaError
from toolgrammar.evaluate import models
from toolgrammar.evaluate.compare.config import (
    CONFIG_VERSION,
    LLAMA_SERVER,
    CompareConfig,
    CompareError,
    Mode,
    Task,
    has_matplotlib,
    load_tasks,
    missing_requirements,
)
from toolgrammar.evaluate.compare.generation import Generator, HFGenerator, assistant_opening
from toolgrammar.evaluate.compare.judging import Conversation, parse_and_judge_turn, summarize_run
from toolgrammar.evaluate.compare.progress import progress_bar
from toolgrammar.evaluate.compare.report import Report, markdown_report, summarize, write_chart
from toolgrammar.evaluate.extras import missing_message
from toolgrammar.evaluate.sandbox import Sandbox
from toolgrammar.schema import load_tools


def initial_messages(task: Task, config: CompareConfig) -> list[dict[str, Any]]:
    # a task that brings its conversation (toolgrammar.evaluate.bfcl_suite.BfclTask)
    own = getattr(task, "messages", None)
    if own:
        given = [dict(m) for m in own]
        if config.system_prompt and given[0].get("role") == "system":
            given[0]["content"] = f"{config.system_prompt}\n\n{given[0]['content']}"
        elif config.system_prompt:
            given.insert(0, {"role": "system", "content": config.system_prompt})
        return given
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(s for s in (config.system_prompt, task.system) if s)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": task.prompt})
    return messages


def run_mode(
    generator: Generator,
    batch: list[Task],
    *,
    mode: Mode,
    seed: int,
    batch_index: int,
    tools: Any,
    config: CompareConfig,
    on_step: Callable[[str, int], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All turns of every run of one batch in one mode; returns (run records, timing records).

    The llama-server side sends the conversations themselves (llama.cpp renders them and builds its grammar from
    the tools), with nothing pre-filled: its grammar forces what the policy forces.
    """
    openai_tools = tools.to_openai()
    server_side = mode == LLAMA_SERVER
    opening = "" if server_side else assistant_opening(config, tools)
    conversations = [Conversation(task, initial_messages(task, config)) for task in batch]
    timings: list[dict[str, Any]] = []
    gate, gate_seconds = _gate(generator, conversations, openai_tools, mode=mode, config=config)
    try:
        for turn in range(config.turns):
            active = [c for c in conversations if c.stop is None]
            if not active:
                break
            prompts = [generator.render(c.messages, openai_tools) + opening for c in active]
            turn_seed = seed * 1_000_000 + batch_index * 1_000 + turn
            grammar_before = getattr(generator, "processor_seconds", 0.0)
            started = time.perf_counter()
            extra: dict[str, Any] = {}
            if gate is not None:  # only then: generators without the keyword keep working
                extra["steer_rows"] = [gate[id(c)].relevant for c in active]

            def step(n: int, turn: int = turn) -> None:
                on_step(f"{mode} turn {turn + 1}", n)

            if server_side:
                outputs = generator.llama_server_side().generate(
                    [c.messages for c in active], openai_tools, config, seed=turn_seed, on_step=step
                )
            else:
                outputs = generator.generate(
                    prompts, constrained=mode == "constrained", seed=turn_seed, on_step=step, **extra
                )
            seconds = time.perf_counter() - started
            grammar_seconds = getattr(generator, "processor_seconds", 0.0) - grammar_before
            if len(outputs) != len(active):
                raise CompareError(f"the generator returned {len(outputs)} rows for {len(active)} prompts")
            tokens = sum(o.tokens for o in outputs)
            timings.append(
                {
                    "type": "batch",
                    "seed": seed,
                    "batch": batch_index,
                    "mode": mode,
                    "turn": turn,
                    "rows": len(active),
                    "tokens": tokens,
                    "seconds": seconds,
                    "processor_seconds": grammar_seconds,
                    "torch_seed": turn_seed,
                    **({"gate_seconds": gate_seconds if turn == 0 else 0.0} if gate is not None else {}),
                }
            )
            for conversation, prompt, output in zip(active, prompts, outputs, strict=True):
                text = opening + output.text  # the whole assistant turn, pre-filled opening included
                parse, judged = parse_and_judge_turn(text, tools, config)
                record = {
                    "turn": turn,
                    "prompt_chars": len(prompt),
                    "opening": opening,
                    "text": text,
                    "tokens": output.tokens,
                    "finish": output.finish,
                    "batch_seconds": seconds,
                    **judged,
                    "processor_error": output.processor_error,
                    "stop_closes": output.stop_closes,
                }
                conversation.turns.append(record)
                if not parse.blocks:
                    conversation.stop = "no-call"
                    continue
                if turn == config.turns - 1:
                    conversation.stop = "turn-limit"
                    continue
                results = []
                for block in parse.blocks:
                    if block.call is not None:
                        if conversation.sandbox is None:
                            conversation.sandbox = Sandbox(config.repo, test_timeout_s=config.test_timeout_s)
                        results.append(conversation.sandbox.execute(block.call.name, block.call.arguments))
                    else:
                        results.append(block.error.message if block.error else "error: invalid tool call")
                record["tool_results"] = results
                conversation.messages.append({"role": "assistant", "content": text})
                conversation.messages.extend({"role": "tool", "content": r} for r in results)
    finally:
        for conversation in conversations:
            if conversation.sandbox is not None:
                conversation.sandbox.close()
    records = [summarize_run(c) for c in conversations]
    if gate is not None:
        for conversation, record in zip(conversations, records, strict=True):
            record["steer_gate"] = gate[id(conversation)].to_dict()
    return records, timings


def _gate(
    generator: Generator,
    conversations: Sequence[Conversation],
    tools: list[dict[str, Any]],
    *,
    mode: Mode,
    config: CompareConfig,
) -> tuple[dict[int, Any] | None, float]:
    """The relevance gate's verdicts on the first messages of a batch (constrained side, a ``steer_gate``).

    One call (one batched forward) per batch, before the first turn; the verdict holds for the whole run.
    Returns ``(None, 0.0)`` when no gate applies, else (verdict by conversation, seconds spent).
    """
    if mode != "constrained" or config.steer_gate == "none" or not conversations:
        return None, 0.0
    judge = getattr(generator, "relevance", None)
    if judge is None:
        raise CompareError(
            f"--steer-gate {config.steer_gate} needs a generator that can judge relevance; {generator.name!r} cannot"
        )
    started = time.perf_counter()
    verdicts = judge([list(c.messages) for c in conversations], tools)
    seconds = time.perf_counter() - started
    if len(verdicts) != len(conversations):
        raise CompareError(f"the relevance gate returned {len(verdicts)} verdicts for {len(conversations)} runs")
    return {id(c): v for c, v in zip(conversations, verdicts, strict=True)}, seconds


# --------------------------------------------------------------------------------------------------
# Output directory, resume


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_records(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    timings: list[dict[str, Any]] = []
    if not path.exists():
        return runs, timings
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interruption: its batch is incomplete and will be redone
        (runs if record.get("type") == "run" else timings).append(record)
    return runs, timings


def _replace_lines(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Write ``records`` as JSON lines into a new file, then rename it over ``path``.

    Never in place: a kill during the write leaves the previous file whole (finished results are
    never rewritten where they lie).
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _batches(tasks: list[Task], size: int) -> list[list[Task]]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def make_generator(config: CompareConfig, tools: Any) -> Generator:
    """The generator ``config.backend`` names, on ``config.model``: transformers or llama.cpp."""
    if config.backend == "llama.cpp":
        from toolgrammar.evaluate.compare.llamacpp_generation import LlamaCppGenerator, load_gguf

        return LlamaCppGenerator(load_gguf(config.model), tools, config)
    return HFGenerator(models.load_model(config.model), tools, config)


def _environment(generator: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "model_source": getattr(generator, "source", ""),
    }
    try:
        import torch

        env["machine"] += f", torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:  # pragma: no cover
        pass
    return env


def prepare(config: CompareConfig) -> tuple[Any, list[Task]]:
    """Check the config and load tools and tasks; raises :class:`CompareError` (or ToolSchemaError) on bad input."""

    config.check()
    tools_path = Path(config.tools) if config.tools else bundled_tools_path()
    if not tools_path.is_file():
        raise CompareError(f"tools file {str(tools_path)!r} does not exist (pass --tools FILE.json)")
    try:
        tools = load_tools(tools_path, mode=config.mode)  # type: ignore[arg-type]
    except ToolSchemaError as error:
        raise CompareError(f"{tools_path}: {error}") from error
    tasks = load_tasks(Path(config.tasks) if config.tasks else bundled_tasks_path(), tools)
    tasks = tasks[config.skip :]
    if config.limit is not None:
        tasks = tasks[: config.limit]
    if config.tool_choice not in ("auto", "required", "none") and config.tool_choice not in tools:
        raise CompareError(f"--tool-choice {config.tool_choice!r} is not one of the tools: {', '.join(tools.names)}")
    if config.repo is not None and not Path(config.repo).is_dir():
        raise CompareError(f"sandbox repository {config.repo!r} is not a directory")
    return tools, tasks


def run_compare(
    config: CompareConfig,
    *,
    generator: Generator | None = None,
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> Report:
    """Run the side-by-side comparison and write its report into ``config.out``.

    Inputs are checked first (tools, tasks, options, the packages the model needs, the model's chat
    template); nothing is generated before they pass. ``generator`` replaces the transformers backend
    (tests pass scripted ones); ``on_run`` is called with each finished run record (tests use it to
    simulate an interruption).

    Raises
    ------
    CompareError
        Bad input, a package the model needs that is not installed (the message has the pip command),
        or ``--resume`` over an output directory written with another configuration.
    """
    tools, tasks = prepare(config)
    if generator is None:
        needed, _ = missing_requirements(config)
        if needed:  # said before anything is written, loaded or generated
            raise CompareError(missing_message(needed, what=f"--model {config.model}"))
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks_file = Path(config.tasks) if config.tasks else bundled_tasks_path()
    identity = {
        "version": CONFIG_VERSION,
        "config": {
            k: v
            for k, v in config.to_dict().items()
            if k not in ("out", "resume", "progress")
            and not (k == "steer_gate" and v == "none")
            and not (k == "close_on_stop" and v is True)
            and not (k == "prefix_true" and v is False)
            and not (k == "skip" and v == 0)
            and not (k == "backend" and v == "transformers")
            and not (k == "llama_server" and v is False)
        },  # options only when not the default: a directory written before the option resumes
        "tools_fingerprint": tools.fingerprint,
        "tasks_sha256": _sha256_file(tasks_file),
        "task_ids": [t.id for t in tasks],
    }
    config_file, runs_file = out / "config.json", out / "runs.jsonl"
    if config.resume and config_file.exists():
        previous = json.loads(config_file.read_text(encoding="utf-8"))
        if previous != identity:
            changed = sorted(
                k
                for k in set(previous.get("config", {})) | set(identity["config"])
                if previous.get("config", {}).get(k) != identity["config"].get(k)
            ) + [k for k in ("tools_fingerprint", "tasks_sha256", "task_ids") if previous.get(k) != identity[k]]
            raise CompareError(
                f"--resume: {out} was written with a different configuration (differs in: {', '.join(changed)}); "
                "rerun with the same options, or drop --resume to start over"
            )

    try:  # everything that can fail on bad input fails here, before any generation
        if generator is None:
            generator = make_generator(config, tools)
        prepare_generator = getattr(generator, "prepare", None)
        if prepare_generator is not None:
            prepare_generator()  # builds the grammar: bad tools or options for this tokenizer fail now
        try:
            prompt_example = generator.render(initial_messages(tasks[0], config), tools.to_openai())
        except Exception as error:
            raise CompareError(
                f"model {config.model!r}: the chat template failed on the first task ({type(error).__name__}: {error})"
            ) from error
    except CompareError:
        raise
    except ToolgrammarError as error:
        raise CompareError(str(error)) from error

    size = config.batch_size or len(tasks)
    plan = [(seed, index, batch) for seed in config.seeds for index, batch in enumerate(_batches(tasks, size))]
    runs, timings = _read_records(runs_file) if config.resume else ([], [])
    done: set[tuple[int, int]] = set()
    if runs:
        by_batch = Counter((r["seed"], r["batch"]) for r in runs)
        expected = {(s, i): len(b) for s, i, b in plan}
        done = {key for key, n in by_batch.items() if expected.get(key) == n}
        runs = [r for r in runs if (r["seed"], r["batch"]) in done]
        timings = [t for t in timings if (t["seed"], t["batch"]) in done]
    config_file.write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
    _replace_lines(runs_file, timings + runs)  # only complete batches survive

    sides = config.sides()
    server_settings: dict[str, Any] = {}
    total = len(tasks) * len(config.seeds) * len(sides)
    bar = progress_bar(total, config.progress, initial=len(sides) * len(runs))
    try:
        for seed, index, batch in plan:
            if (seed, index) in done:
                continue
            per_mode: dict[str, list[dict[str, Any]]] = {}
            for mode in sides:

                def on_step(what: str, step: int, seed: int = seed, index: int = index) -> None:
                    bar.tick(f"seed {seed} batch {index + 1} {what}: token {step}/{config.max_new_tokens}")

                records, mode_timings = run_mode(
                    generator,
                    batch,
                    mode=mode,
                    seed=seed,
                    batch_index=index,
                    tools=tools,
                    config=config,
                    on_step=on_step,
                )
                per_mode[mode] = records
                timings.extend(mode_timings)
                with open(runs_file, "a", encoding="utf-8") as handle:
                    for record in mode_timings:
                        handle.write(json.dumps(record) + "\n")
                bar.update(len(batch))
            with open(runs_file, "a", encoding="utf-8") as handle:
                for position, task in enumerate(batch):
                    record = {
                        "type": "run",
                        "seed": seed,
                        "batch": index,
                        "task_id": task.id,
                        "task": task.to_dict(),
                        "prompt": task.prompt,
                        **{mode: per_mode[mode][position] for mode in sides},
                    }
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    handle.flush()
                    runs.append(record)
                    if on_run is not None:
                        on_run(record)
    finally:
        bar.close()
        settings = getattr(generator, "llama_server_settings", None)
        if settings:  # read before the server is stopped: the grammar its side ran under, for report.json
            server_settings.update(settings)
        close = getattr(generator, "close", None)
        if close is not None:
            close()  # a llama-server it started

    order = {(s, t.id): (i, j) for i, s in enumerate(config.seeds) for j, t in enumerate(tasks)}
    runs.sort(key=lambda r: order.get((r["seed"], r["task_id"]), (1 << 30, 0)))
    environment = _environment(generator)
    environment["prompt_example"] = prompt_example
    if server_settings:
        environment["llama_server"] = server_settings
    report = Report(config.to_dict(), summarize(runs, timings, tools.names), runs, out, environment, timings)
    (out / "report.json").write_text(
        json.dumps(report.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    chart = out / "chart.png"
    if has_matplotlib():
        write_chart(report.summary, chart)
    else:
        chart.unlink(missing_ok=True)  # never leave an older run's chart beside this report
    (out / "report.md").write_text(markdown_report(report), encoding="utf-8")
    return report
