"""The lazy automaton (toolgrammar.automata.lazy): build only what a turn visits, and change nothing else.

The language, the masks and the budget guarantee are those of the automaton built whole: checked
here state by state against a grammar whose every tail was built up front (``build_all``).
"""

from __future__ import annotations

import itertools

import jsonschema
import numpy as np
import pytest

from toolgrammar import automata as automaton
from toolgrammar.automata import lazy, size
from toolgrammar.errors import GrammarError, SchemaTooLargeError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.testing import allowed_ids, random_walk
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn
from toolgrammar.values import json_grammar

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
        _assert_same_masks(vocab, lazy_tg, whole, walk.tokens, budget)


def _assert_same_masks(vocab, lazy_tg: TokenGrammar, whole: TokenGrammar, tokens, budget: int | None) -> None:
    """Along ``tokens``: the same allowed tokens with no budget; under a budget, nothing the whole grammar bans.

    Before a tail is built its cost is bounded from above: the lazy mask may close a little earlier under a
    tight budget, never allow what the whole one bans."""
    a, b = Cursor(lazy_tg, budget), Cursor(whole, budget)
    for token in tokens:
        ids_a = allowed_ids(a.mask(), vocab.n_tokens)
        ids_b = allowed_ids(b.mask(), vocab.n_tokens)
        if budget is None:
            assert np.array_equal(ids_a, ids_b)
        else:
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
        tail = real(key, node)
        dfa = tail.dfa
        t = dfa.transitions.copy()
        symbol = int(np.flatnonzero(tg.transitions[e] >= 0)[0])
        t[np.flatnonzero(dfa.accepting), symbol] = dfa.start  # an end that goes on with the next part's symbol
        return lazy.Tail(type(dfa)(t, dfa.start, dfa.accepting, dfa.safe), tail.points, tail.dispatches)

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


def test_tools_with_one_schema_share_one_tree_and_each_is_called_as_itself(vocab, qwen3_tokenizer):
    """Two tools with the same arguments schema share one grammar tree (``json_grammar.arguments_node``: kept
    by the schema, as a server meets the same tools in other lists); each is still called by its own name,
    and a refusal names the tool that was compiled, whatever tree was kept."""
    json_grammar.clear_part_cache()
    lazy.clear_tail_cache()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n"]}
    tools = [{"name": "first", "parameters": schema}, {"name": "second", "parameters": schema}]
    turn = compile_turn(tools, cache=False)
    tails = [t for d in automaton.nodes_of(turn.node) if isinstance(d, automaton.Dispatch) for t in d.tails]
    members = [[n for n in automaton.nodes_of(t) if isinstance(n, automaton.Members)] for t in tails]
    assert len(tails) == 2 and len(members[0]) == 1 and members[0][0] is members[1][0]  # one tree, in both
    fmt = get_format("hermes")
    for name in ("second", "first"):
        tg = TokenGrammar(turn, vocab)
        text = fmt.render_call(name, {"n": 3, "ok": True})
        cursor = Cursor(tg, 100)
        for token in qwen3_tokenizer.encode(text, add_special_tokens=False):
            assert token in set(allowed_ids(cursor.mask(), vocab.n_tokens).tolist())
            assert cursor.advance(token), cursor.error
        parsed = parse_turn(text, turn.tools, format=fmt)
        assert [c.name for c in parsed.tool_calls] == [name] and parsed.errors == ()
    huge = {"type": "object", "properties": {f"p{i}": {"type": "boolean"} for i in range(400)}}
    for name in ("big_a", "big_b"):
        with pytest.raises(SchemaTooLargeError, match="too large") as refused:
            compile_turn([{"name": name, "parameters": huge}], cache=False)
        assert refused.value.tool == name


