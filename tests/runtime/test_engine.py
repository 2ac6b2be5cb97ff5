"""The engine's invariants with the real Qwen3 tokenizer (DESIGN.md invariants 1-3).

- Soundness: random walks by a uniformly random "model" over the allowed tokens; every finished
  output parses under the strict parser with zero errors and validates with ``jsonschema``
  against the tool's *original* schema (an independent check of the compiled grammar).
- Termination: under every budget, a started block closes in time.
- Completeness: canonical, schema-valid CanIToolCall ``qwen3-hermes`` outputs replay token by token
  with nothing masked; malformed and truncated ones are masked.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from toolgrammar.formats import get_format
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.testing import is_allowed, random_walk, replay
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from toolsets import TOOLSETS

OPENER = 151657  # <tool_call>
QUOTE_CLOSE = '"'


@pytest.fixture(scope="module")
def vocab(qwen3_vocab):
    return qwen3_vocab


def original_schemas(tools: list[dict]) -> dict[str, dict]:
    out = {}
    for entry in tools:
        fn = entry.get("function", entry)
        out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def decode(vocab, tokens) -> str:
    eos = vocab.eos_ids
    return b"".join(vocab.token_bytes[t] for t in tokens if t not in eos).decode("utf-8", errors="replace")


CASES = [
    pytest.param(name, opts, id=f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items()) or 'default'}")
    for name, opts in [
        ("seed-strings", {"reasoning": "disabled"}),
        ("seed-strings", {"mode": "strings", "tool_choice": "required"}),
        ("seed-strings", {"mode": "strings", "tool_choice": "required", "prose_first": True}),
        ("seed-strings", {"escape_markers": True, "parallel_tool_calls": False}),
        ("typed", {}),
        ("typed", {"whitespace": "flexible", "reasoning": "prefilled"}),
        ("nested", {"tool_choice": "required"}),
        ("nested", {"whitespace": "flexible"}),
        ("shared-prefixes", {"reasoning": "disabled"}),
        ("shared-prefixes", {"tool_choice": "read"}),
        ("freeform", {"reasoning": "disabled"}),
    ]
]


@pytest.mark.parametrize(("toolset", "options"), CASES)
def test_random_walks_are_sound_and_terminate(vocab, toolset, options):
    tools = TOOLSETS[toolset]
    options = dict(options)
    mode = options.pop("mode", "schema")
    grammar = compile_turn(tools, mode=mode, **options)
    tg = TokenGrammar(grammar, vocab)
    schemas = original_schemas(tools)
    prefilled = options.get("reasoning") == "prefilled"
    quote = vocab.token_id('"')
    close_think = vocab.token_id("</think>")
    rng = np.random.default_rng(1234)
    n_walks, n_calls = 150, 0
    shortest = int(tg.dist[tg.start])  # below this even the shortest turn cannot fit (tool_choice=required)
    for i in range(n_walks):
        budget = max(int(rng.integers(8, 96)), shortest)

        def prefer(tokens, prefilled=prefilled):
            return [close_think] if prefilled and close_think not in tokens else [OPENER, quote]

        walk = random_walk(tg, rng, max_tokens=budget, prefer=prefer, prefer_probability=0.35)
        assert len(walk.tokens) <= budget
        assert not walk.in_block_at_end, f"walk {i} (budget {budget}) ended inside a block"
        text = decode(vocab, walk.tokens)
        parsed = parse_turn(text, tools, mode="strict", tool_mode=mode, reasoning_started=prefilled)
        assert parsed.errors == (), f"walk {i}: {text!r} -> {[e.message for e in parsed.errors]}"
        for call in parsed.tool_calls:
            if mode == "strings":
                assert all(isinstance(v, str) for v in call.arguments.values())
            else:
                jsonschema.validate(call.arguments, schemas[call.name])
        choice = options.get("tool_choice", "auto")
        if choice == "required":
            assert parsed.tool_calls, f"walk {i}: tool_choice=required but no call: {text!r}"
            if not options.get("prose_first"):  # call first: no content at all, only the call(s)
                assert not (parsed.content or "").strip(), f"walk {i}: required wrote text before its call: {text!r}"
        if choice not in ("auto", "required", "none"):
            assert [c.name for c in parsed.tool_calls] == [choice] * len(parsed.tool_calls)
            assert parsed.tool_calls and not (parsed.content or "").strip()
        if options.get("parallel_tool_calls") is False:
            assert len(parsed.blocks) <= 1
        if options.get("escape_markers"):
            assert all("</tool_call>" not in json.dumps(c.arguments, ensure_ascii=False) for c in parsed.tool_calls)
        n_calls += len(parsed.tool_calls)
    assert n_calls >= n_walks // 4, f"only {n_calls} calls in {n_walks} walks: the walks do not exercise blocks"


def test_an_impossible_budget_still_leaves_tokens_and_closes_as_fast_as_possible(vocab):
    tg = TokenGrammar(compile_turn(TOOLSETS["seed-strings"], tool_choice="required", reasoning="disabled"), vocab)
    shortest = int(tg.dist[tg.start])
    assert shortest > 3
    rng = np.random.default_rng(0)
    walk = random_walk(tg, rng, max_tokens=shortest + 40)
    assert walk.tokens  # never an empty mask
    cursor = Cursor(tg, 3)
    for _ in range(3):
        mask = cursor.mask()
        assert mask is not None and mask.n_allowed > 0
        cursor.advance(
            int(np.flatnonzero(np.isin(np.arange(tg.table.n_tokens), mask.allowed))[0])
            if mask.allowed is not None
            else OPENER
        )


def test_tool_choice_none_never_opens_a_block(vocab):
    tg = TokenGrammar(compile_turn(TOOLSETS["seed-strings"], tool_choice="none"), vocab)
    cursor = Cursor(tg, 100)
    assert not is_allowed(cursor.mask(), OPENER)
    # Spelled in pieces, the opener is refused too.
    for piece in ["<", "tool", "_call"]:
        cursor.advance(vocab.token_id(piece))
    assert not is_allowed(cursor.mask(), vocab.token_id(">"))


@pytest.mark.parametrize("budget", range(1, 65))
def test_a_started_block_closes_within_every_budget(vocab, budget):
    tg = TokenGrammar(compile_turn(TOOLSETS["nested"], reasoning="disabled"), vocab)
    rng = np.random.default_rng(budget)
    # Force the opener as early as the budget allows, then walk uniformly.
    for _ in range(5):
        walk = random_walk(tg, rng, max_tokens=budget, prefer=[OPENER], prefer_probability=1.0)
        assert not walk.in_block_at_end
        if OPENER in walk.tokens:
            parsed = parse_turn(decode(vocab, walk.tokens), TOOLSETS["nested"])
            assert parsed.blocks and all(b.closed for b in parsed.blocks), parsed
            assert parsed.errors == ()


def test_opener_is_refused_when_no_call_could_close_in_time(vocab):
    tg = TokenGrammar(compile_turn(TOOLSETS["seed-strings"], reasoning="disabled"), vocab)
    needed = int(tg.dist[tg.step(tg.start, OPENER)]) + 1
    assert not is_allowed(Cursor(tg, needed - 1).mask(), OPENER)
    assert is_allowed(Cursor(tg, needed).mask(), OPENER)


def test_spelled_opener_starts_a_block(vocab):
    tg = TokenGrammar(compile_turn(TOOLSETS["seed-strings"], reasoning="disabled"), vocab)
    cursor = Cursor(tg)
    for piece in ["Hi", " <", "tool", "_call", ">"]:
        assert cursor.advance(vocab.token_id(piece)), piece
    assert cursor.in_block
    assert not is_allowed(cursor.mask(), vocab.token_id("{"))  # canonical: a newline comes first
    assert is_allowed(cursor.mask(), vocab.token_id("\n"))


# -- completeness: CanIToolCall qwen3-hermes replays --------------------------------------------


def _fixture_options(fx) -> dict:
    prompt = fx.get("generation_prompt") or "<|im_start|>assistant\n"
    return {"reasoning": "prefilled" if prompt.endswith("<think>\n") else "enabled"}


def _is_canonical(fx) -> bool:
    """Independent of the grammar: the output is content + the chat template's rendering of the calls."""
    if "expected" not in fx or "truncated" in fx["tags"]:
        return False
    raw = fx["raw_output"]
    calls = fx["expected"]["tool_calls"]
    if not calls:
        return "<tool_call>" not in raw
    schemas = original_schemas(fx["tools"])
    for c in calls:
        try:
            jsonschema.validate(c["arguments"], schemas[c["name"]])
        except jsonschema.ValidationError:
            return False
    fmt = get_format("hermes")
    rendered = "\n".join(fmt.render_call(c["name"], c["arguments"]) for c in calls)
    return raw.endswith(rendered) and "<tool_call>" not in raw[: -len(rendered)]


