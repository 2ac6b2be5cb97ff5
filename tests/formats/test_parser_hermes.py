"""The strict parser, hermes format: the seed's examples, every error kind, turn splits, streaming."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toolgrammar.formats.calls import ERROR_KINDS, CallError, ToolCall
from toolgrammar.formats.checks import check_arguments, check_call
from toolgrammar.formats.hermes.parser import strict_block_close
from toolgrammar.formats.json_text import JsonValueScanner
from toolgrammar.schema import load_tools
from toolgrammar.turn.parser import Delta, TurnStreamParser, accumulate, parse_turn

ROOT = Path(__file__).resolve().parents[2]
SEED_TOOLS = ROOT / "examples" / "tools" / "seed_tools.json"
TURNS = ROOT / "examples" / "turns"

# The seed's post: "8 contained a raw newline inside a JSON string", "8 were cut off because the turn hit its
# 512-token limit while the model repeated the same boolean expression", and the valid calls.
SEED_RAW_NEWLINE = (
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "is_even.py", "content": "def is_even(n):\n'
    '    return n % 2 == 0\n"}}\n</tool_call>'
)
SEED_TRUNCATED = (
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "check.py", "content": "def check(a, b):\\n'
    "    return (a and b) or (a and not b) or (a and b) or (a and not b) or (a and b) or (a and"
)
SEED_VALID = '<tool_call>\n{"name": "read_file", "arguments": {"path": "is_even.py"}}\n</tool_call>'


@pytest.fixture(scope="module")
def strings_tools():
    return load_tools(SEED_TOOLS, mode="strings")


@pytest.fixture(scope="module")
def schema_tools():
    return load_tools(
        [
            *json.loads(SEED_TOOLS.read_text(encoding="utf-8")),
            {
                "name": "head",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "lines": {"type": "integer"},
                        "mode": {"enum": ["text", "bytes"]},
                    },
                    "required": ["path", "lines"],
                },
            },
        ]
    )


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def only_error(text: str, tools, **kwargs) -> CallError:
    parsed = parse_turn(text, tools, **kwargs)
    assert len(parsed.blocks) == 1
    assert parsed.blocks[0].call is None and parsed.tool_calls == ()
    error = parsed.blocks[0].error
    assert error is not None
    return error


# --------------------------------------------------------------------------- the seed's three examples


@pytest.mark.parametrize("mode", ["strict", "seed"])
def test_seed_raw_newline_write_file_is_raw_newline_in_string(strings_tools, mode):
    error = only_error(SEED_RAW_NEWLINE, strings_tools, mode=mode)
    assert error.kind == "raw-newline-in-string"
    assert error.message.startswith("error: tool call is not valid JSON: Invalid control character at: line 2")


@pytest.mark.parametrize("mode", ["strict", "seed"])
def test_seed_block_cut_at_token_limit_is_truncated(strings_tools, mode):
    parsed = parse_turn(SEED_TRUNCATED, strings_tools, mode=mode)
    (only,) = parsed.blocks
    assert not only.closed and only.end == len(SEED_TRUNCATED)
    assert only.error == CallError(
        "truncated",
        "error: tool call is truncated: the turn ended before </tool_call> and the JSON is incomplete: "
        "Unterminated string starting at: line 2 column 69 (char 69)",
    )
    assert parsed.content is None and parsed.tool_calls == ()


@pytest.mark.parametrize("mode", ["strict", "seed"])
def test_seed_valid_call(strings_tools, mode):
    parsed = parse_turn(SEED_VALID, strings_tools, mode=mode)
    assert parsed.tool_calls == (ToolCall("read_file", {"path": "is_even.py"}),)
    assert parsed.ok and not parsed.is_final_answer and parsed.content is None


def test_example_turn_files(strings_tools):
    kinds = {
        name: [
            b.error.kind if b.error else "valid"
            for b in parse_turn((TURNS / f"{name}.txt").read_text(encoding="utf-8"), strings_tools).blocks
        ]
        for name in ("valid_call", "raw_newline_write_file", "truncated_write_file", "final_answer")
    }
    assert kinds == {
        "valid_call": ["valid"],
        "raw_newline_write_file": ["raw-newline-in-string"],
        "truncated_write_file": ["truncated"],
        "final_answer": [],
    }


def test_seed_counts_are_counted_by_kind(strings_tools):
    """A turn mixing the seed's outcomes: each block judged on its own, errors countable by kind."""
    text = "\n".join([SEED_VALID, SEED_RAW_NEWLINE, SEED_VALID, SEED_TRUNCATED])
    parsed = parse_turn(text, strings_tools)
    assert [b.error.kind if b.error else "valid" for b in parsed.blocks] == [
        "valid",
        "raw-newline-in-string",
        "valid",
        "truncated",
    ]
    assert len(parsed.tool_calls) == 2 and not parsed.ok
    for b in parsed.blocks:
        assert text[b.start : b.end] == b.raw