def test_a_long_qwen_xml_list_builds_only_the_tool_a_call_reaches(vocab, qwen3_tokenizer):
    """qwen-xml spells the name and each parameter in markup, yet its skeleton holds no tool: 60 tools (each
    with raw-text, enum, integer and object parameters; whole, they were over 200,000 states) compile to
    the skeleton of two, and a call to the last builds that tool's tail only and parses strictly."""
    props = {
        "note": {"type": "string"},
        "mode": {"enum": ["fast", "safe"]},
        "count": {"type": "integer", "minimum": 1},
        "where": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    }
    tools = [{"name": f"tool_{i}", "parameters": {"type": "object", "properties": props, "required": ["note"]}}
             for i in range(60)]  # fmt: skip
    turn = compile_turn(tools, format="qwen-xml", cache=False)
    assert turn.skeleton.key == compile_turn(tools[:2], format="qwen-xml", cache=False).skeleton.key
    tg = TokenGrammar(turn, vocab)
    fmt = get_format("qwen-xml")
    text = fmt.render_call("tool_59", {"note": "a </tool_call> and\na line", "count": 3, "where": {"x": 1.5}})
    cursor = Cursor(tg, 200)
    for token in qwen3_tokenizer.encode(text, add_special_tokens=False):
        assert token in set(allowed_ids(cursor.mask(), vocab.n_tokens).tolist())
        assert cursor.advance(token), cursor.error
    built = {turn.skeleton.dispatches[j].keys[b] for _e, j, b in tg.auto.expanded.values()}
    # the tool called, and at most the tools whose key a token of the walk could finish (tool_5 for "tool_5")
    assert b"tool_59>\n" in built and len(built) <= 3, built
    parsed = parse_turn(text, turn.tools, format=fmt)
    assert [c.name for c in parsed.tool_calls] == ["tool_59"] and parsed.errors == ()
    assert parsed.tool_calls[0].arguments == {"note": "a </tool_call> and\na line", "count": 3, "where": {"x": 1.5}}


# -- long arrays, built an item at a time ------------------------------------------------------------

LONG_ARRAYS = [
    {
        "name": "log_points",
        "parameters": {
            "type": "object",
            "properties": {
                "points": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "t": {"type": "integer"},
                            "label": {"type": "string"},
                            "ok": {"type": "boolean"},
                        },
                        "required": ["t", "ok"],
                    },
                    "minItems": 1,
                    "maxItems": 6,
                },
                "ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
            },
            "required": ["points"],
        },
    },
    {
        "name": "tag",
        "parameters": {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4}},
        },
    },
]


@pytest.fixture
def item_at_a_time(monkeypatch):
    """Compile under ``automaton.LAZY_REPEAT_FROM`` 0 (every array of two or more optional items is built an
    item at a time) with no tree or tail kept from before, and keep none for after."""

    def forget() -> None:
        json_grammar.clear_part_cache()
        lazy.clear_tail_cache()

    def compile_lazily(tools, **options):
        forget()
        monkeypatch.setattr(size, "LAZY_REPEAT_FROM", 0)
        try:
            return compile_turn(tools, cache=False, **options)
        finally:
            monkeypatch.setattr(size, "LAZY_REPEAT_FROM", automaton_default)
            forget()

    automaton_default = automaton.LAZY_REPEAT_FROM
    forget()
    yield compile_lazily
    forget()


def _separator_first(vocab, separator: str):
    """Walk preferences: open a block; inside one, close strings and go for another item whenever one may
    follow."""
    opener, closer = vocab.token_id("<tool_call>"), vocab.token_id("</tool_call>")
    inside = [i for i in (vocab.token_id(t) for t in ('"', separator, "{")) if i is not None]

    def prefer(tokens: list[int]) -> list[int]:
        return inside if tokens.count(opener) > tokens.count(closer) else [opener]

    return prefer


def _items_built(tg: TokenGrammar) -> int:
    """Array items built after the tool's tail (stubs inside tails that were expanded)."""
    return sum(1 for s in tg.auto.expanded if s in tg.auto.root_of)


