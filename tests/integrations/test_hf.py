"""ToolCallLogitsProcessor inside a real ``model.generate`` (tiny random Qwen3, real vocabulary)."""

from __future__ import annotations

from collections.abc import Callable

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
        vocab_size=N_COLUMNS,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
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
            tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=False
            )
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
        **inputs,
        logits_processor=LogitsProcessorList([before, proc, after]),
        max_new_tokens=30,
        do_sample=False,
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
        out = model.generate(
            **inputs,
            logits_processor=LogitsProcessorList([proc]),
            max_new_tokens=40,
            do_sample=True,
            pad_token_id=tokenizer.pad_token_id,
        )
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
    out = model.generate(
        **inputs,
        logits_processor=LogitsProcessorList([proc]),
        max_new_tokens=40,
        num_beams=3,
        num_return_sequences=3,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    for text in turns(tokenizer, out, inputs["input_ids"].shape[1]):
        parsed = parse_turn(text, TYPED_TOOLS)
        assert parsed.tool_calls and parsed.errors == (), text


def test_budget_is_the_generate_budget(model, tokenizer):
    for budget in (20, 24, 33):
        _, texts = generate(
            model, tokenizer, SEED_TOOLS, n=3, max_new_tokens=budget, tool_choice="required", seed=budget
        )
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
        assert torch.isinf(scores[:, len(tokenizer) :]).all()
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
    """Per step the processor reads windows of the input (its first and last 16 tokens per row, and the new
    token), so its cost does not grow with the context."""
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=40)
    read: list[int] = []
    real_tolist = torch.Tensor.tolist

    def counting_tolist(t):
        read.append(t.numel())
        return real_tolist(t)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    ids = torch.randint(0, 1000, (2, 20_000))  # a 20k-token context, two rows (the batched path)
    for step in range(5):
        proc(ids, torch.randn(2, N_COLUMNS))
        ids = torch.cat([ids, torch.full((2, 1), 100 + step)], dim=1)
    assert read and max(read) <= 2 * (2 * 16 + 1)
    assert [c.n_tokens for c in proc.cursors] == [4, 4]  # every step was seen as the same generation
    # a new call of the same length + 1 whose newest tokens differ is a new generation
    other = ids.clone()
    other[:, -3:] = 7
    proc(other, torch.randn(2, N_COLUMNS))
    assert [c.n_tokens for c in proc.cursors] == [0, 0]


# -- stops: honoured where the turn may end, text everywhere else -----------------------------------------------


def _boost(tokenizer, pieces: dict[str, float]) -> torch.Tensor:
    """A logit bonus for every token whose text holds one of ``pieces`` (the largest bonus that applies)."""
    from toolgrammar.integrations.hf import vocabulary_of

    texts = vocabulary_of(tokenizer).token_bytes
    bonus = torch.zeros(N_COLUMNS)
    for piece, value in pieces.items():
        ids = torch.tensor([i for i, text in enumerate(texts) if piece.encode() in text])
        bonus[ids] = torch.clamp(bonus[ids], min=value)
    return bonus


def _greedy(proc, bonus: Callable[[list[int]], torch.Tensor], *, rows: int, steps: int, seed: int) -> list[list[int]]:
    """Random logits plus ``bonus(tokens so far)``, greedy, until every row has ended its turn: each row's tokens."""
    gen = torch.Generator().manual_seed(seed)
    ends = set(proc.vocab.eos_ids)
    ids = torch.ones((rows, 3), dtype=torch.long)
    for _ in range(steps):
        scores = torch.randn((rows, N_COLUMNS), generator=gen)
        scores += torch.stack([bonus(row) for row in ids[:, 3:].tolist()])
        scores = proc(ids, scores)
        ids = torch.cat([ids, scores.argmax(dim=1, keepdim=True)], dim=1)
        if all(ends & set(row) for row in ids[:, 3:].tolist()):
            break
    return ids[:, 3:].tolist()


