"""CanIToolCall's ``gpt-oss`` family (51 fixtures) through the product's adapter, every strategy.

The replay is CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`, then
:func:`canitoolcall.runner.evaluate`), with :class:`toolgrammar.conformance.CanIToolCallAdapter`: the
gpt-oss format locates the o200k_harmony vocabulary (``quicktok-v1``'s data files), so the token
strategies run on the fixtures' real ids. Every strategy must pass strictly. Print the pass table with::

    .venv/bin/python tests/test_conformance_gpt_oss.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":  # run as a script: import the working tree's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import ChunkStrategy, synthetic_strategies
from canitoolcall.fixtures import load_fixtures
from canitoolcall.pytest_plugin import family_for
from canitoolcall.results import Status
from canitoolcall.runner import evaluate

from toolgrammar.conformance import ALL_STRATEGIES, CanIToolCallAdapter, pass_table
from toolgrammar.formats.gpt_oss import harmony_vocabulary

FAMILY = "gpt-oss"
STRATEGIES = tuple(ChunkStrategy.parse(s) for s in ALL_STRATEGIES)
FIXTURES = load_fixtures(None, families=[FAMILY])


def run_case(fixture: Any) -> Any:
    """One fixture replayed and checked as ``canitoolcall run`` does; returns its ``CaseResult``."""
    family = family_for(fixture)
    reply = replay(CanIToolCallAdapter(), fixture, family, STRATEGIES)
    synthetic = synthetic_strategies([s.id for s in STRATEGIES], CanIToolCallAdapter.tokens_per_step)
    return evaluate(fixture, family, reply, include_observed="failures", synthetic=synthetic)


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 51


def test_the_vocabulary_is_o200k_harmony() -> None:
    vocab = harmony_vocabulary()
    assert vocab.n_tokens == 201_088
    ids = {text: vocab.token_id(text) for text in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")}
    assert ids == {"<|start|>": 200006, "<|channel|>": 200005, "<|message|>": 200008, "<|end|>": 200007}
    assert vocab.eos_ids == {200002, 200012, 199999}  # <|return|>, <|call|>, <|endoftext|>
    assert {200005, 200006, 200007, 200008, 200003}.isdisjoint(vocab.special_ids)  # markup is text


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    assert fixture.tokenizer is not None and fixture.tokenizer.repo.startswith("openai/gpt-oss-")
    assert harmony_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_strict_pass_on_every_strategy(fixture: Any) -> None:
    case = run_case(fixture)
    assert not case.skipped_strategies, case.skipped_strategies
    bad = [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS]
    assert case.status is Status.PASS and not bad, "\n".join(bad)
    assert {r.strategy for r in case.checks} >= {"nonstream", *ALL_STRATEGIES}


def main() -> int:
    cases = [run_case(f) for f in FIXTURES]
    print(pass_table(cases, ALL_STRATEGIES))
    return 0 if all(c.status is Status.PASS for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
