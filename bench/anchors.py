"""The anchors: xgrammar, llguidance and outlines-core on toolgrammar's workload, side by side, in one run.

    .venv/bin/python bench/anchors.py            # full run, writes bench/results/anchors-<date>.md/.json
    .venv/bin/python bench/anchors.py --quick    # fewer repetitions, a smoke test

For each tool set (the seed's five string tools; a typed set) it builds the hermes block grammar
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` in each engine, with the canonical
separators, and walks one canonical call token by token with the real Qwen3 tokenizer and 151,936 logit
columns. It reports per engine: tokenizer setup, compile, the per-token mask (compute + apply to a fresh
scores tensor), compute alone, accept, cold start (compile + the whole walk), and one decode step at
batch 64; then the floors (one in-place pass over a fresh scores row, and friends). See ``common.py``
for the method and the runner contract; toolgrammar's own engine joins as ``bench/toolgrammar_runner.py``
(a module defining ``ToolgrammarRunner``), picked up when it exists.

Applying a bitmask: xgrammar's CPU kernel (``xgrammar.apply_token_bitmask_inplace``) for every
bitmask engine. llguidance's and outlines-core's own torch kernels go through ``torch.compile``, which
on CPU means an inductor C++ build at first call; the bitmask layout is the same (bit 1 = allowed), so
the apply costs the same and the rows differ only by how the mask is computed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from common import (
    LOGIT_COLUMNS,
    BenchContext,
    EngineRunner,
    Stats,
    ToolSet,
    fmt_ms,
    fmt_us,
    fresh_scores,
    machine_info,
    markdown_table,
    now_ns,
    per_position,
    seed_tools,
    time_op,
    typed_tools,
    write_results,
)

warnings.filterwarnings("ignore")  # transformers / torch chatter; the numbers are the output

OPENER, CLOSER = "<tool_call>\n", "\n</tool_call>"


def apply_bitmask(scores: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set the scores of tokens whose bit is 0 to -inf, in place (xgrammar's CPU kernel)."""
    import xgrammar as xgr

    xgr.apply_token_bitmask_inplace(scores, bitmask)


# ------------------------------------------------------------------------------------------ runners