def test_fixture_classification_is_not_empty(hermes_fixtures):
    canonical = [fx["id"] for fx in hermes_fixtures if _is_canonical(fx)]
    assert len(canonical) >= 25, canonical


def test_canonical_fixtures_are_never_masked(hermes_fixtures, vocab):
    failures = []
    for fx in hermes_fixtures:
        if not _is_canonical(fx):
            continue
        tg = TokenGrammar(compile_turn(fx["tools"], **_fixture_options(fx)), vocab)
        ids = fx["output_token_ids"]
        result = replay(tg, ids)
        end_ok = result.first_masked is None and any(is_allowed(result.cursor.mask(), e) for e in vocab.eos_ids)
        if result.first_masked is not None or not end_ok:
            at = result.first_masked
            failures.append(
                f"{fx['id']}: masked at {at} ({vocab.token_bytes[ids[at]]!r})"
                if at is not None
                else f"{fx['id']}: end of turn refused"
            )
    assert not failures, "\n".join(failures)


def test_malformed_and_truncated_fixtures_are_masked(hermes_fixtures, vocab):
    checked = 0
    unmasked = []
    for fx in hermes_fixtures:
        if _is_canonical(fx):
            continue
        tags = set(fx["tags"])
        if "expected" in fx and not fx["expected"]["tool_calls"] and "<tool_call>" not in fx["raw_output"]:
            continue  # a call-free turn (truncated reasoning): nothing to mask
        tg = TokenGrammar(compile_turn(fx["tools"], **_fixture_options(fx)), vocab)
        ids = fx["output_token_ids"]
        # A truncated output hit its token limit: with that same budget the grammar must have closed earlier.
        budget = len(ids) if "truncated" in tags or "expected_error" in fx else None
        result = replay(tg, ids, max_tokens=budget)
        if result.first_masked is None:
            unmasked.append(fx["id"])
        checked += 1
    assert checked >= 12
    assert not unmasked, f"non-canonical outputs the grammar let through: {unmasked}"


