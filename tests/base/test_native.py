"""The C core (``toolgrammar._native``) against the numpy walks it replaces: the same masks, state by state.

The core only changes how fast a first visit is: every test here runs the same work both ways (the core,
and numpy with ``TOOLGRAMMAR_NATIVE=0`` or a table built with ``native=False``) and compares the results
exactly. The soundness, completeness and termination suites run with the core on (the default), so
they check it too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammar_checks import random_trees
from toolgrammar import automata as A
from toolgrammar import native
from toolgrammar.automata import dfa as D
from toolgrammar.automata import subset
from toolgrammar.errors import GrammarError, TokenizerError
from toolgrammar.runtime.token_grammar import INF, TokenGrammar
from toolgrammar.runtime.token_table import TokenTable
from toolgrammar.turn.grammar import compile_turn

from toolsets import TOOLSETS

CASES = [
    ("seed-strings", {}),
    ("typed", {"reasoning": "prefilled", "escape_markers": True}),
    ("freeform", {"whitespace": "flexible"}),
    ("nested", {"format": "qwen-xml"}),
    ("nested", {"tool_choice": "required", "reasoning": "disabled"}),
]


def test_the_core_is_built():
    """CI and scripts/setup.sh install with a C compiler: a missing core is a broken build, not a fallback."""
    assert native.built(), native.describe()
    assert native.module() is not None, native.describe()


@pytest.fixture(scope="module")
def tables(qwen3_vocab):
    return TokenTable(qwen3_vocab, native=True), TokenTable(qwen3_vocab, native=False)


def _allowed(mask, n):
    if mask.all_allowed:
        return np.arange(n)
    if mask.banned is not None:
        return np.setdiff1d(np.arange(n), mask.banned)
    return np.asarray(mask.allowed)


def _forget(monkeypatch, folder) -> None:
    """Nothing compiled before is reused: an empty cache folder, the in-memory caches emptied."""
    from toolgrammar import caches

    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(folder))
    caches.clear()


def _grammars(vocab, tables, toolset, options, monkeypatch, tmp_path):
    """The same turn compiled twice from nothing: once with the core (automata minimized in C, walked in C),
    once without it (numpy throughout)."""
    core, numpy_table = tables
    out = []
    for on, table in (("1", core), ("0", numpy_table)):
        monkeypatch.setenv(native.ENV, on)
        _forget(monkeypatch, tmp_path / f"cache-{on}")
        tg = TokenGrammar(compile_turn(TOOLSETS[toolset], **options), vocab)
        tg.table = table
        tg.build_all()
        out.append(tg)
    monkeypatch.setenv(native.ENV, "1")
    return out


@pytest.mark.parametrize(("toolset", "options"), CASES)
def test_every_state_gets_the_same_mask(qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path):
    """States of the whole automaton (every tail built; all of them up to 400, else 400 drawn with a fixed
    seed, the start among them): the allowed tokens and the largest need."""
    a, b = _grammars(qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path)
    assert a.n_states == b.n_states and np.array_equal(a.transitions, b.transitions)
    assert np.array_equal(a.dist, b.dist)
    n = qwen3_vocab.n_tokens
    kinds = set()
    states = np.arange(a.n_states)
    if len(states) > 400:
        states = np.union1d([a.start], np.random.default_rng(7).choice(states, size=400, replace=False))
    for state in states.tolist():
        ma, mb = a._compute_built(state), b._compute_built(state)
        assert np.array_equal(_allowed(ma, n), _allowed(mb, n)), state
        assert ma.max_need == mb.max_need, state
        assert ma.n_allowed == mb.n_allowed, state
        kinds.add("text" if ma.n_allowed * 2 >= n else "literal")
        assert np.array_equal(a.table.walk(a.transitions, state), b.table.walk(b.transitions, state, b.loops)), state
    assert kinds == {"text", "literal"}  # both of the core's output shapes were compared


@pytest.mark.parametrize(("toolset", "options"), [CASES[0], CASES[1], ("shared-prefixes", {"reasoning": "disabled"})])
def test_lazy_tails_are_built_the_same_way(qwen3_vocab, tables, toolset, options):
    """Masks asked for in a walk order, tails built on demand (the core reports tokens that reach a stub)."""
    core, numpy_table = tables
    turn = compile_turn(TOOLSETS[toolset], **options)
    a, b = TokenGrammar(turn, qwen3_vocab), TokenGrammar(turn, qwen3_vocab)
    a.table, b.table = core, numpy_table
    assert a.auto.stubs, "nothing would be built lazily"
    rng = np.random.default_rng(11)
    state_a = state_b = a.start
    for _ in range(300):
        ma, mb = a.mask(state_a), b.mask(state_b)
        allowed = _allowed(ma, qwen3_vocab.n_tokens)
        assert np.array_equal(allowed, _allowed(mb, qwen3_vocab.n_tokens))
        if a.is_finished(state_a) or not len(allowed):
            break
        token = int(rng.choice(allowed))
        state_a, state_b = a.step(state_a, token), b.step(state_b, token)
        assert state_a == state_b >= 0
    assert a.n_expansions == b.n_expansions
    assert np.array_equal(a.dist, b.dist)


@pytest.mark.parametrize(("toolset", "options"), CASES)
def test_the_budget_bound_walks_the_same_edges(qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path):
    """The bound's token edges, walked by the core and by numpy, from every state."""
    a, b = _grammars(qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path)
    states = np.arange(a.n_states, dtype=np.int32)
    src_a, dst_a = a._token_edges(states, a._dist_tokens)
    assert b.table.native is None  # numpy's walk
    src_b, dst_b = b._token_edges(states, a._dist_tokens)
    assert len(src_a) > a.n_states  # many edges, not a trivial comparison
    # The same edges, as many times each (the core lists them state by state, numpy token by token).
    order_a, order_b = np.lexsort((dst_a, src_a)), np.lexsort((dst_b, src_b))
    assert np.array_equal(src_a[order_a], src_b[order_b]) and np.array_equal(dst_a[order_a], dst_b[order_b])


