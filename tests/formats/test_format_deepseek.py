"""The DeepSeek formats' grammars over the real vocabularies: completeness, termination and soundness.

- Completeness: every canonical CanIToolCall ``deepseek`` fixture's token ids (then the end of turn) pass
  the engine unmasked under its sub-format's grammar; malformed and truncated ones are masked (a cut turn
  can never end inside a section). Engine-test fixtures that spell a call otherwise than the template
  (compact JSON, no newline between V3 calls, one newline in an empty invoke, a self-closing invoke) are
  masked too: the grammar writes the canonical spelling only (the parser reads them, see the conformance test).
- Soundness: random walks (uniform over the allowed tokens, fixed seeds) parse with zero errors under the
  strict parser, and every call's arguments validate with ``jsonschema``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from canitoolcall.fixtures import load_fixtures

from grammar_checks import (
    GET_WEATHER,
    assert_cut_in_block,
    assert_masked,
    assert_never_masked,
    check_walks,
    function_tool,
)
from toolgrammar.formats import get_format
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

FIXTURES = load_fixtures(None, families=["deepseek"])
FORMATS = {
    "x-deepseek-v3": "deepseek-v3",
    "x-deepseek-v31": "deepseek-v3.1",
    "x-deepseek-v32": "deepseek-v3.2",
    "x-deepseek-v4": "deepseek-v4",
    "x-deepseek-v41": "deepseek-v4.1",
}
NOT_CANONICAL = {
    "deepseek/vllm-v3-parallel-no-newline": "no newline between two V3 calls",
    "deepseek/vllm-v31-text-before-call": 'compact JSON {"x":1}',
    "deepseek/sglang-v32-text-before-empty-invoke": "one newline inside an empty invoke",
    "deepseek/sglang-v4-self-closing-invoke": "a self-closing invoke",
}


def format_of(fixture: Any) -> str:
    return FORMATS[next(t for t in fixture.tags if t.startswith("x-deepseek-"))]


@cache
def vocabulary(repo: str) -> Any:
    return get_format("deepseek").fixture_vocabulary(repo)


def token_grammar(fixture: Any, **options: Any) -> TokenGrammar:
    reasoning = "prefilled" if (fixture.generation_prompt or "").endswith("<think>") else "disabled"
    grammar = compile_turn(list(fixture.tools), format=format_of(fixture), reasoning=reasoning, cache=False, **options)
    return TokenGrammar(grammar, vocabulary(fixture.tokenizer.repo))


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.id for f in FIXTURES])
def test_replay(fixture: Any) -> None:
    tg = token_grammar(fixture)
    ids, eos = list(fixture.output_token_ids), min(tg.vocab.eos_ids)
    cut_in_section = "truncated" in fixture.tags and "reasoning" not in fixture.tags
    if "malformed" in fixture.tags or fixture.id in NOT_CANONICAL:
        assert_masked(tg, ids, eos, why=NOT_CANONICAL.get(fixture.id, "malformed"))
    elif cut_in_section:
        assert_cut_in_block(tg, ids, eos)  # every token of the cut turn, but not the end of turn
    else:
        assert_never_masked(tg, ids, eos)


def test_render_is_the_fixtures_spelling() -> None:
    """render_call / canonical_calls write what the fixtures' templates wrote."""
    for fixture in FIXTURES:
        expected = fixture.expected
        if not expected or not expected.tool_calls or fixture.id in NOT_CANONICAL or "truncated" in fixture.tags:
            continue
        from toolgrammar.formats.calls import ToolCall

        calls = [ToolCall(c.name, dict(c.arguments)) for c in expected.tool_calls]
        assert get_format(format_of(fixture)).canonical_calls(calls) in fixture.raw_output, fixture.id


CALC = {
    "x": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    "flag": {"type": ["boolean", "null"]},
    "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "number"}]},
}
TOOLS = [GET_WEATHER, function_tool("calc", CALC, ["x"])]
REPOS = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3-0324",
    "deepseek-v3.1": "deepseek-ai/DeepSeek-V3.1",
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "deepseek-v4": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v4.1": "deepseek-ai/DeepSeek-V4.1-Flash",
}


@pytest.mark.parametrize("fmt", sorted(REPOS))
@pytest.mark.parametrize("choice", ["required", "auto"])
def test_random_walks_are_sound(fmt: str, choice: str) -> None:
    grammar = compile_turn(TOOLS, format=fmt, tool_choice=choice, reasoning="disabled", cache=False)
    tg = TokenGrammar(grammar, vocabulary(REPOS[fmt]))
    opener = (
        tg.vocab.token_id(get_format(fmt).markers.block_open.encode())
        if fmt in ("deepseek-v3", "deepseek-v3.1")
        else None
    )
    prefer = [opener] if opener is not None else ()
    check_walks(
        tg, TOOLS, fmt, seed=7, n_walks=6, budget=160, require_call=choice == "required", prefer=prefer, eos_weight=0.2
    )


def test_the_grammar_and_parser_agree_on_rendered_calls() -> None:
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.testing import accepts

    calls = [
        ToolCall("get_weather", {"city": "Zürich </x>", "unit": "c"}),
        ToolCall("calc", {"x": -3, "tags": ["a"], "flag": None, "note": 2.5}),
    ]
    for fmt in REPOS:
        text = get_format(fmt).canonical_calls(calls)
        grammar = compile_turn(TOOLS, format=fmt, reasoning="disabled", cache=False)
        assert accepts(grammar, text), fmt
        assert not accepts(
            compile_turn(TOOLS, format=fmt, reasoning="disabled", parallel_tool_calls=False, cache=False), text
        )
        turn = parse_turn(text, TOOLS, format=fmt)
        assert turn.ok and list(turn.tool_calls) == calls, fmt
