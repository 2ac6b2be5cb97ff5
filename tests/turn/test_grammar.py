"""The turn grammar: golden exports, agreement with the real chat template, options and their errors."""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgrammar.automata.nodes import EOS
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.testing import accepts, check_grammar
from toolgrammar.turn.grammar import compile_turn

from toolsets import NESTED_TOOLS, SEED_TOOLS, TOOLSETS, TYPED_TOOLS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _golden(name: str, actual: str) -> None:
    """Compare with tests/golden/NAME; TOOLGRAMMAR_UPDATE_GOLDEN=1 rewrites it (then review the diff)."""
    path = GOLDEN / name
    if os.environ.get("TOOLGRAMMAR_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual + "\n", encoding="utf-8")
    expected = path.read_text(encoding="utf-8").rstrip("\n")
    if expected != actual:
        lines = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "golden", "actual", lineterm="")
        diff = "\n".join(lines)
        pytest.fail(f"{name} changed (set TOOLGRAMMAR_UPDATE_GOLDEN=1 to accept):\n{diff}")


@pytest.mark.parametrize(
    ("name", "tools", "options"),
    [
        ("hermes-seed-tools.block.regex", SEED_TOOLS, {}),
        ("hermes-seed-tools-escape-markers.block.regex", SEED_TOOLS, {"escape_markers": True}),
        ("hermes-typed-tools.block.regex", TYPED_TOOLS, {}),
        ("hermes-nested-tools-flexible.block.regex", NESTED_TOOLS, {"whitespace": "flexible"}),
    ],
)
def test_block_regex_matches_golden_file(name, tools, options):
    _golden(name, compile_turn(tools, cache=False, **options).block_regex())


# -- agreement: the automaton and the exported regex accept the same texts ----------------------


def _sample_texts(grammar) -> list[str]:
    fmt = grammar.format
    calls = {
        "read_file": [{"path": "src/a.py"}, {"path": 'quote " and \\ and \n'}, {"path": "日本語 🌸"}],
        "grep": [{"pattern": "def f", "path": "."}],
        "run_tests": [{}, {"path": "tests"}],
        "write_file": [{"path": "a", "content": "line1\nline2 </tool_call> <tool_call>"}],
    }
    texts = ["Hello!", "", "<think>\nhm\n</think>\n\nok"]
    for name, args_list in calls.items():
        for args in args_list:
            texts.append(fmt.render_call(name, args))
            texts.append("I'll do it.\n" + fmt.render_call(name, args))
    texts += [
        '<tool_call>\n{"name": "read_file", "arguments": {"path": 1}}\n</tool_call>',
        '<tool_call>\n{"name": "read_file", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
        '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>',
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a\nb"}}\n</tool_call>',
        "text after</tool_call> only",
    ]
    return texts


def test_exported_regex_agrees_with_the_automaton():
    grammar = compile_turn(SEED_TOOLS, cache=False)
    pattern = re.compile(grammar.to_regex(), re.DOTALL)
    for text in _sample_texts(grammar):
        by_regex = pattern.fullmatch(text + "") is not None or pattern.fullmatch(text) is not None
        assert accepts(grammar, text) == by_regex, text


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list('{}[]",: \n\\abn01-.eE<>/tolcu_ä😀')), max_size=40))
def test_block_regex_agrees_with_the_automaton_on_random_bodies(body):
    grammar = _typed_grammar()
    text = f'<tool_call>\n{{"name": "calculate", "arguments": {body}}}\n</tool_call>'
    assert accepts(grammar, text) == (_typed_block().fullmatch(text) is not None)


_cache: dict[str, object] = {}


def _typed_grammar():
    if "g" not in _cache:
        _cache["g"] = compile_turn(TYPED_TOOLS, cache=False, reasoning="disabled")
    return _cache["g"]


def _typed_block():
    if "rx" not in _cache:
        _cache["rx"] = re.compile(_typed_grammar().block_regex(), re.DOTALL)
    return _cache["rx"]


def test_interegular_agrees_on_a_json_value_grammar():
    """An independent regex engine (interegular, from the design card) reads the exported regex."""
    interegular = pytest.importorskip("interegular")
    grammar = compile_turn(TYPED_TOOLS[:1], cache=False, reasoning="disabled", tool_choice="calculate")
    rx = grammar.block_regex()
    fsm = interegular.parse_pattern(rx).to_fsm()
    for args in [
        '{"x": 1, "y": 2.5}',
        '{"x": -0, "y": 1e+5, "exact": true}',
        '{"x": 1, "y": 2, "note": null}',
        '{"x": 1}',
        '{"x": 1.5, "y": 1}',
        '{"y": 1, "x": 1}',
    ]:
        text = f'<tool_call>\n{{"name": "calculate", "arguments": {args}}}\n</tool_call>'
        assert fsm.accepts(text) == accepts(grammar, text), text


