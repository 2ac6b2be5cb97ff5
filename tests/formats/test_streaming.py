"""Streamed arguments (:mod:`toolgrammar.formats.streaming`): sound, monotone and complete, for every format.

For each registered format, blocks written two ways:

- the chat template's render (``render_call`` / ``canonical_calls``) of hypothesis-generated arguments drawn
  from the seed tools and a richer schema (nested objects, maps, arrays, numbers with fractions, exponents and
  signs, booleans, null, free-form values, unicode with emoji, escapes and every format's markers);
- random walks through the block grammar (bytes, canonical and flexible whitespace), the text a masked
  model may write.

For every character prefix and for random chunkings, each call's streamed arguments are a prefix of the
final ``arguments_json()`` the strict parser gives, they only grow, the name appears only as the final
name, and at the whole block they are equal. Fixed seeds throughout.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammar_checks import byte_distances, byte_vocabulary, random_block, walk_texts
from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.formats.calls import ToolCall
from toolgrammar.formats.options import GrammarOptions
from toolgrammar.formats.streaming import (
    ArgumentDeltas,
    JsonTransducer,
    PartialCall,
    PartialCallReader,
    StreamingError,
    partial_call,
    partial_calls,
)
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import ToolSet, load_tools
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

SEED_TOOLS = json.loads((Path(__file__).parents[2] / "examples" / "tools" / "seed_tools.json").read_text("utf-8"))

RICH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
        "maybe": {"type": ["string", "null"]},
        "choice": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
        "point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "integer"}, "label": {"type": "string"}},
            "required": ["x"],
        },
        "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
        "nested": {
            "type": "object",
            "properties": {
                "inner": {
                    "type": "object",
                    "properties": {
                        "deep": {
                            "type": "array",
                            "items": {"type": "object", "properties": {"v": {"type": "string"}}},
                            "maxItems": 2,
                        }
                    },
                }
            },
        },
        "anything": {},
    },
    "required": ["text"],
}
RICH_TOOLS = [
    {"type": "function", "function": {"name": "configure", "parameters": RICH_PARAMETERS}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
]
TOOLS = load_tools(SEED_TOOLS + RICH_TOOLS)

MARKERS = sorted(
    {w for name in FORMATS for m in [get_format(name).markers] for w in (*m.leak, m.block_open, m.block_close) if w}
    | {"</parameter>", "\n</parameter>", "<parameter=x>", "</function>", "</arg_value>", "<arg_key>", "[ARGS]"}
    | {"<|close|>argument<|sep|>", "<|open|>argument", "</｜DSML｜parameter>", '"/>', '">', "```"}
)
"""Every format's markup, to put into string values (where a format cannot carry one, its parser says so)."""

SPECIAL = list("\"\\\n\r\t'😀é\u2028\x00\x1f{}[],:=)")
TEXT = st.lists(
    st.one_of(st.characters(codec="utf-8", exclude_categories=("Cs",)), st.sampled_from(SPECIAL + MARKERS)),
    max_size=8,
).map("".join)
NUMBER = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-05, 1e21, 2.5, -7.125]),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | NUMBER | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def _rich_arguments() -> st.SearchStrategy[dict[str, Any]]:
    point = st.fixed_dictionaries({"x": NUMBER}, optional={"y": st.integers(-999, 999), "label": TEXT})
    deep = st.lists(st.fixed_dictionaries({}, optional={"v": TEXT}), max_size=2)
    optional = {
        "count": st.integers(-(10**20), 10**20),
        "ratio": NUMBER,
        "flag": st.booleans(),
        "nothing": st.none(),
        "maybe": st.none() | TEXT,
        "choice": st.sampled_from(["a", "b"]),
        "tags": st.lists(TEXT, max_size=3),
        "matrix": st.lists(st.lists(st.integers(-5, 10**6), max_size=2), max_size=2),
        "point": point,
        "meta": st.dictionaries(TEXT, st.integers(-(2**40), 2**40), max_size=3),
        "nested": st.fixed_dictionaries({}, optional={"inner": st.fixed_dictionaries({}, optional={"deep": deep})}),
        "anything": JSON_VALUE,
    }
    required = {"text": TEXT, "point": optional.pop("point"), "anything": optional.pop("anything")}
    return st.fixed_dictionaries(required, optional=optional)


