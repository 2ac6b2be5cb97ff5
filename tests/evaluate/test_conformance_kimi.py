"""CanIToolCall's ``kimi`` family (49 fixtures: K2-Instruct, K2.6, K3 XTML) through the product's adapter.

No Kimi tokenizer ships on PyPI (tiktoken files loaded with ``trust_remote_code``), so the adapter reads
each fixture's text: the non-streaming parse and the text strategies ``char:0`` / ``char:1`` run; the
token strategies do not (the adapter reports them unavailable). K2 fixtures are read by ``kimi``, K3 ones
by ``kimi-k3`` (picked by the tokenizer pin).

One fixture fails by design: ``kimi/k3-vllm-call-thinking-disabled`` calls ``calc`` with ``{"x": 1}`` while
the tool declares ``"properties": {}``; toolgrammar's strict per-call check (:mod:`toolgrammar.formats.checks`,
the seed harness's) rejects an argument the schema does not list (``unknown-argument``). Print the pass table with::

    .venv/bin/python tests/evaluate/test_conformance_kimi.py
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from canitoolcall.adapters.base import AdapterUnavailable, ReplayInput
from canitoolcall.pytest_plugin import family_for
from canitoolcall.results import Status

from conformance_replay import (
    TEXT_STRATEGIES,
    each_fixture,
    failed_checks,
    family_fixtures,
    run_case,
    script_main,
)
from toolgrammar.evaluate.conformance import CanIToolCallAdapter
from toolgrammar.turn.parser import parse_turn

FIXTURES = family_fixtures("kimi")
FAILS_BY_DESIGN = {"kimi/k3-vllm-call-thinking-disabled"}


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 49


@each_fixture(FIXTURES)
def test_strict_pass_on_the_text_strategies(fixture: Any) -> None:
    _, case = run_case(fixture, TEXT_STRATEGIES)
    bad = failed_checks(case, TEXT_STRATEGIES)
    if fixture.id in FAILS_BY_DESIGN:
        assert bad and all("expected_match" in b for b in bad), bad
        return
    assert case.status is Status.PASS and not bad, "\n".join(bad)


def test_the_failure_by_design_is_the_unknown_argument() -> None:
    (fixture,) = [f for f in FIXTURES if f.id in FAILS_BY_DESIGN]
    turn = parse_turn(fixture.raw_output, list(fixture.tools), format="kimi-k3")
    assert [e.kind for e in turn.errors] == ["unknown-argument"]


def test_token_strategies_are_unavailable() -> None:
    fixture = FIXTURES[0]
    raw = ReplayInput.from_fixture(fixture, family_for(fixture))
    with pytest.raises(AdapterUnavailable, match="text strategies"):
        CanIToolCallAdapter().parse_stream(raw, [list(fixture.output_token_ids)], list(fixture.tools))


if __name__ == "__main__":
    sys.exit(
        script_main(FIXTURES, TEXT_STRATEGIES, ok=lambda c: c.status is Status.PASS or c.fixture_id in FAILS_BY_DESIGN)
    )
