"""The report of a side-by-side run: per-mode counts, what the grammar hid, report.md and chart.png."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgrammar.evaluate.compare.config import CONFIG_VERSION, LLAMA_SERVER, SIDE_LABELS, SIDES, has_matplotlib
from toolgrammar.evaluate.other_shapes import OTHER_SHAPE_KIND
from toolgrammar.evaluate.relevance import describe_gate
from toolgrammar.formats.calls import ERROR_KINDS


@dataclass
class Report:
    """The outcome of :func:`run_compare`: a summary per mode and every run."""

    config: dict[str, Any]
    summary: dict[str, Any]
    runs: list[dict[str, Any]]
    out: Path
    environment: dict[str, Any] = field(default_factory=dict)
    batches: list[dict[str, Any]] = field(default_factory=list)
    """One timing record per ``generate`` call (mode, turn, rows, tokens, seconds, processor seconds)."""

    @property
    def constrained_errors(self) -> int:
        """Errors in the constrained run (blocks with errors plus rows that left the grammar). Must be 0."""
        c = self.summary["modes"]["constrained"]
        return c["errors"] + c["processor_errors"]

    @property
    def ok(self) -> bool:
        return self.constrained_errors == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CONFIG_VERSION,
            "config": self.config,
            "environment": self.environment,
            "summary": self.summary,
            "batches": self.batches,
            "runs": self.runs,
        }


INTENDED_ERROR_KINDS: tuple[str, ...] = (*ERROR_KINDS, OTHER_SHAPE_KIND)
"""Every way an intended call fails to run: a block's error kinds, and a call written in another shape."""


def summarize_side(
    records: Sequence[Mapping[str, Any]], timings: Sequence[Mapping[str, Any]], tool_names: Iterable[str] = ()
) -> dict[str, Any]:
    """The counts of one side (the free or the constrained run records of :func:`summarize`; a policy in a bench).

    ``tool_names``: the offered tools, to count how many other-shape calls name one of them (a 0.5B
    model also writes ``{"name": "median", "arguments": ...}`` for functions of the repository).
    """
    known = set(tool_names)
    kinds: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    unclosed: Counter[str] = Counter()
    for r in records:
        kinds.update(r["error_kinds"])
        inner.update(r.get("other_shape_inner_kinds", {}))
        unclosed.update(r.get("unclosed_inner_kinds", {}))
    others = [c for r in records for c in r["other_shape_calls"]]
    shapes = Counter(c["shape"] for c in others)
    intended_kinds = Counter(kinds)
    intended_kinds[OTHER_SHAPE_KIND] = len(others)

    def hits(key: str) -> tuple[int, int, float | None]:
        values = [r[key] for r in records if r.get(key) is not None]
        return len(values), sum(values), (sum(values) / len(values) if values else None)

    tool_n, tool_hits, tool_rate = hits("expected_tool_hit")
    arg_n, arg_hits, arg_rate = hits("expected_arguments_hit")
    _, tool_any, tool_any_rate = hits("expected_tool_any_shape_hit")
    _, arg_any, arg_any_rate = hits("expected_arguments_any_shape_hit")
    seconds = sum(t["seconds"] for t in timings)
    tokens = sum(t["tokens"] for t in timings)
    gated = [r["steer_gate"] for r in records if r.get("steer_gate")]
    blocks = sum(r["blocks"] for r in records)
    valid = sum(r["valid_calls"] for r in records)
    return {
        "runs": len(records),
        "turns": sum(r["n_turns"] for r in records),
        "runs_with_call": sum(r["made_call"] for r in records),
        "runs_without_call": sum(not r["made_call"] for r in records),
        "runs_with_valid_call": sum(r["valid_calls"] > 0 for r in records),
        "runs_with_intended_call": sum(r.get("intended_calls", 0) > 0 for r in records),
        "runs_at_turn_limit": sum(r["stop"] == "turn-limit" for r in records),
        "intended_calls": blocks + len(others),
        "blocks": blocks,
        "valid_calls": valid,
        "valid_rate": valid / blocks if blocks else None,
        "errors": sum(kinds.values()),
        "error_kinds": {k: kinds[k] for k in ERROR_KINDS if kinds[k]},
        "intended_errors": sum(intended_kinds.values()),
        "intended_error_kinds": {k: intended_kinds[k] for k in INTENDED_ERROR_KINDS if intended_kinds[k]},
        "processor_errors": sum(len(r["processor_errors"]) for r in records),
        "stop_closes": sum(r.get("stop_closes", 0) for r in records),
        "other_shape_calls": {"fenced": shapes["fenced"], "bare": shapes["bare"]},
        "other_shape_inner_kinds": {k: inner[k] for k in ERROR_KINDS if inner[k]},
        "other_shape_valid_inside": sum(c["error"] is None for c in others),
        "unclosed_inner_kinds": {k: unclosed[k] for k in ERROR_KINDS if unclosed[k]},
        "unclosed_valid_inside": unclosed["valid"],
        "other_shape_calls_known_tool": sum(c["name"] in known for c in others),
        "runs_with_other_shape_call": sum(bool(r["other_shape_calls"]) for r in records),
        "expected_tool_tasks": tool_n,
        "expected_tool_hits": tool_hits,
        "expected_tool_rate": tool_rate,
        "expected_tool_any_shape_hits": tool_any,
        "expected_tool_any_shape_rate": tool_any_rate,
        "expected_arguments_tasks": arg_n,
        "expected_arguments_hits": arg_hits,
        "expected_arguments_rate": arg_rate,
        "expected_arguments_any_shape_hits": arg_any,
        "expected_arguments_any_shape_rate": arg_any_rate,
        "tokens": tokens,
        "truncated_turns": sum(r["truncated_turns"] for r in records),
        "budget_closed_blocks": sum(r.get("budget_closed_blocks", 0) for r in records),
        "generate_seconds": seconds,
        "processor_seconds": sum(t.get("processor_seconds", 0.0) for t in timings),
        "tokens_per_second": tokens / seconds if seconds > 0 else None,
        "gate_runs": len(gated),
        "gate_let_steer": sum(bool(g["relevant"]) for g in gated),
        "gate_seconds": sum(t.get("gate_seconds", 0.0) for t in timings),
    }


