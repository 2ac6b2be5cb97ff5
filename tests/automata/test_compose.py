"""The composed automaton (toolgrammar.automata.compose) is the automaton subset construction builds.

Both compilers run on the same trees; after pruning and minimization the two DFAs must be
isomorphic, accepting and ``safe`` flags included. Trees: every tool tail and the skeleton of the
test tool sets in every format, schemas chosen for their joins (bounded nested arrays,
optional-heavy objects, enums, anyOf, maps), and random trees over a small alphabet, where joins
that overlap (and fall back to subset construction for that node) are common.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from grammar_checks import random_trees
from toolgrammar import automata as A
from toolgrammar.automata import compose
from toolgrammar.automata.compose import compose_dfa
from toolgrammar.errors import GrammarError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.formats.options import options_from_kwargs
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import turn_node

from toolsets import TOOLSETS


def isomorphism_error(a: A.DFA, b: A.DFA) -> str | None:
    """None when the (minimal) DFAs ``a`` and ``b`` are one automaton; else the first difference."""
    if a.n_states != b.n_states:
        return f"{a.n_states} states vs {b.n_states}"
    image = {a.start: b.start}
    todo = [a.start]
    while todo:
        s = todo.pop()
        t = image[s]
        if a.accepting[s] != b.accepting[t] or a.safe[s] != b.safe[t]:
            return f"accepting/safe flags differ at state {s}"
        row_a, row_b = a.transitions[s], b.transitions[t]
        if not np.array_equal(row_a >= 0, row_b >= 0):
            return f"state {s} takes other symbols than its image {t}"
        for x in np.flatnonzero(row_a >= 0).tolist():
            u, v = int(row_a[x]), int(row_b[x])
            if u not in image:
                image[u] = v
                todo.append(u)
            elif image[u] != v:
                return f"state {u} maps to both {image[u]} and {v}"
    return None


def assert_same_automaton(node: A.Node) -> None:
    composed = A.compile_dfa(node)
    reference = A.compile_dfa(node, compose=False)
    error = isomorphism_error(composed, reference)
    assert error is None, error


def test_the_checker_tells_different_automata_apart():
    ab = A.compile_dfa(A.seq(A.lit("a"), A.opt(A.lit("b"))))
    assert isomorphism_error(ab, A.compile_dfa(A.seq(A.lit("a"), A.opt(A.lit("b"))))) is None
    assert isomorphism_error(ab, A.compile_dfa(A.seq(A.lit("a"), A.lit("b")))) is not None  # flags
    assert isomorphism_error(ab, A.compile_dfa(A.seq(A.lit("a"), A.opt(A.lit("c"))))) is not None  # symbols
    assert isomorphism_error(ab, A.compile_dfa(A.lit("ab"))) is not None  # sizes
    safe = A.compile_dfa(A.group(A.seq(A.lit("a"), A.opt(A.lit("b"))), safe=True))
    assert isomorphism_error(ab, safe) is not None


JOIN_SCHEMAS = {
    "bounded nested arrays": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "series": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "label": {"type": "string"},
                        "points": {
                            "type": "array",
                            "maxItems": 4,
                            "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
                        },
                    },
                    "required": ["label", "points"],
                },
            },
            "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
        },
        "required": ["series"],
    },
    "optional-heavy": {
        "type": "object",
        "properties": {
            **{f"field_{k}": {"type": ["string", "integer", "boolean"][k % 3]} for k in range(9)},
            "fiber": {"type": "string"},
            "field": {"type": "integer"},
        },
        "required": ["field_4"],
    },
    "enums and anyOf": {
        "type": "object",
        "properties": {
            "unit": {"enum": ["celsius", "celsius_abs", "fahrenheit", 3, 30, None]},
            "value": {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}]},
            "target": {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"type": "null"}]},
        },
        "required": ["unit"],
    },
    "map and bounds": {
        "type": "object",
        "properties": {
            "headers": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
            "count": {"type": "integer", "minimum": -5, "maximum": 120},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        },
    },
}


def _tool_nodes(tools: list, fmt: str) -> list[A.Node]:
    node = turn_node(load_tools(tools, mode="schema"), options_from_kwargs(), get_format(fmt))
    skeleton = A.compile_skeleton(node)
    return [tail for d in skeleton.dispatches for tail in d.tails] + [node]


@pytest.mark.parametrize("name", sorted(JOIN_SCHEMAS))
def test_schemas_with_many_joins_compose_to_the_same_automaton(name):
    tools = [{"name": "f", "parameters": JOIN_SCHEMAS[name]}, {"name": "g", "parameters": JOIN_SCHEMAS[name]}]
    for node in _tool_nodes(tools, "hermes"):
        assert_same_automaton(node)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_composes_to_the_same_automaton(fmt):
    for tools in TOOLSETS.values():
        for node in _tool_nodes(tools, fmt)[:-1]:  # the tails; the whole turn below, for two tool sets
            assert_same_automaton(node)
    assert_same_automaton(
        turn_node(load_tools(TOOLSETS["typed"], mode="schema"), options_from_kwargs(), get_format(fmt))
    )


# Random trees over a three-letter alphabet: joins that overlap are the rule, not the exception.
TREES = random_trees()


# The strategy's own repr (a recursive one) is long; hypothesis warns about printing it.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(TREES)
def test_random_trees_compose_to_the_same_automaton(node):
    with pytest.MonkeyPatch.context() as mp:
        # Every node joined as tables (small parts are otherwise built by subset construction, and these
        # trees are all small): the joins themselves are what is under test.
        mp.setattr(compose, "SUBSET_UP_TO", 0)
        _compare_with_subset_construction(node)


def _compare_with_subset_construction(node: A.Node) -> None:
    try:
        reference = A.compile_dfa(node, compose=False)
    except GrammarError as error:
        with pytest.raises(GrammarError, match=re.escape(str(error))):
            A.compile_dfa(node)
        return
    composed = A.compile_dfa(node)
    error = isomorphism_error(composed, reference)
    assert error is None, error


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(TREES, TREES)
def test_parts_shared_by_several_parents_compose_to_the_same_automaton(a, b):
    """The same part object in several places (as ``seq()`` flattens a shared sequence into each parent):
    the composer grows a part's table in place only when no other build still holds it or will ask for
    it, so every parent reads the part it was given."""
    node = A.seq(A.alt(a, A.seq(b, a)), A.repeat(A.seq(a, b), 0, 2), A.group(a), A.repeat(b, 1, None), a)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compose, "SUBSET_UP_TO", 0)
        _compare_with_subset_construction(node)


def test_a_join_that_would_blow_up_falls_back_to_subset_construction(monkeypatch):
    """Found by the test above: overlapping joins of loops, each part a small automaton, made more than
    200,000 states (a refusal: "grammar too large") where the node's own subset construction makes 124.
    Past JOIN_GROWTH the node is built by subset construction instead."""
    monkeypatch.setattr(compose, "SUBSET_UP_TO", 0)
    ab, abc = A.chars("ab"), A.chars("abc")
    a = A.not_prefixed(A.Members(((A.lit(""), True), (A.lit(""), False), (ab, True), (ab, False)), ab), "a")
    b = A.not_prefixed(A.Members(((ab, True), (A.lit(""), False), (abc, True), (abc, False)), ab), "a")
    node = A.seq(A.alt(a, A.seq(b, a)), A.repeat(A.seq(a, b), 0, 2), A.group(a), A.repeat(b, 1, None), a)
    fell_back: list[A.Node] = []
    real = compose._Composer._fallback

    def spy(self, n, safe):
        fell_back.append(n)
        return real(self, n, safe)

    monkeypatch.setattr(compose._Composer, "_fallback", spy)
    assert_same_automaton(node)
    assert fell_back, "the join fell back"


def test_a_part_is_grown_in_place_only_by_its_last_holder(monkeypatch):
    """The members of an object are asked for by the object and, through seq()'s flattening, by its
    parents: the table grown in place is the one no other build holds (it would read a resized table)."""
    grown: list[int] = []
    real = compose._growable

    def spy(parts, owned):
        i = real(parts, owned)
        if i is not None:
            grown.append(parts[i].n_states)
        return i

    monkeypatch.setattr(compose, "_growable", spy)
    monkeypatch.setattr(compose, "SUBSET_UP_TO", 0)
    inner = A.seq(A.lit("{"), A.star(A.chars("ab")), A.lit("}"))
    node = A.seq(A.lit("["), inner, A.repeat(A.seq(A.lit(","), inner), 0, 3), A.lit("]"))
    assert_same_automaton(node)
    assert grown, "some part was grown in place"


@pytest.mark.parametrize(
    ("node", "accepted", "rejected"),
    [
        # a*a: the first part's ends may go on with what the second part starts with.
        (A.seq(A.star(A.lit("a")), A.lit("a")), [b"a", b"aaa"], [b"", b"b"]),
        # ... and a part before them whose end takes the (joined) start of the nullable a*.
        (A.seq(A.lit("b"), A.star(A.lit("a")), A.lit("a")), [b"ba", b"baaa"], [b"b", b"a"]),
        (A.seq(A.lit("b"), A.opt(A.lit("ab")), A.alt(A.lit("a"), A.lit("ac"))), [b"ba", b"bac", b"baba"], [b"bab"]),
    ],
)
def test_joins_that_overlap_stay_exact(node, accepted, rejected):
    assert_same_automaton(node)
    dfa = A.compile_dfa(node)
    assert all(dfa.matches(w) for w in accepted)
    assert not any(dfa.matches(w) for w in rejected)
    assert compose_dfa(node, A.part_dfa).n_states >= A.compile_dfa(node).n_states


def _overlapping_join() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[frozenset[int]]]:
    """A stacked table of ``a*`` and ``a`` whose join must be determinized (both take ``a`` first)."""
    parts = [A.compile_dfa(A.star(A.lit("a"))), A.compile_dfa(A.lit("ab"))]
    table, accepting, safe, offsets = compose._stack(parts)
    firsts = frozenset(int(off) + p.start for off, p in zip(offsets, parts, strict=True))
    return table, accepting, safe, [firsts]


def test_determinize_grows_a_table_it_is_given_in_place_and_builds_the_same_rows():
    table, accepting, safe, entries = _overlapping_join()
    copied = table.copy()
    base = np.empty((table.shape[0] + 1, table.shape[1]), dtype=np.int32)
    base[:-1] = copied
    view = base[:-1]  # not owning its memory: the rows are copied into a new table, the view left alone
    assert not view.flags.owndata
    a = compose.determinize(table, accepting, safe, entries)
    b = compose.determinize(view, accepting, safe, entries)
    assert a is not None and b is not None
    assert a[0] is table and b[0] is not view, "the owned table is grown in place, the view copied"
    assert a[0].shape[0] > copied.shape[0], "the join made new states"
    assert np.array_equal(a[0], b[0]) and a[3] == b[3]
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    assert np.array_equal(view, copied), "the view was not written"


def test_pruning_in_place_renumbers_the_same_rows_and_never_touches_an_embedded_part(monkeypatch):
    monkeypatch.setattr(compose, "SUBSET_UP_TO", 0)  # joined as tables, as large tails are
    node = A.seq(A.lit("["), A.repeat(A.seq(A.chars("ab"), A.lit(",")), 1, 6), A.lit("]"))
    raw = compose_dfa(node, A.part_dfa)
    assert raw.stats.get(compose.GROWABLE) and raw.transitions.flags.owndata
    kept = A.prune(raw.transitions.copy(), raw.start, raw.accepting, raw.safe, minimize=False)
    table, n_raw = raw.transitions, raw.n_states
    pruned = A.prune(table, raw.start, raw.accepting, raw.safe, minimize=False, in_place=True)
    assert pruned.transitions is table and table.shape[0] == pruned.n_states, "renumbered where it was, shrunk"
    assert np.array_equal(pruned.transitions, kept.transitions) and pruned.start == kept.start
    assert pruned.n_states < n_raw, "the join left states behind to drop"
    # A part compiled once per process and placed as it is (a Shared node): compose hands that DFA back
    # unflagged, so it is pruned into a new table and stays as it was, alone and inside a larger tree.
    part = A.shared(A.seq(A.lit("<"), A.repeat(A.chars("ab"), 2, 4)))
    cached = A.shared_dfa(part)
    before = cached.transitions.copy()
    for tree in (part, A.seq(part, A.lit("!")), A.group(part), A.seq(A.lit("["), part, A.lit(","), part)):
        A.compile_dfa(tree, minimize=False)
        assert A.shared_dfa(part) is cached and np.array_equal(cached.transitions, before)
