"""The qwen-xml parser: error kinds and messages, value conversion, big numbers, markers in values,
strict vs lenient, rendering, and streaming == one-shot."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrammar.errors import ToolSchemaError
from toolgrammar.formats import get_format
from toolgrammar.formats.calls import ERROR_KINDS
from toolgrammar.formats.qwen_xml import QwenXmlFormat, render_call, render_value
from toolgrammar.formats.qwen_xml.parser import (
    VALUE_END,
    VALUE_FORBIDDEN,
    QwenXmlStreamState,
    convert_value,
    schema_types,
)
from toolgrammar.formats.qwen_xml.parser import parse_turn as qwen_parse
from toolgrammar.schema import Tool, ToolSet, load_tools
from toolgrammar.turn.parser import TurnStreamParser, accumulate, parse_turn

FIXTURE_DIR = Path(__import__("canitoolcall").__file__).parent / "_data" / "fixtures" / "qwen3-xml"
FIXTURES = [json.loads(line) for name in ("rendered.jsonl", "imported.jsonl") for line in (FIXTURE_DIR / name).open()]
MALFORMED_KINDS = {
    "qwen3-xml/llamacpp-coder-bare-function": ["bare-function"],
    "qwen3-xml/llamacpp-coder-bare-function-parallel": ["bare-function"],
    "qwen3-xml/bug-coder-missing-tool-call-opener": ["bare-function"],
    "qwen3-xml/vllm-coder-missing-close-parameter": ["missing-close-parameter"],
    "qwen3-xml/bug-missing-close-parameter-before-function": ["missing-close-parameter"],
}
"""The fixtures whose expected call only a lenient reader recovers, and what strict mode reports."""

TOOLS = load_tools(
    [
        {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
        {
            "name": "set_alarm",
            "parameters": {
                "type": "object",
                "properties": {
                    "hour": {"type": "integer"},
                    "volume": {"type": "number"},
                    "repeat": {"type": "boolean"},
                    "label": {"type": ["string", "null"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "extra": {"type": "object"},
                },
                "required": ["hour"],
            },
        },
        {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    ]
)


def parse(text: str, tools: ToolSet = TOOLS, **kw: Any) -> Any:
    return parse_turn(text, tools, format="qwen-xml", **kw)


def only_error(text: str, **kw: Any) -> tuple[str, str]:
    turn = parse(text, **kw)
    assert len(turn.blocks) == 1 and turn.blocks[0].error is not None, turn
    return turn.blocks[0].error.kind, turn.blocks[0].error.message


_STATES: dict[str, tuple[ToolSet, bool]] = {}


def fixture_state(record: dict[str, Any]) -> tuple[ToolSet, bool]:
    """The fixture's tools (loaded once) and whether its generation prompt opened ``<think>``."""
    from toolgrammar.evaluate.conformance import reasoning_started

    if record["id"] not in _STATES:
        started = reasoning_started(record.get("generation_prompt") or "")
        _STATES[record["id"]] = (load_tools(record["tools"]), started)
    return _STATES[record["id"]]


# --------------------------------------------------------------------------- error kinds and messages

WRITE = "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"