@pytest.mark.parametrize(
    ("toolset", "options"),
    [
        ("seed-strings", {}),
        ("typed", {"reasoning": "prefilled", "escape_markers": True}),
        ("freeform", {"whitespace": "flexible"}),
        ("nested", {"format": "qwen-xml"}),
    ],
)
def test_vectorized_walk_equals_a_token_by_token_walk(vocab, toolset, options):
    """The walk's shortcuts (looping states, whole UTF-8 characters, first-character entry) change nothing."""
    tg = TokenGrammar(compile_turn(TOOLSETS[toolset], **options), vocab)
    tg.build_all()  # every state a real one (a walk through a stub would build its tail mid-test)
    table = tg.table
    rng = np.random.default_rng(5)
    sample = rng.choice(table.n_tokens, size=2500, replace=False)
    states = [tg.start, *rng.choice(tg.n_states, size=min(10, tg.n_states), replace=False).tolist()]
    for state in states:
        fast = table.walk(tg.transitions, int(state), tg.loops)
        sparse = table.walk_ids(tg.transitions, int(state), sample, tg.loops)
        for token, got_sparse in zip(sample.tolist(), sparse.tolist(), strict=True):
            expected = tg.step(int(state), token)
            assert fast[token] == expected == got_sparse, (state, token, vocab.token_bytes[token])


def test_budgets_beyond_255_tokens_are_exact(vocab):
    """Needs are cached as one byte per token; budgets of 255 or more take the exact path."""
    runes = "ᚠᚢᚦᚨᚱᚲᚷᚹᚺᚾᛁᛃᛇᛈᛉᛊᛏᛒᛖᛗᛚᛜᛞᛟ" * 8
    tools = [
        {
            "name": "carve",
            "parameters": {"type": "object", "properties": {"text": {"const": runes}}, "required": ["text"]},
        }
    ]
    tg = TokenGrammar(compile_turn(tools, reasoning="disabled", tool_choice="required"), vocab)
    need = int(tg.dist[tg.start])
    assert need > 256, need
    rng = np.random.default_rng(3)
    for budget in (need, need + 1, need + 5):
        walk = random_walk(tg, rng, max_tokens=budget, prefer=[OPENER])
        parsed = parse_turn(decode(vocab, walk.tokens), tools)
        assert [c.arguments for c in parsed.tool_calls] == [{"text": runes}], budget
        assert not walk.in_block_at_end


def test_budget_bookkeeping_is_bounded(vocab, monkeypatch):
    """The per-state budget needs are an LRU: never more than MAX_NEEDS_STATES states, whatever is visited."""
    import toolgrammar.runtime.token_grammar as token_grammar_module

    monkeypatch.setattr(token_grammar_module, "MAX_NEEDS_STATES", 8)
    tg = TokenGrammar(compile_turn(TOOLSETS["nested"], tool_choice="required"), vocab)
    states = [s for s in range(tg.n_states) if not tg.safe[s]][:20]
    assert len(states) == 20
    for state in states:  # a budget of 2 is below every one of these states' max_need: each keeps its needs
        tg.mask(state, 2)
    assert len(tg._needs) == 8 and list(tg._needs) == states[-8:]  # the least recently used went first
    rng = np.random.default_rng(5)
    for _ in range(20):  # walks still work (evicted needs are recomputed)
        walk = random_walk(tg, rng, max_tokens=int(tg.dist[tg.start]) + 2)
        assert not walk.in_block_at_end
    assert len(tg._needs) <= 8
