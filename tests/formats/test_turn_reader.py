"""The one turn reader (toolgrammar.formats.reader) with a toy format defined here.

The toy format writes a call as ``[[CALL]]NAME {json arguments}[[/CALL]]``, or, with its opener
forgotten, as a line ``!call NAME {json arguments}``. It supplies only a block reader (where a block
starts, where it ends, what it holds); reasoning, content, whitespace trimming and streaming come
from the shared reader, and the stream adds up to the one-shot parse for every chunking.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrammar.formats.base import ToolCallFormat
from toolgrammar.formats.calls import Block, CallError, ToolCall
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.reader import NOT_A_BLOCK, NotABlock, Opener, TurnStreamState, read_turn
from toolgrammar.schema import ToolSet, load_tools
from toolgrammar.turn.parser import TurnStreamParser, accumulate, parse_turn

MARKERS = Markers(block_open="[[CALL]]", block_close="[[/CALL]]")
LINE = Opener("!call ", line_start=True)
_NAME = re.compile(r"[a-z_]+")

TOOLS = load_tools(
    [
        {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
        {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    ]
)


@dataclass(frozen=True)
class ToySpan:
    start: int
    body_start: int
    body_end: int
    end: int
    closed: bool


class ToyCursor:
    """A ``[[CALL]]`` block ends at the first ``[[/CALL]]``; a ``!call`` line at its newline."""

    def __init__(self, start: int, line: bool) -> None:
        self.start, self.line = start, line
        self.body_start = start + len(LINE.text if line else MARKERS.block_open)
        self.closer = "\n" if line else MARKERS.block_close
        self.search = self.body_start

    def advance(self, text: str, final: bool) -> ToySpan | NotABlock | None:
        if self.line:  # a ``!call`` not followed by a name is text, not a block
            name = _NAME.match(text, self.body_start)
            if name is None:
                return None if not final and len(text) == self.body_start else NOT_A_BLOCK
        close = text.find(self.closer, self.search)
        if close != -1:
            end = close if self.line else close + len(self.closer)
            return ToySpan(self.start, self.body_start, close, end, True)
        if final:
            return ToySpan(self.start, self.body_start, len(text), len(text), self.line)
        self.search = max(self.body_start, len(text) - len(self.closer) + 1)
        return None


class ToyBlocks:
    modes: ClassVar[tuple[str, ...]] = ("strict",)
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str = "strict", markers: Markers = MARKERS) -> None:
        if mode not in self.modes:
            raise ValueError(f"unknown toy parse mode {mode!r}")
        self.markers = markers
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open), LINE)

    def open_block(self, start: int, opener: Opener) -> ToyCursor:
        return ToyCursor(start, line=opener == LINE)

    def check(self, text: str, cut: ToySpan, tools: ToolSet) -> Block:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]
        verdict = self._verdict(body, cut.closed, tools)
        kind = {"call": verdict} if isinstance(verdict, ToolCall) else {"error": verdict}
        return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, **kind)

    @staticmethod
    def _verdict(body: str, closed: bool, tools: ToolSet) -> ToolCall | CallError:
        if not closed:
            return CallError("truncated", "error: tool call is truncated")
        name, _, arguments = body.strip().partition(" ")
        try:
            decoded = json.loads(arguments or "{}")
        except ValueError as error:
            return CallError("invalid-json", f"error: tool call is not valid JSON: {error}")
        return check_call({"name": name, "arguments": decoded}, tools)


class EagerToyBlocks(ToyBlocks):
    """The same blocks, but an opener ends an opened ``<think>`` (as qwen-xml's does)."""

    block_ends_reasoning: ClassVar[bool] = True


class ToyFormat(ToolCallFormat):
    """A whole format: its block reader is all the parsing it supplies."""

    name: ClassVar[str] = "toy"
    markers: ClassVar[Markers] = MARKERS

    def block_grammar(self, tools: Any, options: Any) -> Any:  # pragma: no cover - not generated here
        raise NotImplementedError

    def render_call(self, tool: Any, arguments: dict[str, Any]) -> str:
        name = tool if isinstance(tool, str) else tool.name
        return f"{MARKERS.block_open}{name} {json.dumps(arguments)}{MARKERS.block_close}"

    def block_reader(self, mode: str = "strict") -> ToyBlocks:
        return ToyBlocks(mode, self.markers)


FORMAT = ToyFormat()
TIME = "[[CALL]]get_time {}[[/CALL]]"
READ = '[[CALL]]read_file {"path": "a.txt"}[[/CALL]]'


def read(text: str, reader: ToyBlocks | None = None, **kw: Any) -> Any:
    return read_turn(text, TOOLS, reader or ToyBlocks(), **kw)


# --------------------------------------------------------------------------- one-shot


@pytest.mark.parametrize(
    ("text", "kwargs", "reasoning", "content", "calls"),
    [
        ("<think>\nplan\n</think>\n\nHi " + TIME + " bye", {}, "plan", "Hi  bye", ["get_time"]),
        ("  <think>x</think>y", {}, "x", "y", []),
        ("plan\n</think>\n\n" + READ, {"reasoning_started": True}, "plan", None, ["read_file"]),
        ("plan\n</think>\n\n" + READ, {}, "plan", None, ["read_file"]),  # a bare </think> before any block
        (TIME + "\nDone.</think>", {}, None, "Done.</think>", ["get_time"]),  # ... but not after one
        ("<think>cut while thinking", {}, "cut while thinking", None, []),
        ("cut while thinking", {"reasoning_started": True}, "cut while thinking", None, []),
        ("Maybe " + TIME + " now?</think>ok", {"reasoning_started": True}, "Maybe " + TIME + " now?", "ok", []),
        (
            "Let me check.\n" + TIME + "\n" + READ + "\nThat is all.",
            {},
            None,
            "Let me check.\n\n\nThat is all.",
            ["get_time", "read_file"],
        ),
        ("", {}, None, None, []),
        ("\n\n", {}, None, None, []),
    ],
)
def test_turn_split(
    text: str, kwargs: dict[str, Any], reasoning: str | None, content: str | None, calls: list[str]
) -> None:
    turn = read(text, **kwargs)
    assert (turn.reasoning_content, turn.content) == (reasoning, content)
    assert [c.name for c in turn.tool_calls] == calls
    assert turn.ok


def test_a_format_that_supplies_only_a_block_reader_parses_and_streams() -> None:
    text = "<think>hm</think>Sure." + READ
    assert parse_turn(text, TOOLS, format=FORMAT) == read(text)
    stream = TurnStreamParser(TOOLS, format=FORMAT)
    deltas = [d for ch in text for d in stream.feed(ch)] + stream.end()
    assert accumulate(deltas) == {
        "content": "Sure.",
        "reasoning_content": "hm",
        "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
    }
    assert stream.finish() == read(text)


def test_block_ends_reasoning_is_the_format_s_choice() -> None:
    text = "<think>hm " + TIME + " more"
    assert read(text).reasoning_content == "hm " + TIME + " more"
    eager = read(text, EagerToyBlocks())
    assert (eager.reasoning_content, eager.content, len(eager.tool_calls)) == ("hm", "more", 1)


def test_blocks_are_cut_out_and_checked_each_on_its_own() -> None:
    text = "a " + TIME + " b [[CALL]]nope {}[[/CALL]] c [[CALL]]get_time {[[/CALL]] d [[CALL]]read_file"
    turn = read(text)
    kinds = [b.error.kind if b.error else "ok" for b in turn.blocks]
    assert kinds == ["ok", "unknown-tool", "invalid-json", "truncated"]
    assert turn.content == "a  b  c  d"
    assert all(text[b.start : b.end] == b.raw for b in turn.blocks)


def test_line_start_openers_and_candidates_that_are_text() -> None:
    turn = read('Hi\n!call read_file {"path": "x"}\nthen !call get_time\n!call 9\nend')
    assert [c.name for c in turn.tool_calls] == ["read_file"]
    assert turn.content == "Hi\n\nthen !call get_time\n!call 9\nend"
    # At the start of a run of content (the turn's start, after </think>, after a block) too.
    assert [c.name for c in read("!call get_time").tool_calls] == ["get_time"]
    assert [c.name for c in read("<think>x</think>!call get_time").tool_calls] == ["get_time"]
    assert [c.name for c in read(TIME + "!call get_time").tool_calls] == ["get_time", "get_time"]


def test_modes_are_the_block_reader_s() -> None:
    with pytest.raises(ValueError, match="unknown toy parse mode 'seed'"):
        parse_turn("hi", TOOLS, format=FORMAT, mode="seed")


# --------------------------------------------------------------------------- streaming


def test_what_waits() -> None:
    state = TurnStreamState(TOOLS, ToyBlocks(), reasoning_started=True)
    assert state.feed("The plan ") == [("reasoning", "The plan")]  # trailing space held back
    assert state.feed("is set.</th") == [("reasoning", " is set.")]  # a partial </think> held back
    assert state.feed("ink>\n\nOK [[CA") == [("content", "OK")]  # ... and a partial opener
    assert state.feed("LL]]get_time {}[[/CALL") == []  # a call waits for its block's end
    pieces = state.feed("]] done")
    assert pieces == [("tool_call", ToolCall("get_time", {})), ("content", "  done")]
    turn = state.finish()
    assert (turn.reasoning_content, turn.content, len(turn.tool_calls)) == ("The plan is set.", "OK  done", 1)
    with pytest.raises(ValueError, match="the turn has ended"):
        state.feed("x")


def test_text_before_a_possible_bare_think_close_waits() -> None:
    state = TurnStreamState(TOOLS, ToyBlocks())
    assert state.feed("maybe reasoning ") == []
    assert state.feed("</think>answer") == [("reasoning", "maybe reasoning"), ("content", "answer")]


def test_a_truncated_block_is_never_streamed() -> None:
    state = TurnStreamState(TOOLS, ToyBlocks())
    assert [k for k, _ in state.feed(TIME + "\n[[CALL]]get_time {}")] == ["tool_call"]
    assert [b.error.kind if b.error else "ok" for b in state.finish().blocks] == ["ok", "truncated"]


_PIECES = [
    "<think>",
    "</think>",
    "</th",
    "[[CALL]]",
    "[[/CALL]]",
    "[[CA",
    "[[/",
    "!call ",
    "!ca",
    "get_time",
    "read_file",
    " {}",
    ' {"path": "p"}',
    "{",
    "9",
    "\n",
    "\n\n",
    " ",
    "Hi",
    "é 🌸",
]


def _stream(text: str, cuts: list[int], reader: ToyBlocks, started: bool) -> tuple[list[Any], Any]:
    state = TurnStreamState(TOOLS, reader, reasoning_started=started)
    bounds = [0, *sorted(set(cuts)), len(text)]
    pieces = [p for a, b in itertools.pairwise(bounds) for p in state.feed(text[a:b])]
    return pieces, state.finish()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=25),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    started=st.booleans(),
    eager=st.booleans(),
)
def test_stream_adds_up_to_the_one_shot_parse(pieces: list[str], cuts: list[int], started: bool, eager: bool) -> None:
    text = "".join(pieces)
    reader = EagerToyBlocks() if eager else ToyBlocks()
    one = read_turn(text, TOOLS, reader, reasoning_started=started)
    streamed, final = _stream(text, [c for c in cuts if 0 < c < len(text)], reader, started)
    assert final == one
    content = "".join(v for k, v in streamed if k == "content")
    reasoning = "".join(v for k, v in streamed if k == "reasoning")
    assert (one.content or "").startswith(content)
    assert (one.reasoning_content or "").startswith(reasoning)
    assert [v for k, v in streamed if k == "tool_call"] == list(one.tool_calls)
    # Through the format-agnostic stream parser, every delta adds up exactly.
    fmt = ToyFormat() if not eager else _EagerFormat()
    stream = TurnStreamParser(TOOLS, format=fmt, reasoning_started=started)
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    deltas = [d for a, b in itertools.pairwise(bounds) for d in stream.feed(text[a:b])] + stream.end()
    got = accumulate(deltas)
    assert (got["content"], got["reasoning_content"]) == (one.content, one.reasoning_content)
    assert [c["name"] for c in got["tool_calls"]] == [c.name for c in one.tool_calls]


class _EagerFormat(ToyFormat):
    def block_reader(self, mode: str = "strict") -> ToyBlocks:
        return EagerToyBlocks(mode, self.markers)