ERROR_CASES = [
    (
        "truncated-at-opener",
        "<tool_call>",
        "truncated",
        "error: tool call is truncated: the turn ended before </tool_call> (after <tool_call>)",
    ),
    (
        "truncated-in-value",
        WRITE + "<parameter=content>\nrm -rf /",
        "truncated",
        "error: tool call is truncated: the turn ended before </tool_call> (in the value of parameter 'content')",
    ),
    (
        "truncated-after-function",
        WRITE + "<parameter=content>\nx\n</parameter>\n</function>\n",
        "truncated",
        "error: tool call is truncated: the turn ended before </tool_call> (after </function>)",
    ),
    (
        "truncated-malformed",
        "<tool_call>\n<function=write_file\n>",
        "truncated",
        "error: tool call is truncated: the turn ended before </tool_call>; its markup was already malformed: "
        "<function=...> is not closed by '>' before '\\n>'",
    ),
    (
        "truncated-bare",
        "<function=get_time>\n",
        "truncated",
        "error: tool call is truncated: the turn ended before </function> (in <function=get_time>, before </function>)",
    ),
    (
        "malformed-not-xml",
        "<tool_call>not xml</tool_call>",
        "malformed-block",
        "error: malformed tool call: expected <function=NAME> after <tool_call>, found 'not xml</tool_call>'",
    ),
    (
        "malformed-text-between-parameters",
        WRITE + "oops\n</function>\n</tool_call>",
        "malformed-block",
        "error: malformed tool call: expected <parameter=NAME> or </function> in <function=write_file>, "
        "found 'oops\\n</function>\\n</tool_...'",
    ),
    (
        "malformed-after-function",
        "<tool_call>\n<function=get_time>\n</function>\n<function=get_time>\n</function>\n</tool_call>",
        "malformed-block",
        "error: malformed tool call: expected </tool_call> after </function>, found '<function=get_time>\\n</fu...'",
    ),
    (
        "malformed-empty-name",
        "<tool_call>\n<function=>\n</function>\n</tool_call>",
        "malformed-block",
        "error: malformed tool call: <function=> has an empty name",
    ),
    (
        "malformed-duplicate-parameter",
        WRITE
        + "<parameter=path>\nb.txt\n</parameter>\n<parameter=content>\nx\n</parameter>\n</function>\n</tool_call>",
        "malformed-block",
        "error: malformed tool call: parameter 'path' is given twice",
    ),
    (
        "bare-function",
        "Listing.\n<function=get_time>\n</function>\n</tool_call>",
        "bare-function",
        "error: <function=get_time> is not inside a tool-call block: write <tool_call> before it",
    ),
    (
        "missing-close-parameter-next-parameter",
        "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n<parameter=content>\nx\n</parameter>\n"
        "</function>\n</tool_call>",
        "missing-close-parameter",
        "error: parameter 'path' is not closed: write </parameter> after its value",
    ),
    (
        "missing-close-parameter-function",
        WRITE + "<parameter=content>\nx\n</function>\n</tool_call>",
        "missing-close-parameter",
        "error: parameter 'content' is not closed: write </parameter> after its value",
    ),
    (
        "unknown-tool",
        "<tool_call>\n<function=delete_file>\n</function>\n</tool_call>",
        "unknown-tool",
        "error: unknown tool 'delete_file'",
    ),
    (
        "missing-argument",
        WRITE + "</function>\n</tool_call>",
        "missing-argument",
        "error: missing arguments ['content'], unknown arguments []",
    ),
    (
        "unknown-argument",
        "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>",
        "unknown-argument",
        "error: missing arguments [], unknown arguments ['zone']",
    ),
    (
        "schema-violation",
        "<tool_call>\n<function=set_alarm>\n<parameter=hour>\nseven\n</parameter>\n</function>\n</tool_call>",
        "schema-violation",
        "error: arguments do not match the schema of 'set_alarm': $.hour: 'seven' is not of type 'integer'",
    ),
]


