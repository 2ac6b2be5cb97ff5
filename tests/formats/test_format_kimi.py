"""The ``kimi`` (K2) and ``kimi-k3`` grammars at the byte level (no Kimi tokenizer ships on PyPI).

- Completeness: every canonical K2 fixture's text is a turn of its grammar (bytes through the automaton);
  malformed ones (noise in a section, an id without ``functions.``, spaces around markers, multi-line JSON)
  and cut ones are not.
- Soundness: random walks over a toy vocabulary of the 256 single bytes plus the K2 markers as whole
  tokens (as the real tokenizer has them), fixed seeds: every walk parses with zero errors under the strict
  parser and its arguments validate with ``jsonschema``; the budget closes every started section.
- K3 the same way: every canonical K3 fixture (reasoning prefilled by the default prompt, or the response
  channel opened by the thinking=False prompt) is a turn of its grammar, cut and malformed ones are not;
  walks over the single bytes plus the XTML control tokens parse with zero errors.
"""

from __future__ import annotations

from typing import Any

import pytest
from canitoolcall.fixtures import load_fixtures

from grammar_checks import GET_WEATHER, byte_vocabulary, check_walks, function_tool
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.calls import ToolCall
from toolgrammar.formats.kimi import render_k2
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

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


K3_FIXTURES = [f for f in load_fixtures(None, families=["kimi"]) if "x-kimi-k3" in f.tags]
K3_REJECTED = {
    "kimi/k3-vllm-call-thinking-disabled": "an argument x the schema (properties: {}) does not have",
    "kimi/k3-vllm-truncated-tools": "cut inside the call's open tag",
    "kimi/k3-truncated-inside-argument": "cut inside an argument",
    "kimi/k3-vllm-reasoning-prefix-consumed": "cut inside the response channel",
    "kimi/k3-bug-response-only-completion": "the think channel the prompt opened is never closed",
}


def k3_reasoning(fixture: Any) -> str:
    """thinking=False prompts open the response channel (``disabled``); the default prompt opens think."""
    prompt = fixture.generation_prompt or ""
    return "disabled" if prompt.endswith("<|open|>response<|sep|>") else "prefilled"


@pytest.mark.parametrize("fixture", K3_FIXTURES, ids=[f.id for f in K3_FIXTURES])
def test_k3_fixture_text_against_the_grammar(fixture: Any) -> None:
    grammar = compile_turn(list(fixture.tools), format="kimi-k3", reasoning=k3_reasoning(fixture), cache=False)
    assert accepts(grammar, fixture.raw_output) is (fixture.id not in K3_REJECTED)
    if fixture.id in K3_REJECTED and "truncated" in fixture.tags:
        assert accepts(grammar, fixture.raw_output, complete=False)  # a prefix of a turn: the budget cut it


def test_k3_fixture_count() -> None:
    assert len(K3_FIXTURES) == 23 and sum(f.id not in K3_REJECTED for f in K3_FIXTURES) == 18


def test_k3_a_turn_that_skips_the_think_channel() -> None:
    """k3-bug-response-only-completion: without a prompt-opened think channel (reasoning enabled) it is a turn."""
    fixture = next(f for f in K3_FIXTURES if f.id == "kimi/k3-bug-response-only-completion")
    assert accepts(compile_turn(list(fixture.tools), format="kimi-k3", cache=False), fixture.raw_output)


def test_k3_render_is_the_fixtures_spelling() -> None:
    fmt = get_format("kimi-k3")
    for fixture in K3_FIXTURES:
        expected = fixture.expected
        if not expected or not expected.tool_calls or fixture.id in K3_REJECTED:
            continue
        calls = [ToolCall(c.name, dict(c.arguments)) for c in expected.tool_calls]
        assert fmt.canonical_calls(calls) in fixture.raw_output, fixture.id


