"""The llama4-pythonic grammar: soundness walks, fixture completeness and value spelling at the byte level.

No Llama 4 tokenizer ships on PyPI, so the token engine runs over a toy vocabulary: the 256 single bytes
plus the format's markers as whole added tokens, ``<|eot|>`` / ``<|eom|>`` / ``<|end_of_text|>`` ending
the turn. Walks over it reach every byte sequence the grammar allows, markers spelled in pieces included.
The strict parser itself is tested in ``test_format_llama.py``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgrammar.automata.nodes import EOS
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats import get_format
from toolgrammar.formats.llama4_pythonic.parser import render_value
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import load_tools
from toolgrammar.testing import accepts, random_walk, replay
from toolgrammar.turn.grammar import TurnGrammar, compile_turn
from toolgrammar.turn.parser import parse_turn
from toolgrammar.vocab import Vocabulary

FMT = get_format("llama4-pythonic")
M = FMT.markers
FIXTURE_DIR = Path(__import__("canitoolcall").__file__).parent / "_data" / "fixtures" / "llama"
FIXTURES = {
    r["id"].split("/", 1)[1].removeprefix("l4-"): r
    for path in sorted(FIXTURE_DIR.glob("*.jsonl"))
    for r in map(json.loads, path.open())
    if "Llama-4" in r["tokenizer"]["repo"]
}
MARKERS = (
    M.block_open,
    M.block_close,
    "<|eot|>",
    "<|eom|>",
    "<|header_start|>",
    "<|header_end|>",
    "<|end_of_text|>",
)
VOCAB = Vocabulary(
    "llama4-toy-bytes",
    tuple(bytes([i]) for i in range(256)) + tuple(m.encode() for m in MARKERS),
    frozenset(256 + i for i in range(2, len(MARKERS))),
    frozenset(256 + MARKERS.index(m) for m in ("<|eot|>", "<|eom|>", "<|end_of_text|>")),
    frozenset(range(256, 256 + len(MARKERS))),
)
EOT = 256 + MARKERS.index("<|eot|>")


def encode(text: str) -> list[int]:
    """Greedy: a marker as its one token, every other byte as itself."""
    out, i, data = [], 0, text.encode()
    while i < len(data):
        hit = next((k for k, m in enumerate(MARKERS) if data.startswith(m.encode(), i)), None)
        if hit is None:
            out.append(data[i])
            i += 1
        else:
            out.append(256 + hit)
            i += len(MARKERS[hit].encode())
    return out


def tool(name: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


@cache
def turn_grammar(tools_json: str, **options: Any) -> TurnGrammar:
    return compile_turn(json.loads(tools_json), format="llama4-pythonic", cache=False, **options)


@cache
def token_grammar(tools_json: str, **options: Any) -> TokenGrammar:
    return TokenGrammar(turn_grammar(tools_json, **options), VOCAB)


def grammar(tools: list[dict[str, Any]], **options: Any) -> TurnGrammar:
    return turn_grammar(json.dumps(tools), **options)


def calls_of(text: str, tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    turn = parse_turn(text, load_tools(tools), format="llama4-pythonic")
    assert turn.errors == (), [e.message for e in turn.errors]
    return [(c.name, c.arguments) for c in turn.tool_calls]


# --------------------------------------------------------------------------- CanIToolCall fixtures


def _canonical(record: dict[str, Any]) -> bool:
    """Whether the fixture's text is the template's spelling of its expected calls (bare or wrapped)."""
    expected = (record.get("expected") or {}).get("tool_calls") or []
    if not expected:
        return False
    text = FMT.canonical_calls([SimpleNamespace(name=c["name"], arguments=c["arguments"]) for c in expected])
    return record["raw_output"] in (text, M.block_open + text + M.block_close)


CANONICAL = sorted(n for n, r in FIXTURES.items() if _canonical(r))
OTHER_QUOTES = ["meta-pythonic-parallel", "vllm-pythonic-escaped-strings"]
"""Not ``repr``'s spelling, yet accepted: strings in double quotes, ``\\'`` and ``\\"`` escapes."""
REJECTED = {
    "vllm-pythonic-parallel-no-spaces": "',' without a space between arguments and calls",
    "truncated-missing-close-bracket": "cut",
}


