"""Cold start (issue 12): from a tool list to the end of the first call, empty caches, side by side in one process.

    .venv/bin/python bench/cold_start.py            # every series; writes bench/results/cold-start-<date>.*
    .venv/bin/python bench/cold_start.py --quick    # 1 and 5 tools, one repetition; writes nothing
    .venv/bin/python bench/cold_start.py --sizes 1,5,20 --shapes simple,nested --reps 1
    .venv/bin/python bench/cold_start.py --known-tools  # a new list of tools seen before (a server's case)

For each tool list (``bench/toolsets_cold.py``: ``simple``, ``nested`` and ``varied`` shapes, 1 to 200
tools) and each engine (toolgrammar, llguidance, xgrammar), one measurement is the wall time of:

1. compiling the grammar for the tool list, from empty caches (toolgrammar: the runner's ``fresh()``
   empties the in-memory caches and points ``TOOLGRAMMAR_CACHE`` at a new empty folder; every tool name
   carries a new random suffix per repetition, so no engine can reuse anything it compiled before). The
   turn skeleton, which holds no tool, is read from the package where one ships for the format and options
   (``toolgrammar.automata.skeletons``), as in any new process; ``--no-shipped-skeletons`` compiles it too;
2. walking the first turn token by token: for each token, compute the mask and apply it to a fresh
   ``torch.randn(1, 151936)`` row (allocated before the timed region), then accept the token.

toolgrammar compiles the whole turn (free text, blocks, end of turn), so its walk is 40 tokens of free
text, then the block. The llguidance and xgrammar runners of ``anchors.py`` build the hermes block grammar
only (``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, canonical separators): their walk
is the block alone, without the 40 free tokens (the table also gives toolgrammar's time without them).
The block holds one canonical call (``json.dumps`` spelling) of the *last* tool of the list.

The tokenizer is set up once before anything is timed, as in ``anchors.py``. Each measurement also
records the peak RSS growth (``VmHWM`` reset through ``/proc/self/clear_refs`` before, read after; freed
memory is handed back to the OS before each measurement) and the time of the first mask inside the block
(the token after ``<tool_call>``). Engines run one after another on the same tool list, in a rotating
order, so they share the noise; each cell is the median of ``--reps`` repetitions, each with a new tool
list. Growth is fitted two ways per engine and shape: the slope of log(time) against log(total schema
bytes) (time ~ bytes^slope), and the linear least-squares fit of time against schema size, whose slope is
the cost of one more kilobyte of tools (ms/KB). The log-log slope also reflects the fixed cost: of two
engines that pay the same per kilobyte, the one with the smaller fixed cost has the steeper slope.

``--known-tools`` measures a server's usual case instead: after the caches are emptied, each engine first
compiles (untimed) the same tools in reverse order, so the measured list is one it has not compiled but
every tool in it is one it has; toolgrammar keeps validated tools and each tool's grammar tree by the
tool's text and schema (``tools.MAX_RECENT_TOOLS``, ``json_grammar.MAX_CACHED_PARTS``), tails by schema.

Every measurement checks itself: the canonical call's own token is never masked (the run stops if it is),
and every engine masks something inside the block.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import hashlib
import math
import os
import resource
import secrets
import statistics
import struct
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import torch
from anchors import LlguidanceRunner, XgrammarRunner
from common import REPO, BenchContext, EngineRunner, fresh_scores, markdown_table, now_ns, write_results
from toolgrammar_runner import ToolgrammarRunner
from toolsets_cold import SHAPES, SIZES, VARIED, VARIED_SIZES, ColdToolSet, check, toolset

warnings.filterwarnings("ignore")

FREE_TOKENS = 40
PROSE = (
    "I will check the current configuration first and then apply the change you asked for. The service "
    "runs in the eu region, so the request goes to the primary database host with the default port, and "
    "I will tag it so the on-call team can find it later."
)
ENGINES = ("toolgrammar", "llguidance", "xgrammar")
SHORT = {"toolgrammar": "tg", "llguidance": "llg", "xgrammar": "xgr"}
QUICK_SIZES = (1, 5)


class WalkError(RuntimeError):
    """The self-check failed: an engine masked the canonical call's token, or rejected it."""