@pytest.mark.parametrize(("text", "kind", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_error_kind_and_message(text: str, kind: str, message: str) -> None:
    assert kind in ERROR_KINDS
    assert only_error(text) == (kind, message)


def test_every_kind_this_format_can_report_is_covered() -> None:
    covered = {c[2] for c in ERROR_CASES}
    # hermes-only kinds: JSON syntax and the {"name", "arguments"} object do not exist in this format;
    # wrong-type is the strings mode's, where every value is read as the string it is written as.
    assert covered == set(ERROR_KINDS) - {
        "raw-newline-in-string",
        "invalid-json",
        "wrong-keys",
        "arguments-not-object",
        "wrong-type",
    }


def test_strings_mode_reads_every_value_as_text() -> None:
    tools = load_tools(TOOLS.to_openai(), mode="strings")
    text = "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n</function>\n</tool_call>"
    turn = parse(text, tools)
    assert turn.tool_calls[0].arguments == {"hour": "7"}


@pytest.mark.parametrize(
    "text",
    [c[1] for c in ERROR_CASES if c[2] in ("bare-function", "missing-close-parameter")],
)
def test_lenient_mode_recovers_what_strict_mode_reports(text: str) -> None:
    strict, lenient = parse(text), parse(text, mode="lenient")
    assert strict.errors and not strict.tool_calls
    assert lenient.ok and len(lenient.tool_calls) == 1
    assert [(b.start, b.end) for b in strict.blocks] == [(b.start, b.end) for b in lenient.blocks]
    assert strict.content == lenient.content


def test_seed_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'strict' or 'lenient'.*only for hermes"):
        parse("hi", mode="seed")


def test_each_block_is_judged_on_its_own() -> None:
    text = (
        "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=nope>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
    )
    turn = parse(text)
    assert [b.error.kind if b.error else "ok" for b in turn.blocks] == ["ok", "unknown-tool", "ok"]
    assert len(turn.tool_calls) == 2 and turn.content is None
    for block in turn.blocks:
        assert text[block.start : block.end] == block.raw and block.closed
        assert block.body.startswith("\n<function=") and block.body.endswith("</function>\n")


# --------------------------------------------------------------------------- strict vs lenient on the fixtures


@pytest.mark.parametrize("record", FIXTURES, ids=[r["id"] for r in FIXTURES])
def test_fixture_in_strict_mode(record: dict[str, Any]) -> None:
    """Strict and lenient agree on every fixture except the malformed ones, where strict reports the fault."""
    tools, started = fixture_state(record)
    strict = parse(record["raw_output"], tools, reasoning_started=started)
    lenient = parse(record["raw_output"], tools, reasoning_started=started, mode="lenient")
    if record["id"] in MALFORMED_KINDS:
        assert [e.kind for e in strict.errors] == MALFORMED_KINDS[record["id"]]
        assert len(lenient.tool_calls) == len(strict.tool_calls) + len(strict.errors)
    elif (record.get("expected_error") is not None) or record["id"].endswith("tool-call-open"):
        assert [e.kind for e in strict.errors] == ["truncated"] and not strict.tool_calls
    else:
        assert strict.ok, strict.errors
    assert (strict.content, strict.reasoning_content) == (lenient.content, lenient.reasoning_content)


def _is_hand_written(record: dict[str, Any]) -> bool:
    """Bug reports' hand-written markup, not template renders: not comparable with render_call."""
    return record["id"] == "qwen3-xml/bug-coder-text-after-call" or record["id"].endswith("outside-int64")


@pytest.mark.parametrize(
    "record",
    [
        r
        for r in FIXTURES
        if r.get("expected")
        and r["expected"]["tool_calls"]
        and r["id"] not in MALFORMED_KINDS
        and not _is_hand_written(r)
    ],
    ids=lambda r: r["id"],
)
def test_render_call_is_the_chat_template(record: dict[str, Any]) -> None:
    """The template's blocks end every canonical fixture; the Qwen3-Coder-30B / Qwen3.5 renders of
    booleans use Python literals, the Qwen3.8 / Coder-Next ones JSON."""
    calls = record["expected"]["tool_calls"]
    python = "x-python-literals" in record["tags"]
    rendered = "\n".join(render_call(c["name"], c["arguments"], python_literals=python) for c in calls)
    assert record["raw_output"].endswith(rendered)


def test_format_object() -> None:
    fmt = get_format("qwen-xml")
    assert isinstance(fmt, QwenXmlFormat) and fmt.name == "qwen-xml"
    tool = TOOLS["set_alarm"]
    text = fmt.render_call(tool, {"hour": 7, "repeat": True, "label": None})
    assert text == (
        "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=repeat>\ntrue\n"
        "</parameter>\n<parameter=label>\nnull\n</parameter>\n</function>\n</tool_call>"
    )
    assert fmt.parse_turn(text, TOOLS).tool_calls[0].arguments == {"hour": 7, "repeat": True, "label": None}
    two = fmt.canonical_calls(list(fmt.parse_turn(text + "\n" + text, TOOLS).tool_calls))
    assert two == text + "\n" + text


def test_check_tools_rejects_names_the_markup_cannot_carry() -> None:
    tool = Tool("t", None, {"type": "object", "properties": {"a>b": {}}, "required": []}, {})
    with pytest.raises(ToolSchemaError, match=r"tool 't', at /properties/a>b: qwen-xml writes each argument name"):
        QwenXmlFormat().check_tools(ToolSet((tool,)))
    QwenXmlFormat().check_tools(TOOLS)


# --------------------------------------------------------------------------- values

CONVERSIONS = [
    # (schema, raw text, value)
    ({"type": "string"}, "7", "7"),
    ({"type": "string"}, "true", "true"),
    ({"type": "string"}, '{"a": 1}', '{"a": 1}'),
    ({"type": "string"}, "02139", "02139"),
    ({"type": "string"}, "null", "null"),
    ({"type": "string"}, "  two  spaces  ", "  two  spaces  "),
    ({"type": "string"}, "", ""),
    ({"type": "integer"}, "7", 7),
    ({"type": "integer"}, " 7 ", 7),
    ({"type": "integer"}, "-12", -12),
    ({"type": "integer"}, "123456789012345678901", 123456789012345678901),
    ({"type": "integer"}, "seven", "seven"),
    ({"type": "integer"}, "true", "true"),
    ({"type": "integer"}, "07", "07"),
    ({"type": "number"}, "0.75", 0.75),
    ({"type": "number"}, "1e20", 1e20),
    ({"type": "number"}, "3", 3),
    ({"type": "number"}, "NaN", "NaN"),
    ({"type": "number"}, "Infinity", "Infinity"),
    ({"type": "boolean"}, "true", True),
    ({"type": "boolean"}, "false", False),
    ({"type": "boolean"}, "True", True),
    ({"type": "boolean"}, "False", False),
    ({"type": "boolean"}, "yes", "yes"),
    ({"type": "boolean"}, "1", "1"),
    ({"type": "null"}, "null", None),
    ({"type": "null"}, "None", None),
    ({"type": ["string", "null"]}, "null", None),
    ({"type": ["string", "null"]}, "None", "None"),
    ({"type": ["string", "null"]}, "gym", "gym"),
    ({"type": ["integer", "null"]}, "42", 42),
    ({"type": ["integer", "null"]}, "None", None),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "5", 5),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}, "some text", "some text"),
    ({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}, '["a", "b"]', ["a", "b"]),
    ({"type": "object"}, '{"k": [1, 2.5, null]}', {"k": [1, 2.5, None]}),
    ({"type": "object"}, "[1]", "[1]"),
    ({"type": "object"}, "{bad", "{bad"),
    ({"type": "array"}, '[{"item": "x", "selected": false}]', [{"item": "x", "selected": False}]),
    ({"type": "array"}, "a, b", "a, b"),
    ({"enum": ["c", "f"]}, "c", "c"),
    ({"enum": [1, 2]}, "2", 2),
    # several readings: the first one the schema accepts
    ({"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "integer"}]}, "5", 5),
    ({"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "integer"}]}, "a", "a"),
    ({"type": ["string", "null"], "enum": ["null", "x"]}, "null", "null"),
    ({"enum": [1, "1"]}, "1", "1"),
    ({"type": ["boolean", "string"]}, "True", "True"),
    # numbers that overflow float() are not numbers
    ({"type": "number"}, "1e400", "1e400"),
    ({"type": "object"}, '{"a": 1e999}', '{"a": 1e999}'),
    ({}, "7", "7"),
    ({}, '{"a": 1}', {"a": 1}),
    ({}, "[1, 2]", [1, 2]),
    (None, "true", "true"),
]


@pytest.mark.parametrize(("schema", "raw", "value"), CONVERSIONS, ids=[f"{s}-{r!r}" for s, r, _ in CONVERSIONS])
def test_convert_value(schema: Any, raw: str, value: Any) -> None:
    got = convert_value(raw, schema)
    assert got == value and type(got) is type(value)


def test_schema_types() -> None:
    assert schema_types({"type": ["integer", "null"]}) == {"integer", "null"}
    assert schema_types({"anyOf": [{"type": "string"}, {}]}) is None
    assert schema_types({"const": True}) == {"boolean"}
    assert schema_types({"description": "anything"}) is None


@pytest.mark.parametrize(
    ("schema", "raw", "arguments_json"),
    [
        ({"type": "number"}, "1e20", '{"x": 1e+20}'),
        ({"type": "number"}, "1.5e300", '{"x": 1.5e+300}'),
        ({"type": "integer"}, "100000000000000000000", '{"x": 100000000000000000000}'),
        ({"type": "integer"}, "-9223372036854775809", '{"x": -9223372036854775809}'),
        ({"type": "integer"}, "18446744073709551616", '{"x": 18446744073709551616}'),
        ({"type": "number"}, "0.1", '{"x": 0.1}'),
    ],
)
def test_big_numbers_stay_exact(schema: dict[str, Any], raw: str, arguments_json: str) -> None:
    tools = load_tools([{"name": "calc", "parameters": {"type": "object", "properties": {"x": schema}}}])
    turn = parse(f"<tool_call><function=calc>\n<parameter=x>\n{raw}\n</parameter>\n</function></tool_call>", tools)
    (call,) = turn.tool_calls
    assert call.arguments_json() == arguments_json
    assert call.arguments["x"] == json.loads(arguments_json)["x"]
    if "e" in raw:
        assert isinstance(call.arguments["x"], float) and math.isfinite(call.arguments["x"])
    elif "." not in raw:
        assert type(call.arguments["x"]) is int


# --------------------------------------------------------------------------- markers in values

MARKER_VALUES = [
    "Qwen wraps calls in <tool_call> ... </tool_call> blocks.",
    "Close tags inline: </parameter> and </function> and <parameter=path> are text here.",
    "<tool_call>\n<function=write_file>\nnot a call, just text",
    "</tool_call>",
    "<think>\nnot reasoning\n</think>",
    "a</parameter>b",
    "ends with a tag </parameter>",
    "line\n</parameter x>\n<parameter\n</function",
    "<|im_end|> and <|im_start|>",
    "\n\nleading and trailing newlines\n\n",
]


@pytest.mark.parametrize("value", MARKER_VALUES)
def test_markers_in_a_value_survive(value: str) -> None:
    text = "Writing.\n" + render_call("write_file", {"path": "x.md", "content": value}) + "\nDone."
    turn = parse(text)
    assert turn.ok and turn.tool_calls[0].arguments == {"path": "x.md", "content": value}
    assert turn.content == "Writing.\n\nDone."


@pytest.mark.parametrize("word", VALUE_FORBIDDEN)
def test_value_forbidden_is_exactly_what_ends_a_value(word: str) -> None:
    """A value holding a forbidden string is cut there; one character less and it survives."""
    assert VALUE_END.search("\n" + word) is not None or VALUE_END.search(word) is not None
    whole = "x" + word + "y"
    cut = parse(render_call("write_file", {"path": "p", "content": whole}))
    assert not (cut.ok and cut.tool_calls and cut.tool_calls[0].arguments["content"] == whole)
    almost = "x" + word[:-1] + "y"
    ok = parse(render_call("write_file", {"path": "p", "content": almost}))
    assert ok.ok and ok.tool_calls[0].arguments["content"] == almost


def test_whitespace_around_values() -> None:
    text = render_call("write_file", {"path": "a.py", "content": "    indented\n\n"})
    assert text.count("\n\n\n</parameter>") == 1
    assert parse(text).tool_calls[0].arguments["content"] == "    indented\n\n"
    compact = (
        "x<tool_call><function=write_file><parameter=path>a</parameter>"
        "<parameter=content>b</parameter></function></tool_call>y"
    )
    turn = parse(compact)
    assert turn.tool_calls[0].arguments == {"path": "a", "content": "b"} and turn.content == "xy"


# --------------------------------------------------------------------------- reasoning and content


@pytest.mark.parametrize(
    ("text", "started", "reasoning", "content", "calls"),
    [
        ("<think>\nplan\n</think>\n\nhello", False, "plan", "hello", 0),
        ("plan\n</think>\n\nhello", True, "plan", "hello", 0),
        ("plan</think>hello", False, "plan", "hello", 0),
        ("cut while thinking", True, "cut while thinking", None, 0),
        ("no reasoning here", False, None, "no reasoning here", 0),
        ("\n</think>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>", True, None, None, 1),
        # a <tool_call> ends an unclosed <think> (llama.cpp, CanIToolCall's call-inside-think)
        ("plan\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>", True, "plan", None, 1),
        ("<think>plan\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>\nafter", False, "plan", "after", 1),
        # ... but without a reasoning part, text before a call is content
        ("plan\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>", False, None, "plan", 1),
    ],
)
def test_reasoning_and_content(
    text: str, started: bool, reasoning: str | None, content: str | None, calls: int
) -> None:
    turn = parse(text, reasoning_started=started)
    assert (turn.reasoning_content, turn.content, len(turn.tool_calls)) == (reasoning, content, calls)
    assert turn.ok


@pytest.mark.parametrize(
    "text",
    [
        "Use <function=get_time> to ask for the time.",
        "Write it as:\n<function=get_time> and then stop.",
        "inline text<function=get_time>\n</function>",
    ],
)
def test_a_bare_function_that_is_not_a_block_stays_text(text: str) -> None:
    turn = parse(text, mode="lenient")
    assert turn.blocks == () and turn.content == text


# --------------------------------------------------------------------------- streaming == one-shot


def stream(text: str, cuts: list[int], tools: ToolSet, **kw: Any) -> tuple[dict[str, Any], Any, int]:
    parser = TurnStreamParser(tools, format="qwen-xml", **kw)
    deltas = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(text))), len(text)]
    early = 0
    for a, b in itertools.pairwise(bounds):
        got = parser.feed(text[a:b])
        early += sum(1 for d in got if d.kind == "tool_call")
        deltas += got
    deltas += parser.end()
    return accumulate(deltas), parser.finish(), early