class XgrammarRunner(EngineRunner):
    name = "xgrammar"
    compile_reps = 5

    def unavailable(self) -> str | None:
        return _missing("xgrammar")

    def setup(self, ctx: BenchContext) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        self.name = f"xgrammar {_version('xgrammar')}"
        self.info = xgr.TokenizerInfo.from_huggingface(
            ctx.tokenizer, vocab_size=ctx.columns, stop_token_ids=list(ctx.eos_ids)
        )
        self.columns = ctx.columns
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, ctx.columns)
        self.batcher = xgr.BatchGrammarMatcher()

    def compile(self, toolset: ToolSet) -> Any:
        g = self.xgr.Grammar
        grammar = g.concat(
            g.from_ebnf(f"root ::= {json.dumps(OPENER)}"),
            g.from_json_schema(json.dumps(toolset.body_schema), any_whitespace=False),  # ", " and ": "
            g.from_ebnf(f"root ::= {json.dumps(CLOSER)}"),
        )
        return self.compiler.compile_grammar(grammar)

    def start(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        state.fill_next_token_bitmask(self.bitmask)
        self.xgr.apply_token_bitmask_inplace(scores, self.bitmask)

    def fill(self, state: Any) -> bool:
        state.fill_next_token_bitmask(self.bitmask)
        return True

    def accept(self, state: Any, token_id: int) -> None:
        if not state.accept_token(token_id):
            raise RuntimeError(f"xgrammar rejected token {token_id}")

    def batch_mask(self, states: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> bool:
        bm = self._batch_bitmask(len(states))
        for i, m in enumerate(states):
            m.fill_next_token_bitmask(bm, i)
        self.xgr.apply_token_bitmask_inplace(scores, bm)
        return True

    def batch_mask_parallel(self, states: Any, scores: torch.Tensor) -> None:
        bm = self._batch_bitmask(len(states))
        self.batcher.batch_fill_next_token_bitmask(list(states), bm)
        self.xgr.apply_token_bitmask_inplace(scores, bm)

    def _batch_bitmask(self, n: int) -> torch.Tensor:
        if getattr(self, "_bm", None) is None or self._bm.shape[0] != n:
            self._bm = self.xgr.allocate_token_bitmask(n, self.columns)
        return self._bm

    def compiled_bytes(self, compiled: Any) -> int | None:
        return int(compiled.memory_size_bytes)


class LlguidanceRunner(EngineRunner):
    name = "llguidance"
    compile_reps = 5

    def unavailable(self) -> str | None:
        return _missing("llguidance") or _missing("xgrammar", "(its CPU bitmask kernel applies the masks)")

    def setup(self, ctx: BenchContext) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg = llguidance
        self.llt = llguidance.torch
        self.name = f"llguidance {_version('llguidance')}"
        self.tok = llguidance.hf.from_tokenizer(ctx.tokenizer, n_vocab=ctx.columns, eos_token=list(ctx.eos_ids))
        self.columns = ctx.columns
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, ctx.columns)
        self.executor = llguidance.LLExecutor()
        # <tool_call> / </tool_call> are added tokens, which llguidance treats as special: reference them by id.
        self.open_id = ctx.vocabulary.token_id("<tool_call>")
        self.close_id = ctx.vocabulary.token_id("</tool_call>")

    def compile(self, toolset: ToolSet) -> Any:
        schema = dict(toolset.body_schema)
        schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
        lark = f'start: <[{self.open_id}]> "\\n" body "\\n" <[{self.close_id}]>\nbody: %json {json.dumps(schema)}\n'
        m = self.llg.LLMatcher(self.tok, lark)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")
        return m

    def start(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.llt.fill_next_token_bitmask(state, self.bitmask)
        apply_bitmask(scores, self.bitmask)

    def fill(self, state: Any) -> bool:
        self.llt.fill_next_token_bitmask(state, self.bitmask)
        return True

    def accept(self, state: Any, token_id: int) -> None:
        if not state.consume_token(token_id):
            raise RuntimeError(f"llguidance rejected token {token_id}: {state.get_error()[:200]}")

    def batch_mask(self, states: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> bool:
        if getattr(self, "_bm", None) is None or self._bm.shape[0] != len(states):
            self._bm = self.llt.allocate_token_bitmask(len(states), self.columns)
        self.llt.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(states)], self._bm)
        apply_bitmask(scores, self._bm)
        return True


class OutlinesCoreRunner(EngineRunner):
    name = "outlines-core"
    compile_reps = 0  # an Index takes seconds: the cold build is the one compile measured

    def unavailable(self) -> str | None:
        return _missing("outlines_core") or _missing("xgrammar", "(its CPU bitmask kernel applies the masks)")

    def setup(self, ctx: BenchContext) -> None:
        import outlines_core

        self.oc = outlines_core
        self.name = f"outlines-core {_version('outlines-core')}"
        v = ctx.vocabulary
        by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(v.token_bytes):
            if i not in v.special_ids:
                by_bytes.setdefault(b, []).append(i)
        self.vocab = outlines_core.Vocabulary(ctx.eos_ids[0], by_bytes)
        self.bitmask = torch.zeros((1, (ctx.columns + 31) // 32), dtype=torch.int32)

    def compile(self, toolset: ToolSet) -> Any:
        # outlines-core cannot pin the separators to ", " / ": ": "[ ]?" admits them (and their absence).
        body = self.oc.json_schema.build_regex_from_schema(json.dumps(toolset.body_schema), whitespace_pattern=r"[ ]?")
        return self.oc.Index(re.escape(OPENER) + "(" + body + ")" + re.escape(CLOSER), self.vocab)

    def start(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        bm = self.bitmask
        state.write_mask_into(bm.data_ptr(), bm.numel(), 4)
        apply_bitmask(scores, bm)

    def fill(self, state: Any) -> bool:
        bm = self.bitmask
        state.write_mask_into(bm.data_ptr(), bm.numel(), 4)
        return True

    def accept(self, state: Any, token_id: int) -> None:
        state.advance(token_id, return_tokens=False)


def runners() -> list[EngineRunner]:
    """The rows, in table order. toolgrammar's runner comes first once ``bench/toolgrammar_runner.py`` exists."""
    out: list[EngineRunner] = [XgrammarRunner(), LlguidanceRunner(), OutlinesCoreRunner()]
    try:
        import toolgrammar_runner  # type: ignore[import-not-found]
    except ModuleNotFoundError as e:
        if e.name != "toolgrammar_runner":
            raise
    else:
        out.insert(0, toolgrammar_runner.ToolgrammarRunner())
    return out


def _missing(module: str, why: str = "") -> str | None:
    import importlib.util

    return None if importlib.util.find_spec(module) else f"{module} is not installed {why}".strip()


def _version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


# ------------------------------------------------------------------------------------------ measures


@dataclass
class Walk:
    """One tool set's call, ready to replay."""

    toolset: ToolSet
    ids: list[int]
    prompt_len: int
    full: torch.Tensor  # (1, prompt + block)
    toolset_n_tokens: int = 151_669  # the tokenizer's ids (columns beyond are never valid)

    def input_ids(self, k: int) -> torch.Tensor:
        """The sequence before block token ``k`` (what ``generate`` passes with the scores for it)."""
        return self.full[:, : self.prompt_len + k]


def make_walk(ctx: BenchContext, toolset: ToolSet) -> Walk:
    tok = ctx.tokenizer
    messages = [{"role": "user", "content": "median() is wrong for lists of even length; fix textkit/stats.py."}]
    prompt = tok.apply_chat_template(messages, tools=toolset.tools, add_generation_prompt=True, tokenize=False)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    ids = tok.encode(toolset.block_text, add_special_tokens=False)
    if ctx.vocabulary.decode(ids) != toolset.block_text.encode():
        raise RuntimeError("the call does not round-trip through the tokenizer")
    return Walk(toolset, ids, len(prompt_ids), torch.tensor([prompt_ids + ids]), ctx.vocabulary.n_tokens)


@dataclass
class Row:
    name: str
    toolset: str
    skipped: str | None = None
    setup_ms: float | None = None
    compile_ms: float | None = None
    cold_ms: float | None = None
    mask: Stats | None = None
    floor: Stats | None = None
    """``scores.add_(row)`` on a fresh tensor, timed beside every step of the steady walks."""
    first_visit: Stats | None = None
    fill: Stats | None = None
    accept: Stats | None = None
    batch64: Stats | None = None
    batch64_par: Stats | None = None
    compiled_mb: float | None = None
    masked_per_step: float | None = None
    notes: list[str] = field(default_factory=list)
    compiled: Any = None  # the last compiled grammar (not reported; kept for the toolgrammar targets)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if k == "compiled":
                continue
            out[k] = v.to_json() if isinstance(v, Stats) else v
        return out


def measure(runner: EngineRunner, walk: Walk, reps: int, batch_reps: int, setup_ms: float) -> Row:
    row = Row(runner.name, walk.toolset.name, setup_ms=setup_ms)
    n = len(walk.ids)
    inputs = [walk.input_ids(k) for k in range(n)]

    # Cold start: compile, then the whole walk (mask + apply on a fresh tensor, accept), scores made beforehand.
    # Repeated (each time from empty caches): the compile, the cold start and each token's first-visit time
    # are medians over the repetitions (one build for engines whose compile takes seconds).
    colds, compiles, first_ns = [], [], []
    for rep in range(max(1, getattr(runner, "compile_reps", 3))):
        runner.fresh()
        scores = [fresh_scores() for _ in range(n)]
        t_row = []
        t0 = now_ns()
        compiled = runner.compile(walk.toolset)
        t1 = now_ns()
        state = runner.start(compiled)
        for k, tid in enumerate(walk.ids):
            a = now_ns()
            runner.mask(state, scores[k], inputs[k])
            t_row.append(now_ns() - a)
            runner.accept(state, tid)
        t2 = now_ns()
        colds.append((t2 - t0) / 1e6)
        compiles.append((t1 - t0) / 1e6)
        first_ns.append(t_row)
        if rep == 0:
            # Soundness of the setup: the call's own token is never masked, and the grammar does mask something.
            blocked = [k for k in range(n) if not torch.isfinite(scores[k][0, walk.ids[k]])]
            if blocked:
                raise RuntimeError(f"{runner.name}: the canonical call's token was masked at positions {blocked}")
            row.masked_per_step = statistics.fmean(float(torch.isinf(s).sum()) for s in scores)
    row.cold_ms = statistics.median(colds)
    row.compile_ms = statistics.median(compiles)
    row.first_visit = per_position(first_ns)
    row.compiled_mb = (b / 2**20) if (b := runner.compiled_bytes(compiled)) is not None else None
    row.compiled = compiled

    # Steady state, with the add_ floor timed right after each step on its own fresh tensor: the load of a
    # shared machine moves within a run, and the floor measured beside the walk moves with it.
    floor_row = torch.zeros(1, LOGIT_COLUMNS)
    floor_row[0, walk.toolset_n_tokens :] = -torch.inf
    mask_ns: list[list[int]] = []
    accept_ns: list[list[int]] = []
    floor_ns: list[list[int]] = []
    for w in range(reps + 2):  # two warm-up walks
        state = runner.start(compiled)
        m_row, a_row, f_row = [], [], []
        for k, tid in enumerate(walk.ids):
            s = fresh_scores()
            t0 = now_ns()
            runner.mask(state, s, inputs[k])
            t1 = now_ns()
            runner.accept(state, tid)
            t2 = now_ns()
            s = fresh_scores()
            t3 = now_ns()
            s.add_(floor_row)
            t4 = now_ns()
            m_row.append(t1 - t0)
            a_row.append(t2 - t1)
            f_row.append(t4 - t3)
        if w >= 2:
            mask_ns.append(m_row)
            accept_ns.append(a_row)
            floor_ns.append(f_row)
    row.mask = per_position(mask_ns)
    row.accept = per_position(accept_ns)
    row.floor = per_position(floor_ns)

    fill_ns: list[list[int]] = []
    for w in range(reps + 2):
        state = runner.start(compiled)
        f_row = []
        for tid in walk.ids:
            t0 = now_ns()
            has_fill = runner.fill(state)
            f_row.append(now_ns() - t0)
            runner.accept(state, tid)
        if not has_fill:
            break
        if w >= 2:
            fill_ns.append(f_row)
    if fill_ns:
        row.fill = per_position(fill_ns)

    # Batch 64: every row inside a block, at positions 1, 2, ..., n-1 of the walk (cycling; position 0 is the
    # step that writes the opener, still outside the block).
    states = []
    for j in range(64):
        st = runner.start(compiled)
        for tid in walk.ids[: 1 + j % (n - 1)]:
            runner.accept(st, tid)
        states.append(st)
    batch_ids = _left_padded([inputs[1 + j % (n - 1)][0].tolist() for j in range(64)], pad=151643)
    prepare = getattr(runner, "batch_prepare", None)
    if prepare is not None:
        prepare(states, batch_ids)  # untimed: a stateful processor follows every row up to its position
    before = getattr(runner, "batch_before", None)
    if before is not None:
        before()
    if runner.batch_mask(states, fresh_scores(64), batch_ids):
        row.batch64 = time_op(
            lambda s: runner.batch_mask(states, s, batch_ids),
            lambda: fresh_scores(64),
            batch_reps,
            warmup=3,
            before=before,
        )
    par = getattr(runner, "batch_mask_parallel", None)
    if par is not None:
        row.batch64_par = time_op(lambda s: par(states, s), lambda: fresh_scores(64), batch_reps, warmup=3)
    return row


def real_masks(runner: XgrammarRunner, walk: Walk) -> dict[str, torch.Tensor]:
    """The walk's masks with the most and the fewest allowed tokens (inside a string; on structure)."""
    masks, allowed = [], []
    state = runner.start(runner.compile(walk.toolset))
    shifts = torch.arange(32, dtype=torch.int32)
    for tid in walk.ids:
        runner.fill(state)
        bm = runner.bitmask.clone()
        masks.append(bm)
        allowed.append(int(((bm.unsqueeze(-1) >> shifts) & 1).sum()))
        runner.accept(state, tid)
    most, fewest = max(range(len(masks)), key=allowed.__getitem__), min(range(len(masks)), key=allowed.__getitem__)
    return {
        f"a string ({allowed[most]:,} allowed)": masks[most],
        f"structure ({allowed[fewest]:,} allowed)": masks[fewest],
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, Stats):
        return x.to_json()
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _left_padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([[pad] * (width - len(r)) + r for r in rows])


def floors(
    ctx: BenchContext, reps: int, bitmasks: dict[str, torch.Tensor], *, compiled_apply: bool = False
) -> dict[str, dict[str, Stats]]:
    """The cost of touching the scores once, on a fresh tensor and (for reference) a cache-hot one."""
    cols = ctx.columns
    row = torch.zeros(1, cols)
    row[0, ctx.vocabulary.n_tokens :] = -torch.inf
    row[0, 1000:4000] = -torch.inf
    banned = torch.arange(1000, 4000)  # ~3,000 ids
    bool_mask = torch.zeros(1, cols, dtype=torch.bool)
    bool_mask[0, 1000:4000] = True
    row64 = row.expand(64, cols).contiguous()
    ninf = float("-inf")
    ops: dict[str, tuple[Any, int]] = {
        "nothing (a Python call)": (lambda s: None, 1),
        "scores.add_(row)": (lambda s: s.add_(row), 1),
        "scores.fill_(-inf)": (lambda s: s.fill_(ninf), 1),
        "scores.index_fill_(1, 3,000 ids, -inf)": (lambda s: s.index_fill_(1, banned, ninf), 1),
        "scores.masked_fill_(bool mask, -inf)": (lambda s: s.masked_fill_(bool_mask, ninf), 1),
        "batch 64: scores.add_(rows)": (lambda s: s.add_(row64), 64),
    }
    # xgrammar's CPU kernel costs about 5 ns per *masked* token: cheap inside a string, dear on structure.
    for label, bm in bitmasks.items():
        ops[f"apply_token_bitmask_inplace, {label}"] = (lambda s, bm=bm: apply_bitmask(s, bm), 1)
    if compiled_apply:
        # llguidance's own kernel: torch.compile'd (an inductor C++ build, ~30 s on the first run of a machine,
        # cached under /tmp/torchinductor_* after); its cost does not depend on the mask.
        import llguidance.torch as llt

        for label, bm in bitmasks.items():
            llt.apply_token_bitmask_inplace(fresh_scores(), bm)
            ops[f"llguidance apply_token_bitmask_inplace (torch.compile), {label}"] = (
                lambda s, bm=bm: llt.apply_token_bitmask_inplace(s, bm),
                1,
            )
    for label, bm in list(bitmasks.items())[-1:]:
        bm64 = bm.expand(64, -1).contiguous()
        ops[f"batch 64: apply_token_bitmask_inplace, {label}"] = (lambda s, bm64=bm64: apply_bitmask(s, bm64), 64)
    out: dict[str, dict[str, Stats]] = {}
    for name, (op, rows) in ops.items():
        r, warm = (reps, 20) if rows == 1 else (max(10, reps // 20), 3)
        out[name] = {
            "fresh": time_op(op, lambda rows=rows: fresh_scores(rows, cols), r, warmup=warm),
            "hot": time_op(op, lambda rows=rows: fresh_scores(rows, cols), r, fresh=False, warmup=warm),
        }
    return out


# ------------------------------------------------------------------------------------------ report


def report(info: dict[str, Any], walks: list[Walk], rows: list[Row], fl: dict[str, dict[str, Stats]], argv: str) -> str:
    out = [
        f"# Anchors: {info['date'][:10]}",
        "",
        f"Command: `{argv}` (source: {info['git']}; toolgrammar's first visits: {info['toolgrammar_walks']}). "
        f"Machine: {info['cpu']}, {info['nproc']} cores "
        f"(torch threads: {info['torch_threads']}), "
        f"load average {info['load_average'][0]} at the start; Python {info['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
        + ".",
        "",
        'Hermes block grammar `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, canonical '
        f"separators, real Qwen3 tokenizer, {LOGIT_COLUMNS:,} logit columns. Walks: "
        + "; ".join(f"{w.toolset.name}, {len(w.toolset.tools)} tools, a {len(w.ids)}-token call" for w in walks)
        + ". Mask = compute the mask and apply it to a fresh `torch.randn(1, 151936)` (allocated outside the timed "
        "region); each position's median over the walks, then p50 / mean / max over positions. Cold start = "
        "compile + every mask and accept of the walk. Batch 64 = one decode step with 64 rows inside a block "
        "(64 fills, one apply) on a fresh (64, 151936) tensor.",
        "",
    ]
    for w in walks:
        out.append(f"## {w.toolset.name} ({len(w.ids)}-token call)")
        out.append("")
        header = [
            "engine", "tokenizer setup", "compile", "mask p50", "mask mean", "mask max", "p50 / add_ floor",
            "first visit p50 / mean / max", "compute p50", "accept p50", "cold start", "batch 64", "masked/step",
            "compiled",
        ]  # fmt: skip
        body = []
        for r in rows:
            if r.toolset != w.toolset.name:
                continue
            if r.skipped:
                body.append([r.name, f"skipped: {r.skipped}"] + [""] * (len(header) - 2))
                continue
            b64 = fmt_us(r.batch64.p50) if r.batch64 else "n/a"
            if r.batch64_par:
                b64 += f" ({fmt_us(r.batch64_par.p50)} batched API)"
            body.append(
                [
                    r.name,
                    fmt_ms(r.setup_ms),
                    fmt_ms(r.compile_ms),
                    fmt_us(r.mask.p50 if r.mask else None),
                    fmt_us(r.mask.mean if r.mask else None),
                    fmt_us(r.mask.max if r.mask else None),
                    f"{r.mask.p50 / r.floor.p50:.1f}x ({fmt_us(r.floor.p50)})" if r.mask and r.floor else "n/a",
                    " / ".join(fmt_us(x) for x in (r.first_visit.p50, r.first_visit.mean, r.first_visit.max))
                    if r.first_visit
                    else "n/a",
                    fmt_us(r.fill.p50 if r.fill else None),
                    fmt_us(r.accept.p50 if r.accept else None),
                    fmt_ms(r.cold_ms),
                    b64,
                    f"{r.masked_per_step:,.0f}" if r.masked_per_step is not None else "n/a",
                    f"{r.compiled_mb:.1f} MB" if r.compiled_mb is not None else "n/a",
                ]
            )
        out += [markdown_table(header, body), ""]
    out += ["## Floors: one pass over the scores (p50; fresh tensor, cache-hot in brackets)", ""]
    body = [
        [name, fmt_us(s["fresh"].p50), fmt_us(s["fresh"].mean), f"({fmt_us(s['hot'].p50)})"] for name, s in fl.items()
    ]
    out += [markdown_table(["op", "fresh p50", "fresh mean", "hot p50"], body), ""]
    out += [
        "Notes: the bitmask engines all apply with xgrammar's CPU kernel (llguidance's and outlines-core's own "
        "torch kernels need `torch.compile`); outlines-core's JSON regex cannot pin the separators, so it admits "
        "`[ ]?` around `:` and `,`; llguidance references `<tool_call>`/`</tool_call>` by id (it treats added "
        "tokens as special); its compile is lazy, so part of it lands in the first masks (see cold start). "
        "`masked/step` is the mean number of -inf columns per step (a sanity check that each engine masks). "
        "xgrammar's CPU apply kernel costs about 5 ns per masked column, so a step on JSON structure (nearly "
        "every column masked) pays about 0.7 ms to apply, a step inside a string almost nothing: that, not the "
        "mask computation, is most of every bitmask engine's per-token cost here (compare `compute p50`). "
        "`p50 / add_ floor` divides mask p50 by the p50 of a fresh `scores.add_(row)` timed right after every "
        "step of the same walks (in brackets), so both see the same load.",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--reps", type=int, default=20, help="walks per engine and tool set (default 20)")
    p.add_argument("--quick", action="store_true", help="3 walks, few floor repetitions: a smoke test")
    p.add_argument("--only", action="append", default=[], help="run only engines whose name contains this")
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: a pass over one 152k-float row gains nothing from a second "
        "thread, and on a busy 2-core machine waiting for it turns 50 µs into milliseconds)",
    )
    p.add_argument(
        "--compiled-apply",
        action="store_true",
        help="also time llguidance's torch.compile'd apply kernel (its first build takes ~30 s)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    reps = 3 if args.quick else args.reps
    floor_reps = 50 if args.quick else 400
    batch_reps = 5 if args.quick else 20
    started = time.perf_counter()

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.vocab import qwen3_vocabulary

    ctx = BenchContext(load_qwen3_tokenizer(), qwen3_vocabulary())
    info = machine_info()
    toolsets = [seed_tools(), typed_tools()]
    walks = [make_walk(ctx, ts) for ts in toolsets]

    rows: list[Row] = []
    bitmasks: dict[str, torch.Tensor] = {}
    tg_runner = None
    for runner in runners():
        if args.only and not any(o in runner.name for o in args.only):
            continue
        why = runner.unavailable()
        if why:
            rows += [Row(runner.name, w.toolset.name, skipped=why) for w in walks]
            continue
        t0 = now_ns()
        runner.setup(ctx)
        setup_ms = (now_ns() - t0) / 1e6
        if runner.name.startswith("toolgrammar"):
            tg_runner = runner
        for w in walks:
            print(f"... {runner.name}: {w.toolset.name}", file=sys.stderr, flush=True)
            rows.append(measure(runner, w, reps, batch_reps, setup_ms))
        if not bitmasks and isinstance(runner, XgrammarRunner):
            bitmasks = real_masks(runner, walks[0])
    print("... floors", file=sys.stderr, flush=True)
    fl = floors(ctx, floor_reps, bitmasks, compiled_apply=args.compiled_apply)
    extra = None
    if tg_runner is not None:
        import targets

        print("... toolgrammar targets", file=sys.stderr, flush=True)
        extra = targets.extra_measures(tg_runner, ctx, walks, rows, reps)
    cmd = "python bench/anchors.py " + " ".join(argv if argv is not None else sys.argv[1:])
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    md = report(info, walks, rows, fl, cmd.strip())
    if extra is not None and any(r.name.startswith("xgrammar") and not r.skipped for r in rows):
        md += "\n\n## toolgrammar's targets (issue 3)\n\n" + targets.targets_markdown(
            tg_runner.name, rows, fl, extra, walks
        )
    md += (
        f"\n\nTotal run: {time.perf_counter() - started:.0f} s; load average "
        f"{info['load_average'][0]} at the start, {info['load_average_end'][0]} at the end."
    )
    if tg_runner is not None:
        tg_runner.cleanup()
    print(md)
    if not args.no_write and not args.only and not args.quick:
        data = {
            "machine": info,
            "walks": [{"toolset": w.toolset.name, "tokens": len(w.ids), "block": w.toolset.block_text} for w in walks],
            "rows": [r.to_json() for r in rows],
            "floors": {k: {kind: s.to_json() for kind, s in v.items()} for k, v in fl.items()},
            "toolgrammar": _jsonable(extra),
        }
        md_path, js_path = write_results("anchors", md, data)
        print(f"\nwrote {md_path.relative_to(md_path.parents[2])} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