@pytest.mark.parametrize(
    ("toolset", "options"),
    [*CASES, ("shared-prefixes", {"tool_choice": "required", "parallel_tool_calls": True})],
)
def test_the_budget_bound_is_the_same_least_fixpoint(qwen3_vocab, tables, toolset, options):
    """The bound of a turn whose tails are not built (stubs weighted by their shortest string): the core's
    shortest paths, with the stubs joined between passes, against the breadth-first search in Python."""
    core, numpy_table = tables
    tg = TokenGrammar(compile_turn(TOOLSETS[toolset], **options), qwen3_vocab)
    tg.table = core
    native_dist = tg._distances()
    tg.table = numpy_table
    numpy_dist = tg._distances()
    assert np.array_equal(native_dist, numpy_dist)
    finite = native_dist[native_dist < INF]
    assert len(finite) == tg.n_states - 1 and finite.max() > 1  # every state but the trap, bounds above 1
    if tg.auto.stubs:  # each stub costs its weight more than the state after its dispatch
        for stub, (after, _j, _b) in tg.auto.stubs.items():
            assert native_dist[stub] <= native_dist[after] + tg._stub_weights[stub]


def _random_dfa(draw_seed: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(draw_seed)
    table = rng.integers(-1, n, size=(n, k)).astype(np.int32)
    table[rng.random((n, k)) < 0.3] = -1
    accepting = rng.random(n) < 0.3
    safe = rng.random(n) < 0.2
    return table, accepting, safe


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(1, 6))
def test_minimize_reaches_moores_partition(seed, n, k):
    """Hopcroft in C and Moore in numpy give the same merged automaton (small alphabets make many merges)."""
    table = np.full((n, A.N_SYMBOLS), -1, dtype=np.int32)
    small, accepting, safe = _random_dfa(seed, n, k)
    table[:, :k] = small
    got = D._minimize(table, 0, accepting, safe)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(native.ENV, "0")
        want = D._minimize(table, 0, accepting, safe)
    for x, y in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_minimize_splits_late_and_merges_long_chains():
    """Three chains of 400 states: A and B alike (they merge), C told apart from A only at its far end
    (Moore needs a round per state of it). The core and numpy agree, and on the count."""
    length = 400
    n = 3 * length
    table = np.full((n, A.N_SYMBOLS), -1, dtype=np.int32)
    for base in (0, length, 2 * length):
        table[base : base + length - 1, ord("a")] = np.arange(base + 1, base + length)
        table[base : base + length - 1, ord("b")] = np.arange(base + 1, base + length)
    table[0, ord("c")] = length  # B hangs off A's start
    table[n - 1, ord("a")] = length - 1  # C's end reads one more "a" into A's end; a "b" there dies
    accepting = np.zeros(n, dtype=bool)
    accepting[[length - 1, 2 * length - 1]] = True
    safe = np.zeros(n, dtype=bool)
    got = D._minimize(table, 0, accepting, safe)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(native.ENV, "0")
        want = D._minimize(table, 0, accepting, safe)
    for x, y in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert got[0].shape[0] == 2 * length + 1  # B merged into A (A's start stays apart: it reads "c")


