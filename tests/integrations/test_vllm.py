"""vLLM integration (:mod:`toolgrammar.integrations.vllm`): both routes, against the installed vLLM.

Runs in the vLLM environment only (``scripts/test-vllm.sh``: ``pytest -m vllm``); elsewhere the module
is skipped. Two kinds of tests:

- fast ones (``vllm``): the structural tag against the turn grammar (xgrammar as the judge), the
  request spec, the processor's batch bookkeeping and masking with hand-made ``BatchUpdate`` values;
- one slow one (``vllm`` + ``slow``): a real vLLM engine on the CPU with a tiny random Qwen3 saved
  locally, one start for both routes. vLLM spawns worker processes, so the engine runs in a
  subprocess: this file itself, run as a script (``python tests/integrations/test_vllm.py --driver OUT.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

if __name__ != "__main__":
    pytestmark = pytest.mark.vllm
    vllm = pytest.importorskip("vllm", reason="needs the vLLM environment (scripts/test-vllm.sh)")
    xgr = pytest.importorskip("xgrammar")

TOOLS_FILE = Path(__file__).resolve().parents[2] / "examples" / "tools" / "seed_tools.json"


def _host_closing(closing: Any) -> float:
    from toolgrammar.runtime.device_state import host_closing

    return host_closing(closing)


BUDGETS = (24, 48, 96, 192)
"""max_tokens of the real-engine batch: every call of the seed tools fits in 24 tokens at the least."""
CHOICES = ("required", "run_tests", "write_file", "auto")
"""Tool choices of the real-engine batch: a call somewhere (reasoning allowed), a named call straight away
(no reasoning; ``run_tests`` can close in a few tokens, ``write_file`` has two free strings), free text."""
SEEDS = (1, 2, 3)


def request_options(choice: str) -> dict[str, Any]:
    """Grammar options of one request of the batch (the same for every route)."""
    named = choice not in ("auto", "required", "none")
    return {"tool_choice": choice, "reasoning": "disabled" if named else "enabled"}


def _tools() -> list[dict[str, Any]]:
    return json.loads(TOOLS_FILE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# Route 1: the structural tag says what the turn grammar says
# ------------------------------------------------------------------------------------------------

R = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
L = '<tool_call>\n{"name": "list_files", "arguments": {"path": "."}}\n</tool_call>'
E = '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
BAD_BLOCKS = (
    '<tool_call>\n{"name": "read_file", "arguments": {"path":"a.py"}}\n</tool_call>',  # not canonical
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}   }\n</tool_call>',  # free whitespace
    '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',  # unknown tool
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a\nb"}}\n</tool_call>',  # raw newline
    '<tool_call>\n{"name": "read_file", "arguments": {}}\n</tool_call>',  # missing argument
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a", "x": 1}}\n</tool_call>',  # unknown argument
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n',  # unclosed
)
TEXTS = (
    "",
    "hello",
    "hi " + R,
    R,
    R + "\n" + L,
    "x" + R + "\n" + L,
    R + "after",
    R + R,
    E,
    R + "\n" + E,
    R + "\n",
    "<think>\nhm\n</think>\n\n" + R,
    "<think>\nhm\n</think>" + R,
    "<think>\nhm\n</think>\n\n\n" + R,
    "<think>\nhm\n</think>\n\nok " + R,
    "<think>\nhm",
    "hm\n</think>\n\n" + R,
    "<think>a</think>b",
    "é ü 中文 " + R,
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "é\\n\\u00e9 \\"q\\""}}\n</tool_call>',
    *BAD_BLOCKS,
    *("x" + b for b in BAD_BLOCKS),
)
OPTION_SETS = (
    [
        pytest.param(
            {"tool_choice": c, "parallel_tool_calls": p, "reasoning": r, "after_calls": a},
            id=f"{c}-{'par' if p else 'one'}-{r}-{a}",
        )
        for c in ("auto", "required", "none", "read_file")
        for p in (True, False)
        for r in ("enabled", "disabled", "prefilled")
        for a in ("end", "text")
    ]
    + [pytest.param({"whitespace": "flexible", "max_whitespace": 2}, id="flexible")]
    + [
        pytest.param({"tool_choice": "required", "prose_first": True, "reasoning": r}, id=f"required-prose-first-{r}")
        for r in ("enabled", "disabled", "prefilled")
    ]
)


@pytest.mark.parametrize("options", OPTION_SETS)
def test_structural_tag_accepts_what_the_turn_grammar_accepts(options: dict[str, Any]) -> None:
    from xgrammar.testing import _is_grammar_accept_string

    from toolgrammar.integrations.vllm import turn_structural_tag
    from toolgrammar.testing import accepts
    from toolgrammar.turn.grammar import compile_turn

    turn = compile_turn(_tools(), **options)
    grammar = xgr.Grammar.from_structural_tag(json.dumps(turn_structural_tag(turn)))
    wrong = [
        f"{t!r}: toolgrammar {accepts(turn, t)}, xgrammar {not accepts(turn, t)}"
        for t in TEXTS
        if accepts(turn, t) != _is_grammar_accept_string(grammar, t)
    ]
    assert not wrong, "\n".join(wrong)


def test_structured_outputs_pass_vllm_validation() -> None:
    from vllm import SamplingParams
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from toolgrammar.integrations.vllm import structured_outputs

    params = SamplingParams(structured_outputs=structured_outputs(_tools(), tool_choice="required"))
    validate_xgrammar_grammar(params)  # raises on a tag vLLM's xgrammar backend would refuse
    tag = json.loads(params.structured_outputs.structural_tag)
    assert tag["type"] == "structural_tag"


def test_structural_tag_regex_has_no_escapes_xgrammar_warns_about() -> None:
    from toolgrammar.integrations.vllm import structural_tag

    text = json.dumps(structural_tag(_tools()))
    for noisy in ("\\\\ ", "\\\\#", "\\\\\n"):
        assert noisy not in text


@pytest.mark.parametrize(
    "options", [pytest.param({"escape_markers": True}, id="escape-markers"), pytest.param({}, id="qwen-xml")]
)
def test_structural_tag_refuses_what_a_regex_cannot_say(options: dict[str, Any]) -> None:
    from toolgrammar.errors import GrammarError
    from toolgrammar.integrations.vllm import structural_tag

    fmt = "hermes" if options else "qwen-xml"
    with pytest.raises(GrammarError, match="logits processor"):
        structural_tag(_tools(), format=fmt, **options)


def test_xgrammar_regex_rewrites_only_escapes() -> None:
    from toolgrammar.integrations.vllm import xgrammar_regex

    assert xgrammar_regex(r"a\ b\#\&\~") == "a b#&~"
    assert xgrammar_regex("\\\n\\\t") == r"\n\t"
    assert xgrammar_regex(r"\\ \{\}\"[\x00-\x1f]") == r"\\ \{\}\"[\x00-\x1f]"


# ------------------------------------------------------------------------------------------------
# Route 2: the request spec and the processor, without an engine
# ------------------------------------------------------------------------------------------------


def test_extra_args_round_trip_as_dict_and_as_json() -> None:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import extra_args, request_spec

    plain = extra_args(_tools(), tool_choice="required")
    as_json = extra_args(_tools(), tool_choice="required", as_json=True)
    assert isinstance(as_json["toolgrammar"], str)
    a = request_spec(SamplingParams(extra_args=plain))
    b = request_spec(SamplingParams(extra_args=as_json))
    assert a == b
    assert a is not None and a["tool_choice"] == "required"
    assert request_spec(SamplingParams()) is None


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        pytest.param({"tools": [], "tool_choice": "required"}, "needs at least one tool", id="required-no-tools"),
        pytest.param({"tools": [{"type": "function"}]}, "tool", id="bad-tool"),
        pytest.param({"tools": [], "budget": 3}, "unknown key", id="unknown-key"),
        pytest.param({"tool_choice": "auto"}, "needs 'tools'", id="no-tools"),
        pytest.param("{not json", "not JSON", id="bad-json"),
        pytest.param({"tools": [], "tool_choice": "nope"}, "nope", id="unknown-named-tool"),
    ],
)
def test_validate_params_refuses_bad_specs(spec: Any, match: str) -> None:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor

    if isinstance(spec, dict) and spec.get("tool_choice") == "nope":
        spec = {**spec, "tools": _tools()}
    with pytest.raises(ValueError, match=match):
        VllmToolCallLogitsProcessor.validate_params(SamplingParams(extra_args={"toolgrammar": spec}))


def test_validate_params_refuses_both_routes_at_once() -> None:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor, extra_args, structured_outputs

    params = SamplingParams(extra_args=extra_args(_tools()), structured_outputs=structured_outputs(_tools()))
    with pytest.raises(ValueError, match="one route"):
        VllmToolCallLogitsProcessor.validate_params(params)
    VllmToolCallLogitsProcessor.validate_params(SamplingParams())  # untouched requests pass


def _fake_config(*, async_scheduling: bool = False, named: bool = True) -> Any:
    model_config = SimpleNamespace(
        max_model_len=8192,
        logits_processors=["toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor"] if named else None,
        get_vocab_size=lambda: 151_936,
    )
    return SimpleNamespace(
        model_config=model_config, scheduler_config=SimpleNamespace(async_scheduling=async_scheduling)
    )


def _processor(**config: Any) -> Any:
    import torch

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor
    from toolgrammar.vocab import qwen3_vocabulary

    proc = VllmToolCallLogitsProcessor(_fake_config(**config), torch.device("cpu"), False)
    proc._vocab = qwen3_vocabulary()
    return proc


def _params(max_tokens: int = 64, **options: Any) -> Any:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import extra_args

    return SamplingParams(max_tokens=max_tokens, extra_args=extra_args(_tools(), **options))


def _update(batch_size: int, removed=(), added=(), moved=()) -> Any:
    from vllm.v1.sample.logits_processor import BatchUpdate

    return BatchUpdate(batch_size=batch_size, removed=list(removed), added=list(added), moved=list(moved))


def _check_masked(logits: Any, original: Any, proc: Any, constrained: dict[int, Any]) -> None:
    """Constrained rows: finite exactly where the row's cursor allows; other rows untouched."""
    import numpy as np

    from toolgrammar.testing import allowed_ids

    for r in range(logits.shape[0]):
        if r not in constrained:
            assert (logits[r] == original[r]).all(), f"row {r} has no toolgrammar request but was changed"
            continue
        cursor = constrained[r]
        n_tokens = cursor.grammar.table.n_tokens
        expected = np.zeros(logits.shape[1], dtype=bool)
        expected[allowed_ids(cursor.mask(), n_tokens)] = True
        finite = np.isfinite(logits[r].numpy())
        assert (finite == expected).all(), f"row {r}: mask differs from the cursor's"
        assert (logits[r][expected] == original[r][expected]).all(), f"row {r}: allowed logits changed"


