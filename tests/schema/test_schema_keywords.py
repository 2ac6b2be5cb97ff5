"""String, number, format, allOf/oneOf keywords and the lenient mode (issue 13, item 2: schema coverage).

Each keyword is checked three ways:

- soundness: random walks through the compiled automaton of a value (seeded numpy walks, and
  hypothesis-driven walks with ``derandomize=True``) end in texts that, decoded, validate with
  ``jsonschema`` (formats with the parser's checker and with ``jsonschema.FormatChecker()``) and with
  an independent reference (Python's ``re``, ``datetime``, ``ipaddress``, ``uuid``);
- completeness: hand-picked valid values, rendered as calls by both formats, are accepted by the turn
  grammar and parsed as valid calls;
- rejection: hand-picked invalid values are refused by the grammar and reported by the parser.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import math
import re
import uuid
import warnings
from decimal import Decimal
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.automata.regex import to_regex
from toolgrammar.automata.size import estimate_size
from toolgrammar.errors import SchemaTooLargeError, ToolSchemaError, ToolSchemaWarning
from toolgrammar.schema import FORMAT_CHECKER, FORMATS, Bounds, load_tools, string_language
from toolgrammar.schema.format_checker import is_date_time, is_time, is_uri
from toolgrammar.schema.patterns import parse_pattern
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn
from toolgrammar.values.json_grammar import SchemaContext, Whitespace, integer_value, number_value, string_value
from toolgrammar.values.numbers import integer_node
from toolgrammar.values.strings import constrained_text

CTX = SchemaContext(ws=Whitespace.canonical(), tool="t")


def load_one(parameters: Any, **kwargs: Any) -> dict[str, Any]:
    return load_tools([{"name": "t", "parameters": parameters}], **kwargs)["t"].parameters


def prop(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool whose one required argument ``v`` has ``schema``."""
    return {"type": "object", "properties": {"v": schema}, "required": ["v"]}


def refused(schema: dict[str, Any], match: str, *, keyword: str, pointer: str = "/properties/v") -> ToolSchemaError:
    with pytest.raises(ToolSchemaError, match=match) as info:
        load_one(prop(schema))
    error = info.value
    assert (error.tool, error.keyword) == ("t", keyword)
    assert error.pointer.startswith(pointer), error.pointer
    return error


# --------------------------------------------------------------------------------------------------
# Walking an automaton


def _distances(dfa: DFA) -> np.ndarray:
    """Fewest bytes from each state to acceptance."""
    n = dfa.n_states
    dist = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    dist[dfa.accepting] = 0
    changed = True
    table = dfa.transitions[:, :256]
    while changed:
        changed = False
        nxt = np.where(table >= 0, dist[np.maximum(table, 0)], np.iinfo(np.int64).max)
        best = nxt.min(axis=1)
        better = (best < np.iinfo(np.int64).max) & (best + 1 < dist)
        if better.any():
            dist[better] = best[better] + 1
            changed = True
    return dist


def walk(dfa: DFA, choose: Any, *, max_len: int = 60, stop: float = 0.15) -> bytes:
    """A random accepted byte string: ``choose(k)`` picks one of ``k`` options (numpy or hypothesis).

    After ``max_len`` bytes every step moves closer to acceptance, so every walk ends."""
    dist = getattr(dfa, "_test_dist", None)
    if dist is None:
        dist = _distances(dfa)
        object.__setattr__(dfa, "_test_dist", dist)
    state, out = dfa.start, bytearray()
    while True:
        row = dfa.transitions[state, :256]
        options = np.flatnonzero(row >= 0)
        if dfa.accepting[state] and (not len(options) or len(out) >= max_len or choose(1000) < stop * 1000):
            return bytes(out)
        if len(out) >= max_len:
            options = options[dist[row[options]] < dist[state]]
        b = int(options[choose(len(options))])
        out.append(b)
        state = int(row[b])


def numpy_chooser(seed: int) -> Any:
    rng = np.random.default_rng(seed)
    return lambda k: int(rng.integers(k))


def value_dfa(schema: dict[str, Any], kind: str) -> DFA:
    """The automaton of one value in JSON (hermes, and qwen-xml objects) or raw text (qwen-xml strings)."""
    if kind == "raw":
        rx = string_language(schema)
        assert rx is not None
        return compile_dfa(constrained_text(rx, "raw"))
    t = schema["type"]
    build = {"string": string_value, "integer": integer_value, "number": number_value}[t]
    return compile_dfa(build(schema, CTX, ""))


def decode(text: bytes, kind: str) -> Any:
    return text.decode("utf-8") if kind == "raw" else json.loads(text)


_FORMAT_REFERENCE = {
    "date": lambda s: datetime.date.fromisoformat(s) is not None and re.fullmatch(r"\d{4}-\d\d-\d\d", s),
    "time": lambda s: datetime.time.fromisoformat(s) is not None and is_time(s),
    "date-time": lambda s: datetime.datetime.fromisoformat(s) is not None and is_date_time(s),
    "uuid": lambda s: uuid.UUID(s) is not None and len(s) == 36,
    "ipv4": lambda s: ipaddress.IPv4Address(s) is not None,
    "ipv6": lambda s: ipaddress.IPv6Address(s) is not None,
    "email": lambda s: re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", s),
    "uri": lambda s: is_uri(s) and re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", s),
}
# jsonschema.FormatChecker() holds every draft's checks; its "time" is draft 3's (HH:MM:SS, no offset),
# which contradicts RFC 3339's full-time that Draft 2020-12 means, so "time" is checked by the rest.
_GENERIC_CHECKER = jsonschema.FormatChecker()


