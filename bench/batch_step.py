"""The batched decode step at the processor level: toolgrammar beside xgrammar's and llguidance's batched APIs.

    .venv/bin/python bench/batch_step.py                   # full run, writes bench/results/batch-step-<date>.md/.json
    .venv/bin/python bench/batch_step.py --quick           # a smoke test: few steps, writes nothing
    .venv/bin/python bench/batch_step.py --batches 1,8,64  # some batch sizes only

One decode step of a batch of B rows (B = 1, 2, 4, ..., 256), on the workload of ``bench/anchors.py``: the hermes
block grammar on the seed's five string tools and on the typed set (built for each engine by the runners of
``anchors.py``, toolgrammar's by its processors over the same tools), the real Qwen3 tokenizer, 151,936 logit
columns. Every step gets a fresh ``(B, 151936)`` float32 scores tensor on the CPU (a ``clone()`` of a random
tensor, allocated before the timed region), and the timed region is what a serving loop runs per step once the
sampled tokens are known: advance every row's state by its token, compute the masks, apply them in place.

The rows walk the canonical call, each at its own position: row ``r`` is at position ``(r + step) mod length``,
so the batch mixes states (inside strings, on JSON structure, at the markers) and every row moves on each step.

- ``toolgrammar (vLLM processor)``: :class:`toolgrammar.integrations.vllm.VllmToolCallLogitsProcessor` driven
  offline as ``tests/integrations/test_vllm.py`` drives it (a fake ``vllm_config``, ``SamplingParams`` and
  ``BatchUpdate`` stand-ins: the processor reads them by attribute only), default options (``close_on_stop``
  on). Each row is one request, added once; per step vLLM appends the sampled token to each request's output
  list (untimed) and calls ``update_state(None)`` + ``apply(logits)`` (timed: the catch-up over the new token,
  the masks, the apply, the close-on-stop pass).
- ``toolgrammar (transformers processor)``: :class:`toolgrammar.integrations.hf.ToolCallLogitsProcessor` called
  as ``generate`` calls it, ``proc(input_ids, scores)`` on a ``(B, prompt + generated)`` LongTensor (a new
  contiguous tensor per step, made untimed, as ``generate``'s ``torch.cat`` makes it).
- ``xgrammar (per-row)``: ``GrammarMatcher.accept_token`` and ``fill_next_token_bitmask(bitmask, i)`` per row
  into one ``(B, words)`` bitmask, one ``apply_token_bitmask_inplace``.
- ``xgrammar (BatchGrammarMatcher)``: ``BatchGrammarMatcher.batch_accept_token`` +
  ``batch_fill_next_token_bitmask`` (its thread pool, default size) + one apply.
- ``llguidance (par)``: ``LLExecutor.consume_token_par`` + ``llguidance.torch.fill_next_token_bitmask_par`` (its
  thread pool, default size) + one apply with xgrammar's CPU kernel (llguidance's own torch kernel goes through
  ``torch.compile``; ``anchors.py`` applies it the same way).

The matcher engines get the sampled tokens as a Python list (as vLLM holds them); a row that has taken
``</tool_call>`` is ``reset()`` inside the timed step (a new call starts there: position 0, where the block
grammar allows only ``<tool_call>``). The toolgrammar processors follow one turn per row: each row writes a
few tokens of prose (``" ok"``) so that it reaches its offset, then the call again and again, separated by
``"\\n"`` (the hermes turn's separator between calls; ``parallel_tool_calls`` is on by default), so their cycle
is the call's tokens plus one (``"\\n"``) and the step before ``<tool_call>`` is outside a block. Nothing is
timed before every row is inside that cycle, and every state's mask is cached (untimed warm-up steps).

Per engine and B: host time per step (p50 and mean over the timed steps, µs), per row (p50 / B), the torch
operations the step dispatches (counted with a ``TorchDispatchMode``, as ``tests/runtime/test_masking.py``
counts them, over untimed steps that together visit every position of the cycle; mean per step, the max in
the JSON) and the device->host reads among them: dispatched ``aten._local_scalar_dense`` / ``aten.item`` /
``aten.equal`` / ``aten.is_nonzero``, plus every call of ``Tensor.tolist`` / ``item`` / ``__bool__`` /
``__int__`` / ``__float__`` / ``__index__`` / ``numpy`` / ``cpu`` during the step (wrapped while counting: on
the CPU these cost nothing, so the count is what a GPU run would wait for at most; a read inside a wrapped
method is counted once). And the ratio of each toolgrammar processor's host time to each anchor's.

Every step checks itself (untimed): the canonical token of every row is never masked; the JSON also gives the
-inf columns per row on the first timed step, and the processors' error counters must stay at zero.

Engines run interleaved step by step (their order rotating), so a change in the load of a shared machine hits
them alike: compare the ratios of one run, not numbers across runs. Options: ``--quick``, ``--batches``,
``--steps N`` (timed steps per engine and B, default 50: a whole cycle, so even one row visits every position),
``--warmup N``, ``--threads N`` (torch intra-op threads, default 1), ``--no-write``. Writes
``bench/results/batch-step-<date>.md`` and ``.json`` (the machine, every step's time, the op and read counts by
kind).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from anchors import LlguidanceRunner, Walk, XgrammarRunner, apply_bitmask, make_walk
from common import (
    LOGIT_COLUMNS,
    BenchContext,
    Stats,
    ToolSet,
    fmt_us,
    machine_info,
    markdown_table,
    now_ns,
    seed_tools,
    typed_tools,
    write_results,
)
from toolgrammar_runner import MAX_NEW_TOKENS, ToolgrammarRunner
from torch.utils._python_dispatch import TorchDispatchMode

warnings.filterwarnings("ignore")  # transformers / torch chatter; the numbers are the output

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FILLER = " ok"
"""Prose a toolgrammar row writes before its first call, to reach its offset in the cycle."""


# ------------------------------------------------------------------------------------------ counting


READ_OPS = frozenset({"aten._local_scalar_dense", "aten.item", "aten.equal", "aten.is_nonzero"})
"""Dispatched operations that read a device value back to the host."""
READ_METHODS = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu")
"""``Tensor`` methods that bring a value to the host (on a GPU: wait for the device and copy)."""


class Counting(TorchDispatchMode):
    """Counts the torch operations dispatched, and the device->host reads (ops and wrapped ``Tensor`` methods)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self.read_detail: Counter[str] = Counter()
        self._inside = 0
        self._saved: dict[str, Any] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] += 1
        if name in READ_OPS and not self._inside:
            self.reads[name] += 1
            self.read_detail[name] += 1
        return func(*args, **(kwargs or {}))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def method(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not self._inside:
                self.reads[f"Tensor.{name}"] += 1
                self.read_detail[f"{name} {_shape(tensor)}"] += 1
            self._inside += 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self._inside -= 1

        return method

    def __enter__(self) -> Counting:
        for name in READ_METHODS:
            self._saved[name] = torch.Tensor.__dict__.get(name)
            setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, saved in self._saved.items():
            if saved is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, saved)
        self._saved.clear()