def test_the_fixture_sets_are_as_documented() -> None:
    assert len(FIXTURES) == 10
    assert CANONICAL == [
        "bug-leading-underscore-identifier",
        "meta-pythonic-int-and-string",
        "vllm-pythonic-more-types",
        "vllm-pythonic-parameterless",
        "vllm-pythonic-python-start-end",
    ]
    assert set(FIXTURES) == {*CANONICAL, *OTHER_QUOTES, *REJECTED, "vllm-pythonic-no-call"}


@pytest.mark.parametrize("name", [*CANONICAL, *OTHER_QUOTES, "vllm-pythonic-no-call"])
def test_fixtures_are_accepted_and_never_masked(name: str) -> None:
    record = FIXTURES[name]
    tools = json.dumps(record["tools"])
    assert accepts(turn_grammar(tools), record["raw_output"])
    assert replay(token_grammar(tools), [*encode(record["raw_output"]), EOT]).first_masked is None
    expected = [(c["name"], c["arguments"]) for c in record["expected"]["tool_calls"]]
    assert calls_of(record["raw_output"], record["tools"]) == expected


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_malformed_and_non_canonical_fixtures_are_rejected(name: str) -> None:
    record = FIXTURES[name]
    tools = json.dumps(record["tools"])
    assert not accepts(turn_grammar(tools), record["raw_output"])
    assert replay(token_grammar(tools), [*encode(record["raw_output"]), EOT]).first_masked is not None, REJECTED[name]


def test_flexible_whitespace_accepts_the_spaceless_list() -> None:
    record = FIXTURES["vllm-pythonic-parallel-no-spaces"]
    assert accepts(turn_grammar(json.dumps(record["tools"]), whitespace="flexible"), record["raw_output"])


# --------------------------------------------------------------------------- what the grammar writes

WEATHER = [
    tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ("city",)),
    tool("get_time", {}),
]


@pytest.mark.parametrize(
    "text",
    [
        "[get_weather(city='Paris')]",
        "[get_weather(city='Paris', unit='c')]",
        '[get_weather(city="Paris")]',
        '[get_weather(city="it\'s")]',
        "[get_weather(city='it\\'s')]",
        "[get_time()]",
        "[get_weather(city='a'), get_time(), get_weather(city='b', unit='f')]",
        "<|python_start|>[get_time()]<|python_end|>",
        "Let me check.\n\n[get_weather(city='x')]",
        "No call needed.",
        "[] and [ get_time()] are content: no name right after the bracket.",
    ],
)
def test_accepted(text: str) -> None:
    assert accepts(grammar(WEATHER), text)
    assert parse_turn(text, load_tools(WEATHER), format="llama4-pythonic").errors == ()


@pytest.mark.parametrize(
    "text",
    [
        "[get_weather(city='Paris',unit='c')]",  # not the template's separator
        "[get_weather(unit='c', city='Paris')]",  # not the schema's order
        "[get_weather(unit='c')]",  # a required argument missing
        "[get_weather(city='x', extra=1)]",  # an argument the schema does not have
        "[get_weather(city='x', unit='k')]",  # not in the enum
        "[get_weather(city=1)]",  # wrong type
        "[get_weather('Paris')]",  # positional
        "[nope()]",  # unknown tool
        "[get_time(),get_time()]",
        "[get_time()][get_time()]",  # two lists
        "[get_time() ]",
        "<|python_start|>[get_time()]",  # no closer
        "[get_time()]<|python_end|>",
        "<|python_start|> [get_time()]<|python_end|>",
        "[get_weather(city='a\nb')]",  # a raw line break in a string
        "[get_weather(city='Paris\")]",
        "[get_weather(city='Paris)]",
        "[get_weather(city='\\q')]",  # not an escape repr writes
        "[get_weather(city='\\x41')]",  # a printable ASCII character escaped
        "[get_weather(city='\\ud800')]",  # a lone surrogate
        "[get_weather(city='Paris')",
    ],
)
def test_rejected(text: str) -> None:
    assert not accepts(grammar(WEATHER), text)


