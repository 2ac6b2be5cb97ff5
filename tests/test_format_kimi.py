"""The ``kimi`` (K2) grammar at the byte level (no Kimi tokenizer ships on PyPI), and the K3 parser's refusals.

- Completeness: every canonical K2 fixture's text is a turn of its grammar (bytes through the automaton);
  malformed ones (noise in a section, an id without ``functions.``, spaces around markers, multi-line JSON)
  and cut ones are not.
- Soundness: random walks over a toy vocabulary of the 256 single bytes plus the K2 markers as whole
  tokens (as the real tokenizer has them), fixed seeds: every walk parses with zero errors under the strict
  parser and its arguments validate with ``jsonschema``; the budget closes every started section.
"""

from __future__ import annotations

from typing import Any

import pytest
from canitoolcall.fixtures import load_fixtures

from grammar_checks import GET_WEATHER, byte_vocabulary, check_walks, function_tool
from toolgrammar.engine import TokenGrammar
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.kimi import render_k2
from toolgrammar.grammar import compile_turn
from toolgrammar.parser import parse_turn
from toolgrammar.testing import accepts
from toolgrammar.turn import ToolCall

FIXTURES = [f for f in load_fixtures(None, families=["kimi"]) if "x-kimi-k2" in f.tags]
NOT_CANONICAL = {
    "kimi/k2i-vllm-single-call-content-before": "a space after the call id",
    "kimi/k2i-vllm-three-tool-calls": "a space after the call id",
    "kimi/k2i-vllm-multiline-json": "multi-line JSON",
    "kimi/k2i-vllm-id-without-functions-prefix": "an id without functions.",
    "kimi/k2i-vllm-noise-between-markers": "text between markers",
    "kimi/k2i-vllm-empty-tool-section": "an empty section",
    "kimi/k2i-vllm-content-after-tool-section": "a space after the call id",
}


def reasoning(fixture: Any) -> str:
    prompt = fixture.generation_prompt
    if prompt is None:  # the family's default prompt: K2.6 opens <think>, K2-Instruct does not
        return "prefilled" if fixture.reference_model.startswith("moonshotai/Kimi-K2.6") else "disabled"
    return "prefilled" if prompt.endswith("<think>") else "disabled"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_fixture_text_against_the_grammar(fixture: Any) -> None:
    grammar = compile_turn(list(fixture.tools), format="kimi", reasoning=reasoning(fixture), cache=False)
    if fixture.id in NOT_CANONICAL or ("truncated" in fixture.tags and "reasoning" not in fixture.tags):
        assert not accepts(grammar, fixture.raw_output)
    else:
        assert accepts(grammar, fixture.raw_output)


def test_render_is_the_fixtures_spelling() -> None:
    fmt = get_format("kimi")
    for fixture in FIXTURES:
        expected = fixture.expected
        if not expected or not expected.tool_calls or fixture.id in NOT_CANONICAL:
            continue
        calls = [ToolCall(c.name, dict(c.arguments)) for c in expected.tool_calls]
        # The index counts the conversation's calls: a later turn's start after the earlier ones.
        first = 1 if "multi-turn" in fixture.tags else 0
        assert render_k2([(c.name, c.arguments) for c in calls], fmt.markers, first) in fixture.raw_output, fixture.id


TOOLS = [GET_WEATHER, function_tool("calc", {"x": {"type": "integer"}, "flag": {"type": ["boolean", "null"]}}, ["x"])]
MARKERS = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_end|>",
    "<|tool_call_argument_begin|>",
    "<think>",
    "</think>",
)


VOCAB = byte_vocabulary("kimi-bytes", (*MARKERS, "<|im_end|>"), eos=["<|im_end|>"], control=["<|im_end|>"])
"""The 256 single bytes, the K2 markers as whole tokens, and ``<|im_end|>`` (the end of turn, a control token)."""


@pytest.mark.parametrize("choice", ["required", "auto", "calc"])
def test_random_walks_are_sound(choice: str) -> None:
    grammar = compile_turn(TOOLS, format="kimi", tool_choice=choice, reasoning="enabled", cache=False)
    tg = TokenGrammar(grammar, VOCAB)
    opener = VOCAB.token_id(MARKERS[0].encode())
    walks = check_walks(
        tg,
        TOOLS,
        "kimi",
        seed=11,
        n_walks=8,
        budget=200,
        require_call=choice != "auto",
        prefer=[opener],
        prefer_probability=0.3,
        eos_weight=0.2,
    )
    if choice == "calc":
        assert all(c.name == "calc" for _, turn in walks for c in turn.tool_calls)


def test_parallel_calls_share_one_section() -> None:
    calls = [ToolCall("get_weather", {"city": "Paris"}), ToolCall("calc", {"x": 2, "flag": None})]
    text = get_format("kimi").canonical_calls(calls)
    assert text.count("<|tool_calls_section_begin|>") == 1
    assert accepts(compile_turn(TOOLS, format="kimi", reasoning="disabled", cache=False), text)
    assert not accepts(
        compile_turn(TOOLS, format="kimi", reasoning="disabled", parallel_tool_calls=False, cache=False), text
    )
    assert list(parse_turn(text, TOOLS, format="kimi").tool_calls) == calls


def test_strict_errors() -> None:
    section = "<|tool_calls_section_begin|>{}<|tool_calls_section_end|>"
    cases = {
        '<|tool_call_begin|>functions.calc:0<|tool_call_argument_begin|>{"x": "2"}<|tool_call_end|>': (
            "schema-violation"
        ),
        "<|tool_call_begin|>functions.nope:0<|tool_call_argument_begin|>{}<|tool_call_end|>": "unknown-tool",
        '<|tool_call_begin|>functions.calc<|tool_call_argument_begin|>{"x": 1}<|tool_call_end|>': "malformed-block",
        '<|tool_call_begin|>functions.calc:0<|tool_call_argument_begin|>{"x": 1,}<|tool_call_end|>': "invalid-json",
    }
    for body, kind in cases.items():
        assert [e.kind for e in parse_turn(section.format(body), TOOLS, format="kimi").errors] == [kind], body
    cut = parse_turn(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.calc:0<|tool_call_argument_begin|>{",
        TOOLS,
        format="kimi",
    )
    assert [e.kind for e in cut.errors] == ["truncated"] and not cut.tool_calls


def test_k3_has_no_grammar_yet() -> None:
    with pytest.raises(GrammarError, match="kimi-k3"):
        compile_turn(TOOLS, format="kimi-k3", cache=False)


def test_k3_render_reads_back() -> None:
    calls = [ToolCall("get_weather", {"city": 'say "hi" & <go>'}), ToolCall("calc", {"x": 2, "flag": None})]
    text = get_format("kimi-k3").canonical_calls(calls)
    assert list(parse_turn(text, TOOLS, format="kimi-k3").tool_calls) == calls