def summarize(
    runs: Sequence[Mapping[str, Any]], timings: Sequence[Mapping[str, Any]], tool_names: Iterable[str] = ()
) -> dict[str, Any]:
    """Per-mode counts (the report's tables) from run and timing records, and what the grammar hid.

    ``hidden_by_grammar``: per kind of intended-call error (a block's kinds, and ``other-shape`` for a
    call written outside the blocks), the free run's count less the constrained run's;
    ``errors_hidden`` is their sum: the intended calls that failed free and not under the grammar.
    """
    names = list(tool_names)
    present = [mode for mode in SIDES if mode in ("free", "constrained") or (runs and mode in runs[0])]
    modes = {
        mode: summarize_side([r[mode] for r in runs], [t for t in timings if t["mode"] == mode], names)
        for mode in present
    }
    free, constrained = modes["free"]["intended_error_kinds"], modes["constrained"]["intended_error_kinds"]
    hidden = {
        k: free.get(k, 0) - constrained.get(k, 0)
        for k in INTENDED_ERROR_KINDS
        if free.get(k, 0) or constrained.get(k, 0)
    }
    return {
        "modes": modes,
        "hidden_by_grammar": hidden,
        "errors_hidden": modes["free"]["intended_errors"] - modes["constrained"]["intended_errors"],
        "runs": len(runs),
    }


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _hits(mode: Mapping[str, Any], hits: str, rate: str) -> str:
    return f"{mode[hits]} ({_rate(mode[rate])})"


def sides_of(summary: Mapping[str, Any]) -> list[str]:
    """The sides a summary holds, in report order (free, constrained, and llama-server's when it ran)."""
    return [mode for mode in SIDES if mode in summary["modes"]]


