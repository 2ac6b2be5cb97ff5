"""The byte automaton against independent oracles: Python's UTF-8 decoder, ``re``, and brute force."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.nodes import (
    ANY_BYTE,
    Members,
    avoiding,
    chars,
    lit,
    not_prefixed,
    opt,
    repeat,
    seq,
    star,
    utf8_char,
)
from toolgrammar.automata.regex import to_regex
from toolgrammar.errors import GrammarError

UTF8_TEXT = compile_dfa(star(utf8_char()))


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=600, derandomize=True)
@given(st.binary(max_size=12))
def test_utf8_automaton_accepts_exactly_what_python_decodes(data):
    assert UTF8_TEXT.matches(data) == _valid_utf8(data)


@settings(max_examples=300, derandomize=True)
@given(st.text(max_size=12))
def test_every_python_string_is_accepted(text):
    assert UTF8_TEXT.matches(text.encode("utf-8"))


@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (0, 1), (2, 2), (1, 3), (0, None), (2, None)])
def test_repeat_bounds(lo, hi):
    dfa = compile_dfa(seq(lit("<"), repeat(lit("ab"), lo, hi), lit(">")))
    for n in range(6):
        expected = n >= lo and (hi is None or n <= hi)
        assert dfa.matches(b"<" + b"ab" * n + b">") == expected, n


def test_members_follow_order_and_requiredness_like_the_regex():
    node = Members(((lit("a"), False), (lit("b"), True), (lit("c"), False)), lit(","))
    dfa = compile_dfa(node)
    pattern = re.compile(to_regex(node))
    for length in range(5):
        for combo in itertools.product("abc,", repeat=length):
            text = "".join(combo)
            expected = text in {"b", "a,b", "b,c", "a,b,c"}
            assert dfa.matches(text.encode()) == expected, text
            assert (pattern.fullmatch(text) is not None) == expected, text


@settings(max_examples=400, derandomize=True)
@given(st.text(alphabet="</tol_ca>xy", max_size=16))
def test_avoiding_a_word_is_exact(text):
    dfa = compile_dfa(avoiding(star(ANY_BYTE), "</tool_call>"))
    assert dfa.matches(text.encode()) == ("</tool_call>" not in text)


@settings(max_examples=200, derandomize=True)
@given(st.text(alphabet="<thinkx>", max_size=10))
def test_not_prefixed_is_exact(text):
    dfa = compile_dfa(not_prefixed(star(ANY_BYTE), "<think>"))
    assert dfa.matches(text.encode()) == (not text.startswith("<think>"))


def test_minimization_merges_equal_futures():
    two_ways = compile_dfa(seq(chars("ab"), lit("xyz")))
    one_way = compile_dfa(seq(lit("a"), lit("xyz")))
    assert two_ways.n_states == one_way.n_states


def test_exported_regex_matches_the_automaton_on_a_mixed_grammar():
    node = seq(lit("{"), opt(seq(lit('"k": '), repeat(chars("0123456789"), 1, 3))), lit("}"))
    dfa, pattern = compile_dfa(node), re.compile(to_regex(node))
    for text in ["{}", '{"k": 1}', '{"k": 123}', '{"k": 1234}', '{"k": }', "{"]:
        assert dfa.matches(text.encode()) == (pattern.fullmatch(text) is not None), text


def test_a_grammar_that_accepts_nothing_is_an_error():
    with pytest.raises(GrammarError, match="accepts nothing"):
        compile_dfa(avoiding(lit("abc"), "b"))


def test_bad_bounds_are_errors():
    with pytest.raises(GrammarError, match="bad repetition bounds"):
        repeat(lit("a"), 3, 1)
