"""The gpt-oss (harmony) format: strict parser, grammar, soundness walks and completeness replays.

The vocabulary is the real o200k_harmony one (``quicktok-v1``'s data files, checked against every
fixture's ids in ``tests/evaluate/test_conformance_gpt_oss.py``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from grammar_checks import GET_WEATHER, assert_masked, assert_never_masked, check_walks, function_tool
from toolgrammar.formats import get_format
from toolgrammar.formats.gpt_oss import harmony_vocabulary
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import load_tools
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

FIXTURE_DIR = Path(__import__("canitoolcall").__file__).parent / "_data" / "fixtures" / "gpt-oss"
FIXTURES = {
    r["id"].split("/", 1)[1]: r
    for name in ("rendered.jsonl", "imported.jsonl")
    for r in map(json.loads, (FIXTURE_DIR / name).open())
}
FMT = get_format("gpt-oss")
CALL = 200012  # <|call|>: the stop token after a call (the fixtures' raw outputs end before it)
RETURN = 200002  # <|return|>: the stop token after the answer


def tools_of(fixture: str) -> list[dict[str, Any]]:
    return FIXTURES[fixture]["tools"]


WEATHER = [
    GET_WEATHER,
    function_tool("get", {}),
]


def parse(text: str, tools: Any = WEATHER) -> Any:
    return parse_turn(text, load_tools(tools), format="gpt-oss")


# --------------------------------------------------------------------------- the strict parser


@pytest.mark.parametrize(
    "header",
    [
        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>",
        " to=functions.get_weather<|channel|>commentary json<|message|>",
        " to=functions.get_weather<|channel|>commentary<|message|>",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
        "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>",
    ],
)
def test_every_header_spelling_is_one_call(header: str) -> None:
    turn = parse("<|channel|>analysis<|message|>think<|end|><|start|>assistant" + header + '{"city": "Oslo"}')
    assert turn.reasoning_content == "think" and turn.content is None and turn.errors == ()
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get_weather", {"city": "Oslo"})]


def test_content_is_the_bodies_of_messages_without_a_recipient() -> None:
    turn = parse(
        "<|channel|>commentary<|message|>One moment.<|end|><|start|>assistant to=functions.get"
        "<|channel|>commentary json<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>Done."
    )
    assert turn.content == "One moment.Done." and turn.reasoning_content is None
    assert [c.name for c in turn.tool_calls] == ["get"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Os', "truncated"),
        (" to=functions.get_weather<|channel|>commentary json", "truncated"),
        (' to=functions.get_weather<|channel|>commentary json<|message|>{"city": Oslo}', "invalid-json"),
        (' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "a\nb"}', "raw-newline-in-string"),
        (' to=functions.nope<|channel|>commentary json<|message|>{"city": "Oslo"}', "unknown-tool"),
        ("<|channel|>commentary to=python <|constrain|>code<|message|>print(1)", "unknown-tool"),
        (" to=functions.get_weather<|channel|>commentary json<|message|>{}", "missing-argument"),
        (
            ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "x", "unit": "k"}',
            "schema-violation",
        ),
    ],
)
def test_errors_by_kind(text: str, kind: str) -> None:
    turn = parse(text)
    assert [e.kind for e in turn.errors] == [kind] and not turn.tool_calls


def test_a_broken_header_is_text_and_markers_in_strings_stay_in_strings() -> None:
    turn = parse("<|channel|>final {oops}")
    assert turn.content == "<|channel|>final {oops}" and not turn.blocks
    inside = '{"city": "a<|call|>b<|end|>c"}'
    turn = parse(" to=functions.get_weather<|channel|>commentary json<|message|>" + inside + "<|call|>")
    assert [c.arguments for c in turn.tool_calls] == [{"city": "a<|call|>b<|end|>c"}]


# --------------------------------------------------------------------------- the grammar


@cache
def token_grammar(tools_json: str, **options: Any) -> TokenGrammar:
    return TokenGrammar(
        compile_turn(json.loads(tools_json), format="gpt-oss", cache=False, **options), harmony_vocabulary()
    )


def test_render_call_is_the_harmony_spelling_and_is_accepted() -> None:
    rendered = FMT.render_call("get_weather", {"city": "Paris", "unit": "c"})
    assert rendered in FIXTURES["harmony-single-call"]["raw_output"]
    grammar = compile_turn(WEATHER, format="gpt-oss", cache=False)
    assert accepts(grammar, rendered)
    assert accepts(grammar, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant" + rendered)
    assert not accepts(grammar, FMT.render_call("get_weather", {"city": "Paris", "unit": "k"}))
    assert not accepts(grammar, FMT.render_call("nope", {}))
    assert not accepts(grammar, "<|channel|>final<|message|>say to=functions.get")  # free text holds no recipient


CUT = {"harmony-truncated-in-arguments", "harmony-truncated-in-header", "harmony-truncated-in-reasoning"}
CANONICAL = {
    # fixture -> whitespace option: the rendered fixtures (openai-harmony, the HF template) and the engine
    # tests that write the same headers.
    **{k: "canonical" for k, r in FIXTURES.items() if r["provenance"]["kind"] == "template_render" and k not in CUT},
    "harmony-compact-json": "flexible",
    "harmony-spec-receiving-tool-calls": "flexible",
    "harmony-test-channel-first-constrain-adjacent": "flexible",
    "harmony-spec-preamble-action-plan": "canonical",
    "harmony-test-role-recipient-constrain-adjacent": "canonical",
    "vllm-channel-first-recipient": "canonical",
    "vllm-channel-first-empty-arguments": "canonical",
    "vllm-split-deltas-constrain-nospace": "canonical",
    "llamacpp-recipient-in-channel-commentary": "canonical",
    "llamacpp-edit-code-arguments": "canonical",
    "llamacpp-commentary-content-only": "canonical",
    "vllm-truncated-final": "canonical",
    "vllm-interrupted-final-only": "canonical",
}
NOT_GENERATED = {
    # what the grammar never writes, so the replay must be masked somewhere
    "vllm-call-on-analysis-channel": "a call on the analysis channel",
    "llamacpp-recipient-in-role-constrain": "a call on the analysis channel",
    "llamacpp-builtin-python-recipient": "a recipient that is not a function",
    "llamacpp-stray-commentary-header": "a recipient that is not a function",
    "vllm-preamble-call-end-terminated": "a call closed by <|end|> with no call after it",
}


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_canonical_fixture_ids_are_never_masked(name: str) -> None:
    """Every token of the fixture's ids, then the stop token, is allowed (completeness, DESIGN.md invariant 2)."""
    record = FIXTURES[name]
    stop = CALL if record["expected"]["tool_calls"] else RETURN
    tg = token_grammar(json.dumps(record["tools"]), whitespace=CANONICAL[name])
    assert_never_masked(tg, record["output_token_ids"], stop)