def test_parallel_tool_calls_false_allows_one_call() -> None:
    g = grammar(WEATHER, parallel_tool_calls=False)
    assert accepts(g, "[get_time()]")
    assert not accepts(g, "[get_time(), get_time()]")


def test_a_named_tool_is_the_only_one() -> None:
    g = grammar(WEATHER, tool_choice="get_time")
    assert accepts(g, "[get_time()]") and not accepts(g, "[get_weather(city='x')]")
    assert not accepts(g, "Hello.")


TYPES = [
    tool(
        "f",
        {
            "i": {"type": "integer", "minimum": 0, "maximum": 100},
            "n": {"type": "number", "exclusiveMinimum": 0},
            "b": {"type": "boolean"},
            "z": {"type": "null"},
            "s": {"type": "string", "pattern": "^[a-z' ]{1,6}$"},
            "m": {"type": "string", "maxLength": 3},
            "l": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
            "o": {"type": "object", "properties": {"k": {"type": "string"}, "q": {"const": [1, "x", None]}}},
            "d": {"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
            "a": {},
        },
    )
]


@pytest.mark.parametrize(
    ("argument", "ok"),
    [
        ("i=0", True),
        ("i=100", True),
        ("i=101", False),
        ("i=-1", False),
        ("i=1.0", False),
        ("n=0.5", True),
        ("n=1e-05", True),
        ("n=0", False),
        ("n=-1", False),
        ("b=True", True),
        ("b=False", True),
        ("b=true", False),
        ("z=None", True),
        ("z=null", False),
        ("s='abc'", True),
        ('s="it\'s"', True),
        ("s='it\\'s'", True),
        ("s='abcdefg'", False),
        ("s='ABC'", False),
        ("s=''", False),
        ("m='\\n\\t\\\\'", True),
        ("m='abcd'", False),
        ("m='\\x00é😀'", True),
        ("l=[1, 2]", True),
        ("l=[1]", True),
        ("l=[]", False),
        ("l=[1, 2, 3]", False),
        ("l=[1,2]", False),
        ("o={'k': 'v', 'q': [1, 'x', None]}", True),
        ("o={}", True),
        ("o={'q': [1, 'x', None], 'k': 'v'}", False),
        ('o={"k": "v"}', False),  # a declared key is written as repr writes it
        ("o={'q': [1, 'x']}", False),
        ("d={'any key': 1, 'x': None}", True),
        ("d={'a': 'b'}", False),
        ("a=[{'x': [1.5, True, None, \"q\"]}]", True),
        ("a=None", True),
        ("a=nan", False),
        ("a=(1, 2)", False),
    ],
)
def test_values_by_schema(argument: str, ok: bool) -> None:
    text = f"[f({argument})]"
    assert accepts(grammar(TYPES), text) is ok
    if ok:
        turn = parse_turn(text, load_tools(TYPES), format="llama4-pythonic")
        assert turn.errors == () and len(turn.tool_calls) == 1


def test_enum_values_are_written_as_repr_writes_them() -> None:
    tools = [tool("f", {"v": {"enum": ["a'b", 'q"', 1.5, True, None, {"k": [1]}]}})]
    g = grammar(tools)
    for value in ["a'b", 'q"', 1.5, True, None, {"k": [1]}]:
        assert accepts(g, f"[f(v={value!r})]"), value
    assert not accepts(g, "[f(v='a\\'b')]")  # an enum value is its repr only
    assert not accepts(g, "[f(v=true)]")


def test_what_cannot_be_written_is_refused_with_tool_pointer_and_keyword() -> None:
    tools = [tool("t", {"p": {"type": "object", "properties": {"e": {"enum": ["ok", "x<|python_end|>"]}}}})]
    with pytest.raises(GrammarError, match=r"tool 't', at /properties/p/properties/e, keyword 'enum': .*marker"):
        compile_turn(tools, format="llama4-pythonic", cache=False, escape_markers=True).dfa  # noqa: B018
    with pytest.raises(ToolSchemaError, match="Python identifier"):
        compile_turn([tool("t", {"not-an-identifier": {}})], format="llama4-pythonic", cache=False)


# --------------------------------------------------------------------------- render_call and repr

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
ANY_TOOL = [tool("f", {"v": {}, "s": {"type": "string"}})]


def _reads_back(text: str, tools: list[dict[str, Any]], arguments: dict[str, Any]) -> None:
    got = calls_of(text, tools)
    assert json.dumps(got, sort_keys=True) == json.dumps([("f", arguments)], sort_keys=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_every_string_as_repr_writes_it_is_accepted_and_reads_back(value: str) -> None:
    text = FMT.render_call("f", {"s": value})
    assert text == f"[f(s={value!r})]"
    assert accepts(grammar(ANY_TOOL), text), text
    _reads_back(text, ANY_TOOL, {"s": value})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from("ab'\"\\\n\t\r\x00\x7f\x85\xa0é\u2028\U0001f600"), max_size=12))