def check_value(value: Any, schema: dict[str, Any]) -> None:
    """``value`` satisfies ``schema``: jsonschema with the parser's format checker, the generic one, and references."""
    jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator, format_checker=FORMAT_CHECKER)
    generic = dict(schema)
    if generic.get("format") == "time":
        generic.pop("format")
    jsonschema.validate(value, generic, cls=jsonschema.Draft202012Validator, format_checker=_GENERIC_CHECKER)
    if isinstance(value, str):
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), (schema["pattern"], value)
        if "format" in schema:
            assert _FORMAT_REFERENCE[schema["format"]](value), (schema["format"], value)
        assert schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf)


STRING_SCHEMAS = [
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"type": "string", "maxLength": 3},
    {"type": "string", "minLength": 3},
    {"type": "string", "pattern": "^[a-z0-9_-]+$", "maxLength": 12},
    {"type": "string", "pattern": "^[A-Z]{2}\\d{3}$"},
    {"type": "string", "pattern": "abc"},
    {"type": "string", "pattern": "^https?://[^\\s/]+(/\\S*)?$"},
    {"type": "string", "pattern": "^(?:red|green|blue)(?:-[0-9]{1,2})?$"},
    {"type": "string", "pattern": '^[^"\\\\]*\\\\?$'},
    {"type": "string", "pattern": "^\\s*\\S+\\s*$"},
    {"type": "string", "pattern": "^[\\w.]+@\\w+\\.\\w{2,}$"},
    {"type": "string", "pattern": "^[à-ÿ\u4e00-\u9fff😀-🙏]{1,4}$"},
    {"type": "string", "pattern": "^.{0,3}$"},
    {"type": "string", "pattern": "x$|^y", "minLength": 0},
    {"type": "string", "pattern": "^\\d+(\\.\\d+)?$", "maxLength": 6},
    {"type": "string", "pattern": '^[\\x00-\\x1f"\\\\/]+$', "maxLength": 4},
    *({"type": "string", "format": name} for name in FORMATS),
    {"type": "string", "format": "ipv4", "maxLength": 20},
    {"type": "string", "format": "uuid", "minLength": 36},
]


@pytest.mark.parametrize("kind", ["json", "raw"])
@pytest.mark.parametrize("schema", STRING_SCHEMAS, ids=lambda s: json.dumps(s, ensure_ascii=False))
def test_every_generated_string_validates(schema: dict[str, Any], kind: str) -> None:
    dfa = value_dfa(schema, kind)
    seen = set()
    for seed in range(150):
        text = walk(dfa, numpy_chooser(seed))
        value = decode(text, kind)
        check_value(value, schema)
        seen.add(value)
    assert len(seen) > 5 or "format" not in schema  # the walks explore the language, not one string


_NUMBER_SCHEMAS = [
    {"type": "integer", "minimum": 1, "maximum": 10},
    {"type": "integer", "minimum": -5, "exclusiveMaximum": 0},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "integer", "minimum": 17, "maximum": 12345},
    {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
    {"type": "integer", "minimum": 1.5, "maximum": 99.5},
    {"type": "integer", "maximum": -100},
    {"type": "integer", "minimum": 10**30, "maximum": 10**40},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "number", "minimum": 0},
    {"type": "number", "maximum": 0},
    {"type": "number", "exclusiveMaximum": 0},
    {"type": "number", "minimum": -90, "maximum": 90},
    {"type": "number", "minimum": 0.1, "exclusiveMaximum": 0.3},
    {"type": "number", "exclusiveMinimum": -1.5, "exclusiveMaximum": 2.25},
    {"type": "number", "minimum": 1e-10, "maximum": 1e-9},
    {"type": "number", "minimum": 123456.789},
    {"type": "number", "maximum": 1e300},
    {"type": "number", "minimum": 5, "maximum": 5},
]


def _check_number(value: Any, schema: dict[str, Any]) -> None:
    assert isinstance(value, int | float) and not isinstance(value, bool)
    assert math.isfinite(value)
    check_value(value, schema)
    if schema["type"] == "integer":
        assert isinstance(value, int)


@pytest.mark.parametrize("schema", _NUMBER_SCHEMAS, ids=lambda s: json.dumps(s))
def test_every_generated_number_is_inside_its_bounds(schema: dict[str, Any]) -> None:
    dfa = value_dfa(schema, "json")
    for seed in range(200):
        _check_number(json.loads(walk(dfa, numpy_chooser(seed), max_len=40)), schema)


_HYPOTHESIS_SCHEMAS = [s for s in STRING_SCHEMAS if "format" not in s][:8] + _NUMBER_SCHEMAS[::3]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(index=st.integers(0, len(_HYPOTHESIS_SCHEMAS) - 1), data=st.data())
def test_hypothesis_walks_are_sound(index: int, data: st.DataObject) -> None:
    schema = _HYPOTHESIS_SCHEMAS[index]
    dfa = _cached_dfa(index)
    text = walk(dfa, lambda k: data.draw(st.integers(0, k - 1)), max_len=30)
    value = json.loads(text)
    if schema["type"] == "string":
        check_value(value, schema)
    else:
        _check_number(value, schema)