def as_dict(turn: Any) -> dict[str, Any]:
    return {
        "content": turn.content,
        "reasoning_content": turn.reasoning_content,
        "tool_calls": [c.to_dict() for c in turn.tool_calls],
    }


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("mode", ["strict", "lenient"])
@pytest.mark.parametrize("record", FIXTURES, ids=[r["id"] for r in FIXTURES])
def test_streaming_equals_one_shot_on_the_fixtures(record: dict[str, Any], mode: str, data: st.DataObject) -> None:
    tools, started = fixture_state(record)
    text = record["raw_output"]
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=40))
    one = parse(text, tools, mode=mode, reasoning_started=started)
    streamed, final, _ = stream(text, cuts, tools, mode=mode, reasoning_started=started)
    assert final == one
    assert streamed == as_dict(one)


def test_calls_stream_as_soon_as_their_block_closes() -> None:
    block = render_call("get_time", {})
    text = block + "\n" + block + "\nmore text"
    _, final, early = stream(text, list(range(len(text))), TOOLS)
    assert early == 2 and len(final.tool_calls) == 2


def test_stream_state_alone() -> None:
    state = QwenXmlStreamState(TOOLS, reasoning_started=True)
    pieces = []
    for ch in "plan\n</think>\n\nHi <tool_call>\n<function=get_time>\n</function>\n</tool_call>":
        pieces += state.feed(ch)
    assert [k for k, _ in pieces if k != "tool_call"][:1] == ["reasoning"]
    assert "".join(v for k, v in pieces if k == "reasoning") == "plan"
    assert "".join(v for k, v in pieces if k == "content") == "Hi"
    assert [k for k, _ in pieces].count("tool_call") == 1
    turn = state.finish()
    assert turn.tool_calls[0].name == "get_time"
    with pytest.raises(ValueError, match="the turn has ended"):
        state.feed("x")


