"""ToolCallLogitsProcessor inside a real ``model.generate`` (tiny random Qwen3, real vocabulary)."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from toolgrammar.errors import ProcessorError
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.turn.parser import parse_turn

from toolsets import SEED_TOOLS, TYPED_TOOLS

N_COLUMNS = 151936


@pytest.fixture(scope="module")
def model():
    """A randomly initialised tiny Qwen3 with the real vocabulary size (151,936 logit columns)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=N_COLUMNS, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=4096, tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tokenizer(qwen3_tokenizer):
    qwen3_tokenizer.padding_side = "left"
    return qwen3_tokenizer


def prompts(tokenizer, n: int, tools) -> dict:
    texts = []
    for i in range(n):
        messages = [{"role": "user", "content": f"Task {i}: look at file number {i * 7} and report." + " more" * i}]
        texts.append(
            tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                          enable_thinking=False)
        )
    return tokenizer(texts, return_tensors="pt", padding=True)


def turns(tokenizer, out: torch.Tensor, prompt_len: int) -> list[str]:
    texts = []
    eos = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    for row in out[:, prompt_len:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        texts.append(tokenizer.decode(row[:cut], skip_special_tokens=False))
    return texts


def generate(model, tokenizer, tools, *, n=4, max_new_tokens=40, seed=0, **options):
    inputs = prompts(tokenizer, n, tools)
    proc = ToolCallLogitsProcessor(tokenizer, tools, max_new_tokens=max_new_tokens, **options)
    torch.manual_seed(seed)
    out = model.generate(
        **inputs,
        logits_processor=LogitsProcessorList([proc]),
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
    )
    return proc, turns(tokenizer, out, inputs["input_ids"].shape[1])


@pytest.mark.parametrize(
    ("tools", "options"),
    [
        pytest.param(SEED_TOOLS, {"tool_choice": "required", "mode": "strings"}, id="seed-required-strings"),
        pytest.param(TYPED_TOOLS, {"tool_choice": "required"}, id="typed-required"),
        pytest.param(SEED_TOOLS, {"tool_choice": "write_file"}, id="seed-named"),
        pytest.param(TYPED_TOOLS, {"tool_choice": "required", "whitespace": "flexible"}, id="typed-flexible"),
    ],
)
def test_every_row_parses_with_zero_errors_in_a_sampled_batch(model, tokenizer, tools, options):
    proc, texts = generate(model, tokenizer, tools, n=4, max_new_tokens=48, **options)
    assert proc.errors == [None] * 4
    for text in texts:
        parsed = parse_turn(text, tools, tool_mode=options.get("mode", "schema"))
        assert parsed.errors == (), (text, [e.message for e in parsed.errors])
        assert parsed.tool_calls, f"tool_choice={options['tool_choice']} but no call in {text!r}"
        if options["tool_choice"] not in ("required", "auto"):
            assert {c.name for c in parsed.tool_calls} == {options["tool_choice"]}


def test_tool_choice_none_makes_no_block(model, tokenizer):
    _, texts = generate(model, tokenizer, SEED_TOOLS, n=3, max_new_tokens=32, tool_choice="none")
    for text in texts:
        assert not parse_turn(text, SEED_TOOLS).blocks


class _Recorder(LogitsProcessor):
    def __init__(self):
        self.seen: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        self.seen.append(scores.clone())
        return scores


def test_free_text_logits_are_bit_identical_to_the_unconstrained_run(model, tokenizer):
    inputs = prompts(tokenizer, 2, SEED_TOOLS)
    before, after = _Recorder(), _Recorder()
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=30)
    out = model.generate(
        **inputs, logits_processor=LogitsProcessorList([before, proc, after]), max_new_tokens=30, do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    n_tokens = len(tokenizer)
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")
    need = int(proc.grammar.dist[proc.grammar.step(proc.grammar.start, opener)])
    free_steps = 0
    for step, (b, a) in enumerate(zip(before.seen, after.seen, strict=True)):
        for row in range(b.shape[0]):
            if proc_in_block_at(proc, out, inputs, row, step):
                continue
            free_steps += 1
            changed = (b[row, :n_tokens] != a[row, :n_tokens]).nonzero().flatten().tolist()
            remaining = 30 - step
            # The budget policy: the opener goes once a call could no longer close in time. Nothing else moves.
            assert changed == ([] if remaining - 1 >= need else [opener]), f"row {row} step {step}: {changed}"
            assert torch.isinf(a[row, n_tokens:]).all()
    assert free_steps >= 30
    # And the greedy outputs equal an unconstrained run's.
    plain = model.generate(**inputs, max_new_tokens=30, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert torch.equal(plain, out)


def proc_in_block_at(proc, out, inputs, row, step) -> bool:
    """Replay the row's tokens up to ``step`` on a fresh cursor (the processor keeps only the current state)."""
    from toolgrammar.runtime.cursor import Cursor

    cursor = Cursor(proc.grammar, proc.max_new_tokens)
    start = inputs["input_ids"].shape[1]
    for t in out[row, start : start + step].tolist():
        cursor.advance(t)
    return cursor.in_block


def test_one_processor_serves_several_generate_calls(model, tokenizer):
    inputs = prompts(tokenizer, 2, SEED_TOOLS)
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=40, tool_choice="required")
    grammar = proc.grammar
    for seed in (1, 2):
        torch.manual_seed(seed)
        out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]), max_new_tokens=40,
                             do_sample=True, pad_token_id=tokenizer.pad_token_id)
        for text in turns(tokenizer, out, inputs["input_ids"].shape[1]):
            parsed = parse_turn(text, SEED_TOOLS)
            assert parsed.tool_calls and parsed.errors == ()
        assert proc.grammar is grammar
    # A second processor for the same tools and options shares the compiled grammar.
    again = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=40, tool_choice="required")
    assert again.grammar is grammar