def test_batch_bookkeeping_follows_removed_added_moved() -> None:
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import MoveDirectionality

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.runtime.cursor import Cursor

    proc = _processor()
    call = load_qwen3_tokenizer().encode(
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "src', add_special_tokens=False
    )
    outs = [[], [], [], []]
    plain = SamplingParams(max_tokens=64)
    proc.update_state(
        _update(
            4,
            added=[
                (0, _params(64, tool_choice="required"), [1, 2, 3], outs[0]),
                (1, plain, [1, 2, 3], outs[1]),
                (2, _params(32, tool_choice="read_file"), [1, 2, 3], outs[2]),
                (3, plain, [1, 2, 3], outs[3]),
            ],
        )
    )
    assert sorted(proc.rows) == [0, 2]
    outs[0].extend(call)  # row 0 is inside a string argument now
    ref = {0: Cursor(proc.rows[0].cursor.grammar, 64), 2: Cursor(proc.rows[2].cursor.grammar, 32)}
    for t in call:
        ref[0].advance(t)
    logits = torch.randn(4, 151_936)
    original = logits.clone()
    proc.apply(logits)
    _check_masked(logits, original, proc, ref)

    # swap 0 <-> 3, then remove 1 and move 3 -> 1 (vLLM condenses the batch that way)
    proc.update_state(_update(4, moved=[(0, 3, MoveDirectionality.SWAP)]))
    assert sorted(proc.rows) == [2, 3]
    ref = {3: ref[0], 2: ref[2]}
    logits = torch.randn(4, 151_936)
    original = logits.clone()
    proc.apply(logits)
    _check_masked(logits, original, proc, ref)

    proc.update_state(_update(3, removed=[1], moved=[(3, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    assert sorted(proc.rows) == [1, 2]
    ref = {1: ref[3], 2: ref[2]}
    outs[0].append(call[-1])  # the request keeps growing through vLLM's own list
    ref[1].advance(call[-1])
    logits = torch.randn(3, 151_936)
    original = logits.clone()
    proc.apply(logits)
    _check_masked(logits, original, proc, ref)

    # a plain request takes slot 2: the old row there is forgotten
    proc.update_state(_update(3, added=[(2, plain, [1], [])]))
    assert sorted(proc.rows) == [1]
    proc.update_state(_update(0, removed=[1, 0, 2]))
    assert not proc.rows
    assert proc.stats()["errors"] == 0


def test_one_row_on_the_host_matches_the_cursor() -> None:
    """A single constrained row takes the host (numpy) path: same mask, padding included, both mask kinds."""
    import torch

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.runtime.cursor import Cursor

    proc = _processor()
    out: list[int] = []
    proc.update_state(_update(1, added=[(0, _params(64, tool_choice="read_file", reasoning="disabled"), [1], out)]))
    ref = Cursor(proc.rows[0].cursor.grammar, 64)
    prefix = load_qwen3_tokenizer().encode(
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a', add_special_tokens=False
    )
    kinds = set()
    for token in [None, *prefix]:
        if token is not None:
            out.append(token)
            ref.advance(token)
        mask = ref.mask()
        kinds.add("banned" if mask.banned is not None else "allowed" if mask.allowed is not None else "all")
        logits = torch.randn(1, 151_936)
        original = logits.clone()
        proc.apply(logits)
        _check_masked(logits, original, proc, {0: ref})
        assert torch.isinf(logits[0, 151_669:]).all()
    assert {"banned", "allowed"} <= kinds


def test_padding_columns_are_masked_for_constrained_rows_only() -> None:
    import torch

    proc = _processor()
    proc.update_state(_update(2, added=[(0, _params(64, tool_choice="auto"), [1], [])]))
    logits = torch.zeros(2, 151_936)
    proc.apply(logits)
    assert torch.isinf(logits[0, 151_669:]).all()
    assert (logits[1] == 0).all()


def test_a_second_instance_on_the_same_engine_stands_down() -> None:
    import torch

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor

    config = _fake_config()
    first = VllmToolCallLogitsProcessor(config, torch.device("cpu"), False)
    second = VllmToolCallLogitsProcessor(config, torch.device("cpu"), False)
    other = VllmToolCallLogitsProcessor(_fake_config(), torch.device("cpu"), False)
    assert first.active and not second.active and other.active
    second.update_state(_update(1, added=[(0, _params(), [1], [])]))
    assert not second.rows


def test_placeholder_ids_leave_the_row_unconstrained_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    import torch

    proc = _processor(async_scheduling=True, named=False)
    out: list[int] = []
    proc.update_state(_update(1, added=[(0, _params(64, tool_choice="required"), [1], out)]))
    out.append(-1)
    logits = torch.zeros(1, 151_936)
    with caplog.at_level("ERROR", logger="toolgrammar.integrations.vllm"):
        proc.apply(logits)
    assert (logits == 0).all()
    assert proc.stats()["errors"] == 1
    assert "--logits-processors" in caplog.text


def test_a_rejected_token_is_counted_once_and_frees_the_row(caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    proc = _processor()
    out: list[int] = []
    proc.update_state(_update(1, added=[(0, _params(64, tool_choice="read_file", reasoning="disabled"), [1], out)]))
    out.extend(load_qwen3_tokenizer().encode("hello there", add_special_tokens=False))  # a named call must open
    logits = torch.zeros(1, 151_936)
    with caplog.at_level("ERROR", logger="toolgrammar.integrations.vllm"):
        proc.apply(logits)
        out.append(11)
        proc.apply(logits)
    assert (logits == 0).all()
    assert proc.stats()["errors"] == 1
    assert "left the grammar" in caplog.text


def test_a_budget_below_the_first_call_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    proc = _processor()
    with caplog.at_level("WARNING", logger="toolgrammar.integrations.vllm"):
        proc.update_state(_update(2, added=[(0, _params(4, tool_choice="write_file"), [1], [])]))
        proc.update_state(_update(2, added=[(1, _params(4, tool_choice="auto"), [1], [])]))
    assert caplog.text.count("max_tokens=4 is below") == 1


def test_budget_comes_from_max_tokens_and_the_context_left() -> None:
    proc = _processor()
    proc.max_model_len = 100
    proc.update_state(
        _update(
            2,
            added=[(0, _params(64), list(range(10)), []), (1, _params(64), list(range(60)), [])],
        )
    )
    assert proc.rows[0].cursor.max_tokens == 64
    assert proc.rows[1].cursor.max_tokens == 40


def _steps_through_vllm(rows: int, written: list[int], steps: Any, spec: dict[str, Any]) -> tuple[list[Any], Any]:
    """``rows`` requests that wrote ``written`` (with ``spec`` in their toolgrammar spec) and a plain one, through
    the processor step by step (``steps``: each step's logits and the token each row took before it); returns
    each step's constrained rows and the processor. The plain request's row must stay untouched."""
    import torch
    from vllm import SamplingParams

    proc = _processor()
    outs: list[list[int]] = [list(written) for _ in range(rows)]
    plain_out: list[int] = []
    params = _params(64, tool_choice="auto", reasoning="disabled", **spec)
    added = [(r, params, [1, 2, 3], outs[r]) for r in range(rows)]
    proc.update_state(_update(rows + 1, added=[*added, (rows, SamplingParams(max_tokens=64), [1], plain_out)]))
    got = []
    for logits, new in steps:
        for out in outs:
            out.extend(new)
        plain_out.extend(new)
        batch = torch.cat([logits, logits[:1]]) if rows > 1 else logits.clone()
        plain = batch[-1].clone()
        proc.apply(batch)
        if rows > 1:
            assert torch.equal(batch[-1], plain), "the plain request's row was changed"
        got.append(batch[:rows].clone())
    return got, proc


@pytest.mark.parametrize("rows", [1, 3], ids=["host-row", "batched"])
def test_a_stop_after_the_last_brace_closes_the_block_as_in_transformers(rows: int) -> None:
    """close_on_stop in route 2 gives, step for step, the transformers processor's logits bit for bit.

    Step 1: after ``}}`` (only the newline allowed) the model wants to stop; step 2 it prefers ``<``, the
    close in pieces. The stop decided at step 1 closes the block at step 2; with ``close_on_stop: false``
    in the spec ``<`` wins. A plain request in the batch is untouched throughout."""
    import torch

    from toolgrammar.integrations.hf import ToolCallLogitsProcessor
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    tokenizer = load_qwen3_tokenizer()
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}'
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    newline, less, close = (tokenizer.convert_tokens_to_ids(t) for t in ("\u010a", "<", "</tool_call>"))
    gen = torch.Generator().manual_seed(3)
    first = torch.randn(rows, 151_936, generator=gen)
    first[:, eos[0]] = 12.0
    first[:, newline] = 4.0
    second = torch.randn(rows, 151_936, generator=gen)
    second[:, less] = 9.0
    second[:, close] = 2.0
    second[:, eos] = torch.tensor([-1.0, 0.5])
    third = torch.randn(rows, 151_936, generator=gen)
    written = tokenizer.encode(call, add_special_tokens=False)
    steps = ((first, []), (second, [newline]), (third, [close]))

    on, proc = _steps_through_vllm(rows, written, steps, {})
    off, _ = _steps_through_vllm(rows, written, steps, {"close_on_stop": False})
    assert (on[0].argmax(1) == newline).all() and (off[0].argmax(1) == newline).all()
    assert (on[1].argmax(1) == close).all() and (off[1].argmax(1) == less).all()
    assert proc.stats()["stop_closes"] == rows

    hf = ToolCallLogitsProcessor(tokenizer, _tools(), max_new_tokens=64, reasoning="disabled", assistant_prefix=call)
    prompt = torch.tensor([[1, 2, 3, *written]] * rows)
    for (logits, new), mine in zip(steps, on, strict=True):
        prompt = torch.cat([prompt, torch.tensor([new] * rows)], dim=1) if new else prompt
        assert torch.equal(hf(prompt, logits.clone()), mine)
    assert hf.stop_closes == rows


@pytest.mark.parametrize("rows", [1, 3], ids=["host-row", "batched"])
def test_prefix_true_gives_the_transformers_processors_logits(rows: int) -> None:
    """prefix_true in route 2 gives, step for step, the transformers processor's logits bit for bit: inside the
    last string the model wants the quote glued to a comma (masked: no property follows), and with the option the
    quote-led closers get that probability. A plain request in the batch is untouched; off by default."""
    import torch
    from vllm import SamplingParams

    from toolgrammar.integrations.hf import ToolCallLogitsProcessor
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor

    tokenizer = load_qwen3_tokenizer()
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt'
    quote_comma, space, closer = (tokenizer.encode(t, add_special_tokens=False)[0] for t in ('",', " ", '"}}'))
    gen = torch.Generator().manual_seed(4)
    first = torch.randn(rows, 151_936, generator=gen)
    first[:, quote_comma] = 12.0
    first[:, space] = 8.0
    first[:, closer] = 7.5
    second = torch.randn(rows, 151_936, generator=gen)
    written = tokenizer.encode(call, add_special_tokens=False)
    steps = ((first, []), (second, [closer]))

    (on, proc), (off, _) = (_steps_through_vllm(rows, written, steps, spec) for spec in ({"prefix_true": True}, {}))
    assert all(proc.rows[r].prefix_true for r in range(rows))
    assert (on[0].argmax(1) == closer).all() and (off[0].argmax(1) == space).all()
    for poured, plain in zip(on, off, strict=True):
        assert torch.equal(torch.isfinite(poured), torch.isfinite(plain))  # the mask is the mask
    for prefix_true, got in ((True, on), (False, off)):
        hf = ToolCallLogitsProcessor(
            tokenizer, _tools(), max_new_tokens=64, reasoning="disabled", assistant_prefix=call, prefix_true=prefix_true
        )
        prompt = torch.tensor([[1, 2, 3, *written]] * rows)
        for (logits, new), mine in zip(steps, got, strict=True):
            prompt = torch.cat([prompt, torch.tensor([new] * rows)], dim=1) if new else prompt
            assert torch.equal(hf(prompt, logits.clone()), mine)
    with pytest.raises(ValueError, match="prefix_true'\\] must be true or false, got 'yes'"):
        VllmToolCallLogitsProcessor.validate_params(
            SamplingParams(extra_args={"toolgrammar": {"tools": _tools(), "prefix_true": "yes"}})
        )


@pytest.mark.parametrize(("key", "value"), [("close_on_stop", False), ("steer_to_blocks", True)])
def test_processor_options_must_be_booleans_and_share_the_compiled_grammar(key: str, value: bool) -> None:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor, compile_spec, extra_args

    with pytest.raises(ValueError, match=f"{key}'\\] must be true or false, got 'yes'"):
        VllmToolCallLogitsProcessor.validate_params(
            SamplingParams(extra_args={"toolgrammar": {"tools": _tools(), key: "yes"}})
        )
    spec = extra_args(_tools(), **{key: value})["toolgrammar"]
    assert compile_spec(spec) is compile_spec({k: v for k, v in spec.items() if k != key})
    proc = _processor()
    proc.update_state(_update(1, added=[(0, _params(64, **{key: value}), [1], [])]))
    row = proc.rows[0]
    assert (row.close_on_stop, row.points is not None) == ((False, False) if key == "close_on_stop" else (True, True))


def test_lenient_in_a_spec_loads_a_dirty_schema_and_must_be_a_boolean() -> None:
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor, compile_spec, extra_args

    dirty = [{"type": "function", "function": {"name": "area", "parameters": {
        "type": "object", "properties": {"r": {"type": "number", "format": "float"}}, "required": ["r"]}}}]  # fmt: skip
    with pytest.raises(Exception, match="/properties/r/format"):
        extra_args(dirty)
    spec = extra_args(dirty, lenient=True)["toolgrammar"]
    assert compile_spec(spec).tools["area"].parameters["properties"]["r"] == {"type": "number"}
    with pytest.raises(ValueError, match="'lenient'\\] must be true or false, got 'yes'"):
        VllmToolCallLogitsProcessor.validate_params(
            SamplingParams(extra_args={"toolgrammar": {"tools": dirty, "lenient": "yes"}})
        )


FENCE, BRACE, HELLO, OPENER = 73594, 90, 9707, 151657
"""Qwen3 ids of ```` ``` ````, ``{``, ``Hello`` and ``<tool_call>``."""


@pytest.mark.parametrize("batched", [False, True], ids=["host-row", "batched"])
def test_steering_in_route_2_gives_the_transformers_processor_logits(batched: bool) -> None:
    """``steer_to_blocks`` in route 2 gives, step for step, the transformers processor's logits bit for bit.

    Step 1, the start of the turn: the model prefers a code fence, then a bare brace; steered, the mass of
    every other-shape opener is on ``<tool_call>`` (its logit their log-sum-exp and its own), every other
    logit as it was; unsteered the fence wins. Step 2,
    inside the block: masking only. Batched, a second row writes ``Hello`` first and then prefers a fence:
    mid-prose is not a call point, so it is left alone; a plain request's row is untouched throughout."""
    import torch
    from vllm import SamplingParams

    from toolgrammar.integrations.hf import ToolCallLogitsProcessor
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.runtime.steering import call_openers
    from toolgrammar.vocab import qwen3_vocabulary

    rows = 2 if batched else 1
    gen = torch.Generator().manual_seed(5)
    first = torch.randn(rows, 151_936, generator=gen)
    first[0, [FENCE, BRACE, OPENER]] = torch.tensor([10.0, 8.0, 1.0])
    second = torch.randn(rows, 151_936, generator=gen)
    if batched:
        first[1, HELLO] = 30.0
        second[1, FENCE] = 10.0
    steps = ((first, []), (second, [OPENER, HELLO][:rows]))

    def through_vllm(steer: bool) -> tuple[list[torch.Tensor], Any]:
        proc = _processor()
        outs: list[list[int]] = [[] for _ in range(rows)]
        plain_out: list[int] = []
        params = _params(64, tool_choice="auto", reasoning="disabled", steer_to_blocks=steer)
        added = [(r, params, [1, 2, 3], outs[r]) for r in range(rows)]
        proc.update_state(_update(rows + 1, added=[*added, (rows, SamplingParams(max_tokens=64), [1], plain_out)]))
        got = []
        for logits, new in steps:
            for out, token in zip(outs, new, strict=False):
                out.append(token)
            plain_out.extend(new[:1])
            batch = torch.cat([logits, logits[:1]]) if batched else logits.clone()
            plain = batch[-1].clone()
            proc.apply(batch)
            if batched:
                assert torch.equal(batch[-1], plain), "the plain request's row was changed"
            got.append(batch[:rows].clone())
        return got, proc

    on, proc = through_vllm(True)
    off, _ = through_vllm(False)
    assert on[0][0].argmax() == OPENER and off[0][0].argmax() == FENCE
    # Every other-shape opener (```python, {", [{ ...) pools, from the masked logits; every other logit is kept.
    steered = torch.from_numpy(call_openers(qwen3_vocabulary(), "<tool_call>").steered)
    pooled = torch.logsumexp(off[0][0, steered].double(), 0).float()
    assert on[0][0, OPENER] == pooled and (on[0][0, steered[1:]] == -float("inf")).all()
    rest = torch.ones(151_936, dtype=torch.bool)
    rest[steered] = False
    assert torch.equal(on[0][0, rest], off[0][0, rest])
    assert torch.equal(on[1], off[1]), "steering acted inside a block or mid-prose"
    if batched:
        # Row 1 is at a call point at step 1 too (its openers pooled, Hello still far ahead), not at step 2.
        assert on[0][1].argmax() == off[0][1].argmax() == HELLO and on[1][1].argmax() == FENCE
    assert proc.stats()["steered_steps"] == rows  # each row once, at step 1

    hf = ToolCallLogitsProcessor(
        load_qwen3_tokenizer(), _tools(), max_new_tokens=64, reasoning="disabled", steer_to_blocks=True
    )
    prompt = torch.tensor([[1, 2, 3]] * rows)
    for (logits, new), mine in zip(steps, on, strict=True):
        prompt = torch.cat([prompt, torch.tensor([new]).T], dim=1) if new else prompt
        assert torch.equal(hf(prompt, logits.clone()), mine)
    assert hf.steered_steps == proc.stats()["steered_steps"]


def test_steering_a_format_whose_opener_is_not_one_token_masks_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Qwen3's vocabulary has no single token for mistral's ``[TOOL_CALLS]``: the row is masked, not steered."""
    import torch

    from toolgrammar.testing import allowed_ids

    proc = _processor()
    params = _params(64, format="mistral", tool_choice="auto", steer_to_blocks=True)
    with caplog.at_level("ERROR", logger="toolgrammar.integrations.vllm"):
        proc.update_state(_update(1, added=[(0, params, [1], [])]))
    assert "masked but not steered" in caplog.text and "[TOOL_CALLS]" in caplog.text
    row = proc.rows[0]
    assert row.points is None and not row.fresh
    logits = torch.zeros(1, 151_936)
    logits[0, FENCE] = 10.0
    proc.apply(logits)
    allowed = allowed_ids(row.cursor.mask(), row.cursor.grammar.table.n_tokens)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == sorted(allowed.tolist())
    assert logits[0].argmax() == FENCE and proc.stats()["steered_steps"] == 0


# ------------------------------------------------------------------------------------------------
# Fault injection: the processor's incremental state against a row recomputed from scratch
# ------------------------------------------------------------------------------------------------

PREFILL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "'
"""An assistant prefill that opens a ``read_file`` call (the grammar continues inside its string)."""

FAULT_SPECS: tuple[tuple[int, dict[str, Any] | None], ...] = (
    (40, {"tool_choice": "required", "close_on_stop": False}),
    (40, {"tool_choice": "auto", "reasoning": "disabled", "close_on_stop": False, "stop": ["Observation", "}\n"]}),
    (28, {"tool_choice": "read_file", "reasoning": "disabled", "close_on_stop": False}),
    (40, {"tool_choice": "auto", "reasoning": "disabled", "steer_to_blocks": True, "close_on_stop": False}),
    # close_on_stop on (its default): compared on the mask and every logit but the closers'
    (
        40,
        {
            "tool_choice": "required",
            "reasoning": "disabled",
            "after_calls": "text",
            "stop": ["}"],
            "stop_token_ids": [264],
        },
    ),
    (
        24,
        {
            "tool_choice": "auto",
            "reasoning": "disabled",
            "close_on_stop": False,
            "assistant_prefix": PREFILL,
            "stop": ["a"],
        },
    ),
    (40, {"tool_choice": "auto", "steer_to_blocks": True, "stop": ["Obs"]}),  # reasoning enabled
    (28, {"tool_choice": "write_file", "reasoning": "disabled"}),
    (16, None),  # a plain request: never touched
)
"""What the fault-injection batch draws its new requests from: (max_tokens, the toolgrammar spec or ``None``)."""

_FAULT_TOKENS = ('"', "}", "}}", '"}}', "{", "\n", "\n\n", "Obs", "ervation", " a", "a", ".py", "}\n", ":", "```")
_FAULT_SPECIAL = ("<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>")
"""Tokens the fault-injection logits favour (structure, stops, ends), so that blocks open, close and stop."""


class _FaultRequest:
    """One request of the fault-injection batch, as vLLM would hold it, with an independent cursor to replay."""

    def __init__(
        self, max_tokens: int, options: dict[str, Any] | None, prompt: list[int], sibling: _FaultRequest | None = None
    ) -> None:
        from vllm import SamplingParams

        from toolgrammar.integrations.vllm import compile_spec, request_spec
        from toolgrammar.runtime.token_grammar import token_grammar
        from toolgrammar.vocab import qwen3_vocabulary

        self.max_tokens = max_tokens
        self.options = options
        if sibling is not None:  # a sample of the same n > 1 request: vLLM gives them one SamplingParams object
            self.params, self.prompt = sibling.params, sibling.prompt
        else:
            self.params = SamplingParams(max_tokens=max_tokens) if options is None else _params(max_tokens, **options)
            self.prompt = prompt
        self.ids: list[int] = []
        self.seen: list[int] | None = None
        """The output as the processor last consumed it (``None``: not yet); a rewind is due when it is not
        a prefix of ``ids`` any more."""
        self.constrained = options is not None
        self.close_on_stop = options is not None and options.get("close_on_stop", True)
        self.finished = False
        if options is not None:
            spec = request_spec(self.params)
            assert spec is not None
            self.grammar = token_grammar(compile_spec(spec), qwen3_vocabulary())
            self.start = self.grammar.walk_text(spec.get("assistant_prefix", ""))

    def cursor(self) -> Any:
        """A fresh cursor over the output so far."""
        from toolgrammar.runtime.cursor import Cursor

        cursor = Cursor(self.grammar, self.max_tokens, start=self.start)
        for token in self.ids:
            assert cursor.advance(token), "the harness wrote a token the grammar rejects"
        return cursor

    def done(self, cursor: Any) -> bool:
        """Whether vLLM would end the request now (its budget spent, or its turn over)."""
        return len(self.ids) >= self.max_tokens or (self.constrained and cursor.finished)


def _allowed_token(cursor: Any, rng: Any, favoured: list[int]) -> int | None:
    """A token the cursor allows (a favoured one half the time, when one is allowed); ``None`` when finished."""
    import numpy as np

    from toolgrammar.testing import allowed_ids

    mask = cursor.mask()
    if mask is None or cursor.remaining == 0:
        return None
    allowed = allowed_ids(mask, cursor.grammar.table.n_tokens)
    liked = np.intersect1d(favoured, allowed).tolist() if rng.random() < 0.5 else []
    return rng.choice(liked) if liked else int(allowed[rng.randrange(len(allowed))])


def _reference_row(request: _FaultRequest, row: Any) -> Any:
    """Process ``row`` (a ``(1, width)`` view, in place) as a fresh processor does, fed the request's whole
    output as one new request; returns that processor."""
    ref = _processor()
    ref.update_state(_update(1, added=[(0, request.params, request.prompt, list(request.ids))]))
    ref.apply(row)
    assert ref.stats()["errors"] == 0
    return ref


def _same_row(got: Any, want: Any, ignore: Any = None) -> bool:
    """Equal ``-inf`` pattern, and the same finite logits (up to float rounding of the pooled ones)."""
    import torch

    dead = got == -float("inf")
    if not torch.equal(dead, want == -float("inf")):
        return False
    live = ~dead
    if ignore is not None and len(ignore):
        live[torch.as_tensor(ignore)] = False
    return torch.allclose(got[live], want[live], rtol=1e-6, atol=1e-6)


def _run_faults(seed: int, steps: int) -> dict[str, int]:
    """Drive one processor through ``steps`` random batch updates and output faults; check every row every step.

    Events (vLLM's order: removed, added, moved): a request preempted (kept here, to come back with the
    same ``SamplingParams`` object, its output possibly grown meanwhile, trimmed, or handed over as a new
    list as async scheduling does) or finished; a new request (a spec of :data:`FAULT_SPECS`, or a sibling
    sharing another request's ``SamplingParams`` as the samples of an ``n > 1`` request do); a preempted
    one re-added; a move or a swap. As vLLM does, a removed slot that an add or a one-way move fills again
    is mostly left out of ``removed``. Then, in the output lists vLLM owns: a trim (``del ids[k:]``) or
    the last tokens replaced in place. After each ``apply`` the whole batch must equal the same logits
    with each row processed by :func:`_reference_row` (where it does not: every row's ``-inf`` pattern,
    and every finite logit up to rounding but, where ``close_on_stop`` carries a probability from the
    past, the closers'), and each row samples its next token from its processed logits. Returns the
    counts of what happened."""
    import random

    import torch
    from vllm.v1.sample.logits_processor import MoveDirectionality

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    tokenizer = load_qwen3_tokenizer()
    favoured = [tokenizer.encode(t, add_special_tokens=False)[0] for t in _FAULT_TOKENS]
    favoured += [tokenizer.convert_tokens_to_ids(t) for t in _FAULT_SPECIAL]
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    proc = _processor()
    width, max_rows = 151_936, 6
    buffers = torch.empty(3, max_rows, width)
    slots: dict[int, _FaultRequest] = {}
    parked: list[_FaultRequest] = []
    counts = dict.fromkeys(("requests", "rewinds", "readds", "trims", "replaced", "moves", "siblings", "checked"), 0)

    for _ in range(steps):
        removed: list[int] = []
        added: list[tuple[Any, ...]] = []
        moved: list[tuple[int, int, Any]] = []
        for index, request in list(slots.items()):  # a finished request leaves the batch
            if request.finished:
                removed.append(index)
                del slots[index]
        if slots and rng.random() < 0.2:  # preempted (or aborted: then it never comes back)
            index = rng.choice(sorted(slots))
            request = slots.pop(index)
            removed.append(index)
            if rng.random() < 0.8:
                parked.append(request)
        free = [i for i in range(max_rows) if i not in slots]
        if free and (not slots or rng.random() < 0.35):
            index = rng.choice(free)
            if parked and rng.random() < 0.5:
                request = parked.pop(rng.randrange(len(parked)))
                counts["readds"] += 1
                if request.constrained:
                    grow = rng.choice((0, 0, 1, 3))
                    for _ in range(grow):  # the output grew while it was away
                        token = _allowed_token(request.cursor(), rng, favoured)
                        if token is None or request.done(request.cursor()):
                            break
                        request.ids.append(token)
                    if request.ids and rng.random() < 0.2:  # trimmed while it was away (the same list)
                        del request.ids[rng.randrange(len(request.ids)) :]
                        counts["trims"] += 1
                    elif request.ids and rng.random() < 0.3:  # async scheduling: a resumed request gets a new list
                        request.ids = list(request.ids)
                    request.finished = request.done(request.cursor())
            else:
                max_tokens, options = rng.choice(FAULT_SPECS)
                others = [r for r in [*slots.values(), *parked] if r.constrained]
                sibling = rng.choice(others) if others and rng.random() < 0.25 else None
                if sibling is not None:
                    max_tokens, options = sibling.max_tokens, sibling.options
                    counts["siblings"] += 1
                request = _FaultRequest(max_tokens, options, list(range(rng.randrange(1, 9))), sibling)
                counts["requests"] += request.constrained
            slots[index] = request
            added.append((index, request.params, request.prompt, request.ids))
        if slots and rng.random() < 0.25:
            a = rng.choice(sorted(slots))
            if rng.random() < 0.5:
                b = rng.choice([i for i in range(max_rows) if i != a])
                slots[a], slots[b] = slots.get(b), slots[a]
                if slots[a] is None:
                    del slots[a]
                moved.append((a, b, MoveDirectionality.SWAP))
            else:
                free = [i for i in range(max_rows) if i not in slots]
                if free:
                    b = rng.choice(free)
                    slots[b] = slots.pop(a)
                    moved.append((a, b, MoveDirectionality.UNIDIRECTIONAL))
            counts["moves"] += bool(moved)
        # vLLM leaves out of `removed` a slot that an add or a one-way move fills again (it pops it).
        refilled = {a[0] for a in added} | {b for _, b, d in moved if d == MoveDirectionality.UNIDIRECTIONAL}
        removed = [i for i in removed if i not in refilled or rng.random() < 0.3]
        proc.update_state(_update(len(slots), removed=removed, added=added, moved=moved))
        assert sorted(proc.rows) == sorted(i for i, r in slots.items() if r.constrained)
        assert all(proc.rows[i].output_ids is r.ids for i, r in slots.items() if r.constrained)

        # vLLM changes outputs in place at their end: a trim, or its last few tokens replaced.
        for request in slots.values():
            if not request.constrained or not request.ids or rng.random() > 0.08:
                continue
            if rng.random() < 0.5:
                del request.ids[rng.randrange(len(request.ids)) :]
                counts["trims"] += 1
            else:
                keep = len(request.ids) - rng.randint(1, min(len(request.ids), 8))
                del request.ids[keep:]
                cursor = request.cursor()
                for _ in range(rng.randint(1, 3)):
                    token = _allowed_token(cursor, rng, favoured)
                    if token is None:
                        break
                    cursor.advance(token)
                    request.ids.append(token)
                counts["replaced"] += 1
            request.finished = request.done(request.cursor())

        if not slots:
            continue
        rows = max(slots) + 1
        # Preallocated: fresh 600 kB tensors at every step and row cost more than the rest here.
        logits, original, reference = buffers[0, :rows], buffers[1, :rows], buffers[2, :rows]
        torch.randn(rows, width, generator=gen, out=logits)
        logits[:, favoured] += torch.rand(rows, len(favoured), generator=gen) * 14.0
        original.copy_(logits)
        reference.copy_(logits)
        refs = {}
        for index, request in slots.items():
            if request.constrained:
                if request.seen is not None and request.ids[: len(request.seen)] != request.seen:
                    counts["rewinds"] += 1  # the processor rewinds a row whose consumed output changed
                request.seen = list(request.ids)
                refs[index] = _reference_row(request, reference[index : index + 1])
        proc.apply(logits)
        counts["checked"] += len(refs)
        if not torch.equal(logits, reference):  # pooled logits rounded apart, or a close decision carried
            for index in range(rows):
                request = slots.get(index)
                if request is None or not request.constrained:
                    assert torch.equal(logits[index], original[index]), f"row {index} is not a toolgrammar row"
                    continue
                closers = refs[index].rows[0].cursor.closing_tokens() if request.close_on_stop else None
                assert _same_row(logits[index], reference[index], closers), f"row {index}: {request.params.extra_args}"
        for index, request in slots.items():
            if request.finished:
                continue
            # Sampled from the processed row (its 32 best logits: a full-vocabulary multinomial is slow on the CPU).
            best, ids = torch.topk(logits[index], 32)
            token = int(ids[torch.multinomial(torch.softmax(best, 0), 1, generator=gen)])
            request.ids.append(token)
            request.finished = request.done(request.cursor()) if request.constrained else request.done(None)
            if request.constrained and token in (151643, 151645):
                assert request.finished, "an end-of-turn token was sampled where the grammar goes on"
        stats = proc.stats()
        assert stats["errors"] == 0
        assert stats["requests"] == counts["requests"]
        assert stats["rewinds"] == counts["rewinds"]
    return counts


@pytest.mark.parametrize("seed", range(4))
def test_fault_injection_keeps_every_row_equal_to_a_fresh_one(seed: int) -> None:
    """A long random run of adds, removals, re-adds, moves, swaps, trims and replaced tokens: every step,
    every row equals the same request recomputed from scratch; requests counted once, rewinds counted."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many small ops on 600 kB rows: a second thread only waits (3x slower on a busy CPU)
    try:
        counts = _run_faults(seed, steps=120)
    finally:
        torch.set_num_threads(threads)
    # Honest coverage: each fault kind happened, and many rows were compared.
    assert counts["checked"] >= 250, counts
    for kind in ("rewinds", "readds", "trims", "replaced", "moves"):
        assert counts[kind] >= 2, counts


def _encode(text: str) -> list[int]:
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    return load_qwen3_tokenizer().encode(text, add_special_tokens=False)


def _fresh_row(params: Any, output: list[int], logits: Any) -> Any:
    """``logits`` (one row) as a fresh processor masks it for a new request with ``output`` so far."""
    ref = _processor()
    ref.update_state(_update(1, added=[(0, params, [1, 2, 3], list(output))]))
    row = logits.unsqueeze(0).clone()
    ref.apply(row)
    return row[0]


def test_a_preempted_request_gets_its_row_back_where_vllm_refills_its_slot() -> None:
    """vLLM removes an unscheduled (preempted) request and adds it back later with the same ``SamplingParams``.
    A slot that an add or a one-way move fills again is not listed in ``removed`` (vLLM pops it), so the row
    found there is parked as well. Back, the request keeps its row: counted once, its cursor goes on, and
    its close_on_stop decision too (step for step the same logits as a request that was never away)."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import MoveDirectionality

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    tokenizer = load_qwen3_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    newline, less, close = (tokenizer.convert_tokens_to_ids(t) for t in ("\u010a", "<", "</tool_call>"))
    written = _encode('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}')
    gen = torch.Generator().manual_seed(11)
    first = torch.randn(151_936, generator=gen)
    first[[eos, newline]] = torch.tensor([12.0, 4.0])  # the model wants to stop after the last brace
    second = torch.randn(151_936, generator=gen)
    second[[less, close]] = torch.tensor([9.0, 2.0])  # and then prefers "<": the carried stop closes

    filler = torch.randn(151_936, generator=gen)  # the other rows' logits

    def run(preempt: bool) -> tuple[list[Any], Any, Any]:
        proc = _processor()
        out = list(written)
        params = _params(64, tool_choice="auto", reasoning="disabled")
        other = _params(64, tool_choice="required")
        proc.update_state(_update(2, added=[(0, other, [1], []), (1, params, [1, 2, 3], out)]))
        row = proc.rows[1]
        got = []
        batch = torch.stack([filler, first])
        proc.apply(batch)
        got.append(batch[1].clone())
        out.append(newline)
        if preempt:
            # Step 2: ours (slot 1) is preempted, a plain request takes its slot: vLLM lists no removal.
            proc.update_state(_update(2, added=[(1, SamplingParams(max_tokens=8), [1], [])]))
            assert sorted(proc.rows) == [0]
            proc.apply(torch.stack([filler, filler]))
            # Step 3: the other request ends; condensing, vLLM moves the plain one down over its slot.
            proc.update_state(_update(1, moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
            assert not proc.rows
            proc.apply(torch.stack([filler]))
            # Step 4: ours is back, appended at slot 1.
            proc.update_state(_update(2, added=[(1, params, [1, 2, 3], out)]))
            assert proc.rows[1] is row
        batch = torch.stack([filler, second])
        proc.apply(batch)
        got.append(batch[1].clone())
        return got, proc, row

    stayed, proc_stayed, _ = run(False)
    back, proc_back, row = run(True)
    for a, b in zip(stayed, back, strict=True):
        assert torch.equal(a, b)
    assert back[1].argmax() == close, "the stop decided before the preemption no longer closes the block"
    assert row.cursor.n_tokens == len(written) + 1 and _host_closing(row.closing) > 0.0
    assert proc_back.stats()["requests"] == proc_stayed.stats()["requests"] == 2
    assert proc_back.stats()["rewinds"] == 0 and proc_back.stats()["errors"] == 0


@pytest.mark.parametrize("async_list", [False, True], ids=["same-list", "new-list"])
def test_samples_sharing_one_sampling_params_each_get_their_own_row_back(async_list: bool) -> None:
    """vLLM gives the samples of an ``n > 1`` request (no seed) one ``SamplingParams`` object. Two of them,
    both away and back in the other order, each get their own row: told apart by their output list (or,
    handed a new list as under async scheduling, by the tokens their row consumed). Their last 8 tokens
    are the same, so a mix-up would not even rewind: it would mask one call as the other."""
    import torch
    from vllm import SamplingParams

    from toolgrammar.runtime.cursor import Cursor

    x = " x" * 12
    write = _encode('<tool_call>\n{"name": "write_file", "arguments": {"path": "' + x)
    read = _encode('<tool_call>\n{"name": "read_file", "arguments": {"path": "' + x)
    read += _encode(" x") * (len(write) - len(read))
    assert len(read) == len(write) and read[-8:] == write[-8:]
    params = _params(64, tool_choice="required", reasoning="disabled")
    outs = {"write": list(write), "read": list(read)}
    proc = _processor()
    proc.update_state(_update(2, added=[(0, params, [1], outs["write"]), (1, params, [1], outs["read"])]))
    proc.apply(torch.zeros(2, 151_936))
    plain = SamplingParams(max_tokens=4)
    proc.update_state(_update(2, added=[(0, plain, [1], []), (1, plain, [1], [])]))  # both away
    assert not proc.rows
    back = {k: (list(v) if async_list else v) for k, v in outs.items()}
    proc.update_state(_update(2, added=[(0, params, [1], back["read"]), (1, params, [1], back["write"])]))
    grammar = proc.rows[0].cursor.grammar
    quote = _encode('"')[0]
    ref = {}
    for index, key in ((0, "read"), (1, "write")):
        ref[index] = Cursor(grammar, 64)
        assert all(ref[index].advance(token) for token in [*outs[key], quote])
        back[key].append(quote)  # both close the path: write_file must go on to "content", read_file close
    logits = torch.randn(2, 151_936)
    original = logits.clone()
    proc.apply(logits)
    _check_masked(logits, original, proc, ref)
    assert proc.stats()["requests"] == 2 and proc.stats()["rewinds"] == 0 and proc.stats()["errors"] == 0


def test_a_trimmed_or_rewritten_output_rewinds_the_row_to_a_fresh_ones_mask() -> None:
    """vLLM trims a request's output in place (a failed KV load) or replaces its last tokens: the row rewinds
    to what it still shares with the output, and masks exactly as a row fed that output from scratch."""
    import torch

    params = _params(48, tool_choice="auto", reasoning="disabled", stop=["Observation"], steer_to_blocks=True)
    out = _encode('Let me look. Obs<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}')
    proc = _processor()
    proc.update_state(_update(1, added=[(0, params, [1, 2, 3], out)]))
    gen = torch.Generator().manual_seed(4)
    steps = [
        lambda: out.__delitem__(slice(5, None)),  # back into the free text: "Let me look. Obs" ...
        lambda: out.__delitem__(slice(3, None)),
        lambda: out.extend(_encode(" Obs")),  # grows again (a new tail for the stop)
        lambda: out.__setitem__(-1, _encode(" Ob")[0]),  # the last token replaced, same length
        lambda: out.__delitem__(slice(0, None)),  # trimmed to nothing: a call point again (steering)
        lambda: out.extend(_encode("<tool_call>\n{")),
    ]
    rewinds = 0
    for change in [lambda: None, *steps]:
        before = list(out)
        change()
        rewinds += bool(before) and out[: len(before)] != before
        logits = torch.randn(1, 151_936, generator=gen)
        logits[0, _encode("ervation")[0]] = 20.0
        want = _fresh_row(params, out, logits[0])
        proc.apply(logits)
        assert torch.equal(logits[0], want), f"after {out}"
    assert rewinds == 4
    assert proc.stats()["rewinds"] == rewinds and proc.stats()["errors"] == 0 and proc.stats()["requests"] == 1


def test_log_once_keys_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """1000 distinct budget warnings (a named tool whose call needs over 1000 tokens, max_tokens 1..1000): each
    logged once, the processor remembers the last 256 keys only; a recent key is not logged again, an
    evicted one is."""
    from vllm import SamplingParams

    from toolgrammar.integrations.vllm import _MAX_LOGGED

    digits = "".join(str(i % 10) for i in range(1100))  # Qwen3 writes digits one token each
    tools = [{"type": "function", "function": {"name": "pin", "parameters": {
        "type": "object", "properties": {"pin": {"const": digits}}, "required": ["pin"]}}}]  # fmt: skip
    spec = {"tools": tools, "tool_choice": "pin", "reasoning": "disabled"}
    proc = _processor()

    def add(budget: int) -> None:
        params = SamplingParams(max_tokens=budget, extra_args={"toolgrammar": spec})
        proc.update_state(_update(1, added=[(0, params, [1], [])]))

    with caplog.at_level("WARNING", logger="toolgrammar.integrations.vllm"):
        for budget in range(1, 1001):
            add(budget)
        assert caplog.text.count("is below the") == 1000
        assert len(proc._logged) == _MAX_LOGGED == 256
        add(1000)  # recent: remembered
        assert caplog.text.count("is below the") == 1000
        add(1)  # evicted long ago: logged again
        assert caplog.text.count("is below the") == 1001
    assert len(proc._logged) <= 256


@pytest.mark.parametrize("rows", [1, 3], ids=["host-row", "batched"])
@pytest.mark.parametrize("kind", ["string", "token-id"])
def test_a_stop_where_the_turn_may_end_goes_to_the_end_token_and_nowhere_else(rows: int, kind: str) -> None:
    """``stop: ["Observation"]`` under tool_choice auto: after free text ending in ``Obs``, the token that
    completes the stop (``ervation``) gives its probability to the best end-of-turn token (its logit the
    log-sum-exp of the two) and is masked; every other logit is bit for bit the one without the stop. Inside
    a block (a path that ends in ``Obs``) the same token is text: untouched. ``stop_token_ids`` likewise."""
    import torch

    from toolgrammar.runtime.stops import stop_rule
    from toolgrammar.vocab import qwen3_vocabulary

    ervation = _encode("ervation")[0]
    stop = {"stop": ["Observation"]} if kind == "string" else {"stop_token_ids": [ervation]}
    banned = stop_rule(qwen3_vocabulary(), stop.get("stop", []), stop.get("stop_token_ids", [])).banned(b"Obs")
    ends = [151643, 151645]
    free = _encode("Let me check. Obs")
    block = _encode('<tool_call>\n{"name": "read_file", "arguments": {"path": "Obs')
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(rows, 151_936, generator=gen)
    logits[:, torch.tensor(banned)] = -float("inf")  # scripted: of the stop's tokens only ervation is live
    logits[:, ervation] = 6.0
    logits[:, ends] = torch.tensor([-1.0, 1.5])

    def run(output: list[int], with_stop: bool) -> Any:
        proc = _processor()
        params = _params(64, tool_choice="auto", reasoning="disabled", **(stop if with_stop else {}))
        proc.update_state(_update(rows, added=[(r, params, [1, 2, 3], list(output)) for r in range(rows)]))
        batch = logits.clone()
        proc.apply(batch)
        return batch

    on, off = run(free, True), run(free, False)
    assert torch.isfinite(off[:, ervation]).all() and torch.isfinite(off[:, ends]).all()
    expected = torch.logsumexp(torch.tensor([1.5, 6.0], dtype=torch.float64), 0).float()
    assert torch.allclose(on[:, ends[1]], expected.expand(rows), rtol=1e-7, atol=0)
    assert (on[:, ervation] == -float("inf")).all() and torch.equal(on[:, ends[0]], off[:, ends[0]])
    rest = torch.ones(151_936, dtype=torch.bool)
    rest[[ervation, ends[1]]] = False
    assert torch.equal(on[:, rest], off[:, rest])
    assert on[0].argmax() == ends[1] and off[0].argmax() == ervation

    inside_on, inside_off = run(block, True), run(block, False)
    assert torch.equal(inside_on, inside_off), "the stop rule acted inside a block"
    assert inside_on[0].argmax() == ervation


@pytest.mark.parametrize("after_calls", ["end", "text"])
def test_a_stop_string_inside_the_call_never_cuts_it(after_calls: str) -> None:
    """``stop: ["}"]`` with tool_choice required, and a model that loves ``}``: greedy decoding writes the
    whole call (its braces are text there), and where the turn may end a ``}`` ends it instead."""
    import torch

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.runtime.cursor import Cursor
    from toolgrammar.turn.parser import parse_turn
    from toolgrammar.vocab import qwen3_vocabulary

    tokenizer = load_qwen3_tokenizer()
    texts = qwen3_vocabulary().token_bytes
    braces = torch.tensor([i for i, t in enumerate(texts) if b"}" in t])
    budget = 64
    params = _params(budget, tool_choice="required", reasoning="disabled", after_calls=after_calls, stop=["}"])
    ended = 0
    logits = torch.empty(1, 151_936)
    for seed in range(3):
        proc = _processor()
        out: list[int] = []
        proc.update_state(_update(1, added=[(0, params, [1], out)]))
        cursor = Cursor(proc.rows[0].cursor.grammar, budget)  # follows the row independently
        gen = torch.Generator().manual_seed(seed)
        while len(out) < budget and not cursor.finished:
            torch.randn(1, 151_936, generator=gen, out=logits)
            logits[0, braces] += 8.0  # stop-biased
            proc.apply(logits)
            out.append(int(logits[0].argmax()))
            assert cursor.advance(out[-1])
        # The turn ended (or the budget did, where the turn may end): never inside the call.
        assert cursor.finished or cursor.grammar.eos_allowed[cursor.state]
        text = tokenizer.decode(out, skip_special_tokens=False).removesuffix("<|im_end|>").removesuffix("<|endoftext|>")
        turn = parse_turn(text, _tools())
        assert len(turn.tool_calls) >= 1 and not turn.errors and all(b.closed for b in turn.blocks), text
        assert "}" not in text[text.rindex("</tool_call>") :], text
        ended += cursor.finished
        assert proc.stats()["errors"] == 0
    assert ended >= 1, "no run ended its turn on a stop"


def test_an_assistant_prefix_starts_the_grammar_after_it(caplog: pytest.LogCaptureFixture) -> None:
    """``assistant_prefix``: the row masks as a cursor started at ``walk_text(prefix)``, step by step; a prefix
    the grammar rejects leaves the row unconstrained, with one error logged and counted."""
    import torch

    from toolgrammar.automata.nodes import DEAD
    from toolgrammar.runtime.cursor import Cursor

    proc = _processor()
    out: list[int] = []
    params = _params(32, tool_choice="auto", close_on_stop=False, assistant_prefix=PREFILL)
    proc.update_state(_update(2, added=[(1, params, [1], out)]))
    grammar = proc.rows[1].cursor.grammar
    start = grammar.walk_text(PREFILL)
    assert start not in (DEAD, grammar.start)
    tokens = Cursor(grammar)
    assert all(tokens.advance(t) for t in _encode(PREFILL)) and tokens.state == start  # the prefill's tokens agree
    ref = {1: Cursor(grammar, 32, start=start)}
    for token in [None, *_encode('src/a.py"}}\n</tool_call>')]:
        if token is not None:
            out.append(token)
            assert ref[1].advance(token)
        logits = torch.randn(2, 151_936)
        original = logits.clone()
        proc.apply(logits)
        _check_masked(logits, original, proc, ref)
    assert proc.stats()["errors"] == 0

    dead = '<tool_call>\n{"name": "nope'
    proc = _processor()
    with caplog.at_level("ERROR", logger="toolgrammar.integrations.vllm"):
        proc.update_state(_update(1, added=[(0, _params(32, tool_choice="auto", assistant_prefix=dead), [1], [])]))
    assert not proc.rows
    logits = torch.randn(1, 151_936)
    original = logits.clone()
    proc.apply(logits)
    assert torch.equal(logits, original)
    assert proc.stats()["errors"] == 1 and caplog.text.count("is not the start of a turn") == 1


# ------------------------------------------------------------------------------------------------
# The real engine
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_vllm_both_routes(tmp_path: Path) -> None:
    """One vLLM start on the CPU, a sampled batch through both routes at several budgets, strict parse."""
    out = tmp_path / "results.json"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, "--driver", str(out), "--model-dir", str(tmp_path / "model")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        pytest.fail(
            f"driver failed ({proc.returncode}) after {elapsed:.0f} s:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    results = json.loads(out.read_text())
    summary = results["summary"]
    print(json.dumps(summary, indent=1))  # shown with -s and in the CI log on failure

    lp = [r for r in results["rows"] if r["route"] == "processor"]
    so = [r for r in results["rows"] if r["route"] == "structured"]
    assert len(lp) == len(so) == len(BUDGETS) * len(CHOICES) * len(SEEDS)

    # Route 2: zero errors at every budget, nothing cut, every required/named request made its call.
    bad = [r for r in lp if r["errors"] or r["unclosed"]]
    assert not bad, json.dumps(bad[:3], indent=1)
    for r in lp:
        assert r["n_tokens"] <= r["budget"]
        if r["choice"] != "auto":
            assert r["calls"] >= 1, f"{r['choice']} request made no call: {r['text'][:200]!r}"
        if r["choice"] in ("run_tests", "write_file"):
            assert r["text"].startswith('<tool_call>\n{"name": "' + r["choice"] + '"'), r["text"][:200]
    assert results["processor_stats"], "no processor ran inside the engine"
    assert sum(s["active"] for s in results["processor_stats"]) == 1, results["processor_stats"]
    assert sum(s["errors"] for s in results["processor_stats"]) == 0

    # Route 1: zero errors in every block that closed; the budget cuts some (reported, not failed).
    closed_bad = [r for r in so if r["closed_errors"]]
    assert not closed_bad, json.dumps(closed_bad[:3], indent=1)
    assert any(r["calls"] for r in so), "the structured-outputs route produced no call at all"


@pytest.mark.slow
def test_example_runs_as_documented() -> None:
    """examples/vllm_offline.py, as its docstring says to run it: the processor's call is valid."""
    example = TOOLS_FILE.parents[1] / "vllm_offline.py"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    proc = subprocess.run([sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    sections = proc.stdout.split("--- ")
    processor = next(s for s in sections if s.startswith("logits processor"))
    assert "  call: write_file(" in processor, proc.stdout
    assert "  error:" not in processor, proc.stdout
    assert any(s.startswith("structured outputs") for s in sections), proc.stdout


# ------------------------------------------------------------------------------------------------
# Driver (run as a script, in its own process: vLLM spawns workers)
# ------------------------------------------------------------------------------------------------


def build_requests(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch: every tool choice x budget x seed, the same for every route."""
    return [{"choice": c, "budget": b, "seed": 1000 * s + b} for c in CHOICES for b in BUDGETS for s in SEEDS]


def judge(text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The strict parser's verdict on one output."""
    from toolgrammar.turn.parser import parse_turn

    turn = parse_turn(text, tools)
    return {
        "calls": len(turn.tool_calls),
        "blocks": len(turn.blocks),
        "unclosed": sum(not b.closed for b in turn.blocks),
        "errors": [e.kind for e in turn.errors],
        "closed_errors": [b.error.kind for b in turn.blocks if b.closed and b.error is not None],
    }


def _driver(out: Path, model_dir: Path) -> None:
    from vllm import LLM, SamplingParams

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.integrations.vllm import VllmToolCallLogitsProcessor, extra_args, structured_outputs
    from toolgrammar.testing.vllm_server import write_tiny_random_qwen3

    tools = _tools()
    write_tiny_random_qwen3(model_dir)
    tokenizer = load_qwen3_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Read a.py, then run the tests."}],
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
    )
    t0 = time.monotonic()
    llm = LLM(
        model=str(model_dir),
        logits_processors=[VllmToolCallLogitsProcessor],
        gpu_memory_utilization=0.2,
        max_model_len=4096,
        dtype="bfloat16",
        enforce_eager=True,
        seed=0,
    )
    startup = time.monotonic() - t0
    requests = build_requests(tools)
    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    for route in ("processor", "structured"):
        params = []
        for req in requests:
            options = request_options(req["choice"])
            common = {"max_tokens": req["budget"], "temperature": 1.0, "seed": req["seed"]}
            if route == "processor":
                params.append(SamplingParams(**common, extra_args=extra_args(tools, **options)))
            else:
                params.append(SamplingParams(**common, structured_outputs=structured_outputs(tools, **options)))
        t = time.monotonic()
        outputs = llm.generate([prompt] * len(params), params, use_tqdm=False)
        timings[route] = time.monotonic() - t
        for req, output in zip(requests, outputs, strict=True):
            completion = output.outputs[0]
            rows.append(
                {
                    **req,
                    "route": route,
                    "text": completion.text,
                    "n_tokens": len(completion.token_ids),
                    "finish_reason": completion.finish_reason,
                    **judge(completion.text, tools),
                }
            )
    stats = [s for per_worker in llm.collective_rpc(_worker_stats) for s in per_worker]
    summary: dict[str, Any] = {
        "startup_s": round(startup, 1),
        "generate_s": {k: round(v, 1) for k, v in timings.items()},
    }
    for route in ("processor", "structured"):
        for budget in BUDGETS:
            sel = [r for r in rows if r["route"] == route and r["budget"] == budget]
            summary[f"{route}@{budget}"] = {
                "n": len(sel),
                "with_call": sum(r["calls"] > 0 for r in sel),
                "cut_by_budget": sum(r["unclosed"] > 0 for r in sel),
                "errors": sum(len(r["errors"]) for r in sel),
                "closed_errors": sum(len(r["closed_errors"]) for r in sel),
            }
    out.write_text(json.dumps({"summary": summary, "rows": rows, "processor_stats": stats}, indent=1))
    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None:  # stop the engine processes now rather than at interpreter exit
        core.shutdown()


def _worker_stats(worker: Any) -> list[dict[str, Any]]:
    """Run by ``LLM.collective_rpc`` in each worker process: the processors living there."""
    from toolgrammar.integrations.vllm import processor_stats

    return processor_stats()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", type=Path, required=True, help="write the results JSON here")
    parser.add_argument("--model-dir", type=Path, required=True, help="where to save the tiny model")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc with a function
    _driver(args.driver, args.model_dir)


def test_the_entry_point_registers_the_tool_parsers_lazily() -> None:
    """``vllm.general_plugins`` -> ``register_tool_parsers``: the names resolve to toolgrammar's parsers."""
    from importlib.metadata import entry_points

    from vllm.tool_parsers import ToolParserManager

    (plugin,) = [e for e in entry_points(group="vllm.general_plugins") if e.value.startswith("toolgrammar.")]
    plugin.load()()
    from toolgrammar.formats import FORMATS
    from toolgrammar.integrations.vllm_plugin import TOOL_PARSERS, tool_parsers
    from toolgrammar.integrations.vllm_tool_parser import ToolgrammarToolParser

    # One parser per registered format, named from the format (``-`` and ``.`` as ``_``), the first two by hand.
    assert {"toolgrammar_hermes", "toolgrammar_qwen_xml", "toolgrammar_deepseek_v3_1", "toolgrammar_gpt_oss"} <= set(
        TOOL_PARSERS
    )
    assert sorted(format_name for format_name, _ in tool_parsers().values()) == sorted(FORMATS)
    for name, (format_name, _) in tool_parsers().items():
        cls = ToolParserManager.get_tool_parser(name)
        assert issubclass(cls, ToolgrammarToolParser)
        assert cls.format_name == format_name
        assert cls.supports_required_and_named is False  # vLLM must not force its JSON-array schema


def _parser_request(fmt: str, *, constrained: bool) -> Any:
    """A chat request as the tool parser sees it after ``adjust_request`` (``constrained``: its spec is in
    ``vllm_xargs``) or without it."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from toolgrammar.integrations.serving import constraint_spec
    from toolgrammar.integrations.vllm import EXTRA_ARGS_KEY

    xargs = (
        {EXTRA_ARGS_KEY: json.dumps(constraint_spec(_tools(), format=fmt, tool_choice="auto"))} if constrained else None
    )
    return ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=_tools(), vllm_xargs=xargs
    )


@pytest.mark.parametrize("constrained", [True, False], ids=["constrained", "unconstrained"])
def test_every_format_s_parser_streams_what_it_parses_whole(constrained: bool) -> None:
    """Each ``toolgrammar_<format>`` parser, fed its format's turn three characters at a time: content with no
    markup, and calls as OpenAI deltas (first: index, id, type, name; then argument fragments only), adding up to
    what ``extract_tool_calls`` returns for the whole turn. A constrained request streams the arguments in
    fragments; one the parser did not adjust gets each call whole."""
    from toolgrammar.formats import get_format
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.integrations.vllm_plugin import tool_parsers
    from toolgrammar.integrations.vllm_tool_parser import PARSER_CLASSES

    tokenizer = load_qwen3_tokenizer()
    calls = [ToolCall("read_file", {"path": "src/a b.py"}), ToolCall("run_tests", {"path": "tests/x"})]
    for name, (format_name, class_name) in tool_parsers().items():
        fmt = get_format(format_name)
        text = "Reading both. " + fmt.canonical_calls(calls)
        request = _parser_request(format_name, constrained=constrained)
        whole = PARSER_CLASSES[class_name](tokenizer).extract_tool_calls(text, request)
        assert whole.content == "Reading both.", (name, whole.content)
        expected = [(tc.function.name, tc.function.arguments) for tc in whole.tool_calls]
        assert expected == [(c.name, c.arguments_json()) for c in calls], name

        parser = PARSER_CLASSES[class_name](tokenizer)
        content, got, ids, pieces = "", [], set(), 0
        chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
        deltas = [parser.extract_tool_calls_streaming("", "", c, [], [], [], request) for c in chunks]
        for delta in [*deltas, parser.finish_streaming()]:
            if delta is None:
                continue
            content += delta.content or ""
            for tc in delta.tool_calls:
                if tc.index == len(got):
                    assert tc.id and tc.id not in ids and tc.type == "function" and tc.function.name, (name, tc)
                    ids.add(tc.id)
                    got.append((tc.function.name, tc.function.arguments or ""))
                else:
                    assert tc.index == len(got) - 1 and tc.function.name is None and tc.id is None, (name, tc)
                    got[-1] = (got[-1][0], got[-1][1] + tc.function.arguments)
                pieces += 1
        assert content == "Reading both.", (name, content)
        assert got == expected, name
        assert parser.get_remaining_unstreamed_args() == ""  # vLLM's end-of-stream top-up adds nothing
        assert (pieces > len(calls) * 4) == constrained, (name, pieces)


def test_the_gpt_oss_parser_serves_beside_vllm_s_harmony_parser() -> None:
    """vLLM reads a gpt-oss turn with its own harmony parser and takes only a ``GptOssToolParser`` beside it:
    ``toolgrammar_gpt_oss`` is one, so the composed parser builds, and its ``adjust_request`` still puts the
    constraint into the request (the calls then come from harmony's parser). The calls it returns on the
    fixtures are counted in docs/conformance.md ("Through vLLM")."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.integrations.vllm import EXTRA_ARGS_KEY
    from toolgrammar.integrations.vllm_tool_parser import PARSER_CLASSES

    tool_parser = PARSER_CLASSES["ToolgrammarGptOssToolParser"]
    assert issubclass(tool_parser, GptOssToolParser)
    assert tool_parser.structural_tag_model is None  # vLLM adds no structural tag of its own beside the processor
    composed = ParserManager.get_parser("toolgrammar_gpt_oss", "openai_gptoss", enable_auto_tools=True, is_harmony=True)
    assert composed is not None and composed.__name__ == "HarmonyParser", composed
    parser = composed(load_qwen3_tokenizer(), _tools())  # HarmonyParser raises for any other tool parser
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=_tools(),
                                    tool_choice="required")  # fmt: skip
    adjusted = parser.adjust_request(request)
    spec = json.loads(adjusted.vllm_xargs[EXTRA_ARGS_KEY])
    assert spec["format"] == "gpt-oss" and spec["tool_choice"] == "required"