def _shape(tensor: torch.Tensor) -> str:
    """``float32[8, 151936]``: dtype and shape, a sequence length (a dimension past the first) written ``L``."""
    dims = [str(d) if i == 0 or d == LOGIT_COLUMNS else "L" for i, d in enumerate(tensor.shape)]
    return f"{str(tensor.dtype).removeprefix('torch.')}[{', '.join(dims)}]"


# ------------------------------------------------------------------------------------------ the schedule


@dataclass
class Schedule:
    """Which token every row takes at every step, for both kinds of engine."""

    walk: Walk
    batch: int
    cycle: list[int]
    """toolgrammar's cycle: the call's tokens, then ``"\\n"``."""
    filler: int
    lead: int
    """Untimed steps before step 0 for the processors: every row reaches its offset in the cycle."""
    horizon: int
    """Steps after the lead (warm-up, timed, counted): how far each row's tokens must be prepared."""

    @property
    def block(self) -> list[int]:
        return self.walk.ids

    def prompt(self) -> list[int]:
        return self.walk.full[0, : self.walk.prompt_len].tolist()

    def generated(self, row: int, count: int) -> list[int]:
        """Row ``row``'s first ``count`` generated tokens (toolgrammar): prose up to its offset, then the cycle."""
        m = len(self.cycle)
        pad = (-row) % m  # so that at step j (generated token lead + j) the row is at cycle position (row + j) % m
        return [self.filler if g < pad else self.cycle[(g - pad) % m] for g in range(count)]

    def expected(self, kind: str, step: int) -> torch.Tensor:
        """The canonical next token of every row at ``step`` (``kind``: ``"matcher"`` or ``"processor"``)."""
        seq = self.block if kind == "matcher" else self.cycle
        return torch.tensor([seq[(r + step) % len(seq)] for r in range(self.batch)])


