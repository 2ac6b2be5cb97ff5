"""The qwen-xml block grammar: what it accepts (the chat template's renders), what it rejects, and
random walks through it that the strict parser must read as valid calls (DESIGN.md invariant 1 at
the block level; the token-level walks of the whole turn live with the engine's tests)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_checks import byte_distances, random_block
from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.regex import to_regex
from toolgrammar.errors import GrammarError
from toolgrammar.formats.options import GrammarOptions
from toolgrammar.formats.qwen_xml import QwenXmlFormat, render_call
from toolgrammar.formats.qwen_xml.grammar import MARKUP, finite_number, text_value
from toolgrammar.formats.qwen_xml.parser import VALUE_FORBIDDEN
from toolgrammar.schema import ToolSet, load_tools
from toolgrammar.turn.parser import parse_turn

FIXTURE_DIR = Path(__import__("canitoolcall").__file__).parent / "_data" / "fixtures" / "qwen3-xml"
FIXTURES = [json.loads(line) for name in ("rendered.jsonl", "imported.jsonl") for line in (FIXTURE_DIR / name).open()]
FMT = QwenXmlFormat()

CUSTOM_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "configure",
            "parameters": {
                "type": "object",
                "properties": {
                    "mode": {"enum": ["fast", "safe", 3, True, None]},
                    "level": {"const": 2},
                    "key": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "integer"}]},
                    "size": {"type": ["number", "null"]},
                    "point": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "tag": {"type": "string"}},
                        "required": ["x", "y"],
                    },
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
                    "note": {"type": "string"},
                    "anything": {},
                },
                "required": ["mode", "note"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
]


def rendered_tools() -> list[dict[str, Any]]:
    return next(r["tools"] for r in FIXTURES if r["id"] == "qwen3-xml/q38-single-call")


def anyof_tools() -> list[dict[str, Any]]:
    return next(r["tools"] for r in FIXTURES if r["id"] == "qwen3-xml/vllm-coder-anyof-coercion")


TOOLSETS = {"rendered": rendered_tools, "anyof": anyof_tools, "custom": lambda: CUSTOM_TOOLS}


@cache
def toolset(name: str, mode: str = "schema") -> ToolSet:
    return load_tools(TOOLSETS[name](), mode=mode)  # type: ignore[arg-type]


@cache
def block_dfa(name: str, mode: str = "schema", **options: Any) -> DFA:
    return compile_dfa(FMT.block_grammar(toolset(name, mode), GrammarOptions(format="qwen-xml", **options)))


@cache
def fixture_block_dfa(tools_json: str) -> DFA:
    return compile_dfa(FMT.block_grammar(load_tools(json.loads(tools_json)), GrammarOptions(format="qwen-xml")))


def accepts(dfa: DFA, text: str) -> bool:
    return dfa.matches(text.encode("utf-8"))


# --------------------------------------------------------------------------- what it accepts


CANONICAL = [
    r
    for r in FIXTURES
    if r.get("expected")
    and r["expected"]["tool_calls"]
    and "malformed" not in r["tags"]
    and not r["id"].startswith("qwen3-xml/bug-coder-")  # hand-written markup from bug reports
]


@pytest.mark.parametrize("record", CANONICAL, ids=[r["id"] for r in CANONICAL])
def test_every_canonical_fixture_block_is_accepted(record: dict[str, Any]) -> None:
    """Each block of each canonical fixture, exactly as its raw output holds it."""
    dfa = fixture_block_dfa(json.dumps(record["tools"]))
    python = "x-python-literals" in record["tags"]
    for call in record["expected"]["tool_calls"]:
        block = render_call(call["name"], call["arguments"], python_literals=python)
        assert block in record["raw_output"]
        assert accepts(dfa, block), block


@pytest.mark.parametrize(
    "arguments",
    [
        {"mode": "fast", "note": ""},
        {"mode": 3, "level": 2, "note": "two\nlines\n"},
        {"mode": True, "key": "a", "note": "x"},
        {"mode": None, "key": -17, "size": 1e20, "note": "</tool_call> and <tool_call> are text here"},
        {"mode": "safe", "size": None, "point": {"x": 1, "y": -2, "tag": "é"}, "note": "a</parameter>b"},
        {"mode": "safe", "names": ["a", "b", "c"], "note": "  indented", "anything": {"k": [1, "v"]}},
        {"mode": "safe", "note": "n", "anything": "free text"},
    ],
)
def test_render_call_is_accepted(arguments: dict[str, Any]) -> None:
    assert accepts(block_dfa("custom"), render_call("configure", arguments))


def test_python_literals_of_the_coder_and_qwen35_templates_are_accepted() -> None:
    args = {"hour": 6, "minute": 0, "repeat": True, "label": None}
    dfa = block_dfa("rendered")
    assert accepts(dfa, render_call("set_alarm", args)) and accepts(
        dfa, render_call("set_alarm", args, python_literals=True)
    )


_PIECES = ["<", ">", "/", "\n", " ", "=", "a", "é", "🙂", "tool_call", "function", "parameter", "think", '"', "\t"]
_text = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_text)
def test_text_values_are_exactly_those_without_a_forbidden_string(text: str) -> None:
    dfa = compile_text_value()
    assert accepts(dfa, "\n" + text) == (not any(w in "\n" + text for w in VALUE_FORBIDDEN))


@cache
def compile_text_value() -> DFA:
    return compile_dfa(text_value(VALUE_FORBIDDEN))


@settings(max_examples=150, deadline=None)
@given(
    note=_text.filter(lambda s: not any(w in "\n" + s for w in VALUE_FORBIDDEN)),
    size=st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: abs(f) < 1e299),
    x=st.integers(-(10**40), 10**40),
    names=st.lists(_text.filter(lambda s: "</parameter>" not in s), min_size=1, max_size=3),
)
def test_generated_calls_are_accepted(note: str, size: float, x: int, names: list[str]) -> None:
    args = {"mode": "fast", "size": size, "point": {"x": x, "y": 0}, "names": names, "note": note}
    assert accepts(block_dfa("custom"), render_call("configure", args))


# --------------------------------------------------------------------------- what it rejects

REJECTS = [
    ("unknown tool", "<tool_call>\n<function=nope>\n</function>\n</tool_call>"),
    (
        "missing required",
        "<tool_call>\n<function=configure>\n<parameter=mode>\nfast\n</parameter>\n</function>\n</tool_call>",
    ),
    ("unknown parameter", render_call("ping", {"x": "1"})),
    ("out of schema order", render_call("configure", {"note": "n", "mode": "fast"})),
    ("enum outside", render_call("configure", {"mode": "slow", "note": "n"})),
    ("const outside", render_call("configure", {"mode": "fast", "level": 3, "note": "n"})),
    ("anyOf outside", render_call("configure", {"mode": "fast", "key": "c", "note": "n"})),
    ("number as text", render_call("configure", {"mode": "fast", "size": "big", "note": "n"})),
    (
        "number overflowing",
        render_call("configure", {"mode": "fast", "note": "n"}).replace(
            "<parameter=note>", "<parameter=size>\n1e999\n</parameter>\n<parameter=note>"
        ),
    ),
    ("object missing required key", render_call("configure", {"mode": "fast", "point": {"x": 1}, "note": "n"})),
    (
        "object not canonical",
        render_call("configure", {"mode": "fast", "note": "n"}).replace(
            "<parameter=note>", '<parameter=point>\n{"x":1,"y":2}\n</parameter>\n<parameter=note>'
        ),
    ),
    ("array too long", render_call("configure", {"mode": "fast", "names": ["a", "b", "c", "d"], "note": "n"})),
    ("value ends early", render_call("configure", {"mode": "fast", "note": "a\n</parameter>\nb"})),
    ("value with a tag at a line start", render_call("configure", {"mode": "fast", "note": "a\n<parameter=x>"})),
    ("value with a closing function line", render_call("configure", {"mode": "fast", "note": "a\n</function>"})),
    ("bare function", render_call("ping", {}).removeprefix("<tool_call>\n")),
    ("missing </parameter>", render_call("configure", {"mode": "fast", "note": "n"}).replace("n\n</parameter>", "n")),
    ("no newlines", "<tool_call><function=ping></function></tool_call>"),
    ("control token inside", render_call("configure", {"mode": "fast", "note": "n"}).replace("n\n<", "n<|im_end|>\n<")),
]


@pytest.mark.parametrize("text", [t for _, t in REJECTS], ids=[n for n, _ in REJECTS])
def test_rejects(text: str) -> None:
    if "<|im_end|>" in text:  # a control token is its own symbol, never a byte of a value
        from toolgrammar.automata.nodes import SPECIAL

        data = text.encode().split(b"<|im_end|>")
        dfa = block_dfa("custom")
        state = dfa.step(dfa.start, data[0])
        assert state >= 0 and dfa.step(state, [SPECIAL]) < 0
        return
    assert not accepts(block_dfa("custom"), text)


def test_escape_markers_keeps_tags_out_of_string_values() -> None:
    plain, escaped = block_dfa("custom"), block_dfa("custom", escape_markers=True)
    for tag in MARKUP:
        text = render_call("configure", {"mode": "fast", "note": f"see {tag} here"})
        assert accepts(plain, text) and not accepts(escaped, text), tag
    assert accepts(escaped, render_call("configure", {"mode": "fast", "note": "no tags"}))


def test_a_named_tool_choice_allows_that_tool_only() -> None:
    dfa = block_dfa("custom", tool_choice="ping")
    assert accepts(dfa, render_call("ping", {}))
    assert not accepts(dfa, render_call("configure", {"mode": "fast", "note": "n"}))


def test_strings_mode_takes_any_text_for_every_parameter() -> None:
    dfa = block_dfa("rendered", "strings")
    assert accepts(dfa, render_call("set_alarm", {"hour": "seven", "minute": "0"}))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"enum": [1, "1"]},
            "the enum/const value 1 cannot be written as a qwen-xml parameter: it reads back as '1'",
        ),
        ({"const": "a\n</parameter>"}, "its text would end the value early"),
    ],
)
def test_enum_values_that_cannot_be_written_are_refused(schema: dict[str, Any], message: str) -> None:
    tools = load_tools([{"name": "t", "parameters": {"type": "object", "properties": {"p": schema}}}])
    with pytest.raises(GrammarError, match=r"tool 't', at /properties/p: .*") as info:
        FMT.block_grammar(tools, GrammarOptions(format="qwen-xml"))
    assert message in str(info.value)


def test_finite_number() -> None:
    dfa = compile_dfa(finite_number())
    for ok in (
        "0",
        "-0",
        "123456789012345678901234567890",
        "0.75",
        "1e20",
        "1E+99",
        "1e-400",
        "1e+200",
        "12345678.5e299",
    ):
        assert accepts(dfa, ok) and json.loads(ok) is not None, ok
    for bad in ("1e300", "1e309", "123456789e299", "01", "1.", "-", "+1", ".5", "NaN", "Infinity"):
        assert not accepts(dfa, bad), bad


def test_block_regex_agrees_with_the_automaton() -> None:
    import re

    pattern = re.compile(to_regex(FMT.block_grammar(toolset("custom"), GrammarOptions(format="qwen-xml"))))
    dfa = block_dfa("custom")
    for args in (
        {"mode": "fast", "note": "x"},
        {"mode": "slow", "note": "x"},
        {"mode": "safe", "note": "a\n</function>"},
    ):
        text = render_call("configure", args)
        assert bool(pattern.fullmatch(text)) == accepts(dfa, text), text


# --------------------------------------------------------------------------- random walks: soundness


WALKS = [
    ("rendered", "schema", {}),
    ("anyof", "schema", {}),
    ("custom", "schema", {}),
    ("custom", "schema", {"escape_markers": True}),
    ("rendered", "strings", {}),
]


@pytest.mark.parametrize(("name", "mode", "options"), WALKS, ids=[f"{n}-{m}-{o}" for n, m, o in WALKS])
def test_random_walks_parse_as_valid_calls(name: str, mode: str, options: dict[str, Any]) -> None:
    """Walks through each tool's block (one tool at a time, so short tools do not crowd out long ones)."""
    tools = toolset(name, mode)
    originals = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLSETS[name]()}
    rng = np.random.default_rng(20261130)
    for tool in tools:
        dfa = block_dfa(name, mode, tool_choice=tool.name, **options)
        dist = byte_distances(dfa)
        for i in range(40):
            text = random_block(dfa, dist, rng, greed=0.2 + 0.2 * (i % 4), max_len=400).decode("utf-8")
            turn = parse_turn(text, tools, format="qwen-xml")
            assert turn.ok and len(turn.tool_calls) == 1 and turn.content is None, (text, turn.errors)
            call = turn.tool_calls[0]
            assert call.name == tool.name
            arguments = json.loads(call.arguments_json(), parse_constant=lambda c, t=text: pytest.fail(f"{c} in {t!r}"))
            if mode == "schema":
                jsonschema.validate(arguments, originals[call.name])
            else:
                assert all(isinstance(v, str) for v in arguments.values())
            # the template's rendering of the parsed call reads back as the same call
            assert parse_turn(render_call(call.name, call.arguments), tools, format="qwen-xml").tool_calls == (call,)


def test_no_overflowing_number_inside_an_object_value() -> None:
    dfa = block_dfa("rendered")
    text = render_call("search", {"query": "q"}).replace(
        "</function>", '<parameter=filters>\n{"a": 1e999}\n</parameter>\n</function>'
    )
    assert not accepts(dfa, text)