K3_TOOLS = [
    GET_WEATHER,
    function_tool(
        "calc",
        {"x": {"type": "integer"}, "flag": {"type": ["boolean", "null"]}, "mode": {"enum": ["fast", 2, None]}},
        ["x"],
    ),
    function_tool(
        "save_answer",
        {
            "q&a": {"type": "string"},
            'say "hi" & co': {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "any": {},
        },
        ["q&a"],
    ),
]
K3 = "<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|open|>response<|sep|>", "<|close|>response<|sep|>"
K3_TOOLS_OPEN, K3_TOOLS_CLOSE = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
K3_VOCAB = byte_vocabulary(
    "kimi-k3-bytes",
    ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"),
    eos=["<|end_of_msg|>"],
    control=["<|end_of_msg|>"],
)
"""The 256 single bytes and the XTML control tokens (the channel names are text, as in K3's tokenizer)."""


@pytest.mark.parametrize(
    ("choice", "reasoning", "after"),
    [
        ("required", "enabled", "end"),
        ("auto", "enabled", "end"),
        ("auto", "disabled", "text"),
        ("calc", "disabled", "end"),
        ("save_answer", "enabled", "end"),
    ],
)
def test_k3_random_walks_are_sound(choice: str, reasoning: str, after: str) -> None:
    grammar = compile_turn(
        K3_TOOLS, format="kimi-k3", tool_choice=choice, reasoning=reasoning, after_calls=after, cache=False
    )
    tg = TokenGrammar(grammar, K3_VOCAB)
    walks = check_walks(
        tg,
        K3_TOOLS,
        "kimi-k3",
        seed=13,
        n_walks=10,
        budget=(40, 400),
        require_call=choice != "auto",
        prefer=[K3_VOCAB.token_id(b"<|open|>"), K3_VOCAB.token_id(b"<|close|>"), K3_VOCAB.token_id(b"<|sep|>")],
        prefer_probability=0.3,
        eos_weight=0.1,
    )
    if choice not in ("auto", "required"):
        assert all(c.name == choice for _, turn in walks for c in turn.tool_calls)


def test_k3_turns_by_hand() -> None:
    """The canonical turn, and what the parser would read otherwise than the grammar means."""
    fmt = get_format("kimi-k3")
    call = fmt.canonical_calls([ToolCall("calc", {"x": 2, "flag": None, "mode": "fast"})])
    odd = fmt.canonical_calls([ToolCall("save_answer", {"q&a": "<|close|>argument<|sep|> x", "any": "1"})])
    think, close_think, response, close_response = K3
    end = "<|close|>message<|sep|>"
    grammar = compile_turn(K3_TOOLS, format="kimi-k3", reasoning="prefilled", cache=False)
    good = [
        f"hm{close_think}{response}Sure.{close_response}{call}{end}",
        f"hm{close_think}{response}{close_response}{odd}",
        f"hm{close_think}{call}",  # the empty response channel may be left out
        f"hm{close_think}{response}No call.{close_response}{end}",
        f"{close_think}",
        "cut while thinking",
    ]
    bad = [
        f"hm{close_think}Sure.{call}",  # content outside the response channel
        f"hm{close_think}{response}Sure.{call}",  # the response channel left open
        f"hm{close_think}{response}a{K3_TOOLS_OPEN}b{close_response}",  # the tools opener inside the response
        f"hm{response}x{close_response}",  # the response channel ends the reasoning (no closer)
        f"hm{close_think}{call}{call}",  # one tools channel per turn
        f"hm{close_think}{call}{end}{end}",
        f"hm{close_think}" + call.replace(K3_TOOLS_CLOSE, ""),
        f"hm{close_think}" + call.replace('type="number"<|sep|>2', 'type="string"<|sep|>2'),  # a string for x
        f"hm{close_think}" + fmt.canonical_calls([ToolCall("calc", {"x": 2, "mode": "slow"})]),  # not in the enum
        f"hm{close_think}"
        + fmt.canonical_calls([ToolCall("save_answer", {"q&a": "<|close|>argument<|sep|><|close|>call<|sep|>"})]),
        f"hm{close_think}" + fmt.canonical_calls([ToolCall("save_answer", {"q&a": "<|close|>argument<|sep|>\nx"})]),
    ]
    for text in good:
        assert accepts(grammar, text), text
        assert parse_turn(text, K3_TOOLS, format="kimi-k3").errors == (), text
    for text in bad:
        assert not accepts(grammar, text), text
    disabled = compile_turn(K3_TOOLS, format="kimi-k3", reasoning="disabled", cache=False)
    assert accepts(disabled, f"Hi.{close_response}{call}{end}") and accepts(disabled, f"{close_response}")
    assert not accepts(disabled, f"{response}Hi.{close_response}")  # the prompt opened it already
    assert not accepts(disabled, "Hi.")
    enabled = compile_turn(K3_TOOLS, format="kimi-k3", cache=False)
    assert accepts(enabled, f"{think}hm{close_think}{response}Hi.{close_response}{end}")
    assert accepts(enabled, f"{response}Hi.{close_response}{call}")
    assert not accepts(enabled, f"{think}hm{close_think}{think}x{close_think}")


def test_k3_exports_and_structural_tag() -> None:
    from toolgrammar.evaluate.compare import bundled_tools_path
    from toolgrammar.turn.exports import to_gbnf, to_lark, to_structural_tag

    grammar = compile_turn(str(bundled_tools_path()), format="kimi-k3", cache=False)
    gbnf, lark = to_gbnf(grammar), to_lark(grammar)
    assert "<|open|>response<|sep|>" in gbnf and "<|close|>message<|sep|>" in gbnf
    assert "<|close|>message<|sep|>" in lark
    with pytest.raises(GrammarError, match="kimi-k3"):
        to_structural_tag(grammar)


def test_k3_refuses_an_enum_value_it_cannot_write() -> None:
    with pytest.raises(GrammarError, match="enum/const"):
        compile_turn(
            [function_tool("f", {"a": {"enum": ["<|close|>argument<|sep|><|close|>call<|sep|>"]}})],
            format="kimi-k3",
            cache=False,
        )


def test_k3_render_reads_back() -> None:
    calls = [ToolCall("get_weather", {"city": 'say "hi" & <go>'}), ToolCall("calc", {"x": 2, "flag": None})]
    text = get_format("kimi-k3").canonical_calls(calls)
    assert list(parse_turn(text, TOOLS, format="kimi-k3").tool_calls) == calls