@pytest.mark.parametrize("rows", [1, 2], ids=["host-row", "batch"])
def test_stops_never_cut_the_forced_call_and_end_the_turn_after_it(tokenizer, rows):
    """A model that loves ``}``, and wants another call after each one: with ``stop_strings=["}"]`` and the block
    opener as a stop token, the call is written whole (inside the block both are text), and after it the opener's
    mass ends the turn."""
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")
    closer = tokenizer.convert_tokens_to_ids("</tool_call>")
    braces = _boost(tokenizer, {"}": 6.0})
    closing = _boost(tokenizer, {"}": 6.0, '"': 9.0})  # after a while it ends its strings (and the call)
    again = torch.zeros(N_COLUMNS)
    again[opener] = 30.0
    again[tokenizer.convert_tokens_to_ids("Ċ")] = 20.0  # "\n": the grammar's way from one block to the next

    def bonus(tokens: list[int]) -> torch.Tensor:
        if closer in tokens:
            return again
        return braces if len(tokens) < 16 else closing

    options = {"max_new_tokens": 80, "tool_choice": "required", "reasoning": "disabled"}
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, **options)
    stopping = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_strings=["}"], stop_token_ids=[opener], **options)
    assert stopping.stop_strings == ("}",) and stopping.stop_token_ids == (opener,)
    stopped = _greedy(stopping, bonus, rows=rows, steps=80, seed=rows)
    # The same draws without stops, a step past the end: there the wanted opener opens a second call.
    unstopped = _greedy(plain, bonus, rows=rows, steps=max(len(row) for row in stopped) + 1, seed=rows)
    for row, other in zip(stopped, unstopped, strict=True):
        text, other_text = (turns(tokenizer, torch.tensor([tokens]), 0)[0] for tokens in (row, other))
        parsed = parse_turn(text, SEED_TOOLS)
        assert parsed.ok and len(parsed.tool_calls) == 1, text
        assert text.endswith("</tool_call>\n") and text.count("}") >= 2  # the braces went into the call
        assert proc_ends(tokenizer) & set(row)  # the turn ended with its end-of-turn token
        assert other_text.startswith(text + "<tool_call>")
    assert stopping.errors == [None] * rows


def proc_ends(tokenizer) -> set[int]:
    return {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}


def _check_pooled(plain: torch.Tensor, pooled: torch.Tensor, ends: set[int]) -> tuple[int, list[int]]:
    """``pooled`` is ``plain`` with some tokens masked and their mass on one end-of-turn token: that end, those tokens.

    Every other logit is bit-identical; the end's logit is the log-sum-exp of its own and the stopped ones'."""
    changed = (plain != pooled).nonzero().flatten().tolist()
    best = [i for i in changed if i in ends]
    stopped = [i for i in changed if i not in ends]
    assert len(best) <= 1 and torch.isneginf(pooled[stopped]).all()
    assert bool(best) == bool(stopped)  # a stop moved mass to an end, or nothing moved at all
    if best:
        expected = torch.logsumexp(plain[[best[0], *stopped]].double(), dim=0)
        assert float(pooled[best[0]]) == pytest.approx(float(expected), rel=1e-6)
        assert best[0] == max(ends, key=lambda e: float(plain[e]))  # the end the model rated highest
    return (best[0] if best else -1), stopped