# --------------------------------------------------------------------------- render -> parse, property-based

_PIECES = [
    "<",
    ">",
    "/",
    "\n",
    " ",
    "=",
    "a",
    "é",
    "🙂",
    "tool_call",
    "function",
    "parameter",
    "think",
    '"',
    "\\",
    "{",
    "}",
]
_text = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)
_safe_text = _text.filter(lambda s: not any(w in "\n" + s for w in VALUE_FORBIDDEN))
_json_scalar = (
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False)
)
_json = st.recursive(
    _json_scalar | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)

ROUND_TRIP_TOOLS = load_tools(
    [
        {
            "name": "everything",
            "parameters": {
                "type": "object",
                "properties": {
                    "s": {"type": "string"},
                    "i": {"type": "integer"},
                    "n": {"type": "number"},
                    "b": {"type": "boolean"},
                    "z": {"type": "null"},
                    "o": {"type": "object"},
                    "a": {"type": "array"},
                },
            },
        }
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    arguments=st.fixed_dictionaries(
        {},
        optional={
            "s": _safe_text,
            "i": st.integers(-(10**40), 10**40),
            "n": st.floats(allow_nan=False, allow_infinity=False),
            "b": st.booleans(),
            "z": st.none(),
            "o": st.dictionaries(_text, _json, max_size=3),
            "a": st.lists(_json, max_size=3),
        },
    ),
    python_literals=st.booleans(),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
)
def test_render_then_parse_round_trips(arguments: dict[str, Any], python_literals: bool, cuts: list[int]) -> None:
    text = render_call("everything", arguments, python_literals=python_literals)
    for mode in ("strict", "lenient"):
        turn = parse(text, ROUND_TRIP_TOOLS, mode=mode)
        assert turn.ok, turn.errors
        (call,) = turn.tool_calls
        assert json.loads(call.arguments_json()) == json.loads(json.dumps(arguments))
        streamed, final, _ = stream(text, cuts, ROUND_TRIP_TOOLS, mode=mode)
        assert final == turn and streamed == as_dict(turn)


def test_render_value() -> None:
    assert render_value("x\ny") == "x\ny"
    assert render_value({"a": [1, "é"]}) == '{"a": [1, "é"]}'
    assert render_value(True) == "true" and render_value(True, python_literals=True) == "True"
    assert render_value(None, python_literals=True) == "None" and render_value(1e20) == "1e+20"


@pytest.mark.parametrize("line", ["x = 1\n", "<div>a</div>\n"])
def test_a_long_value_streams_in_linear_time(line: str) -> None:
    """A 100k-character value fed 4 characters at a time: the value search resumes where it stopped
    instead of re-reading the value per chunk (quadratic: minutes; here well under a second)."""
    import time

    value = line * (100_000 // len(line))
    text = render_call("write_file", {"path": "big.txt", "content": value})
    started = time.perf_counter()
    parser = TurnStreamParser(TOOLS, format="qwen-xml")
    for i in range(0, len(text), 4):
        parser.feed(text[i : i + 4])
    turn = parser.finish()
    assert time.perf_counter() - started < 15
    assert turn.tool_calls[0].arguments["content"] == value


# --------------------------------------------------------------------------- linear time (issue 11)
# Worst cases measured by size ratios (CPU time of 4n against n: about 4 when linear, about 16 when
# quadratic; the bound 9 leaves room for noise) and by operation counts, never by wall-clock limits.

_ADVERSARIAL = {
    "bare-function-lines": "\n<function=create_event>",
    "function-inline": "x<function=",
    "many-parameters": "<parameter=a>\nx\n</parameter>\n",
    "broken-block-body": "y",
    "whitespace-in-content": "a   ",
}
_PREFIX = {"many-parameters": "<tool_call>\n<function=f>\n", "broken-block-body": "<tool_call>\n<function=f>\nzz"}


def _adversarial(kind: str, n: int) -> str:
    unit = _ADVERSARIAL[kind]
    return _PREFIX.get(kind, "") + unit * (n // len(unit))


def _cpu(run: Any) -> float:
    import time

    best = math.inf
    for _ in range(3):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return max(best, 1e-4)


def _stream(text: str, step: int = 1) -> Any:
    state = QwenXmlStreamState(TOOLS)
    for i in range(0, len(text), step):
        state.feed(text[i : i + step])
    return state.finish()


@pytest.mark.parametrize("kind", sorted(_ADVERSARIAL))
def test_one_shot_parse_is_linear_on_adversarial_input(kind: str) -> None:
    small, large = _adversarial(kind, 60_000), _adversarial(kind, 240_000)
    ratio = _cpu(lambda: qwen_parse(large, TOOLS)) / _cpu(lambda: qwen_parse(small, TOOLS))
    assert ratio < 9, f"{kind}: 4x the text took {ratio:.1f}x the time"


@pytest.mark.parametrize("kind", sorted(_ADVERSARIAL))
def test_streaming_one_character_at_a_time_is_linear(kind: str) -> None:
    small, large = _adversarial(kind, 6_000), _adversarial(kind, 24_000)
    ratio = _cpu(lambda: _stream(large)) / _cpu(lambda: _stream(small))
    assert ratio < 9, f"{kind}: 4x the text took {ratio:.1f}x the time"
    assert _stream(large) == qwen_parse(large, TOOLS)


def test_a_streamed_block_is_read_once_not_once_per_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count the characters each block scan starts reading from: their sum must grow with the text,
    not with the text times the number of chunks."""
    import toolgrammar.formats.qwen_xml.parser as module

    real = module.scan_block
    reread = [0]

    def counting(text: str, start: int, **kwargs: Any) -> Any:
        memo = kwargs.get("memo")
        begin = memo.pos if memo is not None and memo.pos >= 0 else start
        reread[0] += len(text) - begin
        return real(text, start, **kwargs)

    monkeypatch.setattr(module, "scan_block", counting)
    for n in (3_000, 12_000):
        reread[0] = 0
        text = _adversarial("many-parameters", n) + "</function>\n</tool_call>"
        turn = _stream(text)
        assert len(turn.blocks) == 1
        assert reread[0] <= 40 * len(text), (n, reread[0])


_PIECES = [
    *_ADVERSARIAL.values(),
    "<tool_call>",
    "</tool_call>",
    "<function=write_file>",
    "</function>",
    "<parameter=path>",
    "<parameter=content>",
    "</parameter>",
    "<think>",
    "</think>",
    "\n",
    " ",
    "a.txt",
]


@settings(max_examples=120, deadline=None, derandomize=True)
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=40), step=st.integers(1, 7))
def test_streaming_and_one_shot_agree_on_adversarial_pieces(pieces: list[str], step: int) -> None:
    text = "".join(pieces)
    assert _stream(text, step) == qwen_parse(text, TOOLS)