RICH_CALL = st.tuples(st.just("configure"), _rich_arguments())
SEED_CALL = st.one_of(
    st.tuples(st.just("ping"), st.just({})),
    st.tuples(st.sampled_from(["read_file", "list_files", "run_tests"]), st.fixed_dictionaries({"path": TEXT})),
    st.tuples(st.just("grep"), st.fixed_dictionaries({"pattern": TEXT, "path": TEXT})),
    st.tuples(st.just("write_file"), st.fixed_dictionaries({"path": TEXT, "content": TEXT})),
)


# --------------------------------------------------------------------------- the checks


def final_calls(fmt: str, text: str, tools: ToolSet) -> tuple[ToolCall, ...] | None:
    """The strict parser's calls when ``text`` is one block of valid calls and nothing else, else ``None``."""
    turn = parse_turn(text, tools, format=fmt)
    if not turn.blocks or not turn.ok or turn.content or turn.reasoning_content:
        return None
    return turn.tool_calls


def check_prefix(got: tuple[PartialCall, ...], names: list[str], finals: list[str], where: str) -> None:
    assert len(got) <= len(finals), where
    for p, name, final in zip(got, names, finals, strict=False):
        assert p.name in (None, name), (where, p, name)
        assert final.startswith(p.arguments), (where, p.arguments, final)
        assert not p.complete or p.arguments == final, (where, p, final)
        assert p.name is not None or not p.arguments, (where, p)


def check_grows(before: tuple[PartialCall, ...], after: tuple[PartialCall, ...], where: str) -> None:
    assert len(after) >= len(before), where
    for a, b in zip(before, after, strict=False):
        assert b.arguments.startswith(a.arguments), (where, a, b)
        assert a.name is None or b.name == a.name, (where, a, b)
        assert b.complete or not a.complete, (where, a, b)


def check_stream(fmt: str, text: str, tools: ToolSet, calls: tuple[ToolCall, ...], rng: random.Random) -> list[str]:
    """Every character prefix (one reader fed one character more each time), a random chunking (compared
    with it at every cut) and a few fresh :func:`partial_calls`; returns the streamed arguments at the end."""
    names, finals = [c.name for c in calls], [c.arguments_json() for c in calls]
    reader = PartialCallReader(fmt, tools)
    seen: list[tuple[PartialCall, ...]] = []
    prev: tuple[PartialCall, ...] = ()
    for i in range(len(text) + 1):
        got = reader.read(text[:i])
        check_prefix(got, names, finals, f"{fmt} at {i}")
        check_grows(prev, got, f"{fmt} at {i}")
        seen.append(got)
        prev = got
    end = seen[-1]
    assert [p.arguments for p in end] == finals, (fmt, text, end, calls)
    assert [p.name for p in end] == names, (fmt, text)
    assert all(p.complete for p in end), (fmt, text, end)
    # A random chunking reads the same at each cut (the result is a function of the text), and the deltas
    # of each call concatenate to its final arguments.
    chunked = PartialCallReader(fmt, tools)
    deltas: list[ArgumentDeltas] = []
    sent: list[list[str]] = []
    pos = 0
    while pos < len(text):
        pos = min(len(text), pos + rng.choice([1, 1, 2, 3, 5, 8, 20]))
        got = chunked.read(text[:pos])
        assert got == seen[pos], (fmt, pos, text)
        for k, p in enumerate(got):
            if k == len(deltas):
                deltas.append(ArgumentDeltas())
                sent.append([])
            sent[k].append(deltas[k].feed(p))
    assert ["".join(s) for s in sent] == finals, (fmt, text)
    for i in sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1))):
        assert partial_calls(fmt, text[:i], tools) == seen[i], (fmt, i, text)
    assert partial_call(fmt, text, tools) == end[-1]
    return [p.arguments for p in end]


# --------------------------------------------------------------------------- the template's renders


