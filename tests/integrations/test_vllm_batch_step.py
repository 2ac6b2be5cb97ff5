"""The vLLM processor's whole step (``update_state`` + ``apply``) on a batch where every feature acts: the torch
operations it launches do not grow with the batch, and it reads nothing back from the device.

Driven offline, without vLLM: the processor reads vLLM's config, ``SamplingParams`` and ``BatchUpdate`` by
attribute only, so plain namespaces stand in for them (as a vLLM engine's objects would be read). Rows write
calls one after another (``close_on_stop`` acts after each call's last brace, prefix-true masking inside each
call) after some free text
(``steer_to_blocks`` acts at every call point there), each row offset from the others, so from a batch of 50
rows on every step has rows in every phase of the call.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor, extra_args
from toolgrammar.testing.dispatch import DispatchCounter, host_reads

TOOLS = json.loads((Path(__file__).resolve().parents[2] / "examples" / "tools" / "seed_tools.json").read_text())
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
WIDTH = 151936


@pytest.fixture(scope="module")
def streams(qwen3_tokenizer):
    """Each row's output: ``r % cycle`` tokens of free text, then calls, one after another."""
    call = qwen3_tokenizer(CALL, add_special_tokens=False)["input_ids"]
    filler = qwen3_tokenizer(" ok", add_special_tokens=False)["input_ids"]
    return lambda r: filler * (r % len(call)) + call * 4, len(call)


def _processor(vocab, rows: int, outs: list[list[int]]) -> VllmToolCallLogitsProcessor:
    model_config = SimpleNamespace(max_model_len=8192, logits_processors=["toolgrammar"], get_vocab_size=lambda: WIDTH)
    config = SimpleNamespace(model_config=model_config, scheduler_config=SimpleNamespace(async_scheduling=False))
    proc = VllmToolCallLogitsProcessor(config, torch.device("cpu"), False)
    proc._vocab = vocab
    args = extra_args(TOOLS, tool_choice="auto", reasoning="disabled", steer_to_blocks=True, prefix_true=True)
    added = [(r, SimpleNamespace(max_tokens=4096, extra_args=args), [1, 2, 3], outs[r]) for r in range(rows)]
    proc.update_state(SimpleNamespace(batch_size=rows, removed=[], added=added, moved=[]))
    assert len(proc.rows) == rows
    return proc


def _spy(monkeypatch, obj, name: str, measure=lambda args: len(args[1])) -> list[int]:
    """Calls of ``obj.name`` from now on, each as ``measure`` of its arguments (default: the rows it was given)."""
    calls: list[int] = []
    original = getattr(obj, name)

    def spied(*args, **kwargs):
        calls.append(measure(args))
        return original(*args, **kwargs)

    monkeypatch.setattr(obj, name, spied)
    return calls


def test_the_step_s_operations_do_not_grow_with_the_batch_and_nothing_is_read_back(qwen3_vocab, streams, monkeypatch):
    stream, cycle = streams
    most = {}
    for size in (8, 64, 256):
        outs: list[list[int]] = [[] for _ in range(size)]
        rows = [stream(r) for r in range(size)]
        proc = _processor(qwen3_vocab, size, outs)
        closes = _spy(monkeypatch, proc.applier, "close")
        pours = _spy(monkeypatch, proc.applier, "pour", lambda args: args[1].n_groups)
        per_step = []
        for step in range(2 * cycle):
            for out, row in zip(outs, rows, strict=True):
                if step:
                    out.append(row[step - 1])
            logits = torch.randn(size, WIDTH)
            if step < cycle:  # every row reaches its calls; caches warm
                proc.update_state(None)
                proc.apply(logits)
                continue
            with DispatchCounter() as ops, host_reads() as reads:
                proc.update_state(None)
                proc.apply(logits)
            assert not ops.reads and not reads, (ops.ops, reads)
            per_step.append(ops.launches)
        stats = proc.stats()
        assert stats["errors"] == 0 and stats["steered_steps"] > 0
        assert len(closes) >= (cycle if size >= cycle else 1)  # close_on_stop acted (on every step from 50 rows)
        assert len(pours) >= (cycle if size >= cycle else 1)  # so did prefix-true masking
        most[size] = max(per_step)
        if size >= cycle:  # every phase of the call on every step: the same operations each step
            assert len(set(per_step)) == 1, per_step
    assert most[8] <= most[64] == most[256], most