def test_strings_with_quotes_backslashes_and_controls(value: str) -> None:
    text = FMT.render_call("f", {"s": value})
    assert accepts(grammar(ANY_TOOL), text), text
    _reads_back(text, ANY_TOOL, {"s": value})
    other = "'" if text[5] == '"' else '"'  # the same text in the other quotes, escaped for them
    swapped = other + repr(value)[1:-1].replace(other, "\\" + other) + other
    if "\\" + text[5] not in swapped:  # no escaped own quote left over
        assert accepts(grammar(ANY_TOOL), f"[f(s={swapped})]")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_any_json_value_as_repr_writes_it_is_accepted(value: Any) -> None:
    text = FMT.render_call("f", {"v": value})
    assert render_value(value) == repr(value)
    depth = _depth(value)
    if depth > 3 or _has_unsupported_float(value):
        return
    assert accepts(grammar(ANY_TOOL), text), text
    _reads_back(text, ANY_TOOL, {"v": value})


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _has_unsupported_float(value: Any) -> bool:
    """Floats at or above 1e300 (JSON number syntax caps the exponent: json_grammar.finite_number)."""
    if isinstance(value, float):
        return abs(value) >= 1e300
    if isinstance(value, list):
        return any(map(_has_unsupported_float, value))
    if isinstance(value, dict):
        return any(map(_has_unsupported_float, value.values()))
    return False


def test_canonical_calls_are_accepted() -> None:
    calls = [SimpleNamespace(name="get_weather", arguments={"city": "Paris", "unit": "c"})] * 2
    text = FMT.canonical_calls([*calls, SimpleNamespace(name="get_time", arguments={})])
    assert text == "[get_weather(city='Paris', unit='c'), get_weather(city='Paris', unit='c'), get_time()]"
    assert accepts(grammar(WEATHER), text)


# --------------------------------------------------------------------------- soundness walks

MIXED = [
    *WEATHER,
    tool(
        "record",
        {
            "score": {"type": "number", "minimum": 0},
            "flag": {"type": "boolean"},
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "obj": {"type": "object", "properties": {"B": {"type": "null"}, "a": {"enum": ["x'", 3]}}},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
            "short": {"type": "string", "maxLength": 4},
            "either": {"type": ["string", "null"]},
            "any": {},
        },
        ("n", "flag"),
    ),
]
WALK_CASES = [
    ({}, "auto"),
    ({"tool_choice": "required"}, "required"),
    ({"tool_choice": "record", "parallel_tool_calls": False}, "named"),
    ({"after_calls": "text", "escape_markers": True}, "text-after"),
    ({"tool_choice": "required", "whitespace": "flexible"}, "flexible"),
]