_DFA_CACHE: dict[int, DFA] = {}


def _cached_dfa(index: int) -> DFA:
    if index not in _DFA_CACHE:
        _DFA_CACHE[index] = value_dfa(_HYPOTHESIS_SCHEMAS[index], "json")
    return _DFA_CACHE[index]


# --------------------------------------------------------------------------------------------------
# Exact languages: membership against the definition


def _dfa_accepts(dfa: DFA, text: str) -> bool:
    state = dfa.step(dfa.start, text.encode("utf-8"))
    return state >= 0 and bool(dfa.accepting[state])


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    lo=st.one_of(st.none(), st.integers(-400, 400)),
    hi=st.one_of(st.none(), st.integers(-400, 400)),
    exclusive=st.booleans(),
)
def test_integer_ranges_are_exact(lo: int | None, hi: int | None, exclusive: bool) -> None:
    schema: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        schema["exclusiveMinimum" if exclusive else "minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    bounds = Bounds(schema)
    ilo, ihi = bounds.integer_range()
    if ilo is not None and ihi is not None and ilo > ihi:
        with pytest.raises(ToolSchemaError, match="exclude every integer"):
            load_one(prop(schema))
        return
    dfa = compile_dfa(integer_node(ilo, ihi))
    validator = jsonschema.Draft202012Validator(schema)
    for v in range(-1200, 1201):
        assert _dfa_accepts(dfa, str(v)) == validator.is_valid(v), (schema, v)
    assert not _dfa_accepts(dfa, "01") and not _dfa_accepts(dfa, "+1") and not _dfa_accepts(dfa, "1.0")


@pytest.mark.parametrize(
    ("lo", "hi", "inside", "outside"),
    [
        (
            -(2**63),
            2**63 - 1,
            [str(-(2**63)), str(2**63 - 1), "0", "-0", "4611686018427387904"],
            [str(2**63), str(-(2**63) - 1)],
        ),
        (
            10**20 + 7,
            10**21 + 3,
            [str(10**20 + 7), str(10**21 + 3), str(5 * 10**20)],
            [str(10**20 + 6), str(10**21 + 4)],
        ),
        # Bounds past 24 digits move inward to a power of ten: sound, and only such huge integers are lost.
        (None, -(10**50), ["-1" + "0" * 51, "-1" + "0" * 60], ["-" + "9" * 50, "0", "-" + "9" * 51]),
        (10**50 + 1, None, ["1" + "0" * 51, "1" + "0" * 50 + "1"], ["1" + "0" * 50, "9" * 50, "1" + "0" * 49 + "1"]),
    ],
)
def test_large_integer_bounds_stay_small_and_sound(lo: Any, hi: Any, inside: list[str], outside: list[str]) -> None:
    node = integer_node(lo, hi)
    assert estimate_size(node) < 1500
    dfa = compile_dfa(node)
    for text in inside:
        assert _dfa_accepts(dfa, text), text
    for text in outside:
        assert not _dfa_accepts(dfa, text), text


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    lo=st.one_of(st.none(), st.decimals(-1000, 1000, places=3).map(float)),
    width=st.decimals(0, 500, places=2).map(float),
    lo_open=st.booleans(),
    hi_open=st.booleans(),
    probes=st.lists(st.decimals(-1200, 1200, places=4), min_size=20, max_size=40),
)
def test_number_bounds_are_sound_and_exact_on_short_decimals(
    lo: float | None, width: float, lo_open: bool, hi_open: bool, probes: list[Decimal]
) -> None:
    schema: dict[str, Any] = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_open else "minimum"] = lo
        schema["exclusiveMaximum" if hi_open else "maximum"] = lo + width
    else:
        schema["exclusiveMaximum" if hi_open else "maximum"] = width
    if not Bounds(schema).has_number():
        return
    dfa = value_dfa(schema, "json")
    validator = jsonschema.Draft202012Validator(schema)
    for probe in probes:
        for text in (str(probe), f"{probe:f}", str(int(probe)), f"{float(probe)!r}"):
            if not re.fullmatch(r"-?(0|[1-9]\d*)(\.\d+)?", text):
                continue  # a spelling the bounded grammar does not use (exponents)
            valid = validator.is_valid(json.loads(text))
            # Sound: accepted -> valid. Complete on these short decimals: valid -> accepted.
            assert _dfa_accepts(dfa, text) == valid, (schema, text)


