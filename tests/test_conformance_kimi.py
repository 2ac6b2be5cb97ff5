"""CanIToolCall's ``kimi`` family (49 fixtures: K2-Instruct, K2.6, K3 XTML) through the product's adapter.

No Kimi tokenizer ships on PyPI (tiktoken files loaded with ``trust_remote_code``), so the adapter reads
each fixture's text: the non-streaming parse and the text strategies ``char:0`` / ``char:1`` run; the
token strategies do not (the adapter reports them unavailable). K2 fixtures are read by ``kimi``, K3 ones
by ``kimi-k3`` (picked by the tokenizer pin).

One fixture fails by design: ``kimi/k3-vllm-call-thinking-disabled`` calls ``calc`` with ``{"x": 1}`` while
the tool declares ``"properties": {}``; toolgrammar's strict per-call check (:mod:`toolgrammar.checks`,
the seed harness's) rejects an argument the schema does not list (``unknown-argument``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import ChunkStrategy
from canitoolcall.fixtures import load_fixtures
from canitoolcall.pytest_plugin import family_for
from canitoolcall.results import Status
from canitoolcall.runner import evaluate

from toolgrammar.conformance import CanIToolCallAdapter, pass_table
from toolgrammar.parser import parse_turn

FAMILY = "kimi"
TEXT_STRATEGIES = ("char:0", "char:1")
STRATEGIES = tuple(ChunkStrategy.parse(s) for s in TEXT_STRATEGIES)
FIXTURES = load_fixtures(None, families=[FAMILY])
FAILS_BY_DESIGN = {"kimi/k3-vllm-call-thinking-disabled"}


def run_case(fixture: Any) -> Any:
    family = family_for(fixture)
    reply = replay(CanIToolCallAdapter(), fixture, family, STRATEGIES)
    return evaluate(fixture, family, reply, include_observed="failures", synthetic=frozenset(TEXT_STRATEGIES))


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 49


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_strict_pass_on_the_text_strategies(fixture: Any) -> None:
    case = run_case(fixture)
    assert not case.skipped_strategies, case.skipped_strategies
    bad = [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS]
    assert {r.strategy for r in case.checks} >= {"nonstream", *TEXT_STRATEGIES}
    if fixture.id in FAILS_BY_DESIGN:
        assert bad and all("expected_match" in b for b in bad), bad
        return
    assert case.status is Status.PASS and not bad, "\n".join(bad)


def test_the_failure_by_design_is_the_unknown_argument() -> None:
    (fixture,) = [f for f in FIXTURES if f.id in FAILS_BY_DESIGN]
    turn = parse_turn(fixture.raw_output, list(fixture.tools), format="kimi-k3")
    assert [e.kind for e in turn.errors] == ["unknown-argument"]


def test_token_strategies_are_unavailable() -> None:
    from canitoolcall.adapters.base import AdapterUnavailable, ReplayInput

    fixture = FIXTURES[0]
    raw = ReplayInput.from_fixture(fixture, family_for(fixture))
    with pytest.raises(AdapterUnavailable, match="text strategies"):
        CanIToolCallAdapter().parse_stream(raw, [list(fixture.output_token_ids)], list(fixture.tools))


def main() -> int:
    cases = [run_case(f) for f in FIXTURES]
    print(pass_table(cases, TEXT_STRATEGIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