# --------------------------------------------------------------------------- every error kind, with its message

ERROR_CASES = [
    # (id, body or full turn, tools fixture, kind, message)
    (
        "raw-newline",
        '{"name": "read_file", "arguments": {"path": "a\nb"}}',
        "strings",
        "raw-newline-in-string",
        "error: tool call is not valid JSON: Invalid control character at: line 2 column 47 (char 47)",
    ),
    (
        "raw-carriage-return",
        '{"name": "read_file", "arguments": {"path": "a\rb"}}',
        "strings",
        "raw-newline-in-string",
        "error: tool call is not valid JSON: Invalid control character at: line 2 column 47 (char 47)",
    ),
    (
        "raw-tab-is-not-a-newline",
        '{"name": "read_file", "arguments": {"path": "a\tb"}}',
        "strings",
        "invalid-json",
        "error: tool call is not valid JSON: Invalid control character at: line 2 column 47 (char 47)",
    ),
    (
        "not-json",
        "not valid json",
        "strings",
        "invalid-json",
        "error: tool call is not valid JSON: Expecting value: line 2 column 1 (char 1)",
    ),
    (
        "missing-brace-closed",
        '{"name": "read_file", "arguments": {"path": "a"}',
        "strings",
        "invalid-json",
        "error: tool call is not valid JSON: Expecting ',' delimiter: line 3 column 1 (char 50)",
    ),
    (
        "nan",
        '{"name": "head", "arguments": {"path": "a", "lines": NaN}}',
        "schema",
        "invalid-json",
        "error: tool call is not valid JSON: NaN is not valid JSON",
    ),
    (
        "wrong-keys-missing",
        '{"name": "read_file"}',
        "strings",
        "wrong-keys",
        'error: a tool call must be a JSON object with exactly "name" and "arguments"',
    ),
    (
        "wrong-keys-extra",
        '{"name": "read_file", "arguments": {"path": "a"}, "id": "1"}',
        "strings",
        "wrong-keys",
        'error: a tool call must be a JSON object with exactly "name" and "arguments"',
    ),
    (
        "wrong-keys-array",
        '[{"name": "read_file", "arguments": {"path": "a"}}]',
        "strings",
        "wrong-keys",
        'error: a tool call must be a JSON object with exactly "name" and "arguments"',
    ),
    (
        "unknown-tool",
        '{"name": "delete_file", "arguments": {"path": "a"}}',
        "strings",
        "unknown-tool",
        "error: unknown tool 'delete_file'",
    ),
    ("unknown-tool-not-a-string", '{"name": 3, "arguments": {}}', "strings", "unknown-tool", "error: unknown tool 3"),
    (
        "arguments-double-encoded",
        '{"name": "read_file", "arguments": "{\\"path\\": \\"a\\"}"}',
        "strings",
        "arguments-not-object",
        "error: arguments must be a JSON object",
    ),
    (
        "missing-argument",
        '{"name": "grep", "arguments": {"pattern": "TODO"}}',
        "strings",
        "missing-argument",
        "error: missing arguments ['path'], unknown arguments []",
    ),
    (
        "unknown-argument",
        '{"name": "read_file", "arguments": {"path": "a", "encoding": "utf-8"}}',
        "strings",
        "unknown-argument",
        "error: missing arguments [], unknown arguments ['encoding']",
    ),
    (
        "missing-and-unknown",
        '{"name": "grep", "arguments": {"pattern": "x", "dir": "."}}',
        "strings",
        "missing-argument",
        "error: missing arguments ['path'], unknown arguments ['dir']",
    ),
    (
        "wrong-type",
        '{"name": "read_file", "arguments": {"path": 3}}',
        "strings",
        "wrong-type",
        "error: every argument must be a string",
    ),
    (
        "schema-violation-type",
        '{"name": "head", "arguments": {"path": "a", "lines": "3"}}',
        "schema",
        "schema-violation",
        "error: arguments do not match the schema of 'head': $.lines: '3' is not of type 'integer'",
    ),
    (
        "schema-violation-two",
        '{"name": "head", "arguments": {"path": 1, "lines": 3, "mode": "hex"}}',
        "schema",
        "schema-violation",
        "error: arguments do not match the schema of 'head': $.mode: 'hex' is not one of ['text', 'bytes']; "
        "$.path: 1 is not of type 'string'",
    ),
]


