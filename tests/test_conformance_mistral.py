"""CanIToolCall's ``mistral`` family (47 fixtures) through :class:`toolgrammar.conformance.CanIToolCallAdapter`.

The replay and checks are CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`,
:func:`canitoolcall.runner.evaluate`), every strategy of :data:`toolgrammar.conformance.ALL_STRATEGIES`,
strict pass required on every row (synthetic ``char:*`` rows included). Every fixture is replayed from
its token ids with a real vocabulary read from ``mistral-common``'s data files: tekken (v11 / v13,
37 fixtures) and the v3 sentencepiece model (Mistral-7B-Instruct-v0.3, 10 fixtures). The family is
declared by ``mistral``; it hands the v3 fixtures to ``mistral-v3`` and Magistral-Small-2506's (plain-text
``<think>``) to ``mistral-think-text``. Print the table::

    .venv/bin/python tests/test_conformance_mistral.py
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

FAMILY = "mistral"
STRATEGIES = tuple(ChunkStrategy.parse(s) for s in ALL_STRATEGIES)
FIXTURES = load_fixtures(None, families=[FAMILY])
FORMAT_BY_REPO = {
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v3",
    "mistralai/Magistral-Small-2506": "mistral-think-text",
}


def run_case(fixture: Any, adapter: Any = None) -> Any:
    adapter = adapter or CanIToolCallAdapter()
    family = family_for(fixture)
    reply = replay(adapter, fixture, family, STRATEGIES)
    synthetic = synthetic_strategies([s.id for s in STRATEGIES], adapter.tokens_per_step)
    return reply, evaluate(fixture, family, reply, include_observed="failures", synthetic=synthetic)


@pytest.fixture(scope="module")
def adapter() -> Any:
    adapter = CanIToolCallAdapter()
    yield adapter
    adapter.close()


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 47
    assert sum(f.tokenizer.mode == "mistral" for f in FIXTURES) == 37


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    """Tekken decodes every id exactly; sentencepiece writes the first word's boundary as a space."""
    from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary, tekken_vocabulary

    if fixture.tokenizer.mode == "mistral":
        assert tekken_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output
    else:
        text = sentencepiece_v3_vocabulary().decode(fixture.output_token_ids).decode("utf-8")
        assert text in (fixture.raw_output, " " + fixture.raw_output)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_strict_pass_on_every_strategy(adapter: Any, fixture: Any) -> None:
    reply, case = run_case(fixture, adapter)
    assert reply["supported"], reply.get("reason")
    assert reply["parser_config"]["format"] == FORMAT_BY_REPO.get(fixture.tokenizer.repo, "mistral")
    assert not case.skipped_strategies, case.skipped_strategies
    assert {r.strategy for r in case.checks} >= {"nonstream", *ALL_STRATEGIES}
    bad = [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS]
    assert case.status is Status.PASS and not bad, "\n".join(bad)


def main() -> int:
    cases = [run_case(f)[1] for f in FIXTURES]
    print(pass_table(cases, ALL_STRATEGIES))
    return 0 if all(c.status is Status.PASS for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