def test_number_bounds_at_the_exact_boundary() -> None:
    cases = [
        ({"minimum": 0.1}, ["0.1", "0.10", "0.1000001", "1", "2.5"], ["0.09999", "0", "-1"]),
        # 0.10000000000000001 reads as the double 0.1, which is not above 0.1: refused; the next double is not.
        ({"exclusiveMinimum": 0.1}, ["0.10000000000000002", "0.2"], ["0.1", "0.100", "0", "0.10000000000000001"]),
        ({"exclusiveMinimum": 0}, ["1e-299", "0.000001", "5", "1E+20"], ["0", "0.0", "-0.0", "-1e-5", "0e5", "1e-400"]),
        ({"minimum": 0}, ["0", "-0", "0.0", "1e-400", "3.5E+2"], ["-0.5", "-1e-5"]),
        ({"maximum": 0}, ["0", "-1e-5", "-2.5", "-0.0"], ["0.1", "1e-5"]),
        ({"minimum": -1, "maximum": 1}, ["-1", "-1.0", "1.000", "0.5", "-0.999"], ["1.0001", "-1.5", "2", "1e0"]),
    ]
    for bounds, good, bad in cases:
        schema = {"type": "number", **bounds}
        dfa = value_dfa(schema, "json")
        for text in good:
            assert _dfa_accepts(dfa, text), (bounds, text)
            _check_number(json.loads(text), schema)
        for text in bad:
            assert not _dfa_accepts(dfa, text), (bounds, text)


# --------------------------------------------------------------------------------------------------
# Lengths count decoded characters, as jsonschema (Python) does


def test_lengths_count_decoded_characters() -> None:
    dfa = value_dfa({"type": "string", "minLength": 2, "maxLength": 2}, "json")
    two = ['"ab"', '"\\n\\t"', '"\\u00e9x"', '"é🌸"', '"\\ud83c\\udf38x"', '"\\"\\\\"', '"a\\/"']
    for text in two:
        assert _dfa_accepts(dfa, text), text
        assert len(json.loads(text)) == 2
    # a surrogate pair is one character (Python counts code points); a lone surrogate is no text
    for text in ['"\\ud83c\\udf38"', '"abc"', '"a"', '"\\ud83cx"', '""']:
        assert not _dfa_accepts(dfa, text), text


def test_a_long_max_length_compiles_and_a_huge_one_is_refused_naming_max_length() -> None:
    tools = [{"name": "t", "parameters": prop({"type": "string", "maxLength": 100})}]
    grammar = compile_turn(tools, cache=False, tool_choice="required", reasoning="disabled")
    fmt = grammar.format
    assert accepts(grammar, fmt.render_call("t", {"v": "x" * 100}))
    assert not accepts(grammar, fmt.render_call("t", {"v": "x" * 101}))
    with pytest.raises(SchemaTooLargeError, match="lower maxLength \\(now 5000") as info:
        compile_turn([{"name": "t", "parameters": prop({"type": "string", "maxLength": 5000})}], cache=False)
    assert (info.value.keyword, info.value.pointer) == ("maxLength", "/properties/v")


# --------------------------------------------------------------------------------------------------
# Completeness and rejection through whole turns, both formats, and the strict parser agreeing


