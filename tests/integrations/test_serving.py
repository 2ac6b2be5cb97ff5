"""toolgrammar.integrations.serving: an OpenAI request's tool fields -> the constraint; a turn -> content and calls.

No vLLM here: the vLLM tool parser (tests/integrations/test_vllm_server.py) is a thin adapter over these.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgrammar.errors import GrammarError, ToolgrammarError
from toolgrammar.formats import FORMATS as REGISTERED
from toolgrammar.formats import get_format
from toolgrammar.formats.calls import ToolCall
from toolgrammar.integrations.serving import (
    LENIENT_ENV,
    LENIENT_XARG,
    STEER_ENV,
    STEER_XARG,
    CallDelta,
    CallExtractor,
    StreamingCallExtractor,
    constraint_spec,
    flag,
    request_setting,
    tool_choice_option,
)
from toolgrammar.schema import load_tools

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]
TOOLSET = load_tools(TOOLS)
FORMATS = ("hermes", "qwen-xml")
ALL_FORMATS = tuple(REGISTERED)


# ------------------------------------------------------------------------------------------------
# The request -> the constraint
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "option"),
    [
        (None, "auto"),
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        ({"type": "function", "function": {"name": "ping"}}, "ping"),
        ({"function": {"name": "ping"}}, "ping"),
    ],
)
def test_tool_choice_maps_to_the_grammar_option(choice: Any, option: str) -> None:
    assert tool_choice_option(choice) == option


@pytest.mark.parametrize(
    "choice", ["any", 3, {"type": "function"}, {"type": "custom", "function": {"name": "ping"}}, {"function": "ping"}]
)
def test_bad_tool_choice_is_named_in_the_error(choice: Any) -> None:
    with pytest.raises(GrammarError, match="tool_choice must be"):
        tool_choice_option(choice)


def test_spec_follows_the_request() -> None:
    spec = constraint_spec(
        TOOLS,
        format="qwen-xml",
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        chat_template_kwargs={"enable_thinking": False},
    )
    assert spec == {
        "tools": TOOLS,
        "mode": "schema",
        "format": "qwen-xml",
        "tool_choice": "get_weather",
        "parallel_tool_calls": False,
        "reasoning": "disabled",
    }
    # Unset options take the OpenAI defaults; thinking is on unless the template is told otherwise.
    spec = constraint_spec(TOOLS, format="hermes", tool_choice=None, parallel_tool_calls=None)
    assert (spec["tool_choice"], spec["parallel_tool_calls"], spec["reasoning"]) == ("auto", True, "enabled")


@pytest.mark.parametrize("key", ["steer_to_blocks", "lenient"])
def test_a_setting_goes_into_the_spec_only_when_on(key: str) -> None:
    on = constraint_spec(TOOLS, format="hermes", **{key: True})
    off = constraint_spec(TOOLS, format="hermes")
    assert on.pop(key) is True
    assert on == off and key not in off
    with pytest.raises(GrammarError, match=f"{key} must be true or false, got 'yes'"):
        constraint_spec(TOOLS, format="hermes", **{key: "yes"})


DIRTY = [{"type": "function", "function": {"name": "area", "parameters": {
    "type": "object", "properties": {"r": {"type": "number", "format": "float"}}, "required": ["r"]}}}]  # fmt: skip
"""A BFCL-style schema: ``format`` on a number, which strict loading refuses."""


def test_lenient_loading_serves_a_schema_strict_refuses(caplog: pytest.LogCaptureFixture) -> None:
    from toolgrammar.integrations.serving import compiled_turn

    with pytest.raises(ToolgrammarError, match=r"'area'.*/properties/r/format"):
        constraint_spec(DIRTY, format="hermes")
    with caplog.at_level("WARNING", logger="toolgrammar.integrations.vllm"):
        spec = constraint_spec(DIRTY, format="hermes", lenient=True)
    assert "lenient loading" in caplog.text and "/properties/r/format" in caplog.text
    turn = compiled_turn(spec)
    assert turn.tools["area"].parameters["properties"]["r"] == {"type": "number"}
    extractor = CallExtractor(turn.tools, format="hermes")
    content, calls = extractor.extract('<tool_call>\n{"name": "area", "arguments": {"r": 2.5}}\n</tool_call>')
    assert [(c.name, c.arguments) for c in calls] == [("area", {"r": 2.5})] and content is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), ("1", True), ("0", False), ("TRUE", True),
     (" yes ", True), ("off", False), ("", False)],
)  # fmt: skip
def test_flag_reads_booleans_and_their_spellings(value: Any, expected: bool) -> None:
    assert flag(value, where="w") is expected


@pytest.mark.parametrize("value", [2, -1, 1.0, "maybe", None, [True]])
def test_flag_refuses_anything_else_naming_where(value: Any) -> None:
    with pytest.raises(GrammarError, match=r"the place must be true or false \(or 1/0\), got"):
        flag(value, where="the place")


SETTINGS = [(STEER_XARG, STEER_ENV), (LENIENT_XARG, LENIENT_ENV)]


@pytest.mark.parametrize(("key", "variable"), SETTINGS)
@pytest.mark.parametrize(
    ("xargs", "environ", "expected"),
    [
        (None, {}, False),  # off unless asked
        ({}, {"V": "1"}, True),  # the server's default
        ({"K": 0}, {"V": "1"}, False),  # a request's own setting wins (vLLM sends JSON false as 0)
        ({"K": 1}, {"V": "0"}, True),
        ({"K": True}, {}, True),
        ({"other": 1}, {"V": "no"}, False),
    ],
)
def test_request_setting_over_server_default(
    key: str, variable: str, xargs: Any, environ: dict[str, str], expected: bool
) -> None:
    xargs = None if xargs is None else {key if k == "K" else k: v for k, v in xargs.items()}
    environ = {variable if k == "V" else k: v for k, v in environ.items()}
    assert request_setting(xargs, environ, key, variable) is expected


@pytest.mark.parametrize(("key", "variable"), SETTINGS)
def test_request_setting_names_the_bad_source(key: str, variable: str) -> None:
    with pytest.raises(GrammarError, match=f"vllm_xargs\\['{key}'\\] must be true or false"):
        request_setting({key: "perhaps"}, {}, key, variable)
    with pytest.raises(GrammarError, match=f"the environment variable {variable} must be true or false"):
        request_setting({}, {variable: "perhaps"}, key, variable)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"format": "os:abort"}, "registered format"),
        ({"format": "hermes", "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
        ({"format": "hermes", "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ],
)
def test_bad_requests_are_refused_with_what_is_wrong(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ToolgrammarError, match=match):
        constraint_spec(TOOLS, **kwargs)


def test_a_bad_schema_is_refused_naming_tool_and_pointer() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": 7}}}}]
    with pytest.raises(ToolgrammarError, match=r"'f'.*/properties/a"):
        constraint_spec(tools, format="hermes")


# ------------------------------------------------------------------------------------------------
# The turn -> content and calls
# ------------------------------------------------------------------------------------------------


def test_valid_blocks_become_calls_and_everything_else_stays_in_content() -> None:
    hermes = get_format("hermes")
    good = hermes.render_call("get_weather", {"city": "Paris"})
    unknown = hermes.render_call("nope", {})
    text = f'<think>\nplan\n</think>\n\nSure. {good}\n{unknown}\n<tool_call>\n{{"name": "ping'
    content, calls = CallExtractor(TOOLSET).extract(text)
    assert [c.to_dict() for c in calls] == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    # Reasoning, the invalid block and the cut one are kept verbatim: nothing the model wrote is lost.
    assert content == f'<think>\nplan\n</think>\n\nSure. \n{unknown}\n<tool_call>\n{{"name": "ping'


def test_a_turn_of_calls_only_has_no_content() -> None:
    hermes = get_format("hermes")
    text = "\n".join([hermes.render_call("ping", {}), hermes.render_call("get_weather", {"city": "Rome"})])
    content, calls = CallExtractor(TOOLSET).extract(text + "\n")
    assert content is None
    assert [c.name for c in calls] == ["ping", "get_weather"]


_words = st.sampled_from(["hello", " ", "\n", "<", "<tool", "</think>", "ok.", "</tool_call>", "{", '"'])
_args = st.fixed_dictionaries(
    {"city": st.lists(st.sampled_from([*'ab <>/"\\\n{}', "</tool_call>", "</parameter>"]), max_size=8).map("".join)},
    optional={"days": st.integers(-5, 500)},
)


@st.composite
def turns(draw: st.DrawFn, fmt_name: str) -> str:
    """Turns as a model writes them: reasoning or not, prose, valid blocks, wrong ones, a cut one."""
    fmt = get_format(fmt_name)
    parts: list[str] = []
    if draw(st.booleans()):
        parts.append("<think>\n" + "".join(draw(st.lists(_words, max_size=6))) + "\n</think>\n\n")
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["prose", "call", "ping", "unknown", "bad-args", "space"]))
        if kind == "prose":
            parts.append("".join(draw(st.lists(_words, min_size=1, max_size=5))))
        elif kind == "call":
            parts.append(fmt.render_call("get_weather", draw(_args)))
        elif kind == "ping":
            parts.append(fmt.render_call("ping", {}))
        elif kind == "unknown":
            parts.append(fmt.render_call("nope", {"x": 1}))
        elif kind == "bad-args":
            parts.append(fmt.render_call("get_weather", {"days": "soon"}))
        else:
            parts.append(draw(st.sampled_from(["\n", "  ", "\n\n"])))
    text = "".join(parts)
    if draw(st.booleans()):  # cut by the budget somewhere
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _stream(
    text: str, cuts: list[int], fmt: str, *, stream_arguments: bool = False
) -> tuple[str | None, list[tuple[str, str]]]:
    """Feed ``text`` cut at ``cuts``; the content and the calls as an OpenAI client accumulates them (by index:
    the name from the first piece, which must carry it, the arguments concatenated)."""
    stream = StreamingCallExtractor(TOOLSET, format=fmt, stream_arguments=stream_arguments)
    content, calls = "", []
    at = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        piece, deltas = stream.feed(text[at:cut])
        content += piece
        _accumulate(calls, deltas)
        at = cut
    piece, deltas = stream.finish()
    _accumulate(calls, deltas)
    assert [(c.name, c.arguments_json()) for c in stream.calls] == calls  # every call begun was finished
    return (content + piece) or None, calls


def _accumulate(calls: list[tuple[str, str]], deltas: list[CallDelta]) -> None:
    for d in deltas:
        if d.index == len(calls):
            assert d.name is not None, f"call {d.index}'s first piece has no name: {d}"
            calls.append((d.name, d.arguments))
        else:
            assert d.index == len(calls) - 1 and d.name is None, f"a piece out of order, or a second name: {d}"
            calls[-1] = (calls[-1][0], calls[-1][1] + d.arguments)


def _whole(text: str, fmt: str) -> tuple[str | None, list[tuple[str, str]]]:
    content, calls = CallExtractor(TOOLSET, format=fmt).extract(text)
    return content, [(c.name, c.arguments_json()) for c in calls]


@pytest.mark.parametrize("fmt", list(ALL_FORMATS))
def test_a_stream_adds_up_to_the_whole_turn_for_every_chunking(fmt: str) -> None:
    """Any turn (valid, invalid and cut blocks, reasoning): whole calls, sent as their blocks close."""
    examples = 300 if fmt in FORMATS else 40

    @settings(max_examples=examples, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        text = data.draw(turns(fmt))
        cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
        assert _stream(text, cuts, fmt) == _whole(text, fmt)
        # One character at a time: the finest chunking a detokenizer can produce.
        assert _stream(text, list(range(len(text))), fmt) == _whole(text, fmt)

    check()


_plain_args = st.fixed_dictionaries(
    {"city": st.text(st.sampled_from([*'ab <>/"\\\n{}:,', "é", "😀"]), max_size=12)},
    optional={"days": st.integers(-5, 500)},
)
"""Arguments every format can carry (no closing markup inside a value: the formats that write values raw
cannot)."""


@st.composite
def valid_turns(draw: st.DrawFn, fmt_name: str) -> str:
    """Turns the constraint lets a model write: prose, then calls (a section holds them all), then prose."""
    fmt = get_format(fmt_name)
    prose = st.lists(st.sampled_from(["hello", " ", "\n", "ok.", "{", '"', "é😀"]), max_size=5).map("".join)
    calls = [
        ToolCall("get_weather", draw(_plain_args)) if draw(st.booleans()) else ToolCall("ping", {})
        for _ in range(draw(st.integers(1, 3)))
    ]
    if fmt.block_holds_calls:
        body = fmt.canonical_calls(calls)
    else:
        body = "\n".join(fmt.render_call(c.name, c.arguments) for c in calls)
    return draw(prose).strip() + ("\n" if draw(st.booleans()) else "") + body


@pytest.mark.parametrize("fmt", list(ALL_FORMATS))
def test_streamed_arguments_add_up_to_the_call_for_every_chunking(fmt: str) -> None:
    """A constrained turn's calls as argument fragments: the first piece of each carries its name, every
    fragment is final, and the concatenation is the non-streamed call's ``arguments_json()`` byte for byte,
    however the turn is split (one character at a time included)."""

    @settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        text = data.draw(valid_turns(fmt))
        whole = _whole(text, fmt)
        assert whole[1], (fmt, text)  # the rendered calls are valid: the property is not vacuous
        cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
        assert _stream(text, cuts, fmt, stream_arguments=True) == whole
        assert _stream(text, list(range(len(text))), fmt, stream_arguments=True) == whole

    check()


@pytest.mark.parametrize("fmt", list(ALL_FORMATS))
def test_arguments_arrive_while_the_block_is_written(fmt: str) -> None:
    """The point of streaming arguments: most of a long string value is sent before its block closes."""
    value = "the quick brown fox jumps over the lazy dog. " * 4
    text = "Writing it. " + get_format(fmt).render_call("get_weather", {"city": value, "days": 3})
    stream = StreamingCallExtractor(TOOLSET, format=fmt, stream_arguments=True)
    sent, pieces = "", 0
    for ch in text[:-1]:
        for d in stream.feed(ch)[1]:
            sent += d.arguments
            pieces += 1
    assert value[: len(value) // 2] in sent  # half the value is out already
    assert pieces > len(value) // 2
    rest = [d.arguments for d in stream.feed(text[-1:])[1] + stream.finish()[1]]
    assert json.loads(sent + "".join(rest)) == {"city": value, "days": 3}


def test_a_call_is_sent_as_soon_as_its_block_closes_and_prose_flows_before_it() -> None:
    hermes = get_format("hermes")
    block = hermes.render_call("get_weather", {"city": "Oslo"})
    stream = StreamingCallExtractor(TOOLSET)
    assert stream.feed("Checking ") == ("Checking", [])  # the trailing space waits: it may end the turn
    assert stream.feed("now <tool") == (" now", [])  # "<tool" may open a block
    content, calls = stream.feed(block[len("<tool") : -3])
    assert (content, calls) == ("", [])  # the block is open
    content, calls = stream.feed(block[-3:])
    assert content == "" and calls == [CallDelta(0, "get_weather", '{"city": "Oslo"}')]
    assert stream.finish() == ("", [])


def test_a_streamed_call_starts_with_its_name_then_its_arguments() -> None:
    block = get_format("hermes").render_call("get_weather", {"city": "Oslo"})
    stream = StreamingCallExtractor(TOOLSET, stream_arguments=True)
    deltas = [d for ch in block for d in stream.feed(ch)[1]] + stream.finish()[1]
    assert deltas[0] == CallDelta(0, "get_weather", "")  # the name, as soon as it is complete
    assert all(d.index == 0 and d.name is None for d in deltas[1:])
    assert [d.arguments for d in deltas[1:]] == ["{", '"city": ', '"', "O", "s", "l", "o", '"', "}"]
