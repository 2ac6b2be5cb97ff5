"""Prefix-true masking (:mod:`toolgrammar.runtime.prefix_true`): the tables against a byte-by-byte oracle, the
invariants on random logits (only allowed tokens gain, the mask is the mask, the donors' mass is kept, nothing
changes outside blocks), the device form against the host form, and the runaway values it ends on a real
``model.generate`` (tiny random Qwen3, the real Qwen3 tokenizer, scripted preferences)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor

from toolgrammar import generate_turn
from toolgrammar.errors import ProcessorError
from toolgrammar.evaluate.models import tiny_random_qwen3
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.runtime.masking import MaskApplier
from toolgrammar.runtime.prefix_true import LAYOUT, pour_host_row, pour_host_row_numpy
from toolgrammar.runtime.token_grammar import INF, token_grammar
from toolgrammar.turn.grammar import compile_turn

N_COLUMNS = 151_936
INTEREST = {
    "type": "function",
    "function": {
        "name": "calc_interest",
        "description": "Compound interest.",
        "parameters": {
            "type": "object",
            "properties": {
                "principal": {"type": "number"},
                "rate": {"type": "number"},
                "number_of_years": {"type": "integer"},
            },
            "required": ["principal", "rate", "number_of_years"],
        },
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOLS = [INTEREST, WEATHER]
NUMBER_DONE = (
    '<tool_call>\n{"name": "calc_interest", "arguments": {"principal": 100, "rate": 0.5, "number_of_years": 15'
)
STRING_OPEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris'
# In-block places of every kind: after a value (all properties written), inside a string, in a key, in a name.
PLACES = [
    NUMBER_DONE,
    STRING_OPEN,
    STRING_OPEN + '"',
    '<tool_call>\n{"name": "get_w',
    '<tool_call>\n{"name": "calc_interest", "arguments": {"princ',
    '<tool_call>\n{"name": "calc_interest", "arguments": {"principal": 1',
    "<tool_call>\n",
]


@pytest.fixture(scope="module")
def grammar(qwen3_vocab):
    return token_grammar(compile_turn(TOOLS), qwen3_vocab)


def _state(grammar, text: str) -> int:
    state = grammar.walk_text(text)
    assert state >= 0, text
    return state


def _viable(grammar, state: int, data: bytes) -> bool:
    """The oracle: the grammar's byte automaton walked over ``data`` from ``state`` can still finish."""
    after = grammar._walk_text(state, np.frombuffer(data, dtype=np.uint8)) if data else state
    return after >= 0 and after != grammar.auto.trap and grammar.dist[after] < INF


def _allowed(grammar, state: int) -> np.ndarray:
    m = grammar.mask(state)
    ok = np.zeros(grammar.table.n_tokens, dtype=bool)
    if m.all_allowed:
        ok[:] = True
    elif m.banned is not None:
        ok[:] = True
        ok[m.banned] = False
    else:
        ok[m.allowed] = True
    return ok


# -- the tables ------------------------------------------------------------------------------------------------


def test_the_runaway_shape_pours_a_comma_glued_closer_onto_the_closers(grammar, qwen3_vocab):
    """After ``"number_of_years": 15`` with every property written: ``},`` gives to ``}``-led tokens, ``,``
    gives to nobody (no accepted prefix), and no allowed token is a donor."""
    table = grammar.prefix_table(_state(grammar, NUMBER_DONE))
    by_bytes = {qwen3_vocab.token_bytes[t]: t for t in range(qwen3_vocab.n_tokens)}
    group = table.group_of(b"}")
    assert group >= 0
    donors = {qwen3_vocab.token_bytes[t] for t in table.donors[table.donor_group == group].tolist()}
    assert b"}," in donors and b"},\n" in donors
    assert by_bytes[b","] not in set(table.donors.tolist())
    slots = table.receiver_slot[table.receiver_group == group]
    receivers = {qwen3_vocab.token_bytes[t] for t in table.receivers[slots]}
    assert receivers == {b"}", b"}}", b"}}\n"}
    state = _state(grammar, NUMBER_DONE)
    assert not _allowed(grammar, state)[table.donors].any()
    assert _allowed(grammar, state)[table.receivers].all()