@pytest.mark.parametrize(
    ("body", "tools_name", "kind", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_error_kind_and_message(request, body, tools_name, kind, message):
    tools = request.getfixturevalue(f"{tools_name}_tools")
    assert only_error(block(body), tools) == CallError(kind, message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "<tool_call>",
            "error: tool call is truncated: the turn ended before </tool_call> and the JSON is "
            "incomplete: Expecting value: line 1 column 1 (char 0)",
        ),
        (
            "<tool_call>\n",
            "error: tool call is truncated: the turn ended before </tool_call> and the JSON is "
            "incomplete: Expecting value: line 2 column 1 (char 1)",
        ),
        # Complete JSON but no closing marker: still cut by the token limit, never a call.
        (
            '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}',
            "error: tool call is truncated: the turn ended before </tool_call>",
        ),
    ],
    ids=["opener-only", "opener-newline", "complete-json-unclosed"],
)
def test_truncated_messages(strings_tools, text, message):
    assert only_error(text, strings_tools) == CallError("truncated", message)


def test_every_hermes_error_kind_has_a_case():
    hermes_kinds = set(ERROR_KINDS) - {"missing-close-parameter", "bare-function", "malformed-block"}
    assert {c[3] for c in ERROR_CASES} | {"truncated"} == hermes_kinds


def test_check_call_and_check_arguments_directly(schema_tools, strings_tools):
    assert check_call({"name": "read_file", "arguments": {"path": "a"}}, strings_tools) == ToolCall(
        "read_file", {"path": "a"}
    )
    assert check_call({"name": "run_tests", "arguments": {}}, strings_tools) == ToolCall("run_tests", {})
    assert check_arguments(schema_tools["head"], {"path": "a", "lines": 2}, "schema") is None
    error = check_arguments(schema_tools["head"], {"path": "a", "lines": 2.5}, "schema")
    assert error is not None and error.kind == "schema-violation"
    with pytest.raises(ValueError, match="unknown argument mode 'lenient'"):
        check_arguments(schema_tools["head"], {"path": "a", "lines": 2}, "lenient")  # type: ignore[arg-type]


def test_deeply_nested_json_is_an_error_not_a_crash(strings_tools):
    body = '{"name": "read_file", "arguments": {"path": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    error = only_error(block(body), strings_tools)
    assert error.kind == "invalid-json"


# --------------------------------------------------------------------------- strict vs seed block ends

MARKER_IN_STRING = block(
    '{"name": "grep", "arguments": {"pattern": "Use <tool_call> ... </tool_call> tags", "path": "."}}'
)


def test_strict_mode_keeps_a_closing_marker_inside_a_json_string(strings_tools):
    parsed = parse_turn(MARKER_IN_STRING, strings_tools, mode="strict")
    assert parsed.tool_calls == (ToolCall("grep", {"pattern": "Use <tool_call> ... </tool_call> tags", "path": "."}),)
    assert parsed.content is None and parsed.blocks[0].raw == MARKER_IN_STRING


def test_seed_mode_cuts_the_block_at_the_first_closing_marker(strings_tools):
    parsed = parse_turn(MARKER_IN_STRING, strings_tools, mode="seed")
    (only,) = parsed.blocks
    assert only.error is not None and only.error.kind == "invalid-json"
    assert only.body.endswith("Use <tool_call> ... ")
    # The rest of the call, its own closing marker included, is left over as text.
    assert parsed.content == 'tags", "path": "."}}\n</tool_call>'