def test_bad_arrays_are_refused_with_the_reason(tables):
    core = native.module()
    table = tables[0]
    t = np.zeros((3, A.N_SYMBOLS), dtype=np.int32)
    n = table.n_tokens
    with pytest.raises(ValueError, match="state 7 is not one of the 3 rows"):
        core.trie_mask(
            t,
            A.N_SYMBOLS,
            7,
            table.pre_max_depth,
            table.pre_sym,
            table.pre_depth,
            table.pre_end,
            table.pre_start,
            table.pre_tokens,
            np.zeros(3, dtype=np.int32),
            1,
            -5,
            np.zeros(3, dtype=np.uint64),
            np.zeros(3, dtype=np.uint64),
            table.pre_sub_low0,
            table.pre_sub_low1,
            table.pre_sub_high,
            table.pre_whole,
            np.full(3, -1, dtype=np.int8),
            0,
            np.zeros(n, dtype=np.uint8),
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
        )
    with pytest.raises(TypeError, match="transitions: expected 4-byte items"):
        core.trie_walk(
            t.astype(np.int64),
            A.N_SYMBOLS,
            0,
            table.pre_max_depth,
            table.pre_sym,
            table.pre_depth,
            table.pre_end,
            table.pre_start,
            table.pre_tokens,
            np.zeros(n, dtype=np.int32),
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int32),
        )
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        core.minimize(np.array([[5], [0]], dtype=np.int32), 1, np.zeros(2, dtype=np.int64))


def test_asking_for_the_core_where_it_is_off_says_why(qwen3_vocab, monkeypatch):
    monkeypatch.setenv(native.ENV, "0")
    assert native.module() is None and "TOOLGRAMMAR_NATIVE=0" in native.describe()
    with pytest.raises(TokenizerError, match="the C core was asked for, but numpy walks"):
        TokenTable(qwen3_vocab, native=True)


_TEXTS = st.one_of(
    st.binary(min_size=1, max_size=48),
    st.text(alphabet="abc_- {}\"':,<>/\\né中🙂\x00", min_size=1, max_size=48).map(lambda t: t.encode("utf-8")),
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TEXTS, min_size=1, max_size=6))
def test_literal_pieces_are_the_tokens_the_dictionary_names(tables, qwen3_vocab, texts):
    """The budget bound's literal tokens and greedy cuts: the core's trie lookups give exactly the ids of
    ``Vocabulary._id_of_bytes`` (lowest ordinary id, added tokens winning, special tokens left out)."""
    core, numpy_table = tables
    assert core.text_index_exact

    class Holder:  # the two TokenGrammar helpers need only a table and a vocabulary
        pass

    with_core, without = Holder(), Holder()
    with_core.table, with_core.vocab = core, qwen3_vocab
    without.table, without.vocab = numpy_table, qwen3_vocab
    texts = [*texts, b"<tool_call>\n{", b"</tool_call><|im_end|>", "日本語".encode()]
    assert TokenGrammar._literal_tokens(with_core, texts) == TokenGrammar._literal_tokens(without, texts)
    for data in texts:
        assert TokenGrammar._greedy_tokens(with_core, data) == TokenGrammar._greedy_tokens(without, data)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 80), st.integers(1, 5), st.booleans())
