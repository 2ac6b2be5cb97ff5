"""CanIToolCall's own replay of one family's fixtures, shared by the ``tests/test_conformance_*.py`` files.

A fixture is replayed with :func:`canitoolcall.adapters.worker.replay` (the non-streaming parse and one
stream per chunking strategy) and checked with :func:`canitoolcall.runner.evaluate`, exactly as
``canitoolcall run`` does, through :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter` unless a test
passes its own adapter. Each family's file runs as a script to print its pass table (:func:`script_main`).

Imported as ``conformance_replay`` (pytest puts ``tests/`` on ``sys.path``; so does running a test file as a
script), before ``toolgrammar``: when run as a script, the working tree's package is put on ``sys.path``.
"""

# ruff: noqa: E402 - the working tree goes on sys.path before toolgrammar is imported
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

_SRC = str(Path(__file__).resolve().parents[1] / "src")
if _SRC not in sys.path:  # a test file run as a script: import the working tree's package
    sys.path.insert(0, _SRC)

import pytest
from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import ChunkStrategy, synthetic_strategies
from canitoolcall.fixtures import load_fixtures
from canitoolcall.pytest_plugin import family_for
from canitoolcall.results import Status
from canitoolcall.runner import evaluate

from toolgrammar.evaluate.conformance import ALL_STRATEGIES, CanIToolCallAdapter, fixture_matrix, pass_table

TEXT_STRATEGIES = ("char:0", "char:1")
"""The synthetic text-delta strategies: all that runs where no tokenizer of the family ships."""


def family_fixtures(family: str) -> list[Any]:
    """CanIToolCall's fixtures of one family, in the suite's order."""
    return load_fixtures(None, families=[family])


def each_fixture(fixtures: Sequence[Any]) -> Any:
    """``pytest.mark.parametrize`` over ``fixtures`` as the argument ``fixture``, the fixture ids as test ids."""
    return pytest.mark.parametrize("fixture", fixtures, ids=[f.id for f in fixtures])


def adapter_fixture() -> Any:
    """A module-scoped pytest fixture ``adapter``: one product adapter for the module, closed at its end.

    Bind it in the test module as ``adapter = adapter_fixture()``.
    """

    @pytest.fixture(scope="module")
    def adapter() -> Any:
        adapter = CanIToolCallAdapter()
        yield adapter
        adapter.close()

    return adapter


def run_case(fixture: Any, strategies: Iterable[str] = ALL_STRATEGIES, adapter: Any = None) -> tuple[Any, Any]:
    """One fixture replayed with ``strategies`` and checked as ``canitoolcall run`` does.

    Returns the worker's reply (``supported``, ``parser_config``...) and the ``CaseResult``. ``adapter``: the
    product's :class:`~toolgrammar.evaluate.conformance.CanIToolCallAdapter` (a new one) unless given.
    """
    adapter = adapter if adapter is not None else CanIToolCallAdapter()
    family = family_for(fixture)
    chosen = tuple(ChunkStrategy.parse(s) for s in strategies)
    reply = replay(adapter, fixture, family, chosen)
    assert reply["supported"], reply.get("reason")
    synthetic = synthetic_strategies([s.id for s in chosen], adapter.tokens_per_step)
    return reply, evaluate(fixture, family, reply, include_observed="failures", synthetic=synthetic)


def failed_checks(case: Any, strategies: Iterable[str]) -> list[str]:
    """The checks that did not pass, one line each, after asserting that every strategy ran (none skipped)."""
    assert not case.skipped_strategies, case.skipped_strategies
    assert {r.strategy for r in case.checks} >= {"nonstream", *strategies}
    return [f"{r.check}@{r.strategy}: {r.status.value} ({r.detail})" for r in case.checks if r.status != Status.PASS]


def assert_strict_pass(case: Any, strategies: Iterable[str] = ALL_STRATEGIES) -> None:
    """Every strategy ran and every check of every row passed strictly."""
    bad = failed_checks(case, strategies)
    assert case.status is Status.PASS and not bad, "\n".join(bad)


def passed(case: Any) -> bool:
    return case.status is Status.PASS


def script_main(
    fixtures: Sequence[Any],
    strategies: Sequence[str] = ALL_STRATEGIES,
    *,
    adapter: Any = None,
    strategies_for: Callable[[Any], Iterable[str]] | None = None,
    ok: Callable[[Any], bool] = passed,
) -> int:
    """Replay every fixture and print the pass table (``--matrix``: and the per-fixture matrix).

    ``strategies`` are the table's columns; ``strategies_for(fixture)`` narrows what one fixture is replayed
    with (default: all of them). Returns the exit status: 0 when every case is ``ok``.
    """
    adapter = adapter if adapter is not None else CanIToolCallAdapter()
    try:
        cases = [run_case(f, strategies_for(f) if strategies_for else strategies, adapter)[1] for f in fixtures]
    finally:
        adapter.close()
    print(pass_table(cases, strategies))
    if "--matrix" in sys.argv[1:]:
        print()
        print(fixture_matrix(cases, strategies))
    return 0 if all(ok(c) for c in cases) else 1
