"""``toolgrammar compare --suite bfcl:CATEGORY,...``: BFCL's items in the side-by-side mode.

Each BFCL item becomes one task of the side-by-side mode (:mod:`toolgrammar.evaluate.compare`): its messages are
the item's only turn (``question[0]``), its tools the item's functions as BFCL gives them to an
OpenAI-style function-calling model (:func:`toolgrammar.evaluate.bfcl.to_openai_tools`, then
:func:`toolgrammar.evaluate.bfcl.grammar_tools`), one assistant turn. Every item runs free and constrained
under every seed, exactly as compare's own tasks do (same seeding, same judging by the strict parser,
the same counts of errors hidden and calls in other shapes), one item at a time (each has its own tools,
so its own grammar). On top, each turn gets BFCL's verdict (:func:`toolgrammar.evaluate.bfcl.score_decoded`
on :func:`toolgrammar.evaluate.bfcl.decode_hermes`: how BFCL reads and scores a Qwen function-calling model),
and a second one that also reads the calls written in other shapes (fenced or bare JSON): what the
free model would have scored had its calls been read wherever it wrote them.

Files (``out/``): ``bfcl-runs.jsonl`` (one line per item and seed, both modes, as it goes),
``bfcl-report.json``, ``bfcl-report.md`` (a row per category) and ``bfcl-chart.png`` (BFCL accuracy per
category: free, free with other shapes read, constrained; when matplotlib is installed, as with
``toolgrammar[compare]``). Only the ``hermes`` format, one turn, and the policies ``auto`` /
``required`` / ``none``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from toolgrammar.errors import ToolgrammarError, ToolSchemaError
from toolgrammar.evaluate import bfcl, models
from toolgrammar.evaluate.compare import (
    MODES,
    CompareConfig,
    CompareError,
    HFGenerator,
    Task,
    has_matplotlib,
    missing_requirements,
    progress_bar,
    run_mode,
    summarize,
)
from toolgrammar.evaluate.extras import missing_message
from toolgrammar.evaluate.relevance import describe_gate, score_text

__all__ = [
    "CHART_FILE",
    "SUITE_PREFIX",
    "BfclTask",
    "SuiteReport",
    "chart_series",
    "parse_suite",
    "run_suite",
    "suite_rows",
    "write_suite_chart",
]

CHART_FILE = "bfcl-chart.png"

SUITE_PREFIX = "bfcl:"


@dataclass(frozen=True)
class BfclTask(Task):
    """A compare task that brings its own messages (``compare._initial_messages`` uses them)."""

    messages: tuple[dict[str, Any], ...] = ()
    category: str = ""


def parse_suite(text: str) -> list[str]:
    """``"bfcl:simple_python,multiple"`` -> the categories, checked; raises :class:`CompareError`."""
    if not text.startswith(SUITE_PREFIX):
        raise CompareError(f"--suite {text!r}: the only suite is BFCL: --suite bfcl:simple_python,multiple")
    categories = [c.strip() for c in text[len(SUITE_PREFIX) :].split(",") if c.strip()]
    if not categories:
        raise CompareError(f"--suite {text!r} names no category; e.g. bfcl:{','.join(bfcl.AST_CATEGORIES[:2])}")
    if len(set(categories)) != len(categories):
        raise CompareError(f"--suite {text!r} names a category twice")
    for category in categories:
        try:
            bfcl.check_category(category)
        except bfcl.BfclError as error:
            raise CompareError(str(error)) from error
    return categories


def _check_config(config: CompareConfig) -> None:
    config.check()
    if config.format != "hermes":
        raise CompareError("--suite bfcl reads turns as BFCL's Qwen handler does (hermes blocks): use --format hermes")
    if config.turns != 1:
        raise CompareError("--suite bfcl items are single-turn: use --turns 1")
    if config.tool_choice not in ("auto", "required", "none"):
        raise CompareError("--suite bfcl: --tool-choice must be auto, required or none (each item has its own tools)")
    if config.tools is not None or config.tasks is not None:
        raise CompareError("--suite bfcl brings its own tools and tasks: drop --tools / --tasks")
    if config.resume:
        raise CompareError("--suite bfcl does not resume: drop --resume")
    if config.llama_server:
        raise CompareError(
            "--suite bfcl compares free and constrained runs; llama.cpp's own side (--llama-server) runs on the "
            "bundled tasks or --tasks: drop --llama-server"
        )


def _other_shape_calls(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls a turn wrote as fenced or bare JSON, as ``{name: arguments}`` where they can be read."""
    calls = []
    for other in turn["other_shape_calls"]:
        try:
            value = json.loads(other["raw"], strict=False)
        except ValueError:
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            continue
        arguments = value.get("arguments", value.get("parameters"))
        if isinstance(arguments, dict):
            calls.append({value["name"]: arguments})
    return calls


