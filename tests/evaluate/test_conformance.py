"""CanIToolCall conformance: the qwen3-hermes (strict) and qwen3-xml (lenient) families pass 100% strict
on every chunking strategy through :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`.

Three layers, each through canitoolcall's own code:

* per fixture, in-process: the worker's ``replay`` (the adapter on every strategy, ``char:0``/``char:1``
  included) and the runner's ``evaluate`` (every check), plus the pytest plugin's ``assert_conforms``
  on each parse;
* each whole family through ``canitoolcall.runner.run``, which spawns the adapter worker exactly as
  ``canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter`` does, and whose pass table
  must be the one published in ``examples/conformance-qwen3-hermes.md`` / ``conformance-qwen3-xml.md``;
* the adapter's pieces: both incremental detokenizers against the fixtures' raw text, the vocabulary
  choice, the parse mode per family, the tool fallback, ``supports``.
"""

from __future__ import annotations

import json
import re
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
from toolgrammar.evaluate.conformance import (
    ALL_STRATEGIES,
    FAMILY_PARSE_MODES,
    CanIToolCallAdapter,
    decode_stream,
    fixture_matrix,
    fixture_toolset,
    pass_table,
    qwen3_tokenizer,
    reasoning_started,
    vocabulary,
    vocabulary_name,
)
from toolgrammar.turn.parser import parse_turn

ROOT = Path(__file__).resolve().parents[2]
TABLE_FILE = ROOT / "examples" / "conformance-qwen3-hermes.md"
XML_TABLE_FILE = ROOT / "examples" / "conformance-qwen3-xml.md"
FAMILY = "qwen3-hermes"
XML_FAMILY = "qwen3-xml"
FIXTURES = load_fixtures(families=[FAMILY])
XML_FIXTURES = load_fixtures(families=[XML_FAMILY])
STRATEGIES = [ChunkStrategy.parse(s) for s in ALL_STRATEGIES]
WORKER_ENV = {"PYTHONPATH": str(Path(toolgrammar.__file__).resolve().parents[1])}
"""The worker gets a clean environment; make the working tree importable even when not installed."""


@pytest.fixture(scope="module")
def adapter():
    adapter = CanIToolCallAdapter()
    yield adapter
    adapter.close()


def test_the_family_has_its_fifty_fixtures():
    assert len(FIXTURES) == 50
    assert len(XML_FIXTURES) == 54


@pytest.mark.parametrize("fixture", FIXTURES + XML_FIXTURES, ids=[f.id for f in FIXTURES + XML_FIXTURES])
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
    # The same ids through the vocabulary path (qwen3-xml): token bytes and an incremental UTF-8 decoder.
    vocab = vocabulary("qwen3-151k")
    assert any(not _is_utf8(vocab.token_bytes[i]) for i in ids)  # a character really is split
    deltas = decode_stream(vocab, [[i] for i in ids])
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    assert "" in deltas  # the first fragment waited for the token that completes it


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("fixture", XML_FIXTURES, ids=[f.id for f in XML_FIXTURES])
def test_vocabulary_detokenization_reproduces_the_raw_output(fixture):
    assert fixture.tokenizer is not None
    vocab = vocabulary(vocabulary_name(fixture.tokenizer.repo))
    ids = list(fixture.output_token_ids)
    for strategy in ("token", "rand:3:8"):
        deltas = decode_stream(vocab, split(ids, ChunkStrategy.parse(strategy)))
        assert "".join(deltas) == fixture.raw_output
        assert all("\ufffd" not in d for d in deltas)


def test_the_xml_family_splits_characters_across_tokens():
    """The hold-back is exercised by real fixtures: some Qwen3.5+ output has a token that is not whole UTF-8
    (the Qwen3-Coder ones do not; the 151k path is covered by the emoji test above)."""
    split_in = set()
    for fixture in XML_FIXTURES:
        name = vocabulary_name(fixture.tokenizer.repo)
        if any(not _is_utf8(vocabulary(name).token_bytes[i]) for i in fixture.output_token_ids):
            split_in.add(name)
    assert "qwen3.5-248k" in split_in


@pytest.mark.parametrize(
    ("repo", "name"),
    [
        ("Qwen/Qwen3-0.6B", "qwen3-151k"),
        ("Qwen/Qwen3-4B-Thinking-2507", "qwen3-151k"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-151k"),
        ("Qwen/Qwen3-Coder-Next", "qwen3-151k"),
        ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "qwen3-151k"),
        ("Qwen/Qwen3.5-9B", "qwen3.5-248k"),
        ("Qwen/Qwen3.8-27B", "qwen3.5-248k"),
        ("zai-org/GLM-4.5", None),
        ("Qwen/Qwen2-7B", None),
    ],
)
def test_vocabulary_by_tokenizer_repo(repo, name):
    assert vocabulary_name(repo) == name


