"""The lazy automaton (toolgrammar.lazy): build only what a turn visits, and change nothing else.

The language, the masks and the budget guarantee are those of the automaton built whole: checked
here state by state against a grammar whose every tail was built up front (``build_all``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from toolgrammar import json_grammar, lazy
from toolgrammar.engine import Cursor, TokenGrammar
from toolgrammar.errors import GrammarError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.grammar import compile_turn
from toolgrammar.testing import allowed_ids, random_walk

from toolsets import TOOLSETS


@pytest.fixture(scope="module")
def vocab(qwen3_vocab):
    return qwen3_vocab


def many_tools(n: int, salt: str) -> list[dict]:
    """``n`` tools with distinct names and three distinct schema shapes."""
    shapes = [
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n"]},
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}},
    ]
    return [{"name": f"{salt}_tool_{i}", "parameters": shapes[i % 3]} for i in range(n)]


def test_a_turn_builds_only_the_tool_it_calls(vocab, qwen3_tokenizer):
    tools = many_tools(60, "only")
    tg = TokenGrammar(compile_turn(tools, cache=False), vocab)
    assert len(tg.auto.stubs) == 60 and not tg.auto.expanded
    text = "Sure.\n" + get_format("hermes").render_call("only_tool_4", {"n": 7})
    cursor = Cursor(tg, 200)
    for token in qwen3_tokenizer.encode(text, add_special_tokens=False):
        mask = cursor.mask()
        assert token in set(allowed_ids(mask, vocab.n_tokens).tolist())
        assert cursor.advance(token), cursor.error
    assert [tg.auto.expanded[s][2] for s in tg.auto.expanded] == [4]
    assert len(tg.auto.stubs) == 59


def test_tails_are_shared_across_tool_lists(vocab, monkeypatch):
    compiled = []
    real = lazy.compile_dfa
    monkeypatch.setattr(lazy, "compile_dfa", lambda node, **kw: compiled.append(node) or real(node, **kw))
    lazy.clear_tail_cache()
    first = TokenGrammar(compile_turn(many_tools(6, "first"), cache=False), vocab)
    first.build_all()
    assert len(compiled) == 3  # six tools, three distinct schemas
    # Another list (other names, other order) holding the same schemas builds nothing new.
    second = TokenGrammar(compile_turn(list(reversed(many_tools(9, "second"))), cache=False), vocab)
    second.build_all()
    assert len(compiled) == 3


@pytest.mark.parametrize(
    ("toolset", "options"),
    [
        ("seed-strings", {}),
        ("typed", {"whitespace": "flexible", "reasoning": "prefilled"}),
        ("nested", {"tool_choice": "required", "escape_markers": True}),
        ("shared-prefixes", {"parallel_tool_calls": False, "reasoning": "disabled"}),
    ],
)
def test_masks_equal_the_whole_automatons_along_random_walks(vocab, toolset, options):
    """Same allowed tokens at every step of random walks, with the budget off and on."""
    grammar = compile_turn(TOOLSETS[toolset], cache=False, **options)
    whole = TokenGrammar(grammar, vocab)
    whole.build_all()
    opener = vocab.token_id("<tool_call>")
    rng = np.random.default_rng(11)
    for walk_no in range(6):
        lazy_tg = TokenGrammar(grammar, vocab)  # a new one each walk: every walk starts unbuilt
        budget = [None, 400, 60][walk_no % 3]
        walk = random_walk(whole, rng, max_tokens=budget or 300, prefer=[opener], prefer_probability=0.3)
        a, b = Cursor(lazy_tg, budget), Cursor(whole, budget)
        for token in walk.tokens:
            ma, mb = a.mask(), b.mask()
            ids_a = allowed_ids(ma, vocab.n_tokens)
            ids_b = allowed_ids(mb, vocab.n_tokens)
            if budget is None:
                assert np.array_equal(ids_a, ids_b)
            else:
                # Before a tail is built its cost is bounded from above: the lazy mask may close a
                # little earlier under a tight budget, never allow what the whole one bans.
                assert np.isin(ids_a, ids_b).all()
            if token not in set(ids_a.tolist()):
                break
            assert a.advance(token) and b.advance(token)


def test_the_budget_holds_while_tails_are_unbuilt(vocab):
    """Random walks at tight budgets over 40 tools: every block closes in time, nothing is rejected."""
    grammar = compile_turn(many_tools(40, "budget"), tool_choice="required", cache=False)
    opener = vocab.token_id("<tool_call>")
    rng = np.random.default_rng(3)
    for budget in (30, 45, 80):
        for _ in range(4):
            tg = TokenGrammar(grammar, vocab)
            walk = random_walk(tg, rng, max_tokens=budget, prefer=[opener])
            assert len(walk.tokens) <= budget
            assert not walk.in_block_at_end, f"budget {budget}: a block was left open"


def test_the_trap_is_never_a_path(vocab):
    """Masks and steps from the trap state (no cursor reaches it) reject everything, and terminate."""
    tg = TokenGrammar(compile_turn(many_tools(3, "trap"), cache=False), vocab)
    trap = tg.auto.trap
    assert tg.mask(trap).n_allowed == 0
    assert tg.step(trap, vocab.token_id("<tool_call>")) < 0
    assert tg.walk_text("abc", trap) < 0
    # Every state's mask, the trap and the stubs included (a stub builds its tail first).
    for state in range(tg.n_states):
        tg.mask(state)
    assert not tg.auto.stubs


def test_masks_do_not_depend_on_which_tools_were_built_before(vocab, qwen3_tokenizer):
    """The same turn under the same budget gets the same masks whether or not other tools' tails exist:
    a turn's tokens never depend on what earlier turns happened to call (the same prompt and seed give
    the same output)."""
    hermes = get_format("hermes")
    grammar = compile_turn(many_tools(12, "history"), tool_choice="required", cache=False)
    turn = hermes.render_call("history_tool_7", {"n": 3, "ok": True})
    ids = qwen3_tokenizer.encode(turn, add_special_tokens=False)
    fresh = TokenGrammar(grammar, vocab)
    seasoned = TokenGrammar(grammar, vocab)
    for name, args in (("history_tool_1", {"n": 1}), ("history_tool_2", {}), ("history_tool_4", {"n": 5})):
        cursor = Cursor(seasoned, 300)
        for token in qwen3_tokenizer.encode(hermes.render_call(name, args), add_special_tokens=False):
            cursor.mask()
            assert cursor.advance(token), cursor.error
    assert len(seasoned.auto.expanded) > len(fresh.auto.expanded)
    for budget in (len(ids) + 1, len(ids) + 4, 200):
        a, b = Cursor(fresh, budget), Cursor(seasoned, budget)
        for token in ids:
            assert np.array_equal(allowed_ids(a.mask(), vocab.n_tokens), allowed_ids(b.mask(), vocab.n_tokens))
            assert a.advance(token) and b.advance(token)


@pytest.mark.parametrize("spare", [0, 4096])
def test_tails_appended_in_place_leave_what_a_full_rebuild_computes(vocab, monkeypatch, spare):
    """Tails go into spare rows of one buffer (``spare`` 0: every tail outgrows it and the buffer is
    reallocated), and only the new rows' derived arrays are computed: after every tail, in a shuffled
    order, the table and each derived array equal the ones computed from scratch on the table as it stands."""
    monkeypatch.setattr(lazy, "_spare_rows", lambda n: spare)
    tg = TokenGrammar(compile_turn(many_tools(9, f"grow{spare}"), cache=False), vocab)
    stubs = sorted(tg.auto.stubs)
    np.random.default_rng(5).shuffle(stubs)
    buffers = [tg.auto._buffer]  # kept alive, so a new buffer is never an old one's address reused
    for stub in stubs:
        before = tg.transitions.copy()
        tg._expand({stub})
        if tg.auto._buffer is not buffers[-1]:
            buffers.append(tg.auto._buffer)
        t = tg.transitions
        assert (t[-1] == -1).all() and t.shape[0] == tg.n_states + 1
        untouched = np.arange(before.shape[0] - 1) != stub  # every old row but the stub's stays as it was
        assert np.array_equal(t[: before.shape[0] - 1][untouched], before[:-1][untouched])
        incremental = (tg.n_symbols, tg.eos_allowed, tg.safe, list(tg._finished), tg.loops)
        tg._refresh()
        for got, want in zip(incremental[:3], (tg.n_symbols, tg.eos_allowed, tg.safe), strict=True):
            assert np.array_equal(got, want)
        assert incremental[3] == tg._finished
        for name in ("low0", "low1", "special", "eos", "any"):
            assert np.array_equal(getattr(incremental[4], name), getattr(tg.loops, name)), name
    assert (len(buffers) > len(stubs)) if spare == 0 else (len(buffers) == 1)


def test_a_refused_tail_leaves_the_automaton_as_it_was(vocab, monkeypatch):
    """A tail whose accepting states go on where the grammar after the dispatch starts is refused, and the
    table (the dead row included) is what it was before."""
    tg = TokenGrammar(compile_turn(many_tools(3, "refused"), cache=False), vocab)
    stub = min(tg.auto.stubs)
    e = tg.auto.stubs[stub][0]
    real = lazy.tail_dfa

    def clashing(key, node):
        dfa = real(key, node)
        t = dfa.transitions.copy()
        symbol = int(np.flatnonzero(tg.transitions[e] >= 0)[0])
        t[np.flatnonzero(dfa.accepting), symbol] = dfa.start  # an end that goes on with the next part's symbol
        return type(dfa)(t, dfa.start, dfa.accepting, dfa.safe)

    monkeypatch.setattr(lazy, "tail_dfa", clashing)
    before = tg.transitions.copy()
    with pytest.raises(GrammarError, match="not prefix-free"):
        tg.auto.expand(stub)
    assert np.array_equal(tg.auto.transitions, before)
    assert np.array_equal(tg.auto._buffer[: before.shape[0]], before)
    assert stub in tg.auto.stubs


def test_the_tail_cache_is_bounded_in_bytes(vocab, monkeypatch):
    """Past MAX_CACHED_TAIL_BYTES the least recently used tails go; the tail just built always stays."""
    lazy.clear_tail_cache()
    tg = TokenGrammar(compile_turn(many_tools(3, "bytes"), cache=False), vocab)
    tg.build_all()  # three distinct schemas: three tails
    sizes = [lazy._nbytes(dfa) for dfa in lazy._tails.values()]
    assert len(sizes) == 3 and lazy.cached_tail_bytes() == sum(sizes)
    monkeypatch.setattr(lazy, "MAX_CACHED_TAIL_BYTES", sizes[1] + sizes[2])
    lazy.clear_tail_cache()
    tg = TokenGrammar(compile_turn(many_tools(3, "bytes2"), cache=False), vocab)
    tg.build_all()
    assert lazy.cached_tail_bytes() <= sizes[1] + sizes[2]
    assert len(lazy._tails) == 2  # the first tail built went
    monkeypatch.setattr(lazy, "MAX_CACHED_TAIL_BYTES", 1)
    lazy.clear_tail_cache()
    TokenGrammar(compile_turn(many_tools(3, "bytes3"), cache=False), vocab).build_all()
    assert len(lazy._tails) == 1 and lazy.cached_tail_bytes() == sizes[2]
    lazy.clear_tail_cache()


def _ordered_tools(order: str) -> list[dict]:
    """One tool whose properties (top level and nested) come in ``order``; required lists do not change."""
    inner = {"x": {"type": "integer"}, "y": {"type": "string"}}
    nested = {k: inner[k] for k in order.replace("a", "x").replace("b", "y")}
    outer = {"a": {"type": "integer"}, "b": {"type": "object", "properties": nested}}
    parameters = {"type": "object", "properties": {k: outer[k] for k in order}, "required": ["a"]}
    return [{"name": "place", "parameters": parameters}]


@pytest.mark.parametrize("fmt", [name for name in FORMATS if name != "qwen-xml"])
def test_property_order_keys_the_shared_tails(vocab, fmt):
    """Property order shapes the grammar (the calls follow the schema's order), so two schemas that differ
    only in it must not share a cached tail: the second list's automaton is the one it has alone."""
    lazy.clear_tail_cache()
    TokenGrammar(compile_turn(_ordered_tools("ab"), format=fmt, cache=False), vocab).build_all()
    after = TokenGrammar(compile_turn(_ordered_tools("ba"), format=fmt, cache=False), vocab)
    after.build_all()
    lazy.clear_tail_cache()
    alone = TokenGrammar(compile_turn(_ordered_tools("ba"), format=fmt, cache=False), vocab)
    alone.build_all()
    assert np.array_equal(after.auto.transitions, alone.auto.transitions)
    assert np.array_equal(after.auto.accepting, alone.auto.accepting)


def test_parts_kept_across_tools_compile_what_a_fresh_build_does(vocab):
    """Tools that repeat a part (one address object: twice in one tool, once in another) share its grammar
    tree (``json_grammar.schema_node`` keeps it); a tool compiled from kept parts has the automaton it has
    when nothing was kept."""
    tags = {"type": "array", "items": {"type": "string"}, "maxItems": 2}
    address = {
        "type": "object",
        "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}, "tags": tags},
        "required": ["street"],
    }
    ship = {"type": "object", "properties": {"to": address, "from": address}, "required": ["to"]}
    bill = {"type": "object", "properties": {"n": {"type": "integer"}, "at": address}}
    tools = [{"name": "ship", "parameters": ship}, {"name": "bill", "parameters": bill}]
    for tool, options in itertools.product(tools, ({}, {"whitespace": "flexible"}, {"escape_markers": True})):
        lazy.clear_tail_cache()
        json_grammar.clear_part_cache()
        TokenGrammar(compile_turn(tools, cache=False), vocab).build_all()
        kept = len(json_grammar._parts)
        lazy.clear_tail_cache()
        warm = TokenGrammar(compile_turn([tool], cache=False, **options), vocab)
        warm.build_all()
        if not options:  # every part came from what the first list kept (other options: other parts)
            assert len(json_grammar._parts) == kept
        lazy.clear_tail_cache()
        json_grammar.clear_part_cache()
        cold = TokenGrammar(compile_turn([tool], cache=False, **options), vocab)
        cold.build_all()
        assert np.array_equal(warm.auto.transitions, cold.auto.transitions)
        assert np.array_equal(warm.auto.accepting, cold.auto.accepting)