# ------------------------------------------------------------------------------------------ engines


class Engine:
    """One column of the comparison: ``prepare`` (untimed), then per step ``before`` (untimed) and ``step`` (timed)."""

    label = "?"
    kind = "matcher"

    def prepare(self, sched: Schedule, scratch: torch.Tensor) -> None:
        """Untimed: build the rows and walk them to their step-0 positions (``scratch``: a logits tensor to use)."""
        raise NotImplementedError

    def before(self, step: int) -> None:
        """Untimed: what the serving loop has done before the processor runs (the sampled tokens in place)."""

    def step(self, scores: torch.Tensor) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Untimed, after the timed steps: the engine's own error counters."""

    def release(self) -> None:
        """Drop the batch's state."""


class MatcherEngine(Engine):
    """The common part of the matcher engines: rows pre-walked to their positions, tokens and resets per step."""

    def prepare(self, sched: Schedule, scratch: torch.Tensor) -> None:
        self.sched = sched
        n = len(sched.block)
        self.matchers = []
        for r in range(sched.batch):
            m = self.new_matcher()
            for tid in sched.block[: (r - 1) % n]:  # one before its step-0 position: step 0 accepts a token too
                self.accept_one(m, tid)
            self.matchers.append(m)
        self.bitmask = self.allocate(sched.batch)
        self.tokens: list[int] = []
        self.resets: list[Any] = []
        self.reset_rows: list[bool] = []

    def before(self, step: int) -> None:
        n = len(self.sched.block)
        prev = [(r + step - 1) % n for r in range(self.sched.batch)]
        self.tokens = [self.sched.block[p] for p in prev]
        self.reset_rows = [p == n - 1 for p in prev]  # the row took </tool_call>: a new call starts
        self.resets = [m for m, done in zip(self.matchers, self.reset_rows, strict=True) if done]

    def release(self) -> None:
        self.matchers = []


class XgrammarPerRow(MatcherEngine):
    def __init__(self, runner: XgrammarRunner, compiled: Any):
        self.runner, self.compiled, self.xgr = runner, compiled, runner.xgr
        self.label = f"{runner.name} (per-row)"

    def new_matcher(self) -> Any:
        return self.xgr.GrammarMatcher(self.compiled)

    def accept_one(self, m: Any, tid: int) -> None:
        self.runner.accept(m, tid)

    def allocate(self, batch: int) -> torch.Tensor:
        return self.xgr.allocate_token_bitmask(batch, LOGIT_COLUMNS)

    def step(self, scores: torch.Tensor) -> None:
        bm = self.bitmask
        for i, (m, tid, done) in enumerate(zip(self.matchers, self.tokens, self.reset_rows, strict=True)):
            if not m.accept_token(tid):
                raise RuntimeError(f"xgrammar rejected token {tid} in row {i}")
            if done:
                m.reset()
            m.fill_next_token_bitmask(bm, i)
        self.xgr.apply_token_bitmask_inplace(scores, bm)


class XgrammarBatch(XgrammarPerRow):
    def __init__(self, runner: XgrammarRunner, compiled: Any):
        super().__init__(runner, compiled)
        self.label = f"{runner.name} (BatchGrammarMatcher)"
        self.batcher = runner.batcher

    def step(self, scores: torch.Tensor) -> None:
        ok = self.xgr.BatchGrammarMatcher.batch_accept_token(self.matchers, self.tokens)
        if not all(ok):
            raise RuntimeError(f"xgrammar rejected a token in rows {[i for i, a in enumerate(ok) if not a]}")
        for m in self.resets:
            m.reset()
        self.batcher.batch_fill_next_token_bitmask(self.matchers, self.bitmask)
        self.xgr.apply_token_bitmask_inplace(scores, self.bitmask)