_CASES: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    ({"type": "string", "pattern": "^[a-z]+$"}, ["abc", "z"], ["", "abC", "a b", "abc\n"]),
    ({"type": "string", "pattern": "abc"}, ["abc", "xxabcyy", "a\nabc\n"], ["ab", "ABC", "a bc"]),
    ({"type": "string", "pattern": "^https?://"}, ["http://x", "https://a.b/c?d"], ["ftp://x", " http://x"]),
    ({"type": "string", "pattern": "^\\d{3}-\\d{4}$"}, ["555-1234"], ["5551234", "555-12345", "٥٥٥-1234"]),
    ({"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "日本語", 'a"\\b'], ["a", "abcde", ""]),
    (
        {"type": "string", "format": "date"},
        ["2024-02-29", "1999-12-31", "0001-01-01"],
        ["2023-02-29", "2024-13-01", "2024-1-01", "0000-01-01"],
    ),
    (
        {"type": "string", "format": "time"},
        ["12:30:00Z", "23:59:59.123+05:30", "00:00:00-00:00"],
        ["24:00:00Z", "12:30:00", "12:60:00Z"],
    ),
    (
        {"type": "string", "format": "date-time"},
        ["2024-06-01T12:00:00Z", "2000-02-29T23:59:59.5-08:00"],
        ["2024-06-01 12:00:00Z", "2024-06-01T12:00:00"],
    ),
    (
        {"type": "string", "format": "uuid"},
        ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"],
        ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"],
    ),
    (
        {"type": "string", "format": "ipv4"},
        ["192.168.0.1", "0.0.0.0", "255.255.255.255"],
        ["256.1.1.1", "01.2.3.4", "1.2.3"],
    ),
    (
        {"type": "string", "format": "ipv6"},
        ["::1", "::", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1", "1::"],
        ["1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "::1%eth0"],
    ),
    (
        {"type": "string", "format": "email"},
        ["a.b+c@example.com", "x@sub.example.org"],
        ["a@b", "a..b@example.com", "no-at.example.com", ".a@example.com"],
    ),
    (
        {"type": "string", "format": "uri"},
        ["https://example.com/a?b=c#d", "mailto:a@b.c", "urn:isbn:0451450523", "http://[::1]:8080/", "file:///tmp/x"],
        ["example.com", "http://exa mple.com", "://x", "http://x/%zz"],
    ),
    ({"type": "integer", "minimum": 1, "maximum": 100}, [1, 50, 100], [0, 101, -1]),
    ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, [0.5, 1, 1.0, 0.001], [0, 1.5, -0.5]),
    ({"type": ["string", "null"], "maxLength": 3}, ["abc", None], ["abcd"]),
]


def _ids(case: tuple[Any, ...]) -> str:
    return json.dumps(case[0])


@pytest.mark.parametrize("fmt", ["hermes", "qwen-xml"])
@pytest.mark.parametrize(("schema", "good", "bad"), _CASES, ids=[_ids(c) for c in _CASES])
def test_valid_values_are_accepted_and_invalid_ones_refused(
    schema: dict[str, Any], good: list[Any], bad: list[Any], fmt: str
) -> None:
    tools = [{"name": "t", "parameters": prop(schema)}]
    grammar = compile_turn(tools, cache=False, format=fmt, tool_choice="required", reasoning="disabled")
    toolset = grammar.tools
    for value in good:
        text = grammar.format.render_call("t", {"v": value})
        assert accepts(grammar, text), (fmt, value)
        parsed = parse_turn(text, toolset, format=fmt)
        assert [c.arguments for c in parsed.tool_calls] == [{"v": value}], (fmt, value, parsed.errors)
    validator = jsonschema.Draft202012Validator(prop(schema), format_checker=FORMAT_CHECKER)
    for value in bad:
        text = grammar.format.render_call("t", {"v": value})
        assert not accepts(grammar, text), (fmt, value)
        # The judge refuses what JSON Schema refuses. The grammar is stricter in a few documented places
        # ("abc\n" matches Python's ^[a-z]+$, Arabic-Indic digits its \d, and "a@b" jsonschema's email).
        if not validator.is_valid({"v": value}):
            assert not parse_turn(text, toolset, format=fmt).tool_calls, (fmt, value)


def test_the_parser_checks_formats() -> None:
    toolset = load_tools([{"name": "t", "parameters": prop({"type": "string", "format": "date"})}])
    text = '<tool_call>\n{"name": "t", "arguments": {"v": "2023-02-29"}}\n</tool_call>'
    parsed = parse_turn(text, toolset)
    assert not parsed.tool_calls
    assert parsed.errors[0].kind == "schema-violation" and "is not a 'date'" in parsed.errors[0].message


@pytest.mark.parametrize(
    "options", [{}, {"escape_markers": True}, {"format": "qwen-xml"}, {"format": "qwen-xml", "escape_markers": True}]
)
def test_exported_regex_agrees_with_the_automaton(options: dict[str, Any]) -> None:
    tools = [
        {"name": "t", "parameters": {"type": "object", "properties": {
            "p": {"type": "string", "pattern": "x"},
            "q": {"type": "string", "pattern": "^[<>/a-z]{0,16}$"},
            "d": {"type": "string", "format": "date"},
            "n": {"type": "number", "minimum": -1, "maximum": 1},
        }, "required": ["p"]}},
    ]  # fmt: skip
    grammar = compile_turn(tools, cache=False, tool_choice="required", reasoning="disabled", **options)
    pattern = re.compile(grammar.to_regex(), re.DOTALL)
    fmt = grammar.format
    values = [
        {"p": "x"},
        {"p": "ax</tool_call>b"},
        {"p": "x\n</parameter>\n"},
        {"p": "x</parameter><parameter=q>"},
        {"p": "x", "q": "a</b>"},
        {"p": "x", "q": "</tool_call>"},
        {"p": "x", "q": "</parameter><parameter=p>"},
        {"p": "y"},
        {"p": "x", "d": "2024-02-29", "n": 0.5},
        {"p": "x", "d": "2023-02-29"},
        {"p": "x", "n": 1.5},
    ]
    for args in values:
        text = fmt.render_call("t", args)
        assert accepts(grammar, text) == (pattern.fullmatch(text) is not None), (options, args)
    assert any(accepts(grammar, fmt.render_call("t", a)) for a in values)


# --------------------------------------------------------------------------------------------------
# Patterns: what is refused, with the pattern and the pointer


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("(a)\\1", "backreferences"),
        ("(?=a)b", "lookahead is not supported"),
        ("(?<!a)b", "negative lookbehind is not supported"),
        ("(?<n>a)", "named group"),
        ("a^b", "'\\^' is supported only at the start"),
        ("a$b", "'\\$' is supported only at the end"),
        ("(^a)", "'\\^' is supported only at the start"),
        ("\\bword\\b", "word boundaries"),
        ("a{,3}", "'\\{' that does not start a quantifier"),
        ("a**", "a quantifier directly after a quantifier"),
        ("[^\\d]", "\\\\d or \\\\w inside a negated class"),
        ("\\p{L}", "the escape \\\\p is not supported"),
        ("[]a]", "starts with '\\]'"),
        ("[[a]", "'\\[' inside a class"),
        ("\\ud83d", "surrogate escape"),
        ("(a", "missing '\\)'"),
        ("a)", "unbalanced"),
        ("[z-a]", "out of order"),
    ],
)
def test_unsupported_patterns_are_refused_naming_pattern_and_pointer(pattern: str, match: str) -> None:
    error = refused({"type": "string", "pattern": pattern}, match, keyword="pattern", pointer="/properties/v/pattern")
    assert repr(pattern) in str(error)