# ------------------------------------------------------------------------------------------ runners


class ColdToolgrammar(ToolgrammarRunner):
    """toolgrammar's processor as ``generate`` drives it: each call reads the previous token from ``input_ids``
    and advances by itself, so *accept* costs nothing here; the last token, which no further call reads, is
    advanced on the processor's own cursor (:meth:`finish`)."""

    free_text = True
    keep_skeletons = False
    """``--keep-skeletons``: keep the turn skeletons between measurements (a server's warm process: the
    skeleton depends on the format and options only), forget everything that depends on the tools."""

    def fresh(self) -> None:
        super().fresh(keep=("automata.skeletons",) if self.keep_skeletons else ())

    def start(self, compiled: Any) -> Any:
        return compiled

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        state(input_ids, scores)

    def accept(self, state: Any, token_id: int) -> None:
        pass

    def finish(self, state: Any, token_id: int) -> None:
        state.cursors[0].advance(token_id)

    def problem(self, state: Any) -> str | None:
        return state.errors[0] if state.cursors else "the processor never started"


class _BlockOnly:
    free_text = False

    def finish(self, state: Any, token_id: int) -> None:
        pass

    def problem(self, state: Any) -> str | None:
        return None


class ColdLlguidance(_BlockOnly, LlguidanceRunner):
    def problem(self, state: Any) -> str | None:
        return state.get_error() if state.is_error() else None


class ColdXgrammar(_BlockOnly, XgrammarRunner):
    pass


def make_runners(names: Sequence[str]) -> list[EngineRunner]:
    table = {"toolgrammar": ColdToolgrammar, "llguidance": ColdLlguidance, "xgrammar": ColdXgrammar}
    return [table[n]() for n in names]


def _tag(runner: EngineRunner) -> str:
    return runner.name.split()[0]


# ------------------------------------------------------------------------------------------ memory


_PEAK_RESET: bool | None = None


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> bool:
    """Reset the process's peak RSS (``VmHWM``) to its current RSS; ``False`` where the kernel refuses."""
    global _PEAK_RESET
    if _PEAK_RESET is False:
        return False
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _PEAK_RESET = True
    except OSError:
        _PEAK_RESET = False
    return _PEAK_RESET