@pytest.mark.parametrize(("options", "label"), WALK_CASES, ids=[c[1] for c in WALK_CASES])
def test_random_walks_are_sound(options: dict[str, Any], label: str) -> None:
    """Every walk parses with zero errors and every call satisfies its schema (DESIGN.md invariant 1)."""
    tg = token_grammar(json.dumps(MIXED), **options)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in MIXED}
    steer = [ord("["), 256 + MARKERS.index(M.block_open), ord("'"), ord('"'), ord(")"), ord("]"), ord("\\")]
    names = [ord("g"), ord("r")]  # after "[", a name's first letter (else content goes on)

    def prefer(tokens: list[int]) -> list[int]:
        return names if tokens and tokens[-1] == ord("[") else steer

    rng = np.random.default_rng(4242)
    n_walks, n_calls = 80, 0
    for i in range(n_walks):
        budget = max(int(rng.integers(24, 200)), int(tg.dist[tg.start]))
        walk = random_walk(tg, rng, max_tokens=budget, prefer=prefer, prefer_probability=0.25)
        assert not walk.in_block_at_end, f"walk {i} ended inside a block"
        ids = [t for t in walk.tokens if t not in VOCAB.eos_ids]
        text = VOCAB.decode(ids).decode("utf-8", errors="replace")
        turn = parse_turn(text, load_tools(MIXED), format="llama4-pythonic")
        assert turn.errors == (), f"walk {i}: {text!r} -> {[e.message for e in turn.errors]}"
        for call in turn.tool_calls:
            jsonschema.validate(call.arguments, schemas[call.name])
        if label in ("required", "named", "flexible"):
            assert turn.tool_calls, f"walk {i}: a call is required: {text!r}"
        if label == "named":
            assert {c.name for c in turn.tool_calls} == {"record"} and len(turn.tool_calls) == 1
        n_calls += len(turn.tool_calls)
    assert n_calls >= n_walks // 4, f"only {n_calls} calls in {n_walks} walks"


def test_byte_walks_of_the_automaton_are_sound() -> None:
    """Walks over the byte automaton itself (each allowed byte equally likely, mostly ASCII): the same invariant."""
    dfa = grammar(MIXED, tool_choice="required").dfa
    t = dfa.transitions
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in MIXED}
    rng = np.random.default_rng(7)
    prefix = "[record(score=1.5, flag=True, n=-3, tags=['a'], obj={'B': None}, map={'k': 1}, code='AB-1', "
    checked = 0
    for k in range(200):
        start = prefix[: int(rng.integers(len(prefix) + 1))] if k % 2 else ""
        data = bytearray(start.encode())
        state = dfa.step(dfa.start, bytes(data))
        for step in range(300):
            end = int(t[state, EOS])
            if end >= 0 and dfa.accepting[end] and (rng.random() < 0.05 or step > 250):
                break
            options = np.flatnonzero(t[state, :256] >= 0)
            if not len(options):
                break
            ascii_options = options[options < 0x80]
            pool = ascii_options if len(ascii_options) and rng.random() < 0.9 else options
            b = int(pool[int(rng.integers(len(pool)))])
            data.append(b)
            state = int(t[state, b])
        end = int(t[state, EOS])
        if not (end >= 0 and dfa.accepting[end]):
            continue
        text = data.decode("utf-8")
        turn = parse_turn(text, load_tools(MIXED), format="llama4-pythonic")
        assert turn.errors == (), f"{text!r} -> {[e.message for e in turn.errors]}"
        for call in turn.tool_calls:
            jsonschema.validate(call.arguments, schemas[call.name])
        checked += 1
    assert checked >= 50