@pytest.mark.parametrize("rows", [1, 2], ids=["host-row", "batch"])
def test_a_stop_string_in_free_text_ends_the_turn_where_it_had_the_mass(tokenizer, rows):
    """Under auto, ``stop_strings=["lo wo"]``: "Hello" is written, then " world" (which would complete the stop across
    two tokens) gives its mass to the end of turn, which is taken; the stop's text is never written. Row 2 of the batch
    writes "Hi there" and is untouched."""
    want = [tokenizer.convert_tokens_to_ids(t) for t in ("Hello", "Ġworld")]
    other = [tokenizer.convert_tokens_to_ids(t) for t in ("Hi", "Ġthere")]
    ends = proc_ends(tokenizer)
    options = {"max_new_tokens": 40, "reasoning": "disabled"}
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, **options)
    stopping = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_strings=["lo wo"], **options)
    gen = torch.Generator().manual_seed(11)
    ids = torch.ones((rows, 3), dtype=torch.long)
    for step in range(2):
        raw = torch.randn((rows, N_COLUMNS), generator=gen)
        raw[0, want[step]] += 30.0
        if rows == 2:
            raw[1, other[step]] += 30.0
        a, b = plain(ids, raw.clone()), stopping(ids, raw.clone())
        end, stopped = _check_pooled(a[0], b[0], ends)
        if step == 0:
            assert int(b[0].argmax()) == want[0]  # nothing to stop yet: "Hello" is written
        else:
            assert want[1] in stopped and int(b[0].argmax()) == end  # " world" would stop: the turn ends
        if rows == 2:
            assert torch.equal(a[1], b[1])  # no token holds "lo wo", no tail begins it: untouched
        ids = torch.cat([ids, b.argmax(dim=1, keepdim=True)], dim=1)
    assert turns(tokenizer, ids, 3)[0] == "Hello"  # the stop's text is not written
    # The next generation starts with an empty tail: " world" alone completes nothing.
    raw = torch.randn((rows, N_COLUMNS), generator=gen)
    raw[:, want[1]] += 30.0
    fresh = torch.full((rows, 5), 7, dtype=torch.long)
    assert int(stopping(fresh, raw.clone())[0].argmax()) == want[1]


def test_a_stop_token_ends_the_turn_where_it_may_end_and_is_text_elsewhere(tokenizer):
    hello = tokenizer.convert_tokens_to_ids("Hello")
    ends = proc_ends(tokenizer)
    stopping = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, reasoning="disabled", stop_token_ids=[hello])
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, reasoning="disabled")
    raw = torch.randn((1, N_COLUMNS), generator=torch.Generator().manual_seed(5))
    raw[0, hello] += 30.0
    a, b = plain(torch.ones((1, 3), dtype=torch.long), raw.clone()), stopping(torch.ones((1, 3), dtype=torch.long), raw)
    end, stopped = _check_pooled(a[0], b[0], ends)
    assert stopped == [hello] and int(b[0].argmax()) == end
    # Inside a call the same id is text: the grammar alone decides (a "Hello" in a string argument).
    inside = '<tool_call>\n{"name": "read_file", "arguments": {"path": "'
    options = {"reasoning": "disabled", "assistant_prefix": inside, "max_new_tokens": 40}
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, **options)
    stopping = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_token_ids=[hello], **options)
    raw = torch.randn((1, N_COLUMNS), generator=torch.Generator().manual_seed(6))
    raw[0, hello] += 30.0
    ids = torch.ones((1, 3), dtype=torch.long)
    a, b = plain(ids, raw.clone()), stopping(ids, raw.clone())
    assert torch.equal(a, b) and int(b[0].argmax()) == hello


def test_bad_stops_are_refused_when_the_processor_is_built(tokenizer):
    with pytest.raises(ProcessorError, match="ToolCallLogitsProcessor: each stop string must be 1 to 256 bytes"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_strings=["}", ""])
    with pytest.raises(ProcessorError, match="stop_token_ids holds 999999, not a token id of this vocabulary"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_token_ids=[999_999])
    with pytest.raises(ProcessorError, match="stop must be a string or a list of strings, got 5"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_strings=5)
    # A tuple, a tensor of ids: sequences are taken as lists; a string is one stop.
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, stop_strings="}", stop_token_ids=torch.tensor([7, 3]))
    assert proc.stop_strings == ("}",) and proc.stop_token_ids == (3, 7)
