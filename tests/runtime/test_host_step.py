"""The one-row host step's two C pieces against their numpy twins, and the transformers processor's one-row path
with the C core (input and row by address) against the same path in numpy: the same values, bit for bit.

``mask_row`` writes a state's mask into a row (``HostMasker.apply_numpy`` is its twin); ``follow_ids`` tells
the next step of a generation from a new one (``InputWindow`` without the core is its twin).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolgrammar import native
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.runtime.host_row import HostMasker
from toolgrammar.runtime.input_window import WINDOW, InputWindow
from toolgrammar.runtime.token_grammar import StateMask, token_grammar
from toolgrammar.turn.grammar import compile_turn

from toolsets import SEED_TOOLS, TYPED_TOOLS

N_COLUMNS = 151936


@pytest.fixture(scope="module")
def core():
    module = native.module()
    assert module is not None, native.describe()  # tests/base/test_native.py: the core is built
    return module


@pytest.fixture(scope="module")
def grammar(qwen3_vocab):
    return token_grammar(compile_turn(TYPED_TOOLS, reasoning="disabled"), qwen3_vocab)


def _masks_of_a_call(grammar, tokenizer) -> list[StateMask | None]:
    """The masks along one typed call, from the turn's start to the end of turn: structure (short allowed lists),
    string insides (banned lists), free text (all allowed) and the finished row (``None``)."""
    text = 'Sure.\n<tool_call>\n{"name": "calculate", "arguments": {"x": 12, "y": 0.5, "note": "half"}}\n</tool_call>'
    state = grammar.walk_text("")
    masks: list[StateMask | None] = [grammar.mask(state)]
    for token in [*tokenizer.encode(text, add_special_tokens=False), tokenizer.convert_tokens_to_ids("<|im_end|>")]:
        state = grammar.step(state, token)
        assert state >= 0
        masks.append(None if grammar.is_finished(state) else grammar.mask(state))
    return masks


def test_the_walk_covers_every_kind_of_mask(grammar, qwen3_tokenizer):
    kinds = {
        "none" if m is None else "all" if m.all_allowed else "banned" if m.banned is not None else "allowed"
        for m in _masks_of_a_call(grammar, qwen3_tokenizer)
    }
    assert kinds == {"none", "all", "banned", "allowed"}


@pytest.mark.parametrize("padding", [0, 267], ids=["no-padding", "padding"])
@pytest.mark.parametrize("by", ["buffer", "address"])
def test_mask_row_writes_what_numpy_writes(grammar, qwen3_tokenizer, core, padding, by):
    n_tokens = grammar.table.n_tokens
    width = n_tokens + padding
    rng = np.random.default_rng(padding)
    masker = HostMasker()
    for m in _masks_of_a_call(grammar, qwen3_tokenizer):
        raw = rng.standard_normal(width).astype(np.float32)
        expected, got = raw.copy(), raw.copy()
        masker.apply_numpy(expected, m, n_tokens)
        if by == "buffer":
            masker.apply(got, m, n_tokens, core)
        else:
            masker.apply_at(got.ctypes.data, width, m, n_tokens, core)
        assert np.array_equal(got, expected)  # -inf where masked, the raw logit bit for bit elsewhere
        assert np.isneginf(got[n_tokens:]).all()


def test_mask_row_refuses_what_does_not_fit_and_writes_nothing(core):
    row = np.arange(10, dtype=np.float32)
    before = row.copy()
    with pytest.raises(ValueError, match=r"id 8 at 1 is outside 0\.\.7"):
        core.mask_row(row, 10, 8, np.array([2, 8], dtype=np.int64), None)
    with pytest.raises(ValueError, match=r"id -1 at 0 is outside"):
        core.mask_row(row, 10, 8, None, np.array([-1], dtype=np.int64))
    with pytest.raises(ValueError, match="not both"):
        core.mask_row(row, 10, 8, np.array([1], dtype=np.int64), np.array([2], dtype=np.int64))
    with pytest.raises(ValueError, match="width 10 is less than n_tokens 12"):
        core.mask_row(row, 10, 12, None, None)
    with pytest.raises(ValueError, match="row: 10 columns, but width is 11"):
        core.mask_row(row, 11, 8, None, None)
    with pytest.raises(TypeError, match="row: expected 4-byte items"):
        core.mask_row(row.astype(np.float64), 10, 8, None, None)
    with pytest.raises(TypeError, match="banned: expected 8-byte items"):
        core.mask_row(row, 10, 8, np.array([1], dtype=np.int32), None)
    assert np.array_equal(row, before)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("by", ["buffer", "address"])
def test_follow_ids_agrees_with_numpy_on_steps_and_new_generations(core, seed, by):
    """Random inputs: mostly the next step, sometimes a changed head, a changed tail, a changed middle (still a step:
    the windows do not look there), a longer or shorter input, or a new prompt. Both keep the same windows and give
    the same answers."""
    rng = np.random.default_rng(seed)
    in_c, in_numpy = InputWindow(), InputWindow()
    prompt_length = int(rng.integers(1, 40))
    seq = rng.integers(0, 150_000, prompt_length).astype(np.int64)
    for window in (in_c, in_numpy):
        window.restart(seq, prompt_length)
    followed = 0
    for _ in range(300):
        kind = rng.choice(["step", "step", "step", "head", "tail", "middle", "skip", "same", "new"])
        nxt = np.append(seq, rng.integers(0, 150_000)).astype(np.int64)
        if kind == "head" and len(nxt) > 1:
            nxt[int(rng.integers(0, min(WINDOW, prompt_length)))] += 1
        elif kind == "tail":
            nxt[len(nxt) - 2 - int(rng.integers(0, min(WINDOW, len(seq))))] += 1
        elif kind == "middle" and len(nxt) > 2 * WINDOW + 1:
            nxt[WINDOW] += 1
        elif kind == "skip":
            nxt = np.append(nxt, 5).astype(np.int64)
        elif kind == "same":
            nxt = seq.copy()
        elif kind == "new":
            prompt_length = int(rng.integers(1, 40))
            nxt = rng.integers(0, 150_000, prompt_length).astype(np.int64)
        ids = nxt if by == "buffer" else nxt.ctypes.data
        got, expected = in_c.follows(ids, len(nxt), core), in_numpy.follows(nxt, len(nxt), None)
        assert got == expected
        if kind in ("step", "middle"):
            assert got == int(nxt[-1])  # the next step, whatever the middle holds
        elif kind in ("head", "tail", "skip", "same"):
            assert got == -1, kind
        if got < 0:
            if kind != "new":
                prompt_length = len(nxt)
            for window in (in_c, in_numpy):
                window.restart(nxt, prompt_length)
        else:
            followed += 1
        seq = nxt
        assert in_c.length == in_numpy.length == len(seq)
    assert followed > 100


def test_follow_ids_refuses_a_buffer_of_another_length_or_item(core):
    window = InputWindow()
    window.restart(np.arange(5, dtype=np.int64), 5)
    with pytest.raises(ValueError, match="follow_ids: 6 ids, but length is 7"):
        window.follows(np.arange(6, dtype=np.int64), 7, core)
    with pytest.raises(TypeError, match="ids: expected 8-byte items"):
        window.follows(np.arange(6, dtype=np.int32), 6, core)
    assert window.follows(np.arange(6, dtype=np.int64), 6, core) == 5


# -- the transformers processor's one-row path ------------------------------------------------------------------


def _drive(proc, *, seed: int, steps: int, ids_dtype=torch.long, strided: bool = False) -> list[torch.Tensor]:
    """Random logits, sampled tokens, one row: each step's processed scores (the row's own tokens chosen from them)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.ones((1, 5), dtype=ids_dtype)
    out = []
    for _ in range(steps):
        raw = torch.randn((1, N_COLUMNS), generator=gen) * 3
        if strided:  # a row that is a view with a column stride: numpy views it, the address path does not apply
            wide = torch.empty((1, 2 * N_COLUMNS))
            wide[:, ::2] = raw
            scores = wide[:, ::2]
        else:
            scores = raw
        got = proc(ids, scores)
        assert got.data_ptr() == scores.data_ptr()  # in place
        out.append(got.clone())
        probs = torch.softmax(got.double(), -1)
        nxt = torch.multinomial(probs, 1, generator=gen).to(ids_dtype)
        ids = torch.cat([ids, nxt], 1)
    return out


