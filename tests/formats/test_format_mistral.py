"""The Mistral grammars against their strict parser, over the real vocabularies of ``mistral-common``.

``mistral`` (``[TOOL_CALLS]NAME[ARGS]{json}``, ``[THINK]`` reasoning) over tekken; ``mistral-v3``
(``[TOOL_CALLS] [{"name", "arguments"}, ...]``) over the v3 sentencepiece vocabulary. Soundness: random
walks (fixed seeds) parse with zero errors and schema-valid arguments. Completeness: every fixture whose
output is the template's spelling of its expected turn replays token by token without a masked id.
"""

from __future__ import annotations

from typing import Any

import pytest
from canitoolcall.fixtures import load_fixtures

from grammar_checks import assert_cut_in_block, assert_every_split_reads_the_same, assert_never_masked, check_walks
from toolgrammar.formats import get_format
from toolgrammar.formats.calls import ToolCall
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from toolsets import TOOLSETS

FIXTURES = load_fixtures(None, families=["mistral"])
FORMAT_BY_REPO = {
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v3",
    "mistralai/Magistral-Small-2506": "mistral-think-text",
}


def format_of(fixture: Any) -> str:
    return FORMAT_BY_REPO.get(fixture.tokenizer.repo, "mistral")


def vocabulary(name: str) -> Any:
    from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary, tekken_vocabulary

    return sentencepiece_v3_vocabulary() if name == "mistral-v3" else tekken_vocabulary()


def token_grammar(tools: Any, fmt: str, **options: Any) -> Any:
    from toolgrammar.runtime.token_grammar import TokenGrammar

    return TokenGrammar(compile_turn(tools, format=fmt, cache=False, **options), vocabulary(fmt))


def canonical_text(fixture: Any) -> str | None:
    """The turn as the template spells its expected value (``None``: no call or no expected value)."""
    exp = fixture.expected
    if exp is None or not exp.tool_calls:
        return None
    fmt = get_format(format_of(fixture))
    m = fmt.markers
    calls = [ToolCall(c.name, dict(c.arguments)) for c in exp.tool_calls]
    think = f"{m.think_open}{exp.reasoning_content}{m.think_close}" if exp.reasoning_content else ""
    return think + (exp.content or "") + fmt.canonical_calls(calls)


CANONICAL = [f for f in FIXTURES if canonical_text(f) == f.raw_output]
MARKER_TEXT = {"mistral/v13think-marker-in-arguments"}
"""Its reasoning and argument hold ``[TOOL_CALLS]`` / ``[THINK]`` spelled with ordinary tokens: the grammar's
reasoning and strings allow that text (only ``[/THINK]`` ends the reasoning), so it replays too."""


def test_vocabularies() -> None:
    tekken, v3 = vocabulary("mistral"), vocabulary("mistral-v3")
    assert tekken.n_tokens == 131072 and v3.n_tokens == 32768
    for text, i in (("[TOOL_CALLS]", 9), ("[ARGS]", 32), ("[CALL_ID]", 33), ("[THINK]", 34), ("[/THINK]", 35)):
        assert tekken.token_bytes[i] == text.encode() and i not in tekken.special_ids
    assert tekken.eos_ids == {2} and 3 in tekken.special_ids  # </s> ends the turn; [INST] is a control token
    assert v3.token_bytes[5] == b"[TOOL_CALLS]" and 5 not in v3.special_ids and v3.eos_ids == {2}


def test_the_canonical_fixtures() -> None:
    assert len(CANONICAL) >= 15
    assert {format_of(f) for f in CANONICAL} == {"mistral", "mistral-v3"}
    assert {f.id for f in CANONICAL} >= MARKER_TEXT


@pytest.mark.parametrize("fixture", CANONICAL, ids=lambda f: f.id)
def test_canonical_fixture_ids_are_never_masked(fixture: Any) -> None:
    fmt = format_of(fixture)
    tg = token_grammar(list(fixture.tools), fmt)
    assert_never_masked(tg, fixture.output_token_ids, min(vocabulary(fmt).eos_ids))


def test_a_call_cut_in_its_arguments_leaves_the_turn_in_the_block() -> None:
    [fixture] = [f for f in FIXTURES if f.id == "mistral/v13think-truncated-in-arguments"]
    assert_cut_in_block(token_grammar(list(fixture.tools), "mistral"), fixture.output_token_ids, 2)