@pytest.mark.parametrize("place", PLACES)
def test_every_table_entry_agrees_with_the_byte_automaton(grammar, qwen3_vocab, place):
    """Each donor is masked, its group's prefix is its longest prefix the automaton can finish from, is more than
    whitespace and leads somewhere else than the state itself; each receiver is allowed and consistent with its
    group's prefix; and every masked token left out has no such prefix."""
    state = _state(grammar, place)
    table = grammar.prefix_table(state)
    allowed = _allowed(grammar, state)
    vocab = qwen3_vocab

    def longest(data: bytes) -> bytes:
        for k in range(len(data), 0, -1):
            if _viable(grammar, state, data[:k]):
                return data[:k]
        return b""

    here = grammar.transitions[state]
    for donor, group in zip(table.donors.tolist(), table.donor_group.tolist(), strict=True):
        data = vocab.token_bytes[donor]
        assert not allowed[donor]
        assert longest(data) == table.prefixes[group] and table.prefixes[group].strip(LAYOUT)
    for slot, group in zip(table.receiver_slot.tolist(), table.receiver_group.tolist(), strict=True):
        token = int(table.receivers[slot])
        data, prefix = vocab.token_bytes[token], table.prefixes[group]
        assert allowed[token]
        assert data.startswith(prefix) or prefix.startswith(data)
    # Masked text tokens that are no donor: no accepted prefix, or one that stays where the row is. (A sample:
    # the whole vocabulary byte by byte is minutes.)
    rng = np.random.default_rng(7)
    donors = set(table.donors.tolist())
    text = [t for t in np.flatnonzero(~allowed).tolist() if t not in vocab.special_ids | vocab.eos_ids]
    for token in rng.choice(text, size=min(1500, len(text)), replace=False).tolist():
        if token in donors:
            continue
        prefix = longest(vocab.token_bytes[token])
        if prefix and prefix.strip(LAYOUT):
            after = grammar._walk_text(state, np.frombuffer(prefix, dtype=np.uint8))
            assert np.array_equal(grammar.transitions[after], here), (vocab.token_bytes[token], prefix)


def test_outside_blocks_the_table_is_empty(grammar):
    for text in ("", "Let me check. ", "Done.\n\n"):
        assert grammar.prefix_table(_state(grammar, text)).empty


# -- the invariants on random logits ---------------------------------------------------------------------------


def _log_mass(values: np.ndarray) -> float:
    values = values[np.isfinite(values)].astype(np.float64)
    top = values.max()
    return float(top + np.log(np.exp(values - top).sum()))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("place", PLACES)
def test_only_allowed_tokens_gain_and_the_donors_mass_is_kept(grammar, place, seed):
    state = _state(grammar, place)
    table = grammar.prefix_table(state)
    rng = np.random.default_rng(seed)
    raw = (rng.standard_normal(N_COLUMNS) * 3).astype(np.float32)
    raw[table.donors] += rng.uniform(0, 8, len(table.donors)).astype(np.float32)  # donors the model wants
    applier = MaskApplier()
    plain = raw.copy()
    applier.apply_host_row(plain, grammar.mask(state), grammar.table.n_tokens)
    poured = plain.copy()
    pour_host_row(poured, raw[table.donors], table)
    assert np.array_equal(np.isfinite(poured), np.isfinite(plain))  # the mask is the mask
    gained = np.zeros(N_COLUMNS, dtype=bool)
    gained[table.receivers] = True
    assert np.array_equal(poured[~gained], plain[~gained])  # bit for bit
    assert (poured[gained] >= plain[gained]).all()
    # Every donor's probability moved onto its group's receivers (each group here has a live receiver).
    expected = np.logaddexp(_log_mass(plain), _log_mass(raw[table.donors]))
    assert math.isclose(_log_mass(poured), expected, rel_tol=0, abs_tol=1e-4)
    # Per group: its receivers hold their own mass plus the group's donors' (a receiver in several groups
    # gains from each, so check the groups whose receivers are theirs alone).
    shared = np.bincount(table.receiver_slot, minlength=len(table.receivers)) > 1
    for g in range(table.n_groups):
        slots = table.receiver_slot[table.receiver_group == g]
        if shared[slots].any():
            continue
        ids = table.receivers[slots]
        before = _log_mass(plain[ids])
        given = _log_mass(raw[table.donors[table.donor_group == g]])
        assert math.isclose(_log_mass(poured[ids]), np.logaddexp(before, given), abs_tol=1e-4)