class LlguidancePar(MatcherEngine):
    def __init__(self, runner: LlguidanceRunner, compiled: Any):
        self.runner, self.compiled = runner, compiled
        self.label = f"{runner.name} (par)"
        self.executor = runner.executor
        self.llt = runner.llt

    def new_matcher(self) -> Any:
        return self.runner.start(self.compiled)

    def accept_one(self, m: Any, tid: int) -> None:
        self.runner.accept(m, tid)

    def allocate(self, batch: int) -> torch.Tensor:
        self.targets = None
        return self.llt.allocate_token_bitmask(batch, LOGIT_COLUMNS)

    def step(self, scores: torch.Tensor) -> None:
        if self.targets is None:
            self.targets = [(m, i) for i, m in enumerate(self.matchers)]
        ok = self.executor.consume_token_par(list(zip(self.matchers, self.tokens, strict=True)))
        if not all(ok):
            raise RuntimeError(f"llguidance rejected a token in rows {[i for i, a in enumerate(ok) if not a]}")
        for m in self.resets:
            m.reset()
        self.llt.fill_next_token_bitmask_par(self.executor, self.targets, self.bitmask)
        apply_bitmask(scores, self.bitmask)


class VllmProcessor(Engine):
    """toolgrammar's vLLM processor, offline: the fakes of ``tests/integrations/test_vllm.py``."""

    kind = "processor"

    def __init__(self, toolset: ToolSet, vocab: Any, budget: int):
        from toolgrammar.integrations.vllm import extra_args

        self.label = "toolgrammar (vLLM processor)"
        self.vocab = vocab
        self.budget = budget
        self.args = extra_args(toolset.tools)  # default options: close_on_stop on

    def prepare(self, sched: Schedule, scratch: torch.Tensor) -> None:
        from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor

        self.sched = sched
        model_config = SimpleNamespace(
            max_model_len=8192,
            logits_processors=["toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor"],
            get_vocab_size=lambda: LOGIT_COLUMNS,
        )
        # A new config per processor: a second processor on the same engine (config) stands down.
        config = SimpleNamespace(model_config=model_config, scheduler_config=SimpleNamespace(async_scheduling=False))
        proc = VllmToolCallLogitsProcessor(config, torch.device("cpu"), False)
        proc._vocab = self.vocab  # as the tests do: no vLLM tokenizer to read it from
        if not proc.active:
            raise RuntimeError("the vLLM processor stood down")
        self.proc = proc
        total = sched.lead + sched.horizon
        self.streams = [sched.generated(r, total) for r in range(sched.batch)]
        self.outs: list[list[int]] = [[] for _ in range(sched.batch)]
        prompt = sched.prompt()
        added = [
            (r, SimpleNamespace(max_tokens=self.budget, extra_args=self.args), prompt, self.outs[r])
            for r in range(sched.batch)
        ]
        proc.update_state(SimpleNamespace(batch_size=sched.batch, removed=[], added=added, moved=[]))
        if len(proc.rows) != sched.batch:
            raise RuntimeError("the vLLM processor did not take every row")
        for g in range(sched.lead):  # untimed: every row to its offset
            self._append(g)
            proc.update_state(None)
            scratch.zero_()
            proc.apply(scratch)

    def _append(self, g: int) -> None:
        if g > 0:
            for out, stream in zip(self.outs, self.streams, strict=True):
                out.append(stream[g - 1])

    def before(self, step: int) -> None:
        self._append(self.sched.lead + step)

    def step(self, scores: torch.Tensor) -> None:
        self.proc.update_state(None)
        self.proc.apply(scores)

    def check(self) -> None:
        stats = self.proc.stats()
        if stats["errors"] or stats["rows"] != self.sched.batch:
            raise RuntimeError(f"the vLLM processor reports {stats}")

    def release(self) -> None:
        self.proc = None
        self.outs = []


class HfProcessor(Engine):
    """toolgrammar's transformers processor, called as ``generate`` calls it."""

    kind = "processor"

    def __init__(self, toolset: ToolSet, tokenizer: Any, budget: int):
        self.label = "toolgrammar (transformers processor)"
        self.toolset, self.tokenizer, self.budget = toolset, tokenizer, budget

    def prepare(self, sched: Schedule, scratch: torch.Tensor) -> None:
        from toolgrammar.integrations.hf import ToolCallLogitsProcessor

        self.sched = sched
        self.proc = ToolCallLogitsProcessor(self.tokenizer, self.toolset.tools, max_new_tokens=self.budget)
        total = sched.lead + sched.horizon
        prompt = sched.prompt()
        self.full = torch.tensor([prompt + sched.generated(r, total) for r in range(sched.batch)])
        self.p = len(prompt)
        for g in range(sched.lead):  # untimed: every row to its offset
            scratch.zero_()
            self.proc(self.full[:, : self.p + g].contiguous(), scratch)
        self.ids = self.full[:, : self.p + sched.lead]

    def before(self, step: int) -> None:
        length = self.p + self.sched.lead + step
        if length > self.full.shape[1]:
            raise RuntimeError("more steps than the prepared input ids")
        self.ids = self.full[:, :length].contiguous()

    def step(self, scores: torch.Tensor) -> None:
        self.proc(self.ids, scores)

    def check(self) -> None:
        errors = [e for e in self.proc.errors if e is not None]
        if errors or len(self.proc.cursors) != self.sched.batch:
            raise RuntimeError(f"the transformers processor lost rows: {errors[:3]}")

    def release(self) -> None:
        self.proc = None
        self.full = self.ids = None