WALKS = [
    ("mistral", "seed-strings", {}),
    ("mistral", "typed", {"whitespace": "flexible", "reasoning": "disabled"}),
    ("mistral", "nested", {"tool_choice": "required"}),
    ("mistral", "shared-prefixes", {"after_calls": "text"}),
    ("mistral-v3", "seed-strings", {}),
    ("mistral-v3", "typed", {"tool_choice": "required"}),
    ("mistral-think-text", "typed", {}),
]


@pytest.mark.parametrize(("fmt", "toolset", "options"), WALKS, ids=[f"{f}-{n}-{o}" for f, n, o in WALKS])
def test_random_walks_parse_with_zero_errors(fmt: str, toolset: str, options: dict[str, Any]) -> None:
    tools = TOOLSETS[toolset]
    tg = token_grammar(tools, fmt, **options)
    vocab = tg.vocab
    opener = vocab.token_id(b"[TOOL_CALLS]")
    think_close = get_format(fmt).markers.think_close
    close_think = vocab.token_id(think_close.encode()) if think_close else None
    quote = vocab.token_id(b'"')

    def prefer(tokens: list[int]) -> list[int]:
        first = [close_think] if close_think is not None and close_think not in tokens else []
        return [*first, opener, quote]

    check_walks(tg, tools, fmt, min_calls=15, prefer=prefer, prefer_probability=0.35)  # 60 walks, seed 20261201


def test_grammar_spellings() -> None:
    tools = TOOLSETS["seed-strings"]
    g = compile_turn(tools, format="mistral", cache=False)
    assert accepts(g, '[TOOL_CALLS]read_file[ARGS]{"path": "a"}[TOOL_CALLS]run_tests[ARGS]{}')
    assert accepts(g, "[THINK]hm[/THINK]Sure.[TOOL_CALLS]run_tests[ARGS]{}")
    assert not accepts(g, "[TOOL_CALLS]run_tests[ARGS]{}[TOOL_CALLS]")
    assert not accepts(g, "[TOOL_CALLS]nope[ARGS]{}")
    v3 = compile_turn(tools, format="mistral-v3", cache=False)
    assert accepts(
        v3, '[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "a"}}, {"name": "run_tests", "arguments": {}}]'
    )
    assert not accepts(
        v3, '[TOOL_CALLS] [{"name": "run_tests", "arguments": {}}][TOOL_CALLS] [{"name": "run_tests", "arguments": {}}]'
    )


@pytest.mark.parametrize(
    ("fmt", "text", "kinds", "names"),
    [
        ("mistral", "[TOOL_CALLS]run_tests{}", ["truncated"], []),
        ("mistral", "[TOOL_CALLS]run_tests[TOOL_CALLS]run_tests[ARGS]{}", ["malformed-block"], ["run_tests"]),
        ("mistral", "[TOOL_CALLS]run tests[ARGS]{}", ["malformed-block"], []),
        ("mistral", "[TOOL_CALLS]run_tests[CALL_ID]a-b[ARGS]{}", ["malformed-block"], []),
        ("mistral", "[TOOL_CALLS]run_tests[CALL_ID]abc123XYZ[ARGS]{}", [], ["run_tests"]),
        ("mistral", "[TOOL_CALLS]run_tests[ARGS][]", ["arguments-not-object"], []),
        ("mistral", '[TOOL_CALLS]read_file[ARGS]{"path": "a\nb"}', ["raw-newline-in-string"], []),
        ("mistral", "[TOOL_CALLS]run_tests[ARGS]oops", ["invalid-json"], []),
        ("mistral-v3", '[TOOL_CALLS] {"name": "run_tests", "arguments": {}}', ["wrong-keys"], []),
        (
            "mistral-v3",
            '[TOOL_CALLS] [{"name": "run_tests", "arguments": {}}, {"name": "x"}]',
            ["wrong-keys"],
            ["run_tests"],
        ),
        ("mistral-v3", '[TOOL_CALLS] [{"name": "run_tests", "arguments": {}}', ["truncated"], []),
    ],
)
def test_strict_errors(fmt: str, text: str, kinds: list[str], names: list[str]) -> None:
    tools = TOOLSETS["seed-strings"]
    turn = parse_turn(text, tools, format=fmt)
    assert [e.kind for e in turn.errors] == kinds
    assert [c.name for c in turn.tool_calls] == names
    assert_every_split_reads_the_same(text, tools, fmt, turn)