def check_render(fmt: str, calls: list[tuple[str, dict[str, Any]]], seed: int) -> bool:
    """The template's render of ``calls`` (one call unless a block holds several) streams soundly; ``False``
    when the render is not a valid block (a value this format cannot carry: nothing to stream)."""
    f = get_format(fmt)
    if not f.block_holds_calls:
        calls = calls[:1]
    text = f.canonical_calls([ToolCall(n, a) for n, a in calls])
    final = final_calls(fmt, text, TOOLS)
    if final is None:
        return False
    check_stream(fmt, text, TOOLS, final, random.Random(seed))
    return True


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments=_rich_arguments(), seed=st.integers(0, 2**32))
def test_rendered_rich_calls_stream_soundly(fmt: str, arguments: dict[str, Any], seed: int) -> None:
    """Nested objects, maps, arrays, numbers, booleans, null, free-form values, unicode and markers."""
    check_render(fmt, [("configure", arguments)], seed)


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(st.one_of(SEED_CALL, RICH_CALL), min_size=1, max_size=3), seed=st.integers(0, 2**32))
def test_rendered_calls_stream_soundly(fmt: str, calls: list[tuple[str, dict[str, Any]]], seed: int) -> None:
    """The seed tools, and several calls in one section where a block holds several."""
    check_render(fmt, calls, seed)


def test_most_rendered_examples_are_valid_calls() -> None:
    """Most drawn arguments render as valid calls in every format, so the properties above are not vacuous
    (a few cannot be carried: a qwen-xml value holding ``\\n</parameter>``, a gemma4 one holding ``<|"|>``)."""
    valid: dict[str, int] = dict.fromkeys(FORMATS, 0)

    @settings(max_examples=40, derandomize=True, deadline=None, database=None)
    @given(arguments=_rich_arguments())
    def draw(arguments: dict[str, Any]) -> None:
        for fmt in FORMATS:
            valid[fmt] += final_calls(fmt, get_format(fmt).render_call("configure", arguments), TOOLS) is not None

    draw()
    assert min(valid.values()) >= 20, valid


# --------------------------------------------------------------------------- the grammar's walks

WALK_TOOLS = load_tools(RICH_TOOLS)
WALK_OPTIONS = [{}, {"whitespace": "flexible"}, {"whitespace": "flexible", "escape_markers": True}]


@cache
def block_dfa(fmt: str, options: str) -> tuple[DFA, np.ndarray]:
    dfa = compile_dfa(get_format(fmt).block_grammar(WALK_TOOLS, GrammarOptions(format=fmt, **json.loads(options))))
    return dfa, byte_distances(dfa)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("options", WALK_OPTIONS, ids=["canonical", "flexible", "flexible-escaped"])
def test_grammar_walks_stream_soundly(fmt: str, options: dict[str, Any]) -> None:
    """Random walks through the block grammar (what a masked model may write, whitespace variants included)."""
    dfa, dist = block_dfa(fmt, json.dumps(options, sort_keys=True))
    rng = np.random.default_rng(20261201)
    chunks = random.Random(5)
    streamed = 0
    for i in range(6):
        text = random_block(dfa, dist, rng, greed=0.15 + 0.15 * (i % 4), max_len=240).decode("utf-8")
        calls = final_calls(fmt, text, WALK_TOOLS)
        assert calls is not None, (fmt, text, parse_turn(text, WALK_TOOLS, format=fmt).errors)
        streamed += len(check_stream(fmt, text, WALK_TOOLS, calls, chunks))
    assert streamed >= 6


ONE_CALL_FORMATS = [name for name in FORMATS if not get_format(name).block_holds_calls]


@pytest.mark.parametrize("fmt", ONE_CALL_FORMATS)
def test_turn_walks_stream_each_block_parse_turn_cuts(fmt: str) -> None:
    """Random walks through the whole turn grammar (:func:`toolgrammar.testing.random_walk` over a byte
    vocabulary with the markers as tokens, flexible whitespace): each block ``parse_turn`` cuts out streams
    soundly (a section is read whole instead: its blocks are its calls)."""
    m = get_format(fmt).markers
    markers = tuple(dict.fromkeys(w for w in (*m.leak, m.block_open, m.block_close, *m.end_of_turn) if w))
    vocab = byte_vocabulary(f"{fmt}-bytes", markers, eos=list(m.end_of_turn), control=list(m.end_of_turn))
    grammar = compile_turn(RICH_TOOLS, format=fmt, tool_choice="required", whitespace="flexible", cache=False)
    rng = np.random.default_rng(11)
    blocks = 0
    for i, text, _ in walk_texts(TokenGrammar(grammar, vocab), rng, 5, budget=(60, 200), eos_weight=0.3):
        turn = parse_turn(text, WALK_TOOLS, format=fmt)
        for block in turn.blocks:
            assert block.call is not None, (text, turn.errors)
            check_stream(fmt, text[block.start : block.end], WALK_TOOLS, (block.call,), random.Random(i))
            blocks += 1
    assert blocks >= 5