def test_strict_mode_falls_back_to_the_first_closer_when_the_json_never_completes(strings_tools):
    text = block('{"name": "read_file", "arguments": {"path": "a"}') + "\n" + SEED_VALID
    parsed = parse_turn(text, strings_tools)
    assert [b.error.kind if b.error else "valid" for b in parsed.blocks] == ["invalid-json", "valid"]
    text = "<tool_call>not valid json</tool_call>" + SEED_VALID
    assert [b.error.kind if b.error else "valid" for b in parse_turn(text, strings_tools).blocks] == [
        "invalid-json",
        "valid",
    ]


def test_complete_value_without_closer_swallows_no_marker_in_string(strings_tools):
    # The value is complete, the only closer is inside it: the block is unclosed (truncated), not cut short.
    text = '<tool_call>{"name": "grep", "arguments": {"pattern": "</tool_call>", "path": "."}}'
    assert only_error(text, strings_tools).kind == "truncated"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "}"} x', 10),
        ('  ["\\"]", 1] x', 12),
        ('"a\\\\" x', 5),
        ('{"a": {"b": [1, {"c": "]"}]}}', 29),
        ('{"a": "b', -1),
        ("", -1),
        ("nope", -2),
        ("42", -2),
    ],
)
def test_json_value_scanner(text, expected):
    assert JsonValueScanner().feed(text) == expected
    if expected >= -1:  # the same answer fed one character at a time
        scanner, got, offset = JsonValueScanner(), -1, 0
        for i, ch in enumerate(text):
            got = scanner.feed(ch)
            if got >= 0:
                offset = i + got
                break
        assert (offset if got >= 0 else -1) == expected


def test_strict_block_close():
    text = '<tool_call>{"a": "</tool_call>"}</tool_call>'
    assert strict_block_close(text, len("<tool_call>"), "</tool_call>") == len(text) - len("</tool_call>")


# --------------------------------------------------------------------------- turn splits

CALL = SEED_VALID
CALL_PARSED = ToolCall("read_file", {"path": "is_even.py"})


@pytest.mark.parametrize(
    ("text", "kwargs", "reasoning", "content", "n_calls"),
    [
        ("<think>\nI should read it.\n</think>\n\n" + CALL, {}, "I should read it.", None, 1),
        ("<think>\n\n</think>\n\nHello!", {}, None, "Hello!", 0),
        ("  <think>x</think>y", {}, "x", "y", 0),
        # The generation prompt opened <think> (Qwen3 Thinking-2507).
        ("I should read it.\n</think>\n\n" + CALL, {"reasoning_started": True}, "I should read it.", None, 1),
        # ... also recognised without being told, when the bare </think> comes before any block.
        ("I should read it.\n</think>\n\n" + CALL, {}, "I should read it.", None, 1),
        # Cut while thinking: all reasoning.
        ("<think>\nThe user wants the weather", {}, "The user wants the weather", None, 0),
        ("The user wants the weather", {"reasoning_started": True}, "The user wants the weather", None, 0),
        ("The user wants the weather", {}, None, "The user wants the weather", 0),
        # A reasoning that mentions a block: with the prompt's <think>, it is reasoning until </think>.
        ("Maybe <tool_call> now?</think>" + CALL, {"reasoning_started": True}, "Maybe <tool_call> now?", None, 1),
        # A </think> after a block is text, not a reasoning end.
        (CALL + "\nDone.</think>", {}, None, "Done.</think>", 1),
        # Text before, between and after blocks joins verbatim; outer whitespace is formatting.
        ("Let me check.\n" + CALL + "\n" + CALL + "\nThat is all.", {}, None, "Let me check.\n\n\nThat is all.", 2),
        ("I will check the weather for you. " + CALL, {}, None, "I will check the weather for you.", 1),
        ("Hi!" + CALL.replace("\n", ""), {}, None, "Hi!", 1),
        ("", {}, None, None, 0),
        ("\n\n", {}, None, None, 0),
    ],
)
def test_turn_split(strings_tools, text, kwargs, reasoning, content, n_calls):
    parsed = parse_turn(text, strings_tools, **kwargs)
    assert (parsed.reasoning_content, parsed.content) == (reasoning, content)
    assert parsed.tool_calls == (CALL_PARSED,) * n_calls
    assert parsed.ok
    assert parsed.is_final_answer == (n_calls == 0)