# -- alignment with the real Qwen3 chat template ------------------------------------------------------

ALIGNMENT = [
    pytest.param("Let me look.", [("read_file", {"path": "a.py"})], None, id="content-1call"),
    pytest.param("", [("read_file", {"path": "a.py"}), ("grep", {"pattern": "x", "path": "."})], None, id="2calls"),
    pytest.param("", [("write_file", {"path": "ö.txt", "content": 'a\n"b"\t</tool_call>'})], None, id="escapes"),
    pytest.param("Done.", [], "I think.", id="reasoning-answer"),
    pytest.param("", [("run_tests", {})], "Run them.", id="reasoning-call-empty-args"),
]


@pytest.mark.parametrize(("content", "calls", "reasoning"), ALIGNMENT)
def test_chat_template_rendering_is_accepted(qwen3_tokenizer, content, calls, reasoning):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    rendered = qwen3_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}, message, {"role": "user", "content": "next"}],
        tools=SEED_TOOLS,
        tokenize=False,
    )
    start = rendered.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
    turn = rendered[start : rendered.index("<|im_end|>", start)]
    assert accepts(compile_turn(SEED_TOOLS), turn), turn


# -- policies ----------------------------------------------------------------------------------------------


def test_policies_accept_and_reject_what_they_say():
    call = '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
    two = call + "\n" + call
    check_grammar(
        compile_turn(SEED_TOOLS, reasoning="disabled"),
        passing=["hi", call, "hi\n" + call, two],
        failing=[call + "trailing text", call + call],
    )
    # required: the turn is the call (after the reasoning, and the chat template's "\n\n" after it)
    check_grammar(
        compile_turn(SEED_TOOLS, tool_choice="required"),
        passing=[call, two, "<think>\nhm\n</think>\n\n" + call, "<think>\nhm\n</think>" + call],
        failing=["hi", "", "ok " + call, "<think>\nhm\n</think>\n\nok " + call, "<think>\nhm\n</think>"],
    )
    check_grammar(
        compile_turn(SEED_TOOLS, tool_choice="required", reasoning="disabled"),
        passing=[call, two],
        failing=["\n" + call, "ok " + call, "hi"],
    )
    # prose first: the earlier variant, by name
    check_grammar(
        compile_turn(SEED_TOOLS, tool_choice="required", prose_first=True),
        passing=[call, "ok " + call, "<think>\nhm\n</think>\n\nok " + call],
        failing=["hi", ""],
    )
    check_grammar(compile_turn(SEED_TOOLS, tool_choice="none"), passing=["hi"], failing=[call])
    check_grammar(
        compile_turn(SEED_TOOLS, tool_choice="run_tests"),
        passing=[call, two],
        failing=[
            "hi " + call,
            '<tool_call>\n{"name": "grep", "arguments": {"pattern": "a", "path": "b"}}\n</tool_call>',
        ],
    )
    check_grammar(compile_turn(SEED_TOOLS, parallel_tool_calls=False), passing=[call], failing=[two])
    check_grammar(
        compile_turn(SEED_TOOLS, after_calls="text"),
        passing=[call + "\nThat was it."],
        failing=[call + "\n" + "x <tool_call>"],
    )
    check_grammar(
        compile_turn(SEED_TOOLS, reasoning="prefilled"),
        passing=["hm\n</think>\n\n" + call, "still thinking"],
        failing=["<think>\nhm\n</think>\n\n" + call + "</think>"],
    )
    check_grammar(
        compile_turn(SEED_TOOLS, escape_markers=True),
        passing=['<tool_call>\n{"name": "read_file", "arguments": {"path": "<\\/tool_call>"}}\n</tool_call>'],
        failing=['<tool_call>\n{"name": "read_file", "arguments": {"path": "</tool_call>"}}\n</tool_call>'],
    )


def test_a_newline_after_the_last_block_may_end_the_turn():
    """Where the separator is a newline, one may end the calls: a model that writes it and means to stop
    is not held to another call (the embedded model does: "</tool_call>" then "\n" then end of turn). It
    is still the separator (a block may follow), it is never two, and the parser reads no content in it."""
    from toolgrammar.turn.parser import parse_turn

    hermes = '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
    xml = "<tool_call>\n<function=run_tests>\n</function>\n</tool_call>"
    for fmt, call in (("hermes", hermes), ("qwen-xml", xml)):
        for options in ({}, {"tool_choice": "required"}, {"tool_choice": "run_tests", "parallel_tool_calls": False}):
            grammar = compile_turn(SEED_TOOLS, format=fmt, reasoning="disabled", **options)
            two = call + "\n" + call + "\n"
            one_only = options.get("parallel_tool_calls") is False
            check_grammar(grammar, passing=[call, call + "\n", *([] if one_only else [two])],
                          failing=[call + "\n\n", call + " ", call + "\nok", *([two] if one_only else [])])  # fmt: skip
        parsed = parse_turn(call + "\n", SEED_TOOLS, format=fmt)
        assert parsed.errors == () and parsed.content is None and [c.name for c in parsed.tool_calls] == ["run_tests"]
    # a separator that is not a newline, and text after the calls, keep their own rules
    check_grammar(compile_turn(SEED_TOOLS, after_calls="text", reasoning="disabled"),
                  passing=[hermes + "\n", hermes + "\nThat was it."], failing=[hermes + "\n<tool_call>"])  # fmt: skip