def test_vocabularies_have_their_sizes():
    assert vocabulary("qwen3-151k").n_tokens == 151_669
    assert vocabulary("qwen3.5-248k").n_tokens == 248_077


def test_run_through_canitoolcall_runner_matches_the_published_table(tmp_path):
    """The real ``canitoolcall run`` path: a worker subprocess loads the adapter by its spec."""
    results = run(
        RunConfig(
            engine="toolgrammar.conformance:CanIToolCallAdapter",
            families=[FAMILY],
            strategies=STRATEGIES,
            out_dir=tmp_path,
            env=WORKER_ENV,
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


def test_run_the_xml_family_through_canitoolcall_runner(tmp_path):
    """``canitoolcall run ... --family qwen3-xml``: 54/54 on every parse, lenient mode, both vocabularies."""
    results = run(
        RunConfig(
            engine="toolgrammar.conformance:CanIToolCallAdapter",
            families=[XML_FAMILY],
            strategies=STRATEGIES,
            out_dir=tmp_path,
            env=WORKER_ENV,
            timeout_s=300,
        )
    )
    assert results.engine.name == "toolgrammar"
    assert results.engine.details["parse_modes"][XML_FAMILY] == "lenient"
    totals = results.summary()["totals"]
    assert totals["pass"] == 54 and totals["unsupported"] == 0 and totals["error"] == 0
    assert all(c.status is Status.PASS for c in results.cases)
    assert all(r.status is Status.PASS for c in results.cases for r in c.checks)
    assert all(not c.skipped_strategies for c in results.cases)
    assert set(results.run.synthetic_strategies) == {"char:0", "char:1"}
    configs = {c.fixture_id: c.parser_config for c in results.cases}
    assert {cfg["parse_mode"] for cfg in configs.values()} == {"lenient"}
    assert {cfg["tokenizer"].split()[0] for cfg in configs.values()} == {"qwen3-151k", "qwen3.5-248k"}
    assert configs["qwen3-xml/q38-single-call"]["tokenizer"].startswith("qwen3.5-248k vocabulary")
    assert configs["qwen3-xml/coder-single-call"]["tokenizer"].startswith("qwen3-151k vocabulary")
    table = pass_table(results.cases, ALL_STRATEGIES)
    print(table)
    assert "| strict pass | " + " | ".join(["54/54"] * (len(ALL_STRATEGIES) + 2)) + " |" in table
    published = XML_TABLE_FILE.read_text(encoding="utf-8")
    assert table in published, f"update {XML_TABLE_FILE.name} with:\n{table}"


def test_supports():
    adapter = CanIToolCallAdapter()
    assert adapter.supports("qwen3-hermes", "Qwen/Qwen3-0.6B")
    assert adapter.supports("qwen3-hermes", "Qwen/Qwen3-4B-Thinking-2507")
    no_format = adapter.supports("no-such-family", "example/Model-1B")
    assert not no_format and "no format for family 'no-such-family'" in (no_format.reason or "")
    # qwen3-xml: Qwen3-Coder ids decode with the 151k vocabulary, Qwen3.5 / Qwen3.8 ids with the 248k one.
    for model in ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-Next", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.8-27B"):
        assert adapter.supports("qwen3-xml", model), model
    # A model whose vocabulary is not here is declined, never decoded with the wrong one.
    unknown = adapter.supports("qwen3-xml", "meta-llama/Llama-3.1-8B-Instruct")
    assert not unknown and "no offline vocabulary" in (unknown.reason or "")
    # hermes is unchanged: the Qwen3 tokenizer only.
    hermes_35 = adapter.supports("qwen3-hermes", "Qwen/Qwen3.5-9B")
    assert not hermes_35 and hermes_35.reason


@pytest.mark.parametrize("fixture", FIXTURES + XML_FIXTURES, ids=[f.id for f in FIXTURES + XML_FIXTURES])
def test_supports_every_fixture(fixture):
    assert CanIToolCallAdapter().supports(fixture.family, fixture.reference_model)
    if fixture.tokenizer is not None:
        assert CanIToolCallAdapter().supports(fixture.family, fixture.tokenizer.repo)


def test_parse_mode_per_family():
    # Every CanIToolCall family has a format that declares it; the qwen3-xml fixtures need lenient reading.
    families = {"qwen3-hermes", "qwen3-xml", "llama", "mistral", "deepseek", "glm", "kimi", "gpt-oss", "gemma4"}
    assert set(FAMILY_PARSE_MODES) == families
    assert FAMILY_PARSE_MODES["qwen3-hermes"] == "strict" and FAMILY_PARSE_MODES["qwen3-xml"] == "lenient"
    adapter = CanIToolCallAdapter()
    for fixtures, mode in ((FIXTURES, "strict"), (XML_FIXTURES, "lenient")):
        fixture = fixtures[0]
        assert adapter.parser_config(ReplayInput.from_fixture(fixture, family_for(fixture)))["parse_mode"] == mode


MALFORMED_KINDS = {"bare-function", "missing-close-parameter"}


@pytest.mark.parametrize(
    "fixture",
    [f for f in XML_FIXTURES if {"x-bare-function", "x-missing-close-param"} & set(f.tags)],
    ids=lambda f: f.id,
)
def test_xml_malformed_fixtures_need_lenient_mode(adapter, fixture):
    """Why qwen3-xml is lenient: strict mode reports these blocks as errors, the fixtures expect the calls."""
    text = fixture.raw_output
    started = reasoning_started(ReplayInput.from_fixture(fixture, family_for(fixture)).generation_prompt)
    strict = parse_turn(text, fixture_toolset(fixture.tools)[0], format="qwen-xml", reasoning_started=started)
    assert {e.kind for e in strict.errors} & MALFORMED_KINDS
    assert len(strict.tool_calls) < len(fixture.expected.tool_calls)
    result = adapter.parse(ReplayInput.from_fixture(fixture, family_for(fixture)), fixture.tools)
    assert [c.name for c in result.tool_calls] == [c.name for c in fixture.expected.tool_calls]
    assert [json.loads(c.arguments_raw) for c in result.tool_calls] == [
        c.arguments for c in fixture.expected.tool_calls
    ]


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
    # multipleOf is not a regular language the grammar enforces: load_tools refuses it, and the adapter
    # falls back to checking calls against the tool's own schema.
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"n": {"type": "integer", "multipleOf": 5}},
                    "required": ["n"],
                },
            },
        }
    ]
    toolset, note = fixture_toolset(tools)
    assert note.startswith("schema-unnormalized (load_tools: ")
    assert toolset["lookup"].parameters["properties"]["n"]["multipleOf"] == 5
    adapter = CanIToolCallAdapter()
    raw = ReplayInput(fixture_id="x/y", family=FAMILY, model="Qwen/Qwen3-0.6B", text="")
    good = '<tool_call>\n{"name": "lookup", "arguments": {"n": 10}}\n</tool_call>'
    bad = '<tool_call>\n{"name": "lookup", "arguments": {"n": 12}}\n</tool_call>'
    assert [c.name for c in adapter.parse_stream_text(raw, [good], tools).tool_calls] == ["lookup"]
    assert adapter.parse_stream_text(raw, [bad], tools).tool_calls == ()
    assert adapter.parser_config(raw)["tools"] == note