# ------------------------------------------------------------------------------------------ measure


@dataclass
class Cell:
    """One engine at one batch size."""

    engine: str
    batch: int
    times_ns: list[int] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    op_kinds: Counter[str] = field(default_factory=Counter)
    read_kinds: Counter[str] = field(default_factory=Counter)
    read_detail: Counter[str] = field(default_factory=Counter)
    masked_per_row: float | None = None

    @property
    def stats(self) -> Stats:
        return Stats.of_ns(self.times_ns)

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        return {
            "engine": self.engine,
            "batch": self.batch,
            "step": s.to_json(),
            "per_row_p50_us": s.p50 / self.batch,
            "ops_per_step": {"mean": statistics.fmean(self.ops), "max": max(self.ops), "steps": len(self.ops)},
            "reads_per_step": {"mean": statistics.fmean(self.reads), "max": max(self.reads)},
            "op_kinds": dict(self.op_kinds.most_common()),
            "read_kinds": dict(self.read_kinds.most_common()),
            "read_detail": dict(self.read_detail.most_common()),
            "masked_per_row_first_step": self.masked_per_row,
            "times_ns": self.times_ns,
        }


def check_step(scores: torch.Tensor, expected: torch.Tensor, label: str, step: int) -> None:
    got = scores[torch.arange(scores.shape[0]), expected]
    if not bool(torch.isfinite(got).all()):
        bad = torch.nonzero(~torch.isfinite(got)).flatten().tolist()
        raise RuntimeError(f"{label}: the canonical token was masked at step {step}, rows {bad[:10]}")


def measure_batch(
    engines: Sequence[Engine], walk: Walk, batch: int, cycle: list[int], filler: int, steps: int, warmup: int
) -> list[Cell]:
    counted = max(3, len(cycle) + 1 - batch)  # rows r < B at steps j0 .. j0 + counted - 1: every cycle position
    sched = Schedule(walk, batch, cycle, filler, lead=len(cycle), horizon=warmup + steps + counted + 1)
    base = torch.randn(batch, LOGIT_COLUMNS)
    scratch = torch.empty(batch, LOGIT_COLUMNS)
    for e in engines:
        e.prepare(sched, scratch)
    del scratch
    cells = {e.label: Cell(e.label, batch) for e in engines}
    periods = {"matcher": len(walk.ids), "processor": len(cycle)}
    expected = {kind: [sched.expected(kind, j) for j in range(n)] for kind, n in periods.items()}

    def exp(e: Engine, j: int) -> torch.Tensor:
        return expected[e.kind][j % periods[e.kind]]

    for j in range(warmup + steps):
        k = j % len(engines)
        for e in list(engines[k:]) + list(engines[:k]):  # rotate the order: no engine always runs first
            e.before(j)
            scores = base.clone()
            t0 = now_ns()
            e.step(scores)
            dt = now_ns() - t0
            check_step(scores, exp(e, j), e.label, j)
            cell = cells[e.label]
            if j >= warmup:
                cell.times_ns.append(dt)
            if j == warmup:
                cell.masked_per_row = float(torch.isinf(scores).sum()) / batch
    # Operations and reads: untimed steps that together visit every position of the cycle.
    for c in range(counted):
        jj = warmup + steps + c
        for e in engines:
            e.before(jj)
            scores = base.clone()
            with Counting() as counter:
                e.step(scores)
            check_step(scores, exp(e, jj), e.label, jj)
            cell = cells[e.label]
            cell.ops.append(sum(counter.ops.values()))
            cell.reads.append(sum(counter.reads.values()))
            cell.op_kinds.update(counter.ops)
            cell.read_kinds.update(counter.reads)
            cell.read_detail.update(counter.read_detail)
    for e in engines:
        e.check()
        e.release()
    return list(cells.values())