def test_patterns_mean_what_both_engines_mean() -> None:
    # \d is ASCII only (Python's is Unicode-wide, ECMA-262's ASCII): the grammar takes the intersection.
    digits = compile_dfa(constrained_text(parse_pattern("^\\d+$"), "raw"))
    assert _dfa_accepts(digits, "123") and not _dfa_accepts(digits, "١٢٣")
    # \S excludes what either engine calls whitespace (Python's \x1c, ECMA's U+FEFF).
    nonspace = compile_dfa(constrained_text(parse_pattern("^\\S$"), "raw"))
    for ch in "\x1c\ufeff \u3000":
        assert not _dfa_accepts(nonspace, ch)
    assert _dfa_accepts(nonspace, "é")
    # "." is ECMA's: no line terminators (Python's takes \r and U+2028).
    dot = compile_dfa(constrained_text(parse_pattern("^.$"), "raw"))
    assert not any(_dfa_accepts(dot, c) for c in "\n\r\u2028\u2029") and _dfa_accepts(dot, "\t")


def test_pattern_and_length_combine_when_exact_and_are_refused_otherwise() -> None:
    assert load_one(prop({"type": "string", "pattern": "^[a-z]+$", "maxLength": 8}))
    assert load_one(prop({"type": "string", "pattern": "^https?://", "maxLength": 40}))
    # Two unbounded parts under a small maxLength: split by the length of the first one, exactly.
    dfa = value_dfa({"type": "string", "pattern": "^[a-z]+-[a-z]+$", "maxLength": 5}, "raw")
    words = ["a-b", "ab-cd", "abc-d", "a-bcd"]
    assert all(_dfa_accepts(dfa, w) for w in words)
    assert not any(_dfa_accepts(dfa, w) for w in ["abc-de", "a-", "-b", "ab"])
    refused(
        {"type": "string", "pattern": "^[a-z]+-[a-z]+$", "maxLength": 64},
        "together with minLength/maxLength: the grammar combines a length bound only with a pattern",
        keyword="maxLength",
    )
    refused({"type": "string", "pattern": "^[a-z]{10}$", "maxLength": 8}, "no string", keyword="maxLength")
    refused({"type": "string", "pattern": "^a$", "format": "date"}, "together with a pattern", keyword="format")


@pytest.mark.parametrize(
    ("schema", "match", "keyword"),
    [
        (
            {"type": "string", "format": "hostname"},
            "format 'hostname' is not enforced.*supported formats: date",
            "format",
        ),
        ({"type": "integer", "minLength": 1}, "minLength applies to strings", "minLength"),
        ({"type": "string", "minimum": 1}, "minimum applies to numbers", "minimum"),
        ({"type": "string", "minLength": -1}, "must be a non-negative integer", "minLength"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "no string satisfies both", "minLength"),
        ({"type": "number", "minimum": "1"}, "must be a number", "minimum"),
        ({"type": "number", "exclusiveMinimum": True}, "draft 4's boolean form", "exclusiveMinimum"),
        ({"type": "number", "minimum": 2, "maximum": 1}, "exclude every number", "minimum"),
        ({"type": "integer", "minimum": 1.2, "maximum": 1.8}, "exclude every integer", "minimum"),
        ({"type": "string", "pattern": 5}, "pattern must be a string", "pattern"),
        ({"type": "string", "format": "date", "enum": ["2023-02-29"]}, "is not a 'date'", "enum"),
        ({"type": "string", "pattern": "(?:"}, "missing", "pattern"),
    ],
)
def test_bad_keyword_values_are_refused(schema: dict[str, Any], match: str, keyword: str) -> None:
    refused(schema, match, keyword=keyword)


# --------------------------------------------------------------------------------------------------
# allOf and oneOf


def test_all_of_merges_types_properties_required_and_bounds() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "v": {
                "allOf": [
                    {"$ref": "#/$defs/Base"},
                    {"type": "object", "properties": {"b": {"type": "integer", "maximum": 9}}, "required": ["b"]},
                    {"properties": {"b": {"minimum": 2}, "a": {"maxLength": 4}}},
                ],
                "description": "merged",
            },
            "n": {"allOf": [{"type": "number", "minimum": 0}, {"type": "integer", "maximum": 10}, {"minimum": 3}]},
        },
        "$defs": {"Base": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
    }
    normalized = load_one(parameters)["properties"]
    assert normalized["n"] == {"type": "integer", "minimum": 3, "maximum": 10}
    v = normalized["v"]
    assert v["required"] == ["a", "b"]
    assert v["properties"]["a"] == {"type": "string", "maxLength": 4}
    assert v["properties"]["b"] == {"type": "integer", "maximum": 9, "minimum": 2}
    # The merge means what allOf means: same verdicts as jsonschema on the original.
    original = jsonschema.Draft202012Validator(parameters)
    merged = jsonschema.Draft202012Validator(load_one(parameters))
    for args in (
        {"v": {"a": "x", "b": 5}, "n": 5},
        {"v": {"a": "xxxxx", "b": 5}},
        {"v": {"a": "x", "b": 1}},
        {"v": {"a": "x"}},
        {"n": 2},
        {"n": 11},
        {"n": 4.5},
    ):
        assert original.is_valid(args) == merged.is_valid(args), args