@pytest.mark.parametrize(
    "options",
    [{}, {"whitespace": "flexible"}, {"tool_choice": "required", "parallel_tool_calls": False}],
    ids=["canonical", "flexible", "required"],
)
def test_arrays_built_an_item_at_a_time_have_the_masks_of_arrays_built_whole(vocab, item_at_a_time, options):
    """Along random walks that write long arrays, the grammar whose arrays are built an item at a time allows
    exactly what the one built whole allows (no budget), and never more (budgets: its bound for an item not
    built yet is an upper bound)."""
    lazy.clear_tail_cache()
    whole = TokenGrammar(compile_turn(LONG_ARRAYS, cache=False, **options), vocab)
    whole.build_all()
    assert not whole.auto.root_of, "the whole grammar left an array to build later"
    grammar = item_at_a_time(LONG_ARRAYS, **options)
    prefer = _separator_first(vocab, ",")
    rng = np.random.default_rng(2026)
    items_built = 0
    for walk_no in range(12):
        budget = [None, 300, 90][walk_no % 3]
        walk = random_walk(whole, rng, max_tokens=budget or 400, prefer=prefer, prefer_probability=0.6)
        lazy_tg = TokenGrammar(grammar, vocab)
        _assert_same_masks(vocab, lazy_tg, whole, walk.tokens, budget)
        items_built += _items_built(lazy_tg)
    assert items_built >= 10, "the walks hardly went past the first items: little was built an item at a time"


def test_arrays_built_an_item_at_a_time_are_sound_and_close_in_budget(vocab, item_at_a_time):
    """Random walks at tight and loose budgets: every block closes in time, every call parses and validates
    against its schema (``maxItems`` and ``minItems`` included), and long arrays are written."""
    grammar = item_at_a_time(LONG_ARRAYS, tool_choice="required")
    schemas = {t["name"]: t["parameters"] for t in LONG_ARRAYS}
    prefer = _separator_first(vocab, ",")
    rng = np.random.default_rng(7)
    at_max_items = 0
    for walk_no in range(24):
        tg = TokenGrammar(grammar, vocab)
        budget = max(int(tg.dist[tg.start]), [40, 90, 250][walk_no % 3])
        walk = random_walk(tg, rng, max_tokens=budget, prefer=prefer, prefer_probability=0.6)
        assert len(walk.tokens) <= budget
        assert not walk.in_block_at_end, f"walk {walk_no} (budget {budget}) ended inside a block"
        text = b"".join(vocab.token_bytes[t] for t in walk.tokens if t not in vocab.eos_ids).decode("utf-8", "replace")
        parsed = parse_turn(text, LONG_ARRAYS, mode="strict")
        assert parsed.errors == (), f"walk {walk_no}: {text!r}"
        assert parsed.tool_calls, text
        for call in parsed.tool_calls:
            jsonschema.validate(call.arguments, schemas[call.name])
            properties = schemas[call.name]["properties"]
            at_max_items += sum(len(v) == properties[k]["maxItems"] for k, v in call.arguments.items())
    assert at_max_items >= 3, "the walks hardly reached maxItems"


@pytest.mark.parametrize("whitespace", ["canonical", "flexible"])
def test_an_array_built_an_item_at_a_time_takes_max_items_and_not_one_more(vocab, qwen3_tokenizer, whitespace):
    """200 objects (too large to build whole: once refused by the size estimate) compile, and a call with 200
    passes while the separator after the 200th is refused; the default threshold, nothing monkeypatched."""
    item = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
        "required": ["a", "b", "c"],
    }
    tools = [
        {
            "name": "big",
            "parameters": {
                "type": "object",
                "properties": {"xs": {"type": "array", "items": item, "maxItems": 200}},
                "required": ["xs"],
            },
        }
    ]
    tg = TokenGrammar(compile_turn(tools, cache=False, tool_choice="required", whitespace=whitespace), vocab)
    xs = [{"a": f"s{i}", "b": i, "c": i % 2 == 0} for i in range(200)]
    hermes = get_format("hermes")
    full = hermes.render_call("big", {"xs": xs})
    cut = full.index("}]") + 1  # the 200th item written, the array not closed yet
    ids = qwen3_tokenizer.encode(full[:cut], add_special_tokens=False)
    cursor = Cursor(tg, None)
    for token in ids:
        cursor.mask()
        assert cursor.advance(token), cursor.error
    assert tg.walk_text(full[cut:], cursor.state) >= 0  # "]}}</tool_call>" closes it
    assert tg.walk_text(", {", cursor.state) < 0  # a 201st item does not fit
    assert tg.walk_text(",", cursor.state) < 0
    assert 190 <= _items_built(tg) <= 200  # the items were built one by one
