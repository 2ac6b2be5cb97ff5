"""The ``llama3-json`` grammar against its strict parser (real Llama 3 vocabulary), and the Llama formats'
parsers on what the CanIToolCall fixtures do not cover.

Soundness: random walks through the token grammar (a uniformly random "model" over the allowed tokens,
fixed seeds) parse with zero errors, every call's arguments valid under ``jsonschema``. Completeness:
the token ids of every canonical fixture (the chat template's spelling, schema-valid) are never masked;
truncated ones leave the turn inside a block. ``llama4-pythonic``'s grammar has its own tests
(``tests/formats/test_format_llama4_pythonic.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from canitoolcall.fixtures import load_fixtures

from grammar_checks import assert_cut_in_block, assert_every_split_reads_the_same, assert_never_masked, check_walks
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from toolsets import TOOLSETS

FIXTURES = load_fixtures(None, families=["llama"])
L3 = [f for f in FIXTURES if "Llama-3" in f.tokenizer.repo]


@pytest.fixture(scope="module")
def vocab() -> Any:
    from toolgrammar.formats.llama3_json import llama3_vocabulary

    return llama3_vocabulary()


def token_grammar(tools: Any, vocab: Any, **options: Any) -> Any:
    from toolgrammar.runtime.token_grammar import TokenGrammar

    return TokenGrammar(compile_turn(tools, format="llama3-json", cache=False, **options), vocab)


def test_the_python_tag_is_a_marker_and_the_stop_tokens_end_the_turn(vocab: Any) -> None:
    assert vocab.n_tokens == 128257  # 128,000 BPE + 257 added (Llama 3.2 adds <|image|>)
    assert vocab.token_id(b"<|python_tag|>") == 128010 and 128010 not in vocab.special_ids
    assert vocab.eos_ids == {128001, 128008, 128009}


def canonical(fixture: Any) -> bool:
    """The output is the chat template's rendering of its one expected call."""
    from toolgrammar.formats import get_format

    calls = fixture.expected.tool_calls if fixture.expected is not None else ()
    if len(calls) != 1:
        return False
    rendered = get_format("llama3-json").render_call(calls[0].name, dict(calls[0].arguments))
    return rendered == fixture.raw_output


CONTROL_TOKENS_IN_STRINGS = {"llama/l3-marker-in-arguments"}
"""Its JSON string holds ``<|python_tag|>`` and header markers tokenized as control tokens: the grammar never
lets a control token into a block (the same text spelled with ordinary tokens is accepted)."""

CANONICAL = [f for f in L3 if canonical(f) and f.id not in CONTROL_TOKENS_IN_STRINGS]


def test_the_canonical_fixtures_are_the_template_renders() -> None:
    assert len(CANONICAL) >= 10
    assert all(canonical(f) for f in L3 if f.id in CONTROL_TOKENS_IN_STRINGS)


@pytest.mark.parametrize("fixture", CANONICAL, ids=lambda f: f.id)
def test_canonical_fixture_ids_are_never_masked(fixture: Any, vocab: Any) -> None:
    assert_never_masked(token_grammar(list(fixture.tools), vocab), fixture.output_token_ids, 128009)


def test_the_python_tag_form_is_accepted(vocab: Any) -> None:
    [fixture] = [f for f in L3 if f.id == "llama/l3-sglang-python-tag-call"]
    tools = list(fixture.tools)
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Beijing"}}'
    from tokenizers import Tokenizer

    from toolgrammar.formats.llama3_json import LLAMA3_TOKENIZER
    from toolgrammar.packages import package_file

    tok = Tokenizer.from_file(str(package_file(LLAMA3_TOKENIZER[0], LLAMA3_TOKENIZER[1], *LLAMA3_TOKENIZER[2])))
    ids = tok.encode(text, add_special_tokens=False).ids
    assert ids[0] == 128010
    assert_never_masked(token_grammar(tools, vocab), ids, 128009)


def test_a_truncated_call_leaves_the_turn_inside_its_block(vocab: Any) -> None:
    [fixture] = [f for f in L3 if f.id == "llama/l3-truncated-inside-parameters"]
    assert_cut_in_block(token_grammar(list(fixture.tools), vocab), fixture.output_token_ids, 128009)


WALKS = [
    ("seed-strings", {}),
    ("typed", {"whitespace": "flexible"}),
    ("nested", {"tool_choice": "required"}),
    ("shared-prefixes", {"after_calls": "text"}),
]