@pytest.mark.parametrize(("path", "family", "n"), [(TABLE_FILE, FAMILY, 50), (XML_TABLE_FILE, XML_FAMILY, 54)])
def test_results_table_file_names_the_command(path, family, n):
    published = path.read_text(encoding="utf-8")
    assert f"canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter --family {family}" in published
    for strategy in ALL_STRATEGIES:
        assert f"--strategy {strategy}" in published
    # The summary `canitoolcall run` prints.
    assert re.search(rf"^  {re.escape(family)} +pass={n}$", published, re.MULTILINE)
    assert f"  total          pass={n}  soft_pass=0  fail=0  error=0  unsupported=0" in published


def test_pass_table_marks_a_parse_that_was_not_run():
    fixture = XML_FIXTURES[0]
    one = [ChunkStrategy.parse("one")]
    reply = replay(CanIToolCallAdapter(), fixture, family_for(fixture), one)
    case = evaluate(fixture, family_for(fixture), reply)
    table = pass_table([case], ["one"])
    assert "| strict pass | 1/1 | 1/1 | - |" in table  # split_invariance needs two streams


def test_parse_results_are_json_round_trippable(adapter):
    fixture = next(f for f in FIXTURES if f.id.endswith("marker-in-arguments"))
    result = adapter.parse(ReplayInput.from_fixture(fixture, family_for(fixture)), fixture.tools)
    assert ParseResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert json.loads(result.tool_calls[0].arguments_raw) == fixture.expected.tool_calls[0].arguments