def test_pruning_keeps_the_same_states(seed, n, k, minimize):
    """The core's one-pass search for live states and numpy's two reachability passes keep the same
    automaton (or both refuse one that accepts nothing)."""
    table = np.full((n, A.N_SYMBOLS), -1, dtype=np.int32)
    small, accepting, safe = _random_dfa(seed, n, k)
    table[:, :k] = small
    outcome = []
    for on in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(native.ENV, on)
            try:
                dfa = D.prune(table, 0, accepting, safe, minimize=minimize)
            except GrammarError as error:
                outcome.append(str(error))
            else:
                outcome.append((dfa.transitions.tolist(), dfa.start, dfa.accepting.tolist(), dfa.safe.tolist()))
    assert outcome[0] == outcome[1]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 60))
def test_relax_finds_the_least_fixpoint(seed, n):
    """The tail bound's shortest paths (C, one pass) against the numpy fixpoint it replaces."""
    rng = np.random.default_rng(seed)
    inf = 1 << 30
    start = np.where(rng.random(n) < 0.3, rng.integers(0, 20, size=n), inf).astype(np.int64)
    m = int(rng.integers(0, 4 * n + 1))
    src, dst = rng.integers(0, n, size=m), rng.integers(0, n, size=m)
    want = start.copy()
    while m:
        new = want.copy()
        np.minimum.at(new, src, want[dst] + 1)
        if np.array_equal(new, want):
            break
        want = new
    got = start.copy()
    native.module().relax(got, dst.astype(np.int64), src.astype(np.int64), inf)  # edges in any order
    assert np.array_equal(np.minimum(got, inf), np.minimum(want, inf))


def _subset_both_ways(node: A.Node) -> tuple[object, object]:
    """``subset_dfa`` with the core and without it: the automaton's arrays, or the refusal's message."""
    outcome = []
    for on in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(native.ENV, on)
            try:
                dfa = A.reference_dfa(node)
            except GrammarError as error:
                outcome.append(str(error))
                continue
        table, start, accepting, safe = dfa.transitions, dfa.start, dfa.accepting, dfa.safe
        renumbered = D._canonical(table, start, accepting, safe)[0]
        assert np.array_equal(renumbered, table), "the states are not numbered breadth-first by symbol"
        outcome.append((table.tolist(), start, accepting.tolist(), safe.tolist(), dfa.stats["nfa_states"]))
    return outcome[0], outcome[1]


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(random_trees())
def test_subset_construction_builds_the_same_automaton(node):
    """The core's subset construction and the Python loop: the same states in the same (canonical) order,
    transitions, accepting and safe flags, on random trees of every node kind."""
    with_core, without = _subset_both_ways(node)
    assert with_core == without


@pytest.mark.parametrize(("toolset", "options"), CASES)
def test_subset_construction_of_real_grammars(toolset, options):
    """Whole turns (a dispatch's keys and tails inside) and every tool's tail, as the compiler meets them."""
    grammar = compile_turn(TOOLSETS[toolset], **options)
    skeleton = A.compile_skeleton(grammar.node)
    nodes = [grammar.node] + [tail for d in skeleton.dispatches for tail in d.tails]
    for node in nodes:
        with_core, without = _subset_both_ways(node)
        assert isinstance(with_core, tuple), with_core
        assert with_core == without


def test_subset_construction_refuses_past_the_state_limit(monkeypatch):
    """Both loops stop at MAX_DFA_STATES with the same message (the core returns None, never a partial table)."""
    node = A.repeat(A.alt(A.lit("ab"), A.lit("a")), 0, 40)
    monkeypatch.setattr(subset, "MAX_DFA_STATES", 25)
    with_core, without = _subset_both_ways(node)
    assert with_core == without == "grammar too large: more than 25 DFA states"