def _rss_kb() -> int:
    try:
        return _status_kb("VmRSS")
    except (OSError, KeyError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_kb() -> int:
    try:
        return _status_kb("VmHWM")
    except (OSError, KeyError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _trim() -> None:
    """Collect garbage and hand freed heap back to the OS, so that the next measurement's growth is its own."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# ------------------------------------------------------------------------------------------ the turn


@dataclass
class Turn:
    """One tool list's first turn, tokenized (untimed)."""

    toolset: ColdToolSet
    prompt_ids: list[int]
    free_ids: list[int]
    block_ids: list[int]

    def walk(self, free_text: bool) -> tuple[list[int], list[torch.Tensor], int]:
        """The tokens an engine walks, the ``input_ids`` before each, and the index of the first token
        inside the block (the one after ``<tool_call>``)."""
        ids = (self.free_ids if free_text else []) + self.block_ids
        full = torch.tensor([self.prompt_ids + ids])
        p = len(self.prompt_ids)
        return ids, [full[:, : p + k] for k in range(len(ids))], (len(self.free_ids) if free_text else 0) + 1


def free_ids(ctx: BenchContext) -> list[int]:
    """40 tokens of prose ending with a newline (the Qwen3 template puts ``\\n`` between content and a block)."""
    ids = ctx.tokenizer.encode(PROSE, add_special_tokens=False)[: FREE_TOKENS - 1]
    nl = ctx.tokenizer.encode("\n", add_special_tokens=False)
    if len(ids) != FREE_TOKENS - 1 or len(nl) != 1:
        raise RuntimeError("the free text does not make 40 tokens")
    return ids + nl


def make_turn(ctx: BenchContext, ts: ColdToolSet, free: list[int]) -> Turn:
    tok = ctx.tokenizer
    messages = [{"role": "user", "content": "Sync the record set and tag it for the on-call team."}]
    prompt = tok.apply_chat_template(messages, tools=ts.tools, add_generation_prompt=True, tokenize=False)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    ids = tok.encode(ts.block_text, add_special_tokens=False)
    if ctx.vocabulary.decode(ids) != ts.block_text.encode():
        raise RuntimeError(f"{ts.name}: the call does not round-trip through the tokenizer")
    if ids[0] != ctx.vocabulary.token_id("<tool_call>"):
        raise RuntimeError(f"{ts.name}: the block does not start with the <tool_call> token")
    return Turn(ts, prompt_ids, free, ids)


# ------------------------------------------------------------------------------------------ one measurement


@dataclass
class Sample:
    total_ms: float | None = None
    compile_ms: float | None = None
    free_ms: float | None = None
    """toolgrammar: the 40 free-text steps (mask + apply each), inside ``total_ms``."""
    first_block_mask_ms: float | None = None
    block_p95_ms: float | None = None
    """95th percentile of the steps inside the block (the first walk after the compile: first visits)."""
    max_mask_ms: float | None = None
    rss_growth_mb: float | None = None
    tokens: int = 0
    error: str | None = None


def measure_once(runner: Any, turn: Turn, before: ColdToolSet | None = None) -> Sample:
    """Compile from empty caches, then the whole walk; the self-check afterwards (untimed). ``before``: a tool
    list compiled first, untimed, after the caches are emptied (``--known-tools``)."""
    ids, inputs, in_block = turn.walk(runner.free_text)
    n = len(ids)
    n_free = in_block - 1
    runner.fresh()
    if before is not None:
        runner.compile(before)
    _trim()
    scores = [fresh_scores() for _ in range(n)]
    mask_ns = [0] * n
    rss0 = _rss_kb()
    exact_peak = _reset_peak()
    t0 = now_ns()
    try:
        compiled = runner.compile(turn.toolset)
    except Exception as e:  # an engine may refuse a grammar (size limits): recorded, the run goes on
        return Sample(error=f"compile failed: {type(e).__name__}: {str(e)[:300]}", tokens=n)
    t1 = now_ns()
    t_free = t1
    k = -1
    try:
        state = runner.start(compiled)
        for k, tid in enumerate(ids):
            if k == n_free:
                t_free = now_ns()
            a = now_ns()
            runner.mask(state, scores[k], inputs[k])
            mask_ns[k] = now_ns() - a
            runner.accept(state, tid)
        runner.finish(state, ids[-1])
        t2 = now_ns()
    except Exception as e:
        blocked = [j for j in range(k + 1) if not torch.isfinite(scores[j][0, ids[j]])]
        if blocked:
            raise WalkError(
                f"{runner.name}, {turn.toolset.name}: the canonical call's token was masked at walk positions "
                f"{blocked} (of {n}; the block starts at {in_block - 1}), then: {e}"
            ) from e
        raise WalkError(f"{runner.name}, {turn.toolset.name}: the walk failed at position {k} of {n}: {e}") from e
    peak = _peak_kb()

    # The self-check (untimed): the call's tokens were never masked; the grammar masks something in the block.
    blocked = [j for j in range(n) if not torch.isfinite(scores[j][0, ids[j]])]
    if blocked:
        raise WalkError(
            f"{runner.name}, {turn.toolset.name}: the canonical call's token was masked at walk positions {blocked} "
            f"(of {n}; the block starts at {in_block - 1})"
        )
    why = runner.problem(state)
    if why:
        raise WalkError(f"{runner.name}, {turn.toolset.name}: the engine did not accept the whole call: {why}")
    n_real = 151_669
    if not any(bool(torch.isinf(scores[j][0, :n_real]).any()) for j in range(in_block, n)):
        raise WalkError(f"{runner.name}, {turn.toolset.name}: nothing was masked inside the block")
    return Sample(
        total_ms=(t2 - t0) / 1e6,
        compile_ms=(t1 - t0) / 1e6,
        free_ms=(t_free - t1) / 1e6 if n_free else None,
        first_block_mask_ms=mask_ns[in_block] / 1e6,
        block_p95_ms=_p95(mask_ns[in_block:]) / 1e6,
        max_mask_ms=max(mask_ns) / 1e6,
        rss_growth_mb=(peak - rss0) / 1024 if exact_peak else max(0, peak - rss0) / 1024,
        tokens=n,
    )


def _p95(xs: Sequence[int]) -> float:
    """The 95th percentile (linear interpolation between the two nearest ranks, as numpy's default)."""
    ys = sorted(xs)
    pos = 0.95 * (len(ys) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


# ------------------------------------------------------------------------------------------ the series


@dataclass
class Cell:
    """One engine on one (shape, n): its samples and their medians."""

    engine: str
    samples: list[Sample] = field(default_factory=list)

    def med(self, key: str) -> float | None:
        xs = [getattr(s, key) for s in self.samples if getattr(s, key) is not None]
        return statistics.median(xs) if xs else None

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.samples if s.error), None)

    def to_json(self) -> dict[str, Any]:
        keys = (
            "total_ms",
            "compile_ms",
            "free_ms",
            "first_block_mask_ms",
            "block_p95_ms",
            "max_mask_ms",
            "rss_growth_mb",
        )
        return {
            "engine": self.engine,
            "median": {k: self.med(k) for k in keys},
            "error": self.error,
            "samples": [s.__dict__ for s in self.samples],
        }


@dataclass
class Row:
    shape: str
    n: int
    schema_bytes: int
    call_tokens: int
    cells: dict[str, Cell]
    salts: list[str]

    def ms(self, engine: str, key: str = "total_ms") -> float | None:
        c = self.cells.get(engine)
        return c.med(key) if c is not None else None

    def tg_block_ms(self) -> float | None:
        """toolgrammar's time without the 40 free-text steps (what the block-only engines walk)."""
        c = self.cells.get("toolgrammar")
        if c is None:
            return None
        xs = [s.total_ms - (s.free_ms or 0.0) for s in c.samples if s.total_ms is not None]
        return statistics.median(xs) if xs else None

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "tools": self.n,
            "schema_bytes": self.schema_bytes,
            "call_tokens": self.call_tokens,
            "free_tokens_toolgrammar": FREE_TOKENS,
            "salts": self.salts,
            "toolgrammar_without_free_text_ms": self.tg_block_ms(),
            "engines": {k: c.to_json() for k, c in self.cells.items()},
        }


