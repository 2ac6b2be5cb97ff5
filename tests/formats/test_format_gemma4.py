"""The gemma4 format: strict parser, grammar, soundness walks and completeness replays at the byte level.

No Gemma 4 tokenizer ships on PyPI, so the token engine runs over a toy vocabulary: the 256 single bytes
plus the format's markers as whole added tokens (as Gemma 4's tokenizer has them), ``<turn|>`` ending
the turn. Walks over it reach every byte sequence the grammar allows, markers spelled in pieces included.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from grammar_checks import GET_WEATHER, assert_masked, assert_never_masked, byte_encode, byte_vocabulary, check_walks
from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats import get_format
from toolgrammar.formats.gemma4 import render_value
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import load_tools
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

FIXTURE_DIR = Path(__import__("canitoolcall").__file__).parent / "_data" / "fixtures" / "gemma4"
FIXTURES = {
    r["id"].split("/", 1)[1]: r for path in sorted(FIXTURE_DIR.glob("*.jsonl")) for r in map(json.loads, path.open())
}
FMT = get_format("gemma4")
M = FMT.markers
MARKERS = (M.block_open, M.block_close, '<|"|>', M.think_open, M.think_close, "<|tool_response>", "<turn|>")
VOCAB = byte_vocabulary("gemma4-toy-bytes", MARKERS, eos=["<turn|>", "<|tool_response>"])
EOS = 256 + MARKERS.index("<turn|>")


def encode(text: str) -> list[int]:
    """Greedy: a marker as its one token, every other byte as itself (how Gemma 4 keeps its markers whole)."""
    return byte_encode(VOCAB, text)


WEATHER = [GET_WEATHER]


def parse(text: str, tools: Any = WEATHER) -> Any:
    return parse_turn(text, load_tools(tools), format="gemma4")


# --------------------------------------------------------------------------- the strict parser


def test_values_are_typed_by_their_notation() -> None:
    schema = {"type": "object", "properties": {k: {} for k in "abcdef"}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = '<|tool_call>call:f{a:<|"|>42<|"|>,b:42,c:1e-05,d:true,e:null,f:{g:[1, <|"|>x,y}<|"|>]}}<tool_call|>'
    turn = parse_turn(text, load_tools(tools, mode="schema"), format="gemma4")
    assert turn.errors == ()
    assert turn.tool_calls[0].arguments == {
        "a": "42",
        "b": 42,
        "c": 1e-05,
        "d": True,
        "e": None,
        "f": {"g": [1, "x,y}"]},
    }


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('<|tool_call>call:get_weather{city:<|"|>Paris', "truncated"),
        ("<|tool_call>call:get_weather no brace<tool_call|>", "malformed-block"),
        ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|> extra}<tool_call|>', "malformed-block"),
        ('<|tool_call>call:get_weather{city:<|"|>a<|"|>,city:<|"|>b<|"|>}<tool_call|>', "malformed-block"),
        ('<|tool_call>call:nope{city:<|"|>Paris<|"|>}<tool_call|>', "unknown-tool"),
        ("<|tool_call>call:get_weather{city:42}<tool_call|>", "schema-violation"),
        ('<|tool_call>call:get_weather{city:<|"|>x<|"|>,unit:<|"|>k<|"|>}<tool_call|>', "schema-violation"),
        ("<|tool_call>call:get_weather{}<tool_call|>", "missing-argument"),
    ],
)
def test_errors_by_kind(text: str, kind: str) -> None:
    turn = parse(text)
    assert [e.kind for e in turn.errors] == [kind] and not turn.tool_calls


def test_the_closer_inside_a_string_stays_in_the_string() -> None:
    turn = parse('<|tool_call>call:get_weather{city:<|"|>a<tool_call|>b<|"|>}<tool_call|>after')
    assert [c.arguments for c in turn.tool_calls] == [{"city": "a<tool_call|>b"}] and turn.content == "after"


def test_keys_that_cannot_be_written_bare_are_refused() -> None:
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a:b": {}}}}}
    ]
    with pytest.raises(ToolSchemaError, match="bare"):
        compile_turn(tools, format="gemma4", cache=False)


# --------------------------------------------------------------------------- the grammar

NON_CANONICAL = {
    # fixture -> why the grammar (the template's spelling) rejects it
    "bug-ollama-18390-key-with-spaces": "', ' between members",
    "vllm-nested-arguments": "members not in dictsort order",
    "vllm-number-and-boolean": "members not in dictsort order",
    "sglang-nested-array-with-spaces": "', ' between array items",
    "sglang-nested-object": "members not in dictsort order",
    "sglang-text-around-call": "text after the call (after_calls='end')",
    "vllm-malformed-no-brace": "malformed",
    "truncated-mid-string": "cut",
    "truncated-in-name": "cut",
    "truncated-before-close": "cut",
    "truncated-second-parallel-call": "cut",
}
TEXT_AFTER = {"text-after-call", "text-after-call-thinking"}


@cache
def toolset_ok(name: str) -> bool:
    try:
        load_tools(FIXTURES[name]["tools"])
    except ToolSchemaError:  # OpenAPI "nullable" in three fixtures: the tool loader refuses it for every format
        return False
    return True


CANONICAL = sorted(n for n in FIXTURES if n not in NON_CANONICAL and toolset_ok(n))


def options_for(name: str) -> dict[str, Any]:
    return {"after_calls": "text"} if name in TEXT_AFTER else {}


@cache
def token_grammar(tools_json: str, **options: Any) -> TokenGrammar:
    return TokenGrammar(compile_turn(json.loads(tools_json), format="gemma4", cache=False, **options), VOCAB)


def test_the_fixture_sets_are_as_documented() -> None:
    assert len(FIXTURES) == 48 and len(CANONICAL) == 34
    assert sorted(n for n in FIXTURES if not toolset_ok(n)) == [
        "edge-values-key-with-space",
        "nested-objects-and-arrays",
        "numeric-arguments",
    ]


@pytest.mark.parametrize("name", CANONICAL)
def test_canonical_fixtures_are_accepted_and_never_masked(name: str) -> None:
    record = FIXTURES[name]
    grammar = compile_turn(record["tools"], format="gemma4", cache=False, **options_for(name))
    assert accepts(grammar, record["raw_output"])
    tg = token_grammar(json.dumps(record["tools"]), **options_for(name))
    assert_never_masked(tg, encode(record["raw_output"]), EOS)


@pytest.mark.parametrize("name", sorted(n for n in NON_CANONICAL if toolset_ok(n)))
def test_non_canonical_fixtures_are_rejected(name: str) -> None:
    record = FIXTURES[name]
    tg = token_grammar(json.dumps(record["tools"]))
    assert_masked(tg, encode(record["raw_output"]), EOS, why=NON_CANONICAL[name])


@pytest.mark.parametrize(
    "arguments",
    [
        {"city": "Zürich 🌦", "unit": "c"},
        {"city": 'with "quotes", {braces} and\nnewlines'},
        {"city": "<|tool_call>call:x{}<tool_call|> <channel|>"},
    ],
)
def test_render_call_is_accepted_and_reads_back(arguments: dict[str, Any]) -> None:
    block = FMT.render_call("get_weather", arguments)
    assert accepts(compile_turn(WEATHER, format="gemma4", cache=False), block)
    assert [c.arguments for c in parse(block).tool_calls] == [arguments]


def test_render_value_is_the_template_spelling() -> None:
    assert render_value({"b": 1, "A": 2.5, "a_c": [True, None, 1e-05]}) == "{A:2.5,a_c:[true,null,1e-05],b:1}"


MIXED = [
    *WEATHER,
    {
        "type": "function",
        "function": {
            "name": "record",
            "parameters": {
                "type": "object",
                "properties": {
                    "key with space": {"type": "number", "minimum": 0},
                    "Flag": {"type": "boolean"},
                    "n": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                    "obj": {"type": "object", "properties": {"B": {"type": "null"}, "a": {"enum": ["x", 3]}}},
                    "map": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "any": {},
                },
                "required": ["n", "Flag"],
            },
        },
    },
]
WALK_CASES = [
    ({}, "auto"),
    ({"reasoning": "disabled", "tool_choice": "required"}, "required"),
    ({"tool_choice": "record", "parallel_tool_calls": False}, "named"),
    ({"after_calls": "text", "escape_markers": True}, "text-after"),
]


@pytest.mark.parametrize(("options", "label"), WALK_CASES, ids=[c[1] for c in WALK_CASES])
def test_random_walks_are_sound(options: dict[str, Any], label: str) -> None:
    """Every walk parses with zero errors and every call satisfies its schema (DESIGN.md invariant 1)."""
    tg = token_grammar(json.dumps(MIXED), **options)
    opener, quote, think_close = (256 + MARKERS.index(m) for m in (M.block_open, '<|"|>', M.think_close))
    steer = [opener, quote, think_close, ord("}"), ord("]"), ord(",")]
    check_walks(
        tg,
        MIXED,
        "gemma4",
        seed=4242,
        n_walks=80,
        budget=(24, 160),
        require_call=label in ("required", "named"),
        min_calls=80 // 4,
        prefer=steer,
        prefer_probability=0.3,
    )