def test_subset_refuses_arrays_that_do_not_fit():
    core = native.module()
    ptr = np.array([0, 1, 1], dtype=np.int64)
    bits = np.zeros(5, dtype=np.uint64)
    bits[0] = 1 << 7
    eps_ptr = np.zeros(3, dtype=np.int64)
    none = np.zeros(0, dtype=np.int32)
    safe = np.zeros(2, dtype=np.uint8)
    outside = np.array([2], dtype=np.int32)
    with pytest.raises(ValueError, match=r"edge 0 leads to 2, outside 0\.\.1"):
        core.subset(ptr, bits, outside, eps_ptr, none, safe, 0, 1, A.N_SYMBOLS, 100)
    too_many = bits.copy()
    too_many[4] = 1 << 3  # symbol 259: past the 258 symbols
    with pytest.raises(ValueError, match="edge 0 holds a symbol past 257"):
        core.subset(ptr, too_many, np.array([1], dtype=np.int32), eps_ptr, none, safe, 0, 1, A.N_SYMBOLS, 100)
    with pytest.raises(ValueError, match="the NFA's arrays do not fit together"):
        core.subset(ptr, bits, np.array([1], dtype=np.int32), eps_ptr, none, safe, 0, 5, A.N_SYMBOLS, 100)
    table, accepting, safe_out = core.subset(
        ptr, bits, np.array([1], dtype=np.int32), eps_ptr, none, safe, 0, 1, A.N_SYMBOLS, 100
    )
    rows = np.frombuffer(table, dtype=np.int32).reshape(-1, A.N_SYMBOLS)
    assert rows.shape == (2, A.N_SYMBOLS) and rows[0, 7] == 1 and (np.delete(rows[0], 7) == -1).all()
    assert accepting == b"\x00\x01" and safe_out == b"\x00\x00"


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(0, 5), st.integers(0, 1000))
def test_rows_are_shifted_the_same_way(seed, n, first_row, shift):
    """``shift_into`` (compose's stacking, lazy tails' appending): the core and numpy write the same rows."""
    src = np.random.default_rng(seed).integers(-1, n, size=(n, A.N_SYMBOLS)).astype(np.int32)
    outs = []
    for on in ("1", "0"):
        dst = np.full((first_row + n + 2, A.N_SYMBOLS), 7, dtype=np.int32)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(native.ENV, on)
            A.shift_into(src, dst, first_row, shift)
        outs.append(dst)
    assert np.array_equal(outs[0], outs[1])
    assert (outs[0][:first_row] == 7).all() and (outs[0][first_row + n :] == 7).all()
    assert np.array_equal(outs[0][first_row : first_row + n], np.where(src >= 0, src + shift, -1))


def test_shifting_and_compacting_refuse_what_does_not_fit():
    core = native.module()
    src = np.zeros((2, 4), dtype=np.int32)
    with pytest.raises(ValueError, match="the rows do not fit in dst"):
        core.shift_rows(src, np.zeros((2, 4), dtype=np.int32), 1, 4, 0)
    with pytest.raises(ValueError, match="entry 1 holds -3"):
        core.shift_rows(np.array([[0, -3, 0, 0]], dtype=np.int32), np.zeros((1, 4), dtype=np.int32), 0, 4, 0)
    table = np.array([[1, -1], [0, 2]], dtype=np.int32)  # 2 rows: target 2 is no state
    with pytest.raises(ValueError, match=r"table entry \(1, 1\) = 2, outside -1\.\.1"):
        core.compact(
            table, np.array([0, 1], dtype=np.int64), np.array([0, 1], dtype=np.int32), np.empty((2, 2), np.int32)
        )
    with pytest.raises(ValueError, match=r"keep\[0\] = 5, outside 0\.\.1"):
        core.compact(
            table, np.array([5], dtype=np.int64), np.array([0, -1], dtype=np.int32), np.empty((1, 2), np.int32)
        )