def known_before(ts: ColdToolSet) -> ColdToolSet:
    """The list ``--known-tools`` compiles before ``ts``: the same tools in reverse order (another list, whose
    tools are all known; a single tool is the same list)."""
    return ColdToolSet(f"{ts.name} reversed", list(reversed(ts.tools)), ts.call, shape=ts.shape, salt=ts.salt)


def run_series(
    ctx: BenchContext,
    runners: list[Any],
    shapes: Sequence[str],
    sizes: dict[str, Sequence[int]],
    reps: int,
    known_tools: bool = False,
) -> list[Row]:
    free = free_ids(ctx)
    # Untimed, discarded measurements per engine, one per shape (varied: one tool of each template): lazy
    # imports and first-call costs of the process are not a tool list's cold start (every measured tool list
    # still has new names and empty caches).
    for shape in shapes:
        n = len(VARIED) if shape == "varied" else 1
        warm = make_turn(ctx, toolset(shape, n, f"w{secrets.token_hex(3)}"), free)
        for r in runners:
            print(f"... warm-up, {shape} x{n}: {r.name}", file=sys.stderr, flush=True)
            measure_once(r, warm)
    rows = []
    for shape in shapes:
        for n in sizes[shape]:
            cells = {_tag(r): Cell(r.name) for r in runners}
            salts = []
            row = None
            for rep in range(reps):
                salt = f"r{rep}{secrets.token_hex(3)}"
                salts.append(salt)
                ts = toolset(shape, n, salt)
                check(ts)
                turn = make_turn(ctx, ts, free)
                if row is None:
                    row = Row(shape, n, ts.schema_bytes, len(turn.block_ids), cells, salts)
                order = runners[rep % len(runners) :] + runners[: rep % len(runners)]
                for r in order:
                    print(f"... {shape} x{n}, rep {rep + 1}/{reps}: {r.name}", file=sys.stderr, flush=True)
                    s = measure_once(r, turn, known_before(ts) if known_tools else None)
                    cells[_tag(r)].samples.append(s)
                    tail = f"{s.total_ms:,.1f} ms" if s.total_ms is not None else s.error
                    print(f"    {tail}", file=sys.stderr, flush=True)
            assert row is not None
            rows.append(row)
    return rows


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) on log(x): y ~ x^slope."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x and y]
    if len({x for x, _ in pts}) < 2:
        return None
    return statistics.linear_regression([x for x, _ in pts], [y for _, y in pts]).slope