def test_block_offsets_with_reasoning_started(strings_tools):
    text = "think.</think>\n" + CALL
    parsed = parse_turn(text, strings_tools, reasoning_started=True)
    (only,) = parsed.blocks
    assert text[only.start : only.end] == only.raw == CALL


def test_unknown_parse_mode(strings_tools):
    with pytest.raises(ValueError, match="unknown hermes parse mode 'lenient'"):
        parse_turn(CALL, strings_tools, mode="lenient")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- streaming


def stream(text: str, cuts: list[int], tools, **kwargs) -> tuple[TurnStreamParser, list[list[Delta]]]:
    parser = TurnStreamParser(tools, **kwargs)
    bounds = [0, *cuts, len(text)]
    steps = [parser.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    steps.append(parser.end())
    return parser, steps


def expected_accumulation(parsed) -> dict:
    return {
        "content": parsed.content,
        "reasoning_content": parsed.reasoning_content,
        "tool_calls": [c.to_dict() for c in parsed.tool_calls],
    }


def test_stream_emits_a_call_only_when_its_block_closes(strings_tools):
    parser = TurnStreamParser(strings_tools)
    text = "Checking.\n" + MARKER_IN_STRING
    close_at = len(text) - len("</tool_call>")
    emitted: list[Delta] = []
    for i, ch in enumerate(text):
        new = parser.feed(ch)
        emitted += new
        calls = [d for d in new if d.kind == "tool_call"]
        if i < len(text) - 1:
            assert not calls, f"a call was emitted at offset {i}, before its block closed at {close_at}"
        else:
            assert [d.call.name for d in calls] == ["grep"]
    # The content was streamed before the end of the turn, not held to the end.
    assert "".join(d.text for d in emitted if d.kind == "content") == "Checking."
    assert parser.end() == []
    assert parser.finish() == parse_turn(text, strings_tools)


def test_stream_streams_reasoning_as_it_comes(strings_tools):
    parser = TurnStreamParser(strings_tools, reasoning_started=True)
    got = [parser.feed(piece) for piece in ["The user ", "wants the", " weather.\n</th", "ink>\n\nOK"]]
    assert [[d.text for d in step] for step in got] == [["The user"], [" wants the"], [" weather."], ["OK"]]
    assert parser.end() == []
    assert parser.finish().reasoning_content == "The user wants the weather."


def test_stream_never_emits_a_truncated_call(strings_tools):
    text = CALL + "\n" + '<tool_call>\n{"name": "read_file", "arguments": {"path": "b"}}'
    parser, steps = stream(text, list(range(1, len(text))), strings_tools)
    calls = [d for step in steps for d in step if d.kind == "tool_call"]
    assert [d.call for d in calls] == [CALL_PARSED] and calls[0].index == 0
    assert [b.error.kind if b.error else "valid" for b in parser.finish().blocks] == ["valid", "truncated"]


def test_stream_openai_deltas(strings_tools):
    _, steps = stream("<think>hm</think>Sure." + CALL, [3, 12, 22], strings_tools)
    deltas = [d.to_openai() for step in steps for d in step]
    assert deltas == [
        {"reasoning_content": "hm"},
        {"content": "Sure."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "is_even.py"}'},
                }
            ]
        },
    ]


def test_stream_rejects_feed_after_end(strings_tools):
    parser = TurnStreamParser(strings_tools)
    parser.finish()
    with pytest.raises(ValueError, match="the stream has ended"):
        parser.feed("x")


FRAGMENTS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "</th",
    "\n",
    "\n\n",
    " ",
    "Hello",
    "é 🌸",
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    '\\"',
    ",",
    ":",
    "x",
    '{"name": "read_file", "arguments": {"path": "a.py"}}',
    '{"name": "grep", "arguments": {"pattern": "</tool_call>", "path": "."}}',
    '{"name": "grep", "arguments": {"pattern": "a\\"</tool_call>\\\\", "path": "."}}',
    '{"name": "write_file", "arguments": {"path": "a", "content": "x\ny"}}',
    '{"name": "run_tests", "arguments": {}}',
    '{"name": "run_tests", "arguments": {"path": 3}}',
    '{"name": "read_file", "arguments": {"path": "a.py"}',
    CALL,
    block('{"name": "grep", "arguments": {"pattern": "<think>", "path": "src"}}'),
]