OPTIONS = [
    pytest.param(SEED_TOOLS, {"tool_choice": "required"}, id="required"),
    pytest.param(TYPED_TOOLS, {"prefix_true": True, "tool_choice": "required"}, id="prefix-true"),
    pytest.param(SEED_TOOLS, {"stop_strings": ["}"], "steer_to_blocks": True}, id="stops-steering"),
    pytest.param(TYPED_TOOLS, {"close_on_stop": False, "tool_choice": "required"}, id="no-close-on-stop"),
]


@pytest.mark.parametrize(("tools", "options"), OPTIONS)
def test_the_host_row_writes_the_same_with_and_without_the_core(qwen3_tokenizer, tools, options, monkeypatch):
    """Every option that reads the row (close_on_stop, prefix-true, stop strings, steering) on the path that reads
    the input and writes the mask by address, and on the numpy path: every step's scores bit for bit. Then the
    shapes the address path leaves to numpy (int32 ids, a strided row) give the same scores too."""
    steps = 60
    with_core = ToolCallLogitsProcessor(qwen3_tokenizer, tools, max_new_tokens=steps, **options)
    assert with_core.grammar.table.native is not None
    on = _drive(with_core, seed=3, steps=steps)
    int32 = _drive(with_core, seed=3, steps=steps, ids_dtype=torch.int32)
    strided = _drive(with_core, seed=3, steps=steps, strided=True)
    numpy_proc = ToolCallLogitsProcessor(qwen3_tokenizer, tools, max_new_tokens=steps, **options)
    monkeypatch.setattr(numpy_proc.grammar.table, "native", None)
    off = _drive(numpy_proc, seed=3, steps=steps)
    monkeypatch.undo()
    for k, (a, b, c, d) in enumerate(zip(on, off, int32, strided, strict=True)):
        for other in (b, c, d):
            assert torch.equal(a, other), k
    assert any(not torch.isfinite(s).all() for s in on)  # it did mask
    assert with_core.errors == [None]


def test_a_new_generation_is_seen_on_the_address_path(qwen3_tokenizer):
    """The same processor, a second input that is not the first plus one token: the cursor starts again."""
    proc = ToolCallLogitsProcessor(qwen3_tokenizer, SEED_TOOLS, max_new_tokens=20, tool_choice="required")
    ids = torch.ones((1, 30), dtype=torch.long)
    for step in range(4):
        proc(ids, torch.randn(1, N_COLUMNS))
        opener = qwen3_tokenizer.convert_tokens_to_ids("<tool_call>") if step == 0 else 198
        ids = torch.cat([ids, torch.tensor([[opener]])], 1)
    assert proc.cursors[0].n_tokens == 3
    other = ids.clone()
    other[0, 2] = 7  # the prompt's head differs: a new generate() call
    proc(other, torch.randn(1, N_COLUMNS))
    assert proc.cursors[0].n_tokens == 0