def per_kb(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y (ms) on x (bytes), per kilobyte: what one more KB of tools costs."""
    pts = [(x / 1024, y) for x, y in points if x and y is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    return statistics.linear_regression([x for x, _ in pts], [y for _, y in pts]).slope


def _fit(pts: Sequence[tuple[float, float]]) -> dict[str, Any]:
    return {"slope": slope(pts), "ms_per_kb": per_kb(pts), "points": len(pts)}


def slopes(rows: list[Row], engines: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for shape in dict.fromkeys(r.shape for r in rows):
        mine = [r for r in rows if r.shape == shape]
        out[shape] = {}
        for e in engines:
            pts = [(r.schema_bytes, r.ms(e)) for r in mine if r.ms(e) is not None]
            out[shape][e] = _fit(pts)
        if "toolgrammar" in engines:
            pts = [(r.schema_bytes, r.tg_block_ms()) for r in mine if r.tg_block_ms() is not None]
            out[shape]["toolgrammar (without free text)"] = _fit(pts)
    return out


# ------------------------------------------------------------------------------------------ report


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.2f}" if x < 10 else f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def _cell_ms(row: Row, e: str, key: str = "total_ms") -> str:
    c = row.cells.get(e)
    if c is None:
        return "-"
    if c.error and c.med(key) is None:
        return "error"
    return _ms(c.med(key))


def report(
    info: dict[str, Any], rows: list[Row], sl: dict[str, Any], engines: Sequence[str], cmd: str, reps: int
) -> str:
    names = {e: n for r in rows for e, c in r.cells.items() for n in [c.engine]}
    keep = bool(info.get("keep_skeletons"))
    known = bool(info.get("known_tools"))
    shipped = info.get("shipped_skeletons", True)
    out = [
        f"# Cold start (issue 12): {info['date'][:10]}",
        "",
        f"Command: `{cmd}` (source: {info['git']}; toolgrammar from {info['toolgrammar_path']}; first visits: "
        f"{info['toolgrammar_walks']}). Machine: "
        f"{info['cpu']}, {info['nproc']} cores (torch threads: {info['torch_threads']}), load average "
        f"{info['load_average'][0]} at the start; Python {info['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
        + ". Engines: "
        + ", ".join(names.get(e, e) for e in engines)
        + ".",
        "",
        "One measurement: from the tool list to the end of the first call, empty caches, new tool names"
        + (" (toolgrammar's turn skeletons kept: a warm server process, `--keep-skeletons`)" if keep else "")
        + (
            "; `--known-tools`: after the caches are emptied, each engine first compiles, untimed, the same tools "
            "in reverse order, so the measured list is new but every tool in it was seen before (as by a server "
            "whose clients send the same tools in other lists); the walk is the measured list's"
            if known
            else ""
        )
        + (
            "; toolgrammar reads its turn skeleton from the package where one ships (`toolgrammar.automata.skeletons`: "
            "tool-independent, keyed by the skeleton's structure)"
            if shipped
            else "; toolgrammar compiles its turn skeleton too (`--no-shipped-skeletons`)"
        )
        + ". "
        f"Compile the grammar, then per token: compute the mask, apply it to a fresh `torch.randn(1, 151936)`, "
        f"accept. toolgrammar compiles the whole turn and walks {FREE_TOKENS} tokens of free text, then the "
        "block; llguidance and xgrammar compile the hermes block grammar only (canonical separators) and walk "
        "the block alone. The block is one canonical call of the last tool. Tokenizer setup is done once, "
        f"before. Times in ms, median of {reps} repetition(s); engines interleaved in rotating order on the same "
        "tool list. *tg w/o free* = toolgrammar's time minus its 40 free-text steps. *first mask* = the mask "
        "of the token after `<tool_call>` (the first inside the block). *block p95* = the 95th percentile of the "
        "steps inside the block (mask + apply, the first walk after the compile: first visits). *RSS* = peak RSS "
        "growth during the "
        "measurement (MB).",
        "",
    ]
    has = {e: e in engines for e in ENGINES}
    for shape in dict.fromkeys(r.shape for r in rows):
        mine = [r for r in rows if r.shape == shape]
        out += [f"## {shape}", ""]
        header = ["tools", "schema KB", "call tokens"]
        header += [e for e in ENGINES if has[e]]
        if has["toolgrammar"]:
            header += ["tg w/o free"]
        if has["toolgrammar"] and has["llguidance"]:
            header += ["tg/llg", "tg w/o free / llg"]
        if has["toolgrammar"] and has["xgrammar"]:
            header += ["tg/xgr"]
        header += [f"first mask {SHORT[e]}" for e in ENGINES if has[e]]
        header += [f"block p95 {SHORT[e]}" for e in ENGINES if has[e]]
        header += [f"RSS {SHORT[e]}" for e in ENGINES if has[e]]
        body = []
        for r in mine:
            line = [str(r.n), f"{r.schema_bytes / 1024:,.1f}", str(r.call_tokens)]
            line += [_cell_ms(r, e) for e in ENGINES if has[e]]
            tg, lg, xg, tgb = r.ms("toolgrammar"), r.ms("llguidance"), r.ms("xgrammar"), r.tg_block_ms()
            if has["toolgrammar"]:
                line += [_ms(tgb)]
            if has["toolgrammar"] and has["llguidance"]:
                line += [_ratio(tg, lg), _ratio(tgb, lg)]
            if has["toolgrammar"] and has["xgrammar"]:
                line += [_ratio(tg, xg)]
            line += [_ms(r.ms(e, "first_block_mask_ms")) for e in ENGINES if has[e]]
            line += [_ms(r.ms(e, "block_p95_ms")) for e in ENGINES if has[e]]
            line += [_ms(r.ms(e, "rss_growth_mb")) for e in ENGINES if has[e]]
            body.append(line)
        out += [markdown_table(header, body), ""]
        errors = [f"{c.engine}, {r.n} tools: {c.error}" for r in mine for c in r.cells.values() if c.error]
        if errors:
            out += ["Errors: " + "; ".join(e.replace("\n", " ")[:300] for e in errors) + ".", ""]
        tg_split = [
            f"{r.n}: {_ms(r.ms('toolgrammar', 'compile_ms'))} + {_ms(r.ms('toolgrammar', 'free_ms'))}"
            for r in mine
            if r.ms("toolgrammar", "compile_ms") is not None
        ]
        if tg_split:
            out += ["toolgrammar's compile + free-text steps (ms), by tool count: " + "; ".join(tg_split) + ".", ""]
    out += [
        "## Growth: time ~ schema bytes ^ slope (least squares on log-log, medians), and ms per KB of tools "
        "(linear least squares)",
        "",
    ]
    cols = [e for e in ENGINES if has[e]] + (["toolgrammar (without free text)"] if has["toolgrammar"] else [])
    body = []
    for shape, per in sl.items():
        body.append(
            [shape]
            + [
                (
                    f"{per[e]['slope']:.2f} · {per[e]['ms_per_kb']:.2f} ms/KB ({per[e]['points']} points)"
                    if per[e]["slope"] is not None
                    else "n/a"
                )
                for e in cols
            ]
        )
    out += [markdown_table(["shape", *cols], body), ""]
    out += [
        "Notes: llguidance compiles lazily, so part of its compile lands in the first masks (its total is what "
        "counts). Every bitmask is applied with xgrammar's CPU kernel (as in `anchors.py`). The block-only "
        "engines have no free-text grammar in these runners, so they skip the 40 free tokens; compare "
        "*tg w/o free* with them for the block alone. RSS growth is the peak during compile + walk over the RSS "
        "just before (the scores rows are allocated before), after a garbage collection and `malloc_trim`.",
    ]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ the source, without git


def source_state() -> str:
    """The commit (read from ``.git`` without running git) and the files under ``src/`` whose content
    differs from the index (or are not in it): the toolgrammar row measures the working tree."""
    gitdir = REPO / ".git"
    try:
        head = (gitdir / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            p = gitdir / ref
            if p.exists():
                head = p.read_text().strip()
            else:
                head = "?"
                packed = gitdir / "packed-refs"
                for line in packed.read_text().splitlines() if packed.exists() else []:
                    if line.endswith(" " + ref):
                        head = line.split()[0]
        commit = head[:7]
    except OSError:
        return "?"
    try:
        changed = _changed_under(gitdir / "index", "src/")
    except (OSError, ValueError, struct.error):
        return commit + " (working tree under src/ not checked)"
    return commit + (f" + uncommitted {', '.join(changed)}" if changed else "")


def _changed_under(index: Path, prefix: str) -> list[str]:
    data = index.read_bytes()
    if data[:4] != b"DIRC":
        raise ValueError("not a git index")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        raise ValueError(f"index version {version}")
    pos, tracked = 12, {}
    for _ in range(count):
        start = pos
        sha = data[pos + 40 : pos + 60]
        flags = struct.unpack(">H", data[pos + 60 : pos + 62])[0]
        pos += 62
        if version == 3 and flags & 0x4000:
            pos += 2
        end = data.index(b"\0", pos)
        path = data[pos:end].decode()
        pos = start + ((end - start) // 8 + 1) * 8
        if path.startswith(prefix):
            tracked[path] = sha
    changed = []
    for path, sha in tracked.items():
        f = REPO / path
        if not f.exists():
            changed.append(path + " (deleted)")
            continue
        blob = f.read_bytes()
        if hashlib.sha1(b"blob %d\0" % len(blob) + blob).digest() != sha:
            changed.append(path)
    for f in sorted((REPO / prefix).rglob("*")):
        rel = f.relative_to(REPO).as_posix()
        built = "__pycache__" in rel or ".egg-info" in rel or rel.endswith(".so")  # build outputs, not source
        if f.is_file() and rel not in tracked and not built:
            changed.append(rel + " (untracked)")
    return sorted(changed)


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sizes", help=f"tool counts, comma-separated (default {','.join(map(str, SIZES))}; varied "
                   f"{','.join(map(str, VARIED_SIZES))})")  # fmt: skip
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of simple,nested,varied")
    p.add_argument("--reps", type=int, help="repetitions per engine and tool list (median; default 3, --quick 1)")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, of toolgrammar,llguidance,xgrammar")
    p.add_argument("--quick", action="store_true", help="sizes 1,5, one repetition, writes nothing: a smoke test")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as anchors.py)")
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    p.add_argument(
        "--no-shipped-skeletons",
        action="store_true",
        help="toolgrammar compiles its turn skeleton instead of reading the one the package ships",
    )
    p.add_argument(
        "--keep-skeletons",
        action="store_true",
        help="toolgrammar keeps its turn skeletons (per format and options, not per tool list) between "
        "measurements: a new tool list in a warm server process; every tool-dependent cache is still emptied",
    )
    p.add_argument(
        "--known-tools",
        action="store_true",
        help="before each measurement, after the caches are emptied, each engine compiles (untimed) the same "
        "tools in reverse order: a new list of tools a server process has seen before",
    )
    args = p.parse_args(argv)

    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for s in shapes:
        if s not in SHAPES:
            p.error(f"unknown shape {s!r} (one of {', '.join(SHAPES)})")
    for e in engines:
        if e not in ENGINES:
            p.error(f"unknown engine {e!r} (one of {', '.join(ENGINES)})")
    engines = [e for e in ENGINES if e in engines]
    if args.sizes:
        given = tuple(int(x) for x in args.sizes.split(",") if x.strip())
        sizes = {s: given for s in shapes}
    elif args.quick:
        sizes = {s: QUICK_SIZES for s in shapes}
    else:
        sizes = {s: (VARIED_SIZES if s == "varied" else SIZES) for s in shapes}
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if reps < 1:
        p.error("--reps must be at least 1")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    import toolgrammar
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.vocab import qwen3_vocabulary

    tg_path = Path(toolgrammar.__file__).resolve().parent
    if "toolgrammar" in engines and tg_path != (REPO / "src" / "toolgrammar").resolve():
        print(f"warning: toolgrammar is imported from {tg_path}, not this tree's src/", file=sys.stderr)
    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    common._git_state = source_state  # machine_info() would run git; read the commit from .git instead
    info = common.machine_info()
    info["keep_skeletons"] = args.keep_skeletons
    info["known_tools"] = args.known_tools
    info["shipped_skeletons"] = not args.no_shipped_skeletons
    if args.no_shipped_skeletons:
        from toolgrammar.automata import skeleton_store

        skeleton_store.SHIPPED_DIR = REPO / "bench" / "no-shipped-skeletons"  # no such folder: every skeleton compiled
    info["toolgrammar_path"] = os.path.relpath(tg_path, REPO) if tg_path.is_relative_to(REPO) else str(tg_path)

    runners = make_runners(engines)
    for r in runners:
        if isinstance(r, ColdToolgrammar):
            r.keep_skeletons = args.keep_skeletons
    setup_ms = {}
    for r in runners:
        why = r.unavailable()
        if why:
            print(f"{r.name}: {why}", file=sys.stderr)
            return 2
        t0 = now_ns()
        r.setup(ctx)  # tokenizer setup, once, not part of any measurement
        setup_ms[r.name] = (now_ns() - t0) / 1e6
    try:
        rows = run_series(ctx, runners, shapes, sizes, reps, known_tools=args.known_tools)
    except WalkError as e:
        print(f"\nSTOP: {e}", file=sys.stderr)
        return 1
    finally:
        for r in runners:
            if hasattr(r, "cleanup"):
                r.cleanup()
    sl = slopes(rows, engines)
    argv_s = " ".join(argv if argv is not None else sys.argv[1:])
    cmd = f"python bench/cold_start.py {argv_s}".strip()
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    md = report(info, rows, sl, engines, cmd, reps)
    md += (
        f"\n\nTotal run: {time.perf_counter() - started:.0f} s; load average {info['load_average'][0]} at the "
        f"start, {info['load_average_end'][0]} at the end. Peak RSS reset per measurement: "
        f"{'yes' if _PEAK_RESET else 'no (ru_maxrss growth: a lower bound)'}."
    )
    print(md)
    if not args.no_write and not args.quick:
        data = {
            "machine": info,
            "command": cmd,
            "reps": reps,
            "free_tokens_toolgrammar": FREE_TOKENS,
            "tokenizer_setup_ms": setup_ms,
            "peak_rss_reset": bool(_PEAK_RESET),
            "rows": [r.to_json() for r in rows],
            "slopes": sl,
        }
        stem = "cold-start" + ("-known-tools" if args.known_tools else "-warm-process" if args.keep_skeletons else "")
        md_path, js_path = write_results(stem, md, data)
        print(f"\nwrote {md_path.relative_to(REPO)} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