@pytest.mark.parametrize(("toolset", "options"), WALKS, ids=[f"{n}-{o}" for n, o in WALKS])
def test_random_walks_parse_with_zero_errors(vocab: Any, toolset: str, options: dict[str, Any]) -> None:
    tools = TOOLSETS[toolset]
    tg = token_grammar(tools, vocab, **options)
    opener, quote = vocab.token_id(b"<|python_tag|>"), vocab.token_id(b'"')
    brace = vocab.token_id(b'{"')
    prefer = [opener, brace, quote]
    check_walks(
        tg, tools, "llama3-json", min_calls=15, prefer=prefer, prefer_probability=0.35
    )  # 60 walks, seed 20261201


def test_parallel_calls_are_joined_by_a_semicolon() -> None:
    tools = TOOLSETS["seed-strings"]
    grammar = compile_turn(tools, format="llama3-json", cache=False)
    from toolgrammar.testing import accepts

    one = '{"name": "read_file", "parameters": {"path": "a"}}'
    two = '{"name": "run_tests", "parameters": {}}'
    assert accepts(grammar, f"{one}; {two}")
    assert accepts(grammar, f"Let me look. <|python_tag|>{one}")
    assert not accepts(grammar, f'{one}; {{"name": "nope", "parameters": {{}}}}')
    turn = parse_turn(f"{one}; {two}", tools, format="llama3-json")
    assert [c.name for c in turn.tool_calls] == ["read_file", "run_tests"] and turn.content is None


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"name": "read_file", "parameters": {"path": "a"}, "extra": 1}', "wrong-keys"),
        ('{"name": "read_file", "parameters": {"path": "a"}, "arguments": {}}', "wrong-keys"),
        ('{"name": "read_file"}', "wrong-keys"),
        ('{"type": "tool", "name": "read_file", "parameters": {"path": "a"}}', None),  # bare: content, not a call
        ('<|python_tag|>{"type": "tool", "name": "read_file", "parameters": {"path": "a"}}', "wrong-keys"),
        ('{"name": "nope", "parameters": {}}', "unknown-tool"),
        ('{"name": "read_file", "parameters": {"path": "a\nb"}}', "raw-newline-in-string"),
        ('<|python_tag|>brave_search.call(query="x")', "invalid-json"),
        ('{"name": "read_file", "parameters": {"path": "a"', "truncated"),
    ],
)
def test_strict_errors(text: str, kind: str | None) -> None:
    turn = parse_turn(text, TOOLSETS["seed-strings"], format="llama3-json")
    assert [e.kind for e in turn.errors] == ([kind] if kind else [])
    assert not turn.tool_calls


def test_streaming_equals_one_shot_for_every_split() -> None:
    tools = TOOLSETS["seed-strings"]
    text = 'Sure. {"name": "read_file", "parameters": {"path": "a;b"}}; {"name": "run_tests", "parameters": {}} ok'
    whole = parse_turn(text, tools, format="llama3-json")
    assert [c.name for c in whole.tool_calls] == ["read_file", "run_tests"] and whole.content == "Sure.  ok"
    assert_every_split_reads_the_same(text, tools, "llama3-json", whole)


@pytest.mark.parametrize(
    ("text", "kinds", "names", "content"),
    [
        ("[read_file(path='a'), run_tests()]", [], ["read_file", "run_tests"], None),
        ("See [1] and [note].", [], [], "See [1] and [note]."),
        ("[read_file('a')]", ["malformed-block"], [], None),
        ("[read_file(path=open('x'))]", ["malformed-block"], [], None),
        ("[read_file(path='a'), nope()]", ["unknown-tool"], ["read_file"], None),
        ("<|python_start|>[run_tests()]", ["malformed-block"], [], None),
        ("<|python_start|>[run_tests()]<|python_end|>", [], ["run_tests"], None),
        ("[read_file(path='a'", ["truncated"], [], None),
    ],
)
def test_pythonic_strict_parse(text: str, kinds: list[str], names: list[str], content: str | None) -> None:
    tools = TOOLSETS["seed-strings"]
    turn = parse_turn(text, tools, format="llama4-pythonic")
    assert [e.kind for e in turn.errors] == kinds
    assert [c.name for c in turn.tool_calls] == names
    assert turn.content == content
    assert_every_split_reads_the_same(text, tools, "llama4-pythonic", turn)


def test_pythonic_values_are_python_literals() -> None:
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}}}]
    turn = parse_turn("[f(a=None, b={'k': [True, 1.5]}, c='it\\'s')]", tools, format="llama4-pythonic")
    assert json.loads(turn.tool_calls[0].arguments_json()) == {"a": None, "b": {"k": [True, 1.5]}, "c": "it's"}