def test_whitespace_is_canonical_by_default_and_bounded_when_flexible():
    tight = '<tool_call>\n{"name": "run_tests", "arguments": {"path": "a"}}\n</tool_call>'
    loose = '<tool_call>\n{ "name" : "run_tests",\n "arguments":{"path":"a"} }\n</tool_call>'
    very_loose = '<tool_call>\n{"name":      "run_tests", "arguments": {}}\n</tool_call>'
    check_grammar(compile_turn(SEED_TOOLS), passing=[tight], failing=[loose, very_loose])
    check_grammar(
        compile_turn(SEED_TOOLS, whitespace="flexible", max_whitespace=2), passing=[tight, loose], failing=[very_loose]
    )


def test_every_turn_can_end_and_free_text_is_safe():
    g = compile_turn(SEED_TOOLS)
    dfa = g.dfa
    state = dfa.step(dfa.start, b"Some free text")
    assert dfa.safe[state] and dfa.transitions[state, EOS] >= 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tool_choice": "nope"}, "tool_choice names 'nope'"),
        ({"reasoning": "maybe"}, "reasoning must be"),
        ({"whitespace": "any"}, "whitespace must be"),
        ({"whitespace": "flexible", "max_whitespace": 100}, "max_whitespace <= 16"),
        ({"format": "nope"}, "unknown format 'nope'"),
        ({"colour": "red"}, "unknown grammar option"),
        ({"after_calls": "more"}, "after_calls must be"),
    ],
)
def test_bad_options_get_clear_errors(options, message):
    with pytest.raises(GrammarError, match=message):
        compile_turn(SEED_TOOLS, cache=False, **options)


def test_bad_tools_fail_at_compile_time_naming_tool_and_keyword():
    with pytest.raises(ToolSchemaError, match="lookahead is not supported") as info:
        compile_turn(
            [
                {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)"}}},
                }
            ],
            cache=False,
        )
    assert info.value.tool == "f" and info.value.keyword == "pattern"


def test_forced_text_is_what_every_turn_starts_with():
    prefixed = [
        {"name": f"get_{x}", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}} for x in "ab"
    ]
    assert compile_turn(prefixed, tool_choice="required", reasoning="disabled").forced_text() == (
        '<tool_call>\n{"name": "get_'
    )
    assert compile_turn(SEED_TOOLS, tool_choice="required", reasoning="disabled").forced_text() == (
        '<tool_call>\n{"name": "'
    )
    assert compile_turn(SEED_TOOLS, tool_choice="auto", reasoning="disabled").forced_text() == ""
    # with reasoning, "<think>" or "<tool_call>": only their shared "<t" is forced (compare pre-fills nothing then)
    assert compile_turn(SEED_TOOLS, tool_choice="required").forced_text() == "<t"
    assert compile_turn(SEED_TOOLS, tool_choice="required", prose_first=True, reasoning="disabled").forced_text() == ""


@pytest.mark.parametrize("choice", ["auto", "none", "run_tests"])
def test_prose_first_is_refused_outside_required(choice):
    with pytest.raises(GrammarError, match=r"prose_first=True applies to tool_choice='required' only"):
        compile_turn(SEED_TOOLS, tool_choice=choice, prose_first=True, cache=False)


def test_required_with_no_tools_is_an_error():
    with pytest.raises(GrammarError, match="at least one tool"):
        compile_turn([], tool_choice="required", cache=False)


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_the_disk_cache_returns_the_same_automaton(toolset, tmp_path, monkeypatch):
    """A skeleton that does not ship, compiled by one process, is what the next one reads from disk."""
    from toolgrammar import caches
    from toolgrammar.automata import skeleton_store as skeletons

    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(tmp_path))
    monkeypatch.setattr(skeletons, "SHIPPED_DIR", tmp_path / "none-shipped")
    caches.clear("automata")
    first = compile_turn(TOOLSETS[toolset])
    caches.clear("automata")  # a new process: only the disk has it
    again = compile_turn(TOOLSETS[toolset])
    caches.clear("automata")
    assert not first.from_cache and again.from_cache
    assert (first.dfa.transitions == again.dfa.transitions).all()
    assert json.loads(first.options.key) == json.loads(again.options.key)