BODIES = [
    '{"name": "read_file", "arguments": {"path": "a.py"}}',
    '{"name": "run_tests", "arguments": {}}',
    '{"name": "grep", "arguments": {"pattern": "Use <tool_call> ... </tool_call>", "path": "."}}',
    '{"name": "grep", "arguments": {"pattern": "\\\\\\"}", "path": "<think>"}}',
    '{"name": "write_file", "arguments": {"path": "a", "content": "x\ny"}}',
    '{"name": "read_file", "arguments": {"path": 3}}',
    '{"name": "delete", "arguments": {"path": "a"}}',
    '{"name": "read_file", "arguments": {"path": "a"}',
    "not json",
    "",
]


@st.composite
def structured_turns(draw):
    """Turns shaped like real ones (reasoning, text, blocks good and bad), maybe cut like a token limit."""
    parts = []
    if draw(st.booleans()):
        opener = draw(st.sampled_from(["<think>\n", "<think>", ""]))
        parts.append(opener + draw(st.sampled_from(["Plan.", "Use <tool_call>?", ""])) + "\n</think>\n\n")
    parts.append(draw(st.sampled_from(["", "Let me check.", "Sure. ", "é 🌸\n"])))
    for body in draw(st.lists(st.sampled_from(BODIES), max_size=4)):
        pad = draw(st.sampled_from(["\n", ""]))
        parts.append(draw(st.sampled_from(["\n", "", " "])) + "<tool_call>" + pad + body + pad + "</tool_call>")
    parts.append(draw(st.sampled_from(["", "\nDone.", " "])))
    text = "".join(parts)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


@st.composite
def split_turns(draw):
    text = draw(st.one_of(st.lists(st.sampled_from(FRAGMENTS), max_size=24).map("".join), structured_turns()))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=40))) if len(text) > 1 else []
    return text, cuts


@pytest.mark.parametrize("mode", ["strict", "seed"])
@pytest.mark.parametrize("reasoning_started", [False, True])
@settings(max_examples=500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=split_turns())
def test_streaming_equals_one_shot_for_every_split(strings_tools, mode, reasoning_started, case):
    """500 derandomized examples per (mode, reasoning_started): 2,000 random turns and splits in all."""
    text, cuts = case
    kwargs = {"mode": mode, "reasoning_started": reasoning_started}
    one_shot = parse_turn(text, strings_tools, **kwargs)
    # --hypothesis-show-statistics reports how often the examples exercise each part.
    event(f"valid calls: {min(len(one_shot.tool_calls), 2)}{'+' if len(one_shot.tool_calls) >= 2 else ''}")
    event(f"error blocks: {'some' if one_shot.errors else 'none'}")
    event(f"reasoning: {'yes' if one_shot.reasoning_content else 'no'}")
    parser, steps = stream(text, cuts, strings_tools, **kwargs)
    assert parser.finish() == one_shot
    assert accumulate([d for step in steps for d in step]) == expected_accumulation(one_shot)
    # Never ahead of the text: the calls emitted after each chunk are calls of that prefix's own parse.
    bounds = [*cuts, len(text)]
    emitted = 0
    for end, step in zip(bounds, steps, strict=False):
        emitted += sum(d.kind == "tool_call" for d in step)
        prefix_calls = parse_turn(text[:end], strings_tools, **kwargs).tool_calls
        assert list(prefix_calls[:emitted]) == list(one_shot.tool_calls[:emitted])


@pytest.mark.parametrize("mode", ["strict", "seed"])
def test_streaming_char_by_char_on_the_seed_examples(strings_tools, mode):
    for text in (SEED_RAW_NEWLINE, SEED_TRUNCATED, SEED_VALID, MARKER_IN_STRING):
        parser, steps = stream(text, list(range(1, len(text))), strings_tools, mode=mode)
        one_shot = parse_turn(text, strings_tools, mode=mode)
        assert parser.finish() == one_shot
        assert accumulate([d for s in steps for d in s]) == expected_accumulation(one_shot)