@pytest.mark.parametrize("name", sorted(CUT - {"harmony-truncated-in-reasoning"} | set(NOT_GENERATED)))
def test_cut_and_non_canonical_fixtures_are_masked(name: str) -> None:
    record = FIXTURES[name]
    tg = token_grammar(json.dumps(record["tools"]), whitespace="flexible")
    assert_masked(tg, record["output_token_ids"], CALL, why=f"{name}: {NOT_GENERATED.get(name, 'cut')}")


WALK_TOOLS = {
    "nested": tools_of("harmony-nested-json"),
    "numeric": tools_of("harmony-numeric-arguments"),
    "weather": WEATHER,
}
WALK_CASES = [
    ("weather", {}),
    ("nested", {}),
    ("numeric", {"reasoning": "disabled"}),
    ("weather", {"tool_choice": "required"}),
    ("numeric", {"tool_choice": "set_alarm", "parallel_tool_calls": False}),
    ("nested", {"whitespace": "flexible", "parallel_tool_calls": False}),
]


@pytest.mark.parametrize(("toolset", "options"), WALK_CASES, ids=[f"{t}-{o}" for t, o in WALK_CASES])
def test_random_walks_are_sound(toolset: str, options: dict[str, Any]) -> None:
    """Every walk parses with zero errors; every call's arguments satisfy the schema (invariant 1)."""
    vocab = harmony_vocabulary()
    tools = WALK_TOOLS[toolset]
    tg = token_grammar(json.dumps(tools), **options)
    to, eq, functions, dot, quote, close = (vocab.token_id(t) for t in (" to", "=", "functions", ".", '"', "}"))
    follow = {to: [eq], eq: [functions], functions: [dot]}

    def steer(tokens: list[int]) -> list[int]:
        """Spell the opener `` to=functions.`` once started; else start it, or close a string or object."""
        return follow.get(tokens[-1], [to, quote, close]) if tokens else [to]

    required = options.get("tool_choice") not in (None, "auto")
    check_walks(
        tg,
        tools,
        "gpt-oss",  # 60 walks of 16 to 120 tokens, seed 20261201
        require_call=required,
        min_calls=60 // 4,
        prefer=steer,
        prefer_probability=0.4,
    )