# ------------------------------------------------------------------------------------------ report


TG = ("toolgrammar (vLLM processor)", "toolgrammar (transformers processor)")


SHORT = {
    "toolgrammar (vLLM processor)": "vLLM proc.",
    "toolgrammar (transformers processor)": "transformers proc.",
}


def _short(label: str) -> str:
    """``xgrammar per-row``, ``llguidance par``: an engine's column name in the ratio table."""
    if label in SHORT:
        return SHORT[label]
    name, _, how = label.partition(" (")
    return f"{name.split()[0]} {how.rstrip(')').replace('BatchGrammarMatcher', 'batch')}"


def _mean_range(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    mean = f"{statistics.fmean(values):.1f}"
    return mean if lo == hi else f"{mean} ({lo}-{hi})"


def _kinds(counter: Counter[str], steps: int) -> str:
    if not counter:
        return "none"
    return ", ".join(f"{k.removeprefix('aten.')} x{v / steps:.2g}" for k, v in counter.most_common())


def report(
    info: dict[str, Any], results: dict[str, list[Cell]], walks: dict[str, Walk], argv: str, extra: dict[str, Any]
) -> str:
    out = [
        f"# Batched decode step, processor level: {info['date'][:10]}",
        "",
        f"Command: `{argv}` (source: {info['git']}; toolgrammar's walks: {info['toolgrammar_walks']}). "
        f"Machine: {info['cpu']}, {info['nproc']} cores (torch threads: {info['torch_threads']}; xgrammar's "
        f"BatchGrammarMatcher and llguidance's LLExecutor with their default pools: {extra['pools']}), load average "
        f"{info['load_average'][0]} at the start; Python {info['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
        + ".",
        "",
        'Hermes block grammar `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, canonical separators, '
        f"real Qwen3 tokenizer, {LOGIT_COLUMNS:,} logit columns. One decode step of B rows: advance every row by its "
        "token, compute the masks, apply them in place to a fresh `(B, 151936)` float32 CPU tensor. Row r is at "
        "position (r + step) mod length of the canonical call (toolgrammar's rows: the call and a `\\n` separator, "
        "then the next call; the anchors' rows: the call, reset after `</tool_call>`). "
        f"{extra['steps']} timed steps per engine and B after {extra['warmup']} warm-up steps, engines interleaved "
        "step by step. p50 / mean: host time per step; per row = p50 / B; ops = torch operations dispatched per "
        "step; reads = device->host reads per step (`_local_scalar_dense`, `item`, `equal`, `is_nonzero` ops, and "
        "calls of `Tensor.tolist` / `item` / `__bool__` / `__int__` / `__float__` / `__index__` / `numpy` / `cpu`), "
        "means over untimed steps that visit every position.",
        "",
    ]
    for name, cells in results.items():
        w = walks[name]
        out += [f"## {name} ({len(w.ids)}-token call)", ""]
        body = []
        by = {(c.engine, c.batch): c for c in cells}
        batches = sorted({c.batch for c in cells})
        engines = list(dict.fromkeys(c.engine for c in cells))
        for b in batches:
            for e in engines:
                c = by[(e, b)]
                s = c.stats
                steps = len(c.ops)
                body.append(
                    [
                        str(b),
                        e,
                        fmt_us(s.p50),
                        fmt_us(s.mean),
                        fmt_us(s.p50 / b),
                        _mean_range(c.ops),
                        _mean_range(c.reads),
                        _kinds(c.read_detail, steps),
                    ]
                )
        out += [
            markdown_table(
                ["B", "engine", "step p50", "step mean", "per row (p50)", "ops/step", "reads/step", "reads by kind"],
                body,
            ),
            "",
        ]
        anchors = [e for e in engines if e not in TG]
        tgs = [e for e in engines if e in TG]
        header = ["B"] + [f"{_short(t)} ÷ {_short(a)}" for t in tgs for a in anchors]
        body = []
        for b in batches:
            row = [str(b)]
            for t in tgs:
                for a in anchors:
                    row.append(f"{by[(t, b)].stats.p50 / by[(a, b)].stats.p50:.2f}x")
            body.append(row)
        title = f"Ratio of toolgrammar's host time (p50) to each anchor's, {name}:"
        out += [title, "", markdown_table(header, body), ""]
    out += [
        "Notes: on the CPU the matcher engines fill their bitmask and apply it through raw pointers "
        "(xgrammar's CPU kernel), so they dispatch no torch operation; on a GPU their step adds the bitmask's "
        "host->device copy and a kernel. The read counts are upper bounds on what a GPU run waits for: a call "
        "of `numpy()` or `tolist()` on a tensor that lives on the host there too (the input ids of a CPU batch, "
        "the host path's one-row view of the logits, which a GPU run does not take) counts as a read here; the "
        "JSON gives each read's dtype and shape. The matchers get the sampled tokens as a Python list (vLLM's "
        "output lists); the transformers processor reads them from `input_ids`.",
    ]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes (default 1,2,4,...,256)")
    p.add_argument(
        "--steps",
        type=int,
        default=50,
        help="timed steps per engine and batch size (default 50: a whole cycle, every row visits every position)",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    p.add_argument("--quick", action="store_true", help="3 timed steps, 1 warm-up: a smoke test; writes nothing")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    steps, warmup = (3, 1) if args.quick else (args.steps, args.warmup)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    started = time.perf_counter()

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.vocab import qwen3_vocabulary

    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    info = machine_info()
    tg = ToolgrammarRunner()
    xg, llg = XgrammarRunner(), LlguidanceRunner()
    for r in (tg, xg, llg):
        why = r.unavailable()
        if why:
            raise SystemExit(f"batch_step needs every engine: {why}")
        r.setup(ctx)
    filler = ctx.vocabulary.token_id(FILLER.encode())
    newline = ctx.tokenizer.encode("\n", add_special_tokens=False)
    budget = MAX_NEW_TOKENS * 8  # far from every row's end: no budget-specific masks (and room for any --steps)

    results: dict[str, list[Cell]] = {}
    walks: dict[str, Walk] = {}
    try:
        for ts in (seed_tools(), typed_tools()):
            walk = make_walk(ctx, ts)
            walks[ts.name] = walk
            cycle = walk.ids + newline
            if ctx.vocabulary.decode(cycle * 2) != ((ts.block_text + "\n") * 2).encode():
                raise RuntimeError("the call and its separator do not round-trip through the tokenizer")
            xc, lc = xg.compile(ts), llg.compile(ts)
            engines: list[Engine] = [
                VllmProcessor(ts, tg.vocab, budget),
                HfProcessor(ts, ctx.tokenizer, budget),
                XgrammarPerRow(xg, xc),
                XgrammarBatch(xg, xc),
                LlguidancePar(llg, lc),
            ]
            # Untimed: one batch that holds every position, so every state's mask is cached before any timing.
            measure_batch(engines, walk, len(cycle), cycle, filler, steps=1, warmup=1)
            cells: list[Cell] = []
            for b in batches:
                elapsed = time.perf_counter() - started
                print(f"... {ts.name}: B = {b} ({elapsed:.0f} s)", file=sys.stderr, flush=True)
                cells += measure_batch(engines, walk, b, cycle, filler, steps, warmup)
                gc.collect()
            results[ts.name] = cells
    finally:
        tg.cleanup()

    cmd = "python bench/batch_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    cpus = os.cpu_count() or 1
    pools = (
        f"xgrammar hardware_concurrency / 2 = {max(1, cpus // 2)} thread(s), "
        f"llguidance 80% of the CPUs = {max(1, int(cpus * 0.8))} thread(s)"
    )
    extra = {"steps": steps, "warmup": warmup, "batches": batches, "pools": pools}
    md = report(info, results, walks, cmd.strip(), extra)
    md += (
        f"\n\nTotal run: {time.perf_counter() - started:.0f} s; load average "
        f"{info['load_average'][0]} at the start, {info['load_average_end'][0]} at the end."
    )
    print(md)
    if not args.no_write and not args.quick:
        data = {
            "machine": info,
            "config": {**extra, "budget": budget, "filler": FILLER, "columns": LOGIT_COLUMNS},
            "walks": {
                name: {"tokens": len(w.ids), "cycle": len(w.ids) + len(newline), "block": w.toolset.block_text}
                for name, w in walks.items()
            },
            "cells": {name: [c.to_json() for c in cells] for name, cells in results.items()},
        }
        md_path, js_path = write_results("batch-step", md, data)
        print(f"\nwrote {md_path.relative_to(md_path.parents[2])} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