def side_headings(summary: Mapping[str, Any]) -> list[str]:
    """Column headings: ``free``, ``constrained``; with llama-server's side, ``free``, ``toolgrammar``,
    ``llama.cpp's own``."""
    sides = sides_of(summary)
    return [SIDE_LABELS[m] for m in sides] if LLAMA_SERVER in sides else sides


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """``(metric, value per side...)`` rows shared by the terminal table and report.md (sides: :func:`sides_of`)."""
    sides = [summary["modes"][m] for m in sides_of(summary)]
    first = sides[0]
    left = "rows that left the grammar"
    if LLAMA_SERVER in summary["modes"]:
        left += " (llama-server: requests it refused)"

    def each(key: str, fmt: Callable[[Any], str] = str) -> tuple[str, ...]:
        return tuple(fmt(m[key]) for m in sides)

    def tps(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    def hits(hit: str, rate: str) -> tuple[str, ...]:
        return tuple(_hits(m, hit, rate) for m in sides)

    def kind_counts(key: str, kind: str) -> tuple[str, ...]:
        return tuple(str(m[key].get(kind, 0)) for m in sides)

    def any_side(key: str, kind: str) -> bool:
        return any(m[key].get(kind) for m in sides)

    rows: list[tuple[str, ...]] = [
        ("runs", *each("runs")),
        ("runs with an intended call (a block or another shape)", *each("runs_with_intended_call")),
        ("runs with a valid call", *each("runs_with_valid_call")),
        ("intended calls (blocks + other shapes)", *each("intended_calls")),
        ("  valid calls (valid blocks)", *each("valid_calls")),
        ("  errors: calls that cannot run", *each("intended_errors")),
    ]
    for k in [k for k in INTENDED_ERROR_KINDS if any_side("intended_error_kinds", k)]:
        label = "other-shape (fenced or bare JSON)" if k == OTHER_SHAPE_KIND else f"{k} (in a block)"
        rows.append((f"    {label}", *kind_counts("intended_error_kinds", k)))
    if any(m["other_shape_calls"]["fenced"] + m["other_shape_calls"]["bare"] for m in sides):
        rows += [
            (
                "  other shapes: fenced / bare",
                *(f"{m['other_shape_calls']['fenced']} / {m['other_shape_calls']['bare']}" for m in sides),
            ),
            ("    naming an offered tool", *each("other_shape_calls_known_tool")),
            ("    the call inside would be valid", *each("other_shape_valid_inside")),
        ]
        rows += [
            (f"    inside: {k}", *kind_counts("other_shape_inner_kinds", k))
            for k in ERROR_KINDS
            if any_side("other_shape_inner_kinds", k)
        ]
    unclosed = [k for k in ERROR_KINDS if any_side("unclosed_inner_kinds", k)]
    if unclosed or any(m["unclosed_valid_inside"] for m in sides):
        rows.append(("  truncated blocks: the call inside would be valid", *each("unclosed_valid_inside")))
        rows += [(f"  truncated blocks, inside: {k}", *kind_counts("unclosed_inner_kinds", k)) for k in unclosed]
    rows += [
        ("tool-call blocks", *each("blocks")),
        ("invalid blocks (constrained: must be 0)", *each("errors")),
        (left, *each("processor_errors")),
        ("blocks closed where the model stopped (close_on_stop)", *each("stop_closes")),
        (
            f"expected tool, valid call (of {first['expected_tool_tasks']} runs)",
            *hits("expected_tool_hits", "expected_tool_rate"),
        ),
        ("expected tool, named in any shape", *hits("expected_tool_any_shape_hits", "expected_tool_any_shape_rate")),
        (
            f"expected tool + arguments, valid call (of {first['expected_arguments_tasks']})",
            *hits("expected_arguments_hits", "expected_arguments_rate"),
        ),
        (
            "expected tool + arguments, any shape",
            *hits("expected_arguments_any_shape_hits", "expected_arguments_any_shape_rate"),
        ),
        ("turns", *each("turns")),
        ("turns cut at the token limit", *each("truncated_turns")),
        ("blocks the budget closed (a value ran away)", *each("budget_closed_blocks")),
        ("tokens generated", *each("tokens")),
        ("generate time (s)", *each("generate_seconds", lambda v: f"{v:.1f}")),
        ("tokens per second", *each("tokens_per_second", tps)),
    ]
    return rows


def markdown_report(report: Report) -> str:
    cfg, summary = report.config, report.summary
    f, c = summary["modes"]["free"], summary["modes"]["constrained"]
    server = summary["modes"].get(LLAMA_SERVER)
    headings = side_headings(summary)
    title = "free, toolgrammar and llama.cpp's own grammar" if server is not None else "free vs constrained sampling"
    lines = [f"# toolgrammar compare: {title}", ""]
    if not report.ok:
        lines += [
            '<p style="color:red"><b>BUG: the constrained run made errors.</b></p>',
            "",
            f"**BUG: the constrained run made {c['errors']} invalid block(s) and {c['processor_errors']} row(s) left "
            "the grammar. The grammar must make every call valid; this is a toolgrammar bug. The runs are listed "
            "under 'Constrained errors' below.**",
            "",
        ]
    seeds = ", ".join(str(s) for s in cfg["seeds"])
    lines += [
        f"- Model: `{cfg['model']}` ({report.environment.get('model_source', '')})",
        f"- Tasks: {summary['runs'] // max(len(cfg['seeds']), 1)} x seeds [{seeds}] = {summary['runs']} runs per mode; "
        f"{cfg['turns']} turn(s) per run, {cfg['max_new_tokens']} new tokens per turn",
        f"- Sampling: temperature {cfg['temperature']}, top-p {cfg['top_p']}, top-k {cfg['top_k']}; "
        f"format `{cfg['format']}`, arguments `{cfg['mode']}`, parser `{cfg['parse_mode']}`, "
        f"tool_choice `{cfg['tool_choice']}`{', prose first' if cfg.get('prose_first') else ''}, "
        f"reasoning `{cfg['reasoning']}`, whitespace `{cfg['whitespace']}`",
        f"- Constrained side: {_policy_sentence(cfg)}",
        *([f"- llama.cpp's own side: {LLAMA_SERVER_SENTENCE}"] if server is not None else []),
        f"- Machine: {report.environment.get('machine', '')}",
        "",
        "| metric | " + " | ".join(headings) + " |",
        "|---|" + "---:|" * len(headings),
    ]
    lines += [
        f"| {'&nbsp;' * 2 * (len(m) - len(m.lstrip()))}{m.strip()} | " + " | ".join(values) + " |"
        for m, *values in summary_rows(summary)
    ]
    lines += ["", "## Errors the grammar hid", ""]
    hidden = summary["hidden_by_grammar"]
    if hidden:
        lines += [
            f"Intended calls that could not run: {f['intended_errors']} free, {c['intended_errors']} constrained: "
            f"**{summary['errors_hidden']} hidden by the grammar**.",
            "",
            "| error kind | free | constrained | hidden |" + (" llama.cpp's own |" if server is not None else ""),
            "|---|---:|---:|---:|" + ("---:|" if server is not None else ""),
        ]
        fk, ck = f["intended_error_kinds"], c["intended_error_kinds"]
        for kind, count in hidden.items():
            own = f" {server['intended_error_kinds'].get(kind, 0)} |" if server is not None else ""
            lines.append(f"| {kind} | {fk.get(kind, 0)} | {ck.get(kind, 0)} | {count} |{own}")
    else:
        lines.append("The free run made no intended call that failed, so there was nothing to hide.")
    if c.get("gate_runs"):
        lines += [
            "",
            f"Relevance gate (`--steer-gate {cfg.get('steer_gate')}`): let steering act on {c['gate_let_steer']} of "
            f"{c['gate_runs']} constrained runs ({c['gate_seconds']:.1f} s of forward passes).",
        ]
    overhead = c["processor_seconds"]
    if c["generate_seconds"]:
        lines += [
            "",
            f"Time inside the logits processor: {overhead:.1f} s of {c['generate_seconds']:.1f} s of constrained "
            f"generation ({_pct(overhead, c['generate_seconds'])}).",
        ]
    bad = [r for r in report.runs if r["constrained"]["error_kinds"] or r["constrained"]["processor_errors"]]
    if bad:
        lines += ["", "## Constrained errors (bugs)", ""]
        for r in bad:
            for t in r["constrained"]["turns"]:
                if t["error_kinds"] or t["processor_error"]:
                    lines.append(
                        f"- seed {r['seed']}, task `{r['task_id']}`, turn {t['turn'] + 1}: "
                        f"{', '.join(t['errors']) or ''} {t['processor_error'] or ''}".rstrip()
                    )
    if has_matplotlib():
        lines += ["", "![error kinds and call rates](chart.png)", ""]
    else:
        lines += ["", "(No chart: matplotlib is not installed; `pip install 'toolgrammar[compare]'` brings it.)", ""]
    sides = sides_of(summary)
    lines += ["## Runs", "", "| seed | task | " + " | ".join(f"{h}: blocks / valid / errors" for h in headings) + " |"]
    lines += ["|---:|---|" + "---|" * len(sides)]
    for r in report.runs:
        cells = []
        for mode in sides:
            side = r[mode]
            errors = ", ".join(f"{k} x{v}" for k, v in side["error_kinds"].items()) or "-"
            cells.append(f"{side['blocks']} / {side['valid_calls']} / {errors}")
        lines.append(f"| {r['seed']} | {r['task_id']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


LLAMA_SERVER_SENTENCE = (
    "llama-server `--jinja` on the same GGUF, sent each conversation with its tools and the same `tool_choice`; "
    "llama.cpp builds its grammar from the tools and the chat template (nothing pre-filled); its raw tokens are "
    "judged by the same strict parser"
)
"""How the llama-server side is run, for the report."""


def _policy_sentence(cfg: Mapping[str, Any]) -> str:
    closing = (
        "; a stop where a block's call is complete goes to its close"
        if cfg.get("close_on_stop", True)
        else "; a stop inside a block is masked like any other token (`--no-close-on-stop`)"
    )
    if cfg.get("prefix_true"):
        closing += (
            "; prefix-true masking (`--prefix-true`): a masked token's probability goes to the allowed tokens its "
            "accepted bytes lead to"
        )
    if cfg["tool_choice"] == "none":
        return "`none`: no block"
    return _policy_text(cfg) + closing


def _policy_text(cfg: Mapping[str, Any]) -> str:
    choice = cfg["tool_choice"]
    if choice == "auto":
        text = "`auto`: free text stays free; a block, when opened, is valid and closes in time"
        if cfg.get("steer_to_blocks"):
            text += "; steered: at call points the other call shapes' openers are moved onto the block opener"
            if cfg.get("steer_gate", "none") != "none":
                text += f", only {describe_gate(cfg['steer_gate'])} (relevance gate)"
        return text
    if choice == "required" and cfg.get("prose_first"):
        return "`required`, prose first: free text, then at least one block (the budget forces it at the end)"
    what = (
        "`required`: the turn is the call" if choice == "required" else f"named tool `{choice}`: the turn is that call"
    )
    if cfg.get("reasoning", "disabled") == "disabled":
        what += (
            "; both sides find the block opener pre-filled, so the free side is judged inside the blocks it was "
            "made to open"
        )
    return what


CHART_COLORS = {"free": "#d62728", "constrained": "#1f77b4", LLAMA_SERVER: "#2ca02c"}


def write_chart(summary: Mapping[str, Any], path: Path) -> None:
    """A PNG: error kinds (left) and call rates (right), one bar per side (:func:`sides_of`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = sides_of(summary)
    labels_of = dict(zip(sides, side_headings(summary), strict=True))
    modes = [summary["modes"][m] for m in sides]
    width = 0.8 / len(sides)

    def offset(i: int, n: int) -> float:
        return i + (n - (len(sides) - 1) / 2) * width

    kinds = [k for k in INTENDED_ERROR_KINDS if any(m["intended_error_kinds"].get(k) for m in modes)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    if kinds:
        y = range(len(kinds))
        for n, (mode, m) in enumerate(zip(sides, modes, strict=True)):
            left.barh(
                [offset(i, n) for i in y],
                [m["intended_error_kinds"].get(k, 0) for k in kinds],
                width,
                label=labels_of[mode],
                color=CHART_COLORS[mode],
            )
        left.set_yticks(list(y), kinds)
        left.invert_yaxis()
        left.legend()
    else:
        left.text(0.5, 0.5, "no failed intended call on any side", ha="center", va="center", transform=left.transAxes)
        left.set_yticks([])
    left.set_title("intended calls that cannot run, by error kind")
    left.set_xlabel("calls")

    def rate(mode: Mapping[str, Any], key: str) -> float:
        return mode[key] / mode["runs"] if mode["runs"] else 0.0

    labels = [
        "runs with an intended call",
        "runs with a valid call",
        "runs with another-shape call",
        "expected tool, any shape",
        "expected tool, valid call",
        "expected tool + args, valid",
    ]
    x = range(len(labels))
    for n, (mode, m) in enumerate(zip(sides, modes, strict=True)):
        values = [
            rate(m, "runs_with_intended_call"),
            rate(m, "runs_with_valid_call"),
            rate(m, "runs_with_other_shape_call"),
            m["expected_tool_any_shape_rate"] or 0.0,
            m["expected_tool_rate"] or 0.0,
            m["expected_arguments_rate"] or 0.0,
        ]
        right.bar([offset(i, n) for i in x], values, width, label=labels_of[mode], color=CHART_COLORS[mode])
    right.set_xticks(list(x), labels, rotation=15, ha="right")
    right.set_ylim(0, 1)
    right.set_ylabel("fraction of runs")
    right.set_title(f"call rates ({modes[0]['runs']} runs per side)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