def test_beam_search_keeps_each_beam_valid(model, tokenizer):
    inputs = prompts(tokenizer, 1, TYPED_TOOLS)
    proc = ToolCallLogitsProcessor(tokenizer, TYPED_TOOLS, max_new_tokens=40, tool_choice="required")
    out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]), max_new_tokens=40, num_beams=3,
                         num_return_sequences=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    for text in turns(tokenizer, out, inputs["input_ids"].shape[1]):
        parsed = parse_turn(text, TYPED_TOOLS)
        assert parsed.tool_calls and parsed.errors == (), text


def test_budget_is_the_generate_budget(model, tokenizer):
    for budget in (20, 24, 33):
        _, texts = generate(model, tokenizer, SEED_TOOLS, n=3, max_new_tokens=budget, tool_choice="required",
                            seed=budget)
        for text in texts:
            parsed = parse_turn(text, SEED_TOOLS)
            assert parsed.tool_calls and all(b.closed for b in parsed.blocks), text


def test_misuse_gets_clear_errors(tokenizer):
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS)
    with pytest.raises(ProcessorError, match="columns but the tokenizer has"):
        proc(torch.zeros((1, 3), dtype=torch.long), torch.zeros((1, 1000)))
    with pytest.raises(ProcessorError, match="same batch"):
        proc(torch.zeros((2, 3), dtype=torch.long), torch.zeros((1, N_COLUMNS)))
    with pytest.raises(ProcessorError, match="max_new_tokens"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=0)


def test_random_logits_driver_with_batch_and_padding_columns(tokenizer):
    """No model at all: random logits + sampling drive the processor (outlines' test pattern)."""
    proc = ToolCallLogitsProcessor(tokenizer, TYPED_TOOLS, max_new_tokens=60, tool_choice="required")
    gen = torch.Generator().manual_seed(7)
    ids = torch.ones((8, 5), dtype=torch.long)
    for _ in range(60):
        scores = proc(ids, torch.randn((8, N_COLUMNS), generator=gen))
        assert torch.isinf(scores[:, len(tokenizer):]).all()
        nxt = torch.multinomial(torch.softmax(scores, -1), 1, generator=gen)
        ids = torch.cat([ids, nxt], 1)
    for text in turns(tokenizer, ids, 5):
        parsed = parse_turn(text, TYPED_TOOLS)
        assert parsed.tool_calls and parsed.errors == (), text


def test_copies_start_fresh_and_share_the_grammar(tokenizer):
    import copy
    import pickle

    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=64, tool_choice="required")
    ids, scores = torch.tensor([[1, 2, 3]]), torch.randn(1, N_COLUMNS)
    first = proc(ids, scores.clone())
    for other in (copy.deepcopy(proc), pickle.loads(pickle.dumps(proc))):
        assert other.grammar is proc.grammar and other.cursors == []
        assert torch.equal(other(ids, scores.clone()), first)  # a copy masks exactly as the original did