def score_turn(item: bfcl.BfclItem, turn: Mapping[str, Any]) -> dict[str, Any]:
    """BFCL's verdicts on one judged turn: as BFCL reads it (blocks), and with other-shape calls read too."""
    try:
        decoded: Any = bfcl.decode_hermes(turn["text"])
    except bfcl.DecodeError as error:
        decoded = error
    verdict = bfcl.score_decoded(item, decoded)
    others = _other_shape_calls(turn)
    any_shape = verdict
    if others:
        any_shape = bfcl.score_decoded(item, (decoded if isinstance(decoded, list) else []) + others)
    return {"verdict": verdict.to_dict(), "any_shape": any_shape.to_dict()}


@dataclass
class SuiteReport:
    """The outcome of :func:`run_suite`: per category, compare's summary plus BFCL's accuracies."""

    config: dict[str, Any]
    categories: dict[str, dict[str, Any]]
    runs: list[dict[str, Any]]
    out: Path
    data_source: str
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def constrained_errors(self) -> int:
        return sum(
            c["summary"]["modes"]["constrained"]["errors"] + c["summary"]["modes"]["constrained"]["processor_errors"]
            for c in self.categories.values()
        )

    @property
    def ok(self) -> bool:
        return self.constrained_errors == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "data_source": self.data_source,
            "environment": self.environment,
            "categories": self.categories,
            "runs": self.runs,
        }


GeneratorFactory = Callable[[Any], Any]
"""``factory(toolset) -> generator``: one generator per item (tests pass scripted ones)."""