def test_all_of_branches_may_share_a_definition() -> None:
    parameters = prop({"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]})
    parameters["$defs"] = {
        "A": {"type": "object", "properties": {"a": {"type": "string"}}},
        "B": {"allOf": [{"$ref": "#/$defs/A"}, {"required": ["a"]}]},
    }
    got = load_one(parameters)["properties"]["v"]
    assert got == {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def test_all_of_with_closed_branches_and_distribution() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    # b is not among the closed branch's properties: it can never appear.
    got = load_one(prop({"allOf": [closed, {"properties": {"b": {"type": "string"}}}]}))["properties"]["v"]
    assert got["properties"] == {"a": {"type": "string"}} and got["additionalProperties"] is False
    refused(
        {"allOf": [closed, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
        "'b' is required, but the branch at /properties/v/allOf/0 allows no such property",
        keyword="additionalProperties",
    )
    # allOf over anyOf: one branch per alternative, incompatible ones dropped.
    got = load_one(prop({"allOf": [{"type": "string"}, {"anyOf": [{"maxLength": 2}, {"type": "integer"}]}]}))
    assert got["properties"]["v"] == {"type": "string", "maxLength": 2}


@pytest.mark.parametrize(
    ("schema", "match", "keyword"),
    [
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "no value is both of type", "type"),
        ({"allOf": [{"const": 1}, {"const": 2}]}, "two different const values", "const"),
        ({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}, "no value in common", "enum"),
        (
            {"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]},
            "write one pattern that means both",
            "pattern",
        ),
        ({"allOf": []}, "allOf must be a non-empty list", "allOf"),
        ({"allOf": [{"$ref": "#/properties/v"}]}, "recursive schema", "$ref"),
    ],
)
def test_all_of_that_cannot_be_merged_is_refused(schema: dict[str, Any], match: str, keyword: str) -> None:
    refused(schema, match, keyword=keyword)


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        {"oneOf": [{"const": "a"}, {"const": "b"}, {"enum": [1, 2]}]},
        {"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "minimum": 1}]},
        {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
             "required": ["kind", "r"]},
            {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
             "required": ["kind"]},
        ]},
    ],
)  # fmt: skip
def test_one_of_with_exclusive_branches_is_exact(schema: dict[str, Any]) -> None:
    normalized = load_one(prop(schema))
    assert "anyOf" in normalized["properties"]["v"]
    original = jsonschema.Draft202012Validator(prop(schema))
    read = jsonschema.Draft202012Validator(normalized)
    for value in ["a", "b", 1, 2, 0, -3, None, 1.5, {"kind": "circle", "r": 1}, {"kind": "square"}, {"kind": "x"}]:
        assert original.is_valid({"v": value}) == read.is_valid({"v": value}), value


def test_lenient_reads_overlapping_one_of_as_any_of_with_a_warning() -> None:
    schema = prop({"oneOf": [{"type": "number"}, {"type": "integer"}]})
    with pytest.raises(ToolSchemaError, match="oneOf branches #0 and #1 may both match"):
        load_one(schema)
    with pytest.warns(ToolSchemaWarning, match=r"tool 't', at /properties/v/oneOf: oneOf branches #0 and #1 may"):
        got = load_one(schema, lenient=True)
    assert got["properties"]["v"] == {"anyOf": [{"type": "number"}, {"type": "integer"}]}


# --------------------------------------------------------------------------------------------------
# The lenient mode


BFCL_JAVA = {
    "name": "Sorter_sort",
    "description": "Sorts a list.",
    "parameters": {
        "type": "dict",
        "properties": {
            "items": {"type": "ArrayList", "items": {"type": "String"}, "description": "what to sort"},
            "limit": {"type": "long", "optional": True},
            "ratio": {"type": "double", "nullable": True},
            "flags": {"type": "HashMap", "additionalProperties": {"type": "Boolean"}},
            "anything": {"type": "any", "x-order": 3},
            "day": {"type": "String", "format": "date", "example": "2024-01-01"},
            "id": {"type": "String", "format": "int64-string"},
            "count": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            "name": {"type": "String", "required": True},
        },
        "required": ["items"],
    },
}


def test_lenient_maps_and_drops_with_one_warning_each() -> None:
    with pytest.raises(ToolSchemaError, match=r"its \"type\" must be \"object\" \(got 'dict'\)"):
        load_tools([BFCL_JAVA])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toolset = load_tools([BFCL_JAVA], lenient=True)
    messages = [str(w.message) for w in caught if issubclass(w.category, ToolSchemaWarning)]
    params = toolset["Sorter_sort"].parameters
    props = params["properties"]
    assert props["items"] == {"type": "array", "items": {"type": "string"}}
    assert props["limit"] == {"type": "integer"}
    assert props["ratio"] == {"type": ["number", "null"]}
    assert props["flags"] == {"type": "object", "additionalProperties": {"type": "boolean"}}
    assert props["anything"] == {}
    assert props["day"] == {"type": "string", "format": "date"}
    assert props["id"] == {"type": "string"}
    assert props["count"] == {"type": "integer", "exclusiveMinimum": 0}
    assert params["required"] == ["items", "name"]
    expected = [
        'at /type: type "dict" read as "object"',
        'at /properties/items/type: type "ArrayList" read as "array"',
        'at /properties/items/items/type: type "String" read as "string"',
        "at /properties/limit/optional: BFCL's optional flag dropped",
        'at /properties/ratio/nullable: nullable: true read as "null" added to type',
        'at /properties/anything/type: type "any" read as any value',
        "at /properties/anything/x-order: keyword 'x-order' dropped",
        "at /properties/day/example: keyword 'example' dropped",
        "at /properties/id/format: format 'int64-string' dropped",
        "at /properties/count/exclusiveMinimum: draft 4's exclusiveMinimum: true read as exclusiveMinimum: 0",
        "at /properties/name/required: draft 3's required: true read as the object's required list",
    ]
    for text in expected:
        assert any(text in m and m.startswith("tool 'Sorter_sort'") for m in messages), (text, messages)
    # Loaded again (from the memo): the same warnings again.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert load_tools([BFCL_JAVA], lenient=True) == toolset
    assert [str(w.message) for w in again] == messages
    # The result compiles, and what it generates the strict parser accepts.
    grammar = compile_turn(toolset, cache=False, tool_choice="required", reasoning="disabled")
    args = {"items": ["b", "a"], "limit": 3, "ratio": None, "day": "2024-01-01", "count": 1, "name": "n"}
    text = grammar.format.render_call("Sorter_sort", args)
    assert accepts(grammar, text)
    assert parse_turn(text, toolset).tool_calls[0].arguments == args


@pytest.mark.parametrize(
    ("schema", "strict_keyword", "lenient_read", "warning", "good", "bad"),
    [
        ({"type": "boolean", "enum": ["True", "False", "dontcare"]}, "enum", {"type": "boolean"},
         'at /properties/v/enum: enum ["True", "False", "dontcare"] dropped: no value is of type "boolean"',
         False, "True"),
        ({"type": "string", "enum": ["a", 3, "b"]}, "enum", {"type": "string", "enum": ["a", "b"]},
         'at /properties/v/enum: enum values [3] dropped: not of type "string"', "b", 3),
        ({"type": "integer", "minItems": 1}, "minItems", {"type": "integer"},
         'at /properties/v/minItems: minItems dropped: it applies to arrays, the type is "integer"', 7, [7]),
        ({"type": "string", "required": ["x"]}, "required", {"type": "string"},
         'at /properties/v/required: required dropped: it applies to objects, the type is "string"', "x", {"x": 1}),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}, "required",
         {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
         'at /properties/v/required: required names ["b"] dropped: no property declares them', {"a": "x"}, {}),
    ],
)  # fmt: skip
def test_lenient_drops_contradictions_strict_refuses(
    schema: dict[str, Any], strict_keyword: str, lenient_read: dict[str, Any], warning: str, good: Any, bad: Any
) -> None:
    with pytest.raises(ToolSchemaError) as refused_error:
        load_one(prop(schema))
    assert refused_error.value.keyword == strict_keyword
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = load_one(prop(schema), lenient=True)
    messages = [str(w.message) for w in caught if issubclass(w.category, ToolSchemaWarning)]
    assert len(messages) == 1 and warning in messages[0] and messages[0].startswith("tool 't'"), messages
    assert got["properties"]["v"] == lenient_read
    # What lenient loading reads is what the grammar enforces, and the strict parser checks.
    toolset = load_tools([{"name": "t", "parameters": prop(schema)}], lenient=True)
    grammar = compile_turn(toolset, cache=False, tool_choice="t", reasoning="disabled")
    for value, valid in ((good, True), (bad, False)):
        text = grammar.format.render_call("t", {"v": value})
        assert accepts(grammar, text) is valid, (value, valid)
        assert parse_turn(text, toolset).ok is valid, (value, valid)


def test_lenient_still_refuses_constraints_it_cannot_enforce() -> None:
    with pytest.raises(ToolSchemaError, match="unsupported keyword 'multipleOf'"):
        load_one(prop({"type": "integer", "multipleOf": 5}), lenient=True)
    with pytest.raises(ToolSchemaError, match="lenient must be True or False"):
        load_one(prop({"type": "integer"}), lenient="yes")


def test_strict_is_the_default_and_names_what_lenient_would_do() -> None:
    refused({"type": "string", "optional": True}, "unsupported keyword 'optional'", keyword="optional")
    refused({"type": "String"}, 'unknown type "String"', keyword="type")
    refused({"type": "string", "format": "byte"}, "or load with lenient=True", keyword="format")


# --------------------------------------------------------------------------------------------------
# The judge's format checks are RFC-exact and the grammar's languages stay inside them


def test_format_checks_follow_the_rfcs() -> None:
    assert is_time("23:59:60z") and not is_time("23:59:59")
    assert is_date_time("2024-02-29t00:00:00+01:00") and not is_date_time("2023-02-29T00:00:00Z")
    assert is_uri("http://[v1.fe]/") and not is_uri("/relative/path")
    checker = FORMAT_CHECKER
    assert checker.conforms("2024-01-01", "date") and not checker.conforms("2024-1-1", "date")


def test_grammar_regex_of_formats_is_what_the_module_documents() -> None:
    # The node's regex export (to_regex) and the automaton agree on the formats (ASCII languages).
    for name in FORMATS:
        rx = string_language({"type": "string", "format": name})
        assert rx is not None
        node = constrained_text(rx, "raw")
        regex = re.compile(to_regex(node), re.DOTALL)
        dfa = compile_dfa(node)
        for seed in range(20):
            text = walk(dfa, numpy_chooser(seed)).decode()
            assert regex.fullmatch(text), (name, text)