def test_a_receiver_the_budget_removed_gains_nothing(grammar):
    state = _state(grammar, NUMBER_DONE)
    table = grammar.prefix_table(state)
    raw = np.random.default_rng(1).standard_normal(N_COLUMNS).astype(np.float32)
    row = raw.copy()
    MaskApplier().apply_host_row(row, grammar.mask(state), grammar.table.n_tokens)
    row[table.receivers[1:]] = -np.inf  # as a budget mask would
    before = row.copy()
    pour_host_row(row, raw[table.donors], table)
    assert np.isneginf(row[table.receivers[1:]]).all()
    assert row[table.receivers[0]] > before[table.receivers[0]]
    row[:] = before
    row[table.receivers] = -np.inf  # no receiver left: the donors stay masked, nothing moves
    pour_host_row(row, raw[table.donors], table)
    assert np.array_equal(row, np.where(np.isin(np.arange(N_COLUMNS), table.receivers), -np.inf, before))


@pytest.mark.parametrize("device_rows", [1, 5])
def test_the_device_form_is_the_host_form(grammar, device_rows):
    """:meth:`MaskApplier.pour` on a batch (rows at different places, one outside blocks) equals
    :func:`pour_host_row` per row."""
    places = (PLACES * 2)[:device_rows] if device_rows > 1 else [NUMBER_DONE]
    states = [_state(grammar, p) for p in places]
    if device_rows > 1:
        states[-1] = _state(grammar, "Some text ")
    gen = torch.Generator().manual_seed(5)
    raw = torch.randn(device_rows, N_COLUMNS, generator=gen) * 4
    tables = [grammar.prefix_table(s) for s in states]
    masks = [grammar.mask(s) for s in states]
    applier = MaskApplier()
    logits = raw.clone()
    rows = list(range(device_rows))
    pouring = applier.gather_donors(logits, rows, tables)
    applier.apply(logits, rows, masks, grammar.table.n_tokens)
    assert pouring is not None
    applier.pour(logits, pouring)
    for r, (state, table) in enumerate(zip(states, tables, strict=True)):
        row = raw[r].numpy().copy()
        MaskApplier().apply_host_row(row, grammar.mask(state), grammar.table.n_tokens)
        pour_host_row(row, raw[r].numpy()[table.donors], table)
        assert np.array_equal(np.isfinite(row), np.isfinite(logits[r].numpy()))
        finite = np.isfinite(row)
        assert np.allclose(logits[r].numpy()[finite], row[finite], rtol=1e-6, atol=1e-6)


# -- the processor ---------------------------------------------------------------------------------------------


def test_prefix_true_must_be_a_bool(qwen3_tokenizer):
    with pytest.raises(ProcessorError, match="prefix_true must be True or False"):
        ToolCallLogitsProcessor(qwen3_tokenizer, TOOLS, prefix_true="yes")


@pytest.mark.parametrize("rows", [1, 3], ids=["host-row", "batched"])
def test_free_text_is_bit_identical_with_prefix_true(qwen3_tokenizer, rows):
    prompt = torch.tensor([qwen3_tokenizer.encode("Hello")] * rows)
    raw = torch.randn(rows, N_COLUMNS, generator=torch.Generator().manual_seed(2))
    outs = [
        ToolCallLogitsProcessor(qwen3_tokenizer, TOOLS, reasoning="disabled", prefix_true=on)(prompt, raw.clone())
        for on in (False, True)
    ]
    assert torch.equal(outs[0], outs[1])


# -- runaway values on model.generate ----------------------------------------------------------------------------


class _Scripted(LogitsProcessor):
    """The model's preferences, scripted on top of a tiny random model's logits (which stay, as noise): the
    tokens of ``lead`` one by one, then at the value's end what the embedded model wants there (``parallel_18``:
    a closer glued to a comma, a comma, then a digit just above the closers), and after that the close."""

    def __init__(self, tokenizer: Any, lead: str, value_end: dict[str, float]):
        self.tokenizer = tokenizer
        self.lead = tokenizer.encode(lead, add_special_tokens=False)
        self.value_end = {self._id(text): boost for text, boost in value_end.items()}
        self.close = [self._id(t) for t in ("\n", "</tool_call>", "<|im_end|>")]
        self.start: int | None = None

    def _id(self, text: str) -> int:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        assert len(ids) == 1, (text, ids)
        return ids[0]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.start is None:
            self.start = input_ids.shape[1]
        n = input_ids.shape[1] - self.start
        if n < len(self.lead):
            scores[:, self.lead[n]] += 40.0
            return scores
        written = input_ids[0, self.start + len(self.lead) :].tolist()
        if all(t in self.value_end for t in written):  # still at the value's end (as the grammar left it)
            for token, boost in self.value_end.items():
                scores[:, token] += boost
        else:
            scores[:, self.close] += 40.0
        return scores