def test_a_processor_shared_by_two_concurrent_generations_is_an_error(tokenizer):
    import threading

    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=64, tool_choice="required")
    worker = threading.Thread(target=lambda: proc(torch.tensor([[1, 2, 3]]), torch.randn(1, N_COLUMNS)))
    worker.start()
    worker.join()  # that thread's generation is under way (1 of 64 tokens)
    with pytest.raises(ProcessorError, match="use one processor per concurrent generation"):
        proc(torch.tensor([[4, 5, 6]]), torch.randn(1, N_COLUMNS))
    proc.reset()  # its owner said it is over: now this thread may start one
    proc(torch.tensor([[4, 5, 6]]), torch.randn(1, N_COLUMNS))


@pytest.mark.parametrize("choice", ["required", "run_tests"])
def test_a_budget_too_small_for_the_forced_call_is_refused(tokenizer, choice):
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=64, tool_choice=choice)
    shortest = int(proc.grammar.dist[proc.grammar.start])
    assert 5 < shortest < 64
    with pytest.raises(ProcessorError, match=rf"max_new_tokens={shortest - 1} is too small .* takes {shortest} tokens"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=shortest - 1, tool_choice=choice)
    ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=shortest, tool_choice=choice)  # enough
    ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=1, tool_choice="auto")  # auto need not call


def test_control_tokens_cannot_spell_markup_when_decoded_as_the_recipe_says(tokenizer):
    """`<tool` + a control token + `_call>` is free text; decoded without skipping specials (the README's recipe,
    examples/hf_generate.py, compare) it stays free text. Skipping them would glue a block opener together."""
    pieces = [tokenizer.convert_tokens_to_ids(t) for t in ("<", "tool", "<|vision_start|>", "_call", ">")]
    assert all(isinstance(i, int) and i >= 0 for i in pieces)
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, tool_choice="none", reasoning="disabled")
    ids = torch.tensor([[1]])
    for token in pieces:  # every piece is allowed: free text is free under tool_choice="none"
        scores = proc(ids, torch.zeros(1, N_COLUMNS))
        assert torch.isfinite(scores[0, token])
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    as_written = parse_turn(tokenizer.decode(pieces, skip_special_tokens=False), SEED_TOOLS)
    assert not as_written.blocks and "<|vision_start|>" in as_written.content
    glued = parse_turn(tokenizer.decode(pieces, skip_special_tokens=True), SEED_TOOLS)
    assert glued.blocks  # what skipping would have shown: a block the grammar never opened
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    src = root / "src" / "toolgrammar"
    # Every place that decodes a generated turn: the one-call entry point (the examples go through it) and compare.
    for path in (src / "integrations" / "hf_generate.py", src / "evaluate" / "compare" / "generation.py"):
        text = path.read_text(encoding="utf-8")
        assert "skip_special_tokens=False" in text and "skip_special_tokens=True" not in text, path
    assert "turn = tokenizer.decode(new, skip_special_tokens=False)" in (root / "README.md").read_text(encoding="utf-8")


def test_each_step_compares_a_bounded_window_not_the_whole_context(tokenizer, monkeypatch):
    """Per step the processor checks windows of the input, so its cost does not grow with the context."""
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=40)
    compared: list[int] = []
    real_equal = torch.equal

    def counting_equal(a, b):
        compared.append(a.numel())
        return real_equal(a, b)

    monkeypatch.setattr(torch, "equal", counting_equal)
    ids = torch.randint(0, 1000, (2, 20_000))  # a 20k-token context, two rows (the batched path)
    for step in range(5):
        proc(ids, torch.randn(2, N_COLUMNS))
        ids = torch.cat([ids, torch.full((2, 1), 100 + step)], dim=1)
    assert compared and max(compared) <= 2 * 16
    assert [c.n_tokens for c in proc.cursors] == [4, 4]  # every step was seen as the same generation
    # a new call of the same length + 1 whose newest tokens differ is a new generation
    other = ids.clone()
    other[:, -3:] = 7
    proc(other, torch.randn(2, N_COLUMNS))
    assert [c.n_tokens for c in proc.cursors] == [0, 0]
