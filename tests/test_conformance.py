"""CanIToolCall conformance: the qwen3-hermes family passes 100% strict on every chunking strategy.

Three layers, each through canitoolcall's own code:

* per fixture, in-process: the worker's ``replay`` (the adapter on every strategy, ``char:0``/``char:1``
  included) and the runner's ``evaluate`` (every check), plus the pytest plugin's ``assert_conforms``
  on each parse;
* the whole family through ``canitoolcall.runner.run``, which spawns the adapter worker exactly as
  ``canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter`` does, and whose pass table
  must be the one published in ``examples/conformance-qwen3-hermes.md``;
* the adapter's pieces: the incremental detokenizer against the fixtures' raw text, the tool fallback,
  ``supports``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from canitoolcall.adapters.base import ReplayInput
from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import ChunkStrategy, split
from canitoolcall.fixtures import load_fixtures
from canitoolcall.pytest_plugin import assert_conforms
from canitoolcall.results import ParseResult, Status
from canitoolcall.runner import RunConfig, evaluate, family_for, run

import toolgrammar
from toolgrammar.conformance import (
    ALL_STRATEGIES,
    CanIToolCallAdapter,
    decode_stream,
    fixture_matrix,
    fixture_toolset,
    pass_table,
    qwen3_tokenizer,
    reasoning_started,
)

ROOT = Path(__file__).resolve().parents[1]
TABLE_FILE = ROOT / "examples" / "conformance-qwen3-hermes.md"
FAMILY = "qwen3-hermes"
FIXTURES = load_fixtures(families=[FAMILY])
STRATEGIES = [ChunkStrategy.parse(s) for s in ALL_STRATEGIES]


@pytest.fixture(scope="module")
def adapter():
    adapter = CanIToolCallAdapter()
    yield adapter
    adapter.close()


def test_the_family_has_its_fifty_fixtures():
    assert len(FIXTURES) == 50


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_fixture_passes_strictly_on_every_strategy(adapter, fixture):
    family = family_for(fixture)
    reply = replay(adapter, fixture, family, STRATEGIES)
    assert reply["supported"], reply.get("reason")
    assert reply["skipped"] == {}
    assert set(reply["streams"]) == set(ALL_STRATEGIES)
    case = evaluate(fixture, family, reply, include_observed="all")
    bad = [
        f"{r.check}[{r.strategy}]: {r.status.value} ({r.detail})" for r in case.checks if r.status is not Status.PASS
    ]
    # Every row must pass, char:* rows included (the case status alone ignores them).
    assert not bad, "\n".join(bad)
    assert case.status is Status.PASS
    for label, result in [("nonstream", reply["nonstream"]), *reply["streams"].items()]:
        try:
            assert_conforms(fixture, ParseResult.from_dict(result), soft=False, family=family)
        except AssertionError as error:
            raise AssertionError(f"{label}: {error}") from None


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_incremental_detokenization_reproduces_the_raw_output(fixture):
    ids = list(fixture.output_token_ids)
    for strategy in ("token", "rand:3:8"):
        deltas = decode_stream(qwen3_tokenizer(), split(ids, ChunkStrategy.parse(strategy)))
        assert "".join(deltas) == fixture.raw_output


def test_multibyte_characters_split_across_tokens_are_held_back():
    tokenizer = qwen3_tokenizer()
    text = "👩\u200d💻 café"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    deltas = decode_stream(tokenizer, [[i] for i in ids])
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_run_through_canitoolcall_runner_matches_the_published_table(tmp_path):
    """The real ``canitoolcall run`` path: a worker subprocess loads the adapter by its spec."""
    results = run(
        RunConfig(
            engine="toolgrammar.conformance:CanIToolCallAdapter",
            families=[FAMILY],
            strategies=STRATEGIES,
            out_dir=tmp_path,
            # The worker gets a clean environment; make the working tree importable even when not installed.
            env={"PYTHONPATH": str(Path(toolgrammar.__file__).resolve().parents[1])},
            timeout_s=300,
        )
    )
    assert results.engine.name == "toolgrammar"
    assert results.summary()["totals"]["pass"] == 50
    assert all(c.status is Status.PASS for c in results.cases)
    assert all(r.status is Status.PASS for c in results.cases for r in c.checks)
    assert set(results.run.synthetic_strategies) == {"char:0", "char:1"}
    table = pass_table(results.cases, ALL_STRATEGIES)
    print(table)
    assert "| strict pass | " + " | ".join(["50/50"] * (len(ALL_STRATEGIES) + 2)) + " |" in table
    published = TABLE_FILE.read_text(encoding="utf-8")
    assert table in published, f"update {TABLE_FILE.name} with:\n{table}"
    assert fixture_matrix(results.cases, ALL_STRATEGIES) in published


def test_supports():
    adapter = CanIToolCallAdapter()
    assert adapter.supports("qwen3-hermes", "Qwen/Qwen3-0.6B")
    assert adapter.supports("qwen3-hermes", "Qwen/Qwen3-4B-Thinking-2507")
    no_format = adapter.supports("glm", "zai-org/GLM-4.5")
    assert not no_format and "no format for family 'glm'" in (no_format.reason or "")
    # Qwen3.5+ use a 248k vocabulary no tokenizer.json here ships: declined, never decoded wrongly.
    wrong_vocab = adapter.supports("qwen3-xml", "Qwen/Qwen3.5-9B")
    assert not wrong_vocab and wrong_vocab.reason


@pytest.mark.parametrize(
    ("prompt", "started"),
    [
        ("<|im_start|>assistant\n", False),
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        (None, False),
    ],
)
def test_reasoning_started_from_the_generation_prompt(prompt, started):
    assert reasoning_started(prompt) is started


def test_tools_load_in_schema_mode_for_every_fixture():
    for fixture in FIXTURES:
        toolset, note = fixture_toolset(fixture.tools)
        assert note == "schema", fixture.id
        assert toolset.mode == "schema"


def test_tools_the_grammar_rejects_still_get_checked_against_their_own_schema():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["zip"],
                },
            },
        }
    ]
    toolset, note = fixture_toolset(tools)
    assert note.startswith("schema-unnormalized (load_tools: ")
    assert toolset["lookup"].parameters["properties"]["zip"]["pattern"] == "^[0-9]{5}$"
    adapter = CanIToolCallAdapter()
    raw = ReplayInput(fixture_id="x/y", family=FAMILY, model="Qwen/Qwen3-0.6B", text="")
    good = '<tool_call>\n{"name": "lookup", "arguments": {"zip": "02139"}}\n</tool_call>'
    bad = '<tool_call>\n{"name": "lookup", "arguments": {"zip": "abc"}}\n</tool_call>'
    assert [c.name for c in adapter.parse_stream_text(raw, [good], tools).tool_calls] == ["lookup"]
    assert adapter.parse_stream_text(raw, [bad], tools).tool_calls == ()
    assert adapter.parser_config(raw)["tools"] == note


def test_results_table_file_names_the_command():
    published = TABLE_FILE.read_text(encoding="utf-8")
    assert "canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter --family qwen3-hermes" in published
    for strategy in ALL_STRATEGIES:
        assert f"--strategy {strategy}" in published


def test_parse_results_are_json_round_trippable(adapter):
    fixture = next(f for f in FIXTURES if f.id.endswith("marker-in-arguments"))
    result = adapter.parse(ReplayInput.from_fixture(fixture, family_for(fixture)), fixture.tools)
    assert ParseResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert json.loads(result.tool_calls[0].arguments_raw) == fixture.expected.tool_calls[0].arguments