RUNAWAYS = {
    # "number_of_years": 15 -> '},' 0.49, ',' 0.46, '0' 0.018, '}}' 0.014 (BFCL parallel_18 on the embedded model)
    "number": (NUMBER_DONE, {"},": 40.0, ",": 39.94, "0": 36.62, "}}": 36.36}, {"number_of_years": 15}),
    # "city": "Paris -> a quote glued to a comma or a newline wanted, a space just above the closing '"}}'
    "string": (STRING_OPEN, {'",': 40.0, '"\n': 39.94, " ": 36.62, '"}}': 36.36}, {"city": "Paris"}),
}


@pytest.mark.parametrize("shape", sorted(RUNAWAYS))
def test_prefix_true_closes_the_value_the_model_meant_to_close(qwen3_tokenizer, shape):
    lead, value_end, expected = RUNAWAYS[shape]
    model = tiny_random_qwen3()
    budget = 96
    turns = {}
    for on in (False, True):
        turns[on] = generate_turn(
            model,
            qwen3_tokenizer,
            [{"role": "user", "content": "Go."}],
            TOOLS,
            max_new_tokens=budget,
            tool_choice="required",
            reasoning="disabled",
            prefix_true=on,
            chat_template_kwargs={"enable_thinking": False},
            do_sample=False,
            logits_processor=[_Scripted(qwen3_tokenizer, lead, value_end)],
        )
    plain, poured = turns[False], turns[True]
    # Renormalized: the value grows until the budget makes the block close.
    assert plain.parsed.errors == ()
    runaway = plain.tool_calls[0].arguments
    assert runaway != {**runaway, **expected}
    assert len(json.dumps(runaway)) > 40
    # Prefix-true: the closer wins at the value's end, and the call is the one the model meant.
    assert poured.parsed.errors == ()
    assert len(poured.tool_calls) == 1
    call = poured.tool_calls[0]
    assert {k: v for k, v in call.arguments.items() if k in expected} == expected
    assert len(poured.token_ids) < len(plain.token_ids)


def test_the_tables_kept_are_bounded(qwen3_vocab, monkeypatch):
    """At most MAX_PREFIX_STATES states keep a table (least recently used out), and one asked again after its
    eviction is built again to the same table."""
    from toolgrammar.runtime import token_grammar as module

    monkeypatch.setattr(module, "MAX_PREFIX_STATES", 3)
    grammar = module.TokenGrammar(compile_turn(TOOLS), qwen3_vocab)  # its own caches
    states = [_state(grammar, place) for place in PLACES]
    first = grammar.prefix_table(states[0])
    for state in states[1:]:
        grammar.prefix_table(state)
        assert len(grammar._prefix_tables) <= 3
    again = grammar.prefix_table(states[0])
    assert again is not first
    for name in ("donors", "donor_group", "receivers", "receiver_slot", "receiver_group"):
        assert np.array_equal(getattr(again, name), getattr(first, name))
    assert again.prefixes == first.prefixes


@pytest.mark.parametrize("place", PLACES)
def test_the_c_core_pours_as_numpy_does(grammar, place):
    """The C core's pour and its numpy twin: the same logits (the same sums in the same order; libm's exp
    against numpy's may differ in the last bit of a double, so allow one float32 ulp), on rows with masked
    receivers and an all-masked row too."""
    from toolgrammar import native

    assert native.module() is not None, native.describe()  # tests/base/test_native.py: the core is built
    state = _state(grammar, place)
    table = grammar.prefix_table(state)
    rng = np.random.default_rng(11)
    for case in range(4):
        raw = (rng.standard_normal(N_COLUMNS) * 5).astype(np.float32)
        row = raw.copy()
        MaskApplier().apply_host_row(row, grammar.mask(state), grammar.table.n_tokens)
        if case == 1 and len(table.receivers) > 1:
            row[table.receivers[::2]] = -np.inf
        if case == 2:
            row[:] = -np.inf
        donors = raw[table.donors] if case != 3 else np.full(len(table.donors), -np.inf, dtype=np.float32)
        by_c, by_numpy = row.copy(), row.copy()
        pour_host_row(by_c, donors, table)
        pour_host_row_numpy(by_numpy, donors, table)
        assert np.array_equal(np.isfinite(by_c), np.isfinite(by_numpy))
        finite = np.isfinite(by_c)
        assert np.allclose(by_c[finite], by_numpy[finite], rtol=1.2e-7, atol=0), case