def run_suite(
    config: CompareConfig,
    categories: Sequence[str],
    *,
    generator_factory: GeneratorFactory | None = None,
    data: bfcl.BfclData | None = None,
) -> SuiteReport:
    """Run BFCL ``categories`` free and constrained; ``config.limit`` items of each (``None``: all), after
    the first ``config.skip``.

    Inputs are checked before anything is loaded: options, the categories, BFCL's data, every item's
    tools (an item whose tools still fail to load is an error, never skipped). Raises :class:`CompareError`.
    """

    _check_config(config)
    try:
        data = data or bfcl.locate_data()
        plan: list[tuple[bfcl.BfclItem, Any, BfclTask, list[str]]] = []
        for category in categories:
            items = bfcl.load_category(category, data)
            held = items[config.skip :]
            for item in held[: config.limit] if config.limit else held:
                try:
                    toolset, notes = bfcl.grammar_tools(
                        bfcl.to_openai_tools(item.functions, category), mode=config.mode
                    )
                except ToolSchemaError as error:
                    raise CompareError(f"BFCL item {item.id}: its tools do not load: {error}") from error
                prompt = next((m["content"] for m in item.messages if m.get("role") == "user"), "")
                task = BfclTask(id=item.id, prompt=prompt, messages=item.messages, category=category)
                plan.append((item, toolset, task, notes))
    except bfcl.BfclError as error:
        raise CompareError(str(error)) from error

    if generator_factory is None:
        generator_factory = _hf_factory(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    runs_file = out / "bfcl-runs.jsonl"
    runs_file.write_text("", encoding="utf-8")
    runs: list[dict[str, Any]] = []
    timings: dict[str, list[dict[str, Any]]] = {c: [] for c in categories}
    bar = progress_bar(len(plan) * len(config.seeds) * 2, config.progress)
    environment: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for index, (item, toolset, task, notes) in enumerate(plan):
            generator = generator_factory(toolset)
            environment.setdefault("model_source", getattr(generator, "source", ""))
            for seed in config.seeds:
                record: dict[str, Any] = {
                    "type": "run",
                    "seed": seed,
                    "category": item.category,
                    "task_id": item.id,
                    "messages": list(item.messages),
                    "schema_notes": notes,
                }
                for mode in MODES:

                    def on_step(what: str, step: int, seed: int = seed, item_id: str = item.id) -> None:
                        bar.tick(f"seed {seed} {item_id} {what}: token {step}/{config.max_new_tokens}")

                    records, mode_timings = run_mode(
                        generator,
                        [task],
                        mode=mode,
                        seed=seed,
                        batch_index=index,
                        tools=toolset,
                        config=config,
                        on_step=on_step,
                    )
                    run = records[0]
                    run["bfcl"] = score_turn(item, run["turns"][0])
                    record[mode] = run
                    timings[item.category].extend(mode_timings)
                    bar.update(1)
                runs.append(record)
                with open(runs_file, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        bar.close()
    environment["seconds"] = time.perf_counter() - started

    summaries = {}
    for category in categories:
        category_runs = [r for r in runs if r["category"] == category]
        names = sorted({name for item, toolset, _, _ in plan if item.category == category for name in toolset.names})
        summary = summarize(category_runs, timings[category], names)
        summaries[category] = {"summary": summary, "bfcl": _accuracy(category_runs)}
    report = SuiteReport(
        {**config.to_dict(), "suite": f"{SUITE_PREFIX}{','.join(categories)}"},
        summaries,
        runs,
        out,
        data.source,
        environment,
    )
    (out / "bfcl-report.json").write_text(
        json.dumps(report.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    chart = has_matplotlib()
    if chart:
        write_suite_chart(report, out / CHART_FILE)
    else:  # an earlier run's chart in the same folder would no longer match the report
        (out / CHART_FILE).unlink(missing_ok=True)
    (out / "bfcl-report.md").write_text(markdown_report(report, chart=chart), encoding="utf-8")
    return report


def _hf_factory(config: CompareConfig) -> GeneratorFactory:
    needed, _ = missing_requirements(config)
    if needed:
        raise CompareError(missing_message(needed, what=f"--model {config.model}"))

    if config.backend == "llama.cpp":
        from toolgrammar.evaluate.compare.llamacpp_generation import LlamaCppGenerator, load_gguf

        try:
            gguf = load_gguf(config.model)
        except ToolgrammarError as error:
            raise CompareError(str(error)) from error
        return lambda toolset: LlamaCppGenerator(gguf, toolset, config)
    try:
        loaded = models.load_model(config.model)  # looked up at call time: tests replace it
    except ToolgrammarError as error:
        raise CompareError(str(error)) from error
    # One item per generate call: there is no shared prefix across rows to cache.
    item_config = dataclasses.replace(config, prefix_cache=False)
    return lambda toolset: HFGenerator(loaded, toolset, item_config)


def _accuracy(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per mode: BFCL-valid runs (as BFCL reads the turn, and with other-shape calls read too), error types."""
    out: dict[str, Any] = {}
    for mode in MODES:
        verdicts = [r[mode]["bfcl"]["verdict"] for r in runs]
        any_shape = [r[mode]["bfcl"]["any_shape"] for r in runs]
        types: dict[str, int] = {}
        for v in verdicts:
            if not v["valid"]:
                types[v["error_type"]] = types.get(v["error_type"], 0) + 1
        out[mode] = {
            "runs": len(verdicts),
            "valid": sum(v["valid"] for v in verdicts),
            "accuracy": sum(v["valid"] for v in verdicts) / len(verdicts) if verdicts else None,
            "valid_any_shape": sum(v["valid"] for v in any_shape),
            "budget_closed_blocks": sum(r[mode].get("budget_closed_blocks", 0) for r in runs),
            "error_types": dict(sorted(types.items(), key=lambda kv: -kv[1])),
        }
        gated = [r[mode]["steer_gate"] for r in runs if r[mode].get("steer_gate")]
        if gated:  # the relevance gate (constrained side, --steer-gate)
            out[mode]["gate"] = {
                "runs": len(gated),
                "let_steer": sum(bool(g["relevant"]) for g in gated),
                "scores": [g["score"] for g in gated],
                "score_texts": [score_text(g) for g in gated],
                "method": gated[0]["method"],
                "threshold": gated[0]["threshold"],
            }
    return out


def _pct(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.0%})" if total else "n/a"


SUITE_COLUMNS: tuple[str, ...] = (
    "category",
    "items x seeds",
    "BFCL accuracy free",
    "BFCL accuracy constrained",
    "free, other shapes read too",
    "intended calls that cannot run: free / constrained (hidden)",
    "calls in other shapes: free / constrained",
    "invalid blocks: free / constrained",
    "blocks (closed at a stop)",
    "tokens: free / constrained",
    "generate time (s): free / constrained",
)


def suite_rows(report: SuiteReport) -> list[tuple[str, ...]]:
    """One row per category (and a total when there are several), in :data:`SUITE_COLUMNS` order."""
    rows = []
    for category, data in report.categories.items():
        s, acc = data["summary"], data["bfcl"]
        f, c = s["modes"]["free"], s["modes"]["constrained"]
        fa, ca = acc["free"], acc["constrained"]
        others = [m["other_shape_calls"]["fenced"] + m["other_shape_calls"]["bare"] for m in (f, c)]
        rows.append(
            (
                category,
                str(s["runs"]),
                _pct(fa["valid"], fa["runs"]),
                _pct(ca["valid"], ca["runs"]),
                _pct(fa["valid_any_shape"], fa["runs"]),
                f"{f['intended_errors']} / {c['intended_errors']} ({s['errors_hidden']})",
                f"{others[0]} / {others[1]}",
                f"{f['errors']} / {c['errors']}",
                f"{c['blocks']} ({c['stop_closes']})",
                f"{f['tokens']} / {c['tokens']}",
                f"{f['generate_seconds']:.1f} / {c['generate_seconds']:.1f}",
            )
        )
    return rows


def _gates(report: SuiteReport) -> dict[str, dict[str, Any]]:
    """Per category, the relevance gate's counts (only categories whose constrained runs were gated)."""
    return {
        c: d["bfcl"]["constrained"]["gate"] for c, d in report.categories.items() if "gate" in d["bfcl"]["constrained"]
    }


def _policy(cfg: Mapping[str, Any]) -> str:
    """The constrained side's policy in words (markdown)."""
    policy = f"`{cfg['tool_choice']}`" + (", steered" if cfg.get("steer_to_blocks") else "")
    if cfg.get("steer_gate", "none") != "none":
        policy += f" {describe_gate(cfg['steer_gate'])} (`--steer-gate {cfg['steer_gate']}`)"
    if cfg.get("prefix_true"):
        policy += ", prefix-true masking"
    return policy


def _constrained_label(cfg: Mapping[str, Any]) -> str:
    """The constrained side's short name (the chart's legend)."""
    label = f"constrained, {cfg['tool_choice']}"
    if cfg.get("steer_to_blocks"):
        gate = cfg.get("steer_gate", "none")
        label += ", steered" + (f" where {gate} says so" if gate != "none" else "")
    if cfg.get("prefix_true"):
        label += ", prefix-true"
    return label


def chart_series(report: SuiteReport) -> tuple[list[str], dict[str, list[tuple[int, int]]]]:
    """The chart's data: the categories, and per bar (its legend label) each category's ``(valid runs,
    runs)`` by BFCL's verdict: exactly the report's counts."""
    categories = list(report.categories)
    label = _constrained_label(report.config)
    series: dict[str, list[tuple[int, int]]] = {"free": [], "free, other shapes read too": [], label: []}
    for category in categories:
        acc = report.categories[category]["bfcl"]
        free, constrained = acc["free"], acc["constrained"]
        series["free"].append((free["valid"], free["runs"]))
        series["free, other shapes read too"].append((free["valid_any_shape"], free["runs"]))
        series[label].append((constrained["valid"], constrained["runs"]))
    return categories, series


def write_suite_chart(report: SuiteReport, path: Path) -> None:
    """A PNG: BFCL accuracy per category, free (as BFCL reads it, and with other shapes read too) against
    constrained, each bar labeled ``valid/runs``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories, series = chart_series(report)
    colors = ["#d62728", "#ff9896", "#1f77b4"]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(categories) + 2), 5.2))
    for k, ((label, counts), color) in enumerate(zip(series.items(), colors, strict=True)):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(categories))]
        bars = ax.bar(xs, [hits / runs if runs else 0.0 for hits, runs in counts], width, label=label, color=color)
        ax.bar_label(bars, [f"{hits}/{runs}" for hits, runs in counts], fontsize=7)
    ax.set_xticks(range(len(categories)), categories, rotation=15, ha="right")
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("BFCL accuracy (fraction of runs)")
    cfg = report.config
    ax.set_title(f"BFCL accuracy per category: {cfg['model']}, seeds {cfg['seeds']}, temperature {cfg['temperature']}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(series), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_report(report: SuiteReport, *, chart: bool = False) -> str:
    cfg = report.config
    policy = _policy(cfg)
    lines = [
        "# toolgrammar compare --suite: BFCL, free vs constrained",
        "",
        f"- Suite: `{cfg['suite']}`, data: {report.data_source}",
        f"- Model: `{cfg['model']}` ({report.environment.get('model_source', '')})",
        f"- Seeds [{', '.join(str(s) for s in cfg['seeds'])}], {cfg['max_new_tokens']} new tokens, temperature "
        f"{cfg['temperature']}, top-p {cfg['top_p']}, top-k {cfg['top_k']}; arguments `{cfg['mode']}`; "
        f"constrained side: {policy}",
        "- BFCL accuracy: BFCL's own verdict (its AST checker, or its relevance rule) on the turn read as BFCL "
        "reads a Qwen function-calling model (`<tool_call>` blocks); 'other shapes read too' also reads the "
        "calls written as fenced or bare JSON.",
        "",
    ]
    if not report.ok:
        lines += [f"**BUG: the constrained run made {report.constrained_errors} error(s).**", ""]
    lines += ["| " + " | ".join(SUITE_COLUMNS) + " |", "|---|" + "---:|" * (len(SUITE_COLUMNS) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in suite_rows(report)]
    if chart:
        lines += ["", f"![BFCL accuracy per category]({CHART_FILE})"]
    else:
        lines += ["", "(No chart: matplotlib is not installed; `pip install 'toolgrammar[compare]'` brings it.)"]
    gates = _gates(report)
    if gates:
        first = next(iter(gates.values()))
        lines += [
            "",
            "## Relevance gate",
            "",
            f"Constrained side (`--steer-gate {first['method']}`, `toolgrammar.evaluate.relevance`): "
            "steering acts only "
            f"{describe_gate(first['method'], first['threshold'])}.",
            "",
            "| category | runs (items x seeds) the gate let steer | score per run |",
            "|---|---:|---|",
        ]
        for category, gate in gates.items():
            scores = ", ".join(gate.get("score_texts") or [f"{v:.2f}" for v in gate["scores"]])
            lines.append(f"| {category} | {gate['let_steer']}/{gate['runs']} | {scores} |")
    lines += ["", "## BFCL error types", "", "| category | mode | error type | runs |", "|---|---|---|---:|"]
    for category, data in report.categories.items():
        for mode in MODES:
            for kind, count in data["bfcl"][mode]["error_types"].items():
                lines.append(f"| {category} | {mode} | {kind} | {count} |")
    return "\n".join(lines) + "\n"


def print_suite_report(report: SuiteReport) -> None:
    """The per-category table on the terminal."""
    import sys

    console = Console(file=sys.stdout, highlight=False, width=200)
    table = Table(title="toolgrammar compare --suite: BFCL, free vs constrained", title_justify="left")
    for column in SUITE_COLUMNS:
        table.add_column(column, justify="left" if column == "category" else "right")
    for row in suite_rows(report):
        table.add_row(*row)
    console.print(table)
    for category, gate in _gates(report).items():
        console.print(f"relevance gate, {category}: let steering act on {gate['let_steer']} of {gate['runs']} runs")
    if not report.ok:
        console.print(f"[bold red]BUG: the constrained run made {report.constrained_errors} error(s)[/bold red]")
    chart = f", {CHART_FILE}" if (report.out / CHART_FILE).is_file() else ""
    console.print(f"report: {report.out / 'bfcl-report.md'}  (also bfcl-report.json, bfcl-runs.jsonl{chart})")


def suite_command(suite: str, config: CompareConfig) -> NoReturn:
    """What ``toolgrammar compare --suite`` does: exit 0 (the constrained side made no error), 1, or 2 (bad input)."""
    import typer

    try:
        report = run_suite(config, parse_suite(suite))
    except CompareError as error:
        typer.echo(f"toolgrammar compare: {error}", err=True)
        raise SystemExit(2) from None
    print_suite_report(report)
    raise SystemExit(0 if report.ok else 1)