def _text_states(tg: TokenGrammar) -> dict[tuple[int, int], list[int]]:
    """Dense text states (the core's exits apply to them), grouped by their loop words."""
    groups: dict[tuple[int, int], list[int]] = {}
    n = tg.table.n_tokens
    for state in range(tg.n_states):
        if state == tg.auto.trap or tg.dist[state] >= INF:
            continue
        if int(tg.table.first_symbol_counts[tg.transitions[state] >= 0].sum()) * 2 <= n:
            continue
        groups.setdefault((int(tg.loops.low0[state]), int(tg.loops.low1[state])), []).append(state)
    return groups


@pytest.mark.parametrize(("toolset", "options"), CASES)
def test_text_states_walked_from_another_states_exits_get_the_same_mask(
    qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path
):
    """A text state's mask from the exits another state with the same loop words recorded (only the trie's
    ranges where a path leaves the state are walked) equals its own whole walk: allowed tokens, largest need,
    count. Every pair of such states in the automaton, both ways round, over up to 40 states a group."""
    core_table, _ = tables
    tg, _ = _grammars(qwen3_vocab, tables, toolset, options, monkeypatch, tmp_path)
    n = qwen3_vocab.n_tokens
    shared = 0
    for loops, states in _text_states(tg).items():
        states = states[:40]
        whole = {}
        for state in states:
            core_table.forget_text_exits()
            whole[state] = tg._compute_native(state)
        for recorder in states[:3]:
            core_table.forget_text_exits()
            tg._compute_native(recorder)
            exits = core_table.text_exits(loops)
            if exits is None:
                continue  # this state's UTF-8 characters do not all come back to it: it never records
            for state in states:
                got = tg._compute_native(state)
                want = whole[state]
                assert np.array_equal(_allowed(got, n), _allowed(want, n)), (recorder, state)
                assert (got.max_need, got.n_allowed) == (want.max_need, want.n_allowed), (recorder, state)
                shared += state != recorder
    assert shared, "no text state was walked from another state's exits"


def test_a_json_string_walks_a_few_exits_not_the_trie(qwen3_vocab, tables, monkeypatch, tmp_path):
    """The exits of a JSON string's body are the tokens that leave it (a quote, a backslash, a control byte,
    a character cut short): a few thousand trie nodes, where the whole walk visits the vocabulary's trie."""
    core_table, _ = tables
    tg, _ = _grammars(qwen3_vocab, tables, "seed-strings", {}, monkeypatch, tmp_path)
    groups = _text_states(tg)
    core_table.forget_text_exits()
    recorded = {}
    for loops, states in groups.items():
        tg._compute_native(states[0])
        got = core_table.text_exits(loops)
        if got is not None:
            recorded[loops] = got
    assert recorded, "no text state recorded its exits"
    nodes = len(core_table.pre_sym)
    for exits, has_pure in recorded.values():
        covered = int((exits[:, 1] - exits[:, 0]).sum())
        assert has_pure == 1
        assert 0 < covered < nodes // 10, (covered, nodes)
        starts = exits[:, 0]
        assert np.all(np.diff(starts) > 0), "exits come in preorder, one range per node"
        assert np.all(exits[:-1, 1] <= exits[1:, 0]), "ranges do not overlap"


def test_the_text_exits_kept_per_table_are_bounded(qwen3_vocab):
    from toolgrammar.runtime import token_table as engine

    table = TokenTable(qwen3_vocab, native=True)  # its own: the shared fixture's exits are real ones
    for k in range(engine.MAX_TEXT_EXITS + 5):
        table.remember_text_exits((k, 0), np.zeros((1, 3), dtype=np.int32), 1)
    assert len(table._text_exits) == engine.MAX_TEXT_EXITS
    assert table.text_exits((0, 0)) is None  # the first ones out
    assert table.text_exits((engine.MAX_TEXT_EXITS + 4, 0)) is not None
    table.forget_text_exits()
    assert table.text_exits((engine.MAX_TEXT_EXITS + 4, 0)) is None