# --------------------------------------------------------------------------- granularity


def test_hermes_streams_a_long_string_character_by_character() -> None:
    """Usefulness: the arguments grow inside a long string, long before the block closes."""
    value = "the quick brown fox jumps over the lazy dog; " * 8
    text = get_format("hermes").render_call("write_file", {"path": "a.txt", "content": value})
    cut = text.index(value) + len(value) // 2
    reader = PartialCallReader("hermes", TOOLS)
    lengths = [len(reader.read(text[:i])[-1].arguments) for i in range(cut - 40, cut + 1)]
    assert lengths == list(range(lengths[0], lengths[0] + 41))  # one more character of output per character read
    got = partial_call("hermes", text[:cut], TOOLS)
    assert got.name == "write_file" and not got.complete
    assert got.arguments == '{"path": "a.txt", "content": "' + value[: len(value) // 2]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_string_values_stream_before_they_end(fmt: str) -> None:
    """Every format streams a string-typed value before the value ends (character level)."""
    value = "abcdefghij" * 3
    text = get_format(fmt).render_call("write_file", {"path": "p", "content": value})
    cut = text.index(value) + 20
    got = partial_call(fmt, text[:cut], TOOLS)
    assert got.name == "write_file"
    assert got.arguments.endswith('"content": "' + value[:20]), (fmt, got)


@pytest.mark.parametrize(
    ("wire", "canonical"),
    [
        ('"\\u00e9\\/\\ud83d\\ude00\\n"', '"é/😀\\n"'),
        ('"\\ud800x"', '"\ud800x"'),
        ('"\\u0041\\u001f"', '"A\\u001f"'),
        ("1e2", "100.0"),
        ("-0", "0"),
        ("10.50", "10.5"),
        ("1E400", "Infinity"),
        ("[true , false,null ]", "[true, false, null]"),
        ('{ "a" :1 , "b":[ ] ,"c":{} }', '{"a": 1, "b": [], "c": {}}'),
    ],
)
def test_json_transducer_writes_what_json_dumps_writes(wire: str, canonical: str) -> None:
    assert canonical == json.dumps(json.loads(wire), ensure_ascii=False)
    for size in (1, 2, 3, len(wire)):
        out: list[str] = []
        tr = JsonTransducer(out.append)
        pos = 0
        text = wire + " "
        for end in range(size, len(text) + size, size):
            pos = tr.feed(text[: min(end, len(text))], pos)
            assert canonical.startswith("".join(out)), (size, out)
            assert not tr.failed
        assert tr.done and "".join(out) == canonical


def test_escapes_are_held_until_complete() -> None:
    out: list[str] = []
    tr = JsonTransducer(out.append)
    text = '"a\\ud83d\\ude00b"'
    pos = 0
    for end in range(1, len(text) + 1):
        pos = tr.feed(text[:end], pos)
        emitted = "".join(out)
        assert '"a😀b"'.startswith(emitted), (end, emitted)
        if end < text.index("b"):
            assert "\\" not in emitted
    assert "".join(out) == '"a😀b"'


def test_a_map_is_held_until_it_closes() -> None:
    """A map may repeat a key (``json.loads`` keeps the last value): nothing inside is final before it closes."""
    text = (
        '<tool_call>\n{"name": "configure", "arguments": {"text": "t", "meta": {"a": 1, "b": 2, "a": 3}, '
        '"count": 4}}\n</tool_call>'
    )
    calls = final_calls("hermes", text, TOOLS)
    assert calls is not None and calls[0].arguments_json() == '{"text": "t", "meta": {"a": 3, "b": 2}, "count": 4}'
    check_stream("hermes", text, TOOLS, calls, random.Random(1))
    inside = partial_call("hermes", text[: text.index('"a": 3')], TOOLS)
    assert inside.arguments == '{"text": "t", "meta": '


def test_qwen_xml_drops_the_markup_newlines() -> None:
    fmt = get_format("qwen-xml")
    for value in ("\nx\n", "x\n\n", "\n", "", "a</parameter>b", "a\n</parameterx"):
        text = fmt.render_call("write_file", {"path": "p", "content": value})
        calls = final_calls("qwen-xml", text, TOOLS)
        assert calls is not None, value
        check_stream("qwen-xml", text, TOOLS, calls, random.Random(2))


def test_what_the_grammar_never_writes_stops_streaming_and_completes_at_the_end() -> None:
    """Keys in another order than the grammar's: nothing is streamed, the whole call arrives at the end."""
    text = '<tool_call>\n{"arguments": {"path": "a"}, "name": "read_file"}\n</tool_call>'
    reader = PartialCallReader("hermes", TOOLS)
    for i in range(len(text)):
        assert reader.read(text[:i]) in ((), (PartialCall(),))
    assert reader.stopped
    assert reader.read(text) == (PartialCall("read_file", '{"path": "a"}', True),)


def test_a_section_streams_each_call() -> None:
    fmt = get_format("deepseek-v3.1")
    text = fmt.canonical_calls([ToolCall("read_file", {"path": "a"}), ToolCall("grep", {"pattern": "x", "path": "b"})])
    mid = text.index('"b"') + 2
    got = partial_calls(fmt, text[:mid], TOOLS)
    assert got == (
        PartialCall("read_file", '{"path": "a"}', True),
        PartialCall("grep", '{"pattern": "x", "path": "b', False),
    )
    assert partial_call(fmt, text[:mid], TOOLS) == got[-1]


@pytest.mark.parametrize(
    "turn",
    [
        ' to=functions.grep<|channel|>commentary <|constrain|>json<|message|>{"pattern": "a", "path": "b"}',
        '<|channel|>commentary to=functions.grep <|constrain|>json<|message|>{"pattern": "a", "path": "b"}',
        '<|start|>assistant to=functions.grep<|channel|>commentary json<|message|> {"pattern": "a", "path": "b"}',
        "<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.grep<|channel|>commentary<|message|>"
        '{"pattern": "a", "path": "b"}',
    ],
)
def test_gpt_oss_blocks_as_the_parser_cuts_them(turn: str) -> None:
    """A gpt-oss block starts at its message header (``<|start|>``, ``<|channel|>``) or at the recipient."""
    (block,) = parse_turn(turn, TOOLS, format="gpt-oss").blocks
    text = turn[block.start : block.end]
    assert block.call is not None
    check_stream("gpt-oss", text, TOOLS, (block.call,), random.Random(3))


# --------------------------------------------------------------------------- deltas and misuse


def test_argument_deltas() -> None:
    deltas = ArgumentDeltas()
    assert deltas.feed(PartialCall()) == ""
    assert deltas.name_delta() is None
    assert deltas.feed(PartialCall("f", '{"a": ')) == '{"a": '
    assert deltas.name_delta() == "f" and deltas.name_delta() is None
    assert deltas.feed(PartialCall("f", '{"a": ')) == ""
    assert deltas.feed(PartialCall("f", '{"a": 1}', True)) == "1}"
    assert deltas.sent == '{"a": 1}'
    with pytest.raises(StreamingError, match="no longer a prefix"):
        deltas.feed(PartialCall("f", '{"b": 1}', True))
    with pytest.raises(StreamingError, match="name changed"):
        deltas.feed(PartialCall("g", '{"a": 1}', True))


def test_a_reader_reads_one_growing_text() -> None:
    reader = PartialCallReader("hermes", TOOLS)
    reader.read("<tool_call>\n{")
    with pytest.raises(StreamingError, match="must extend"):
        reader.read("<tool_call>\n[")
    assert partial_call("hermes", "", TOOLS) == PartialCall()
