"""The policies that turn a model's intent into calls: call-first ``required``, steering, a pre-filled opening.

On the logits (real Qwen3 vocabulary) and inside a real ``model.generate`` (tiny random Qwen3):

- call-first ``required``: the first generated token opens the block, the turn is only the call;
- steering: at call points the other shapes' opener mass moves onto the block opener, and every
  other token keeps its logit bit for bit (so its log-probability exactly); elsewhere nothing changes;
- ``assistant_prefix``: the grammar continues after text the prompt already put into the turn.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from toolgrammar.errors import ProcessorError
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.runtime.steering import call_openers
from toolgrammar.turn.parser import parse_turn

from toolsets import SEED_TOOLS

N_COLUMNS = 151936


@pytest.fixture(scope="module")
def model():
    from toolgrammar.evaluate.models import tiny_random_qwen3

    return tiny_random_qwen3().eval()  # the real vocabulary's 151,936 logit columns


@pytest.fixture(scope="module")
def tokenizer(qwen3_tokenizer):
    qwen3_tokenizer.padding_side = "left"
    return qwen3_tokenizer


@pytest.fixture(scope="module")
def openers(qwen3_vocab):
    return call_openers(qwen3_vocab, "<tool_call>")


def _prompt(tokenizer, text: str = "List the files.") -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tools=SEED_TOOLS, add_generation_prompt=True, tokenize=False,
        enable_thinking=False,
    )  # fmt: skip


def _ids(tokenizer, texts: list[str]) -> torch.Tensor:
    return tokenizer(texts, return_tensors="pt", padding=True)["input_ids"]


# -- which tokens are openers ------------------------------------------------------------------------


def test_openers_are_fences_and_braces_after_optional_whitespace(qwen3_vocab, openers):
    vocab = qwen3_vocab
    assert openers.block_opener == vocab.token_id("<tool_call>")
    other = set(openers.other.tolist())
    for text in ("```", "```json", "```python", "{", '{"', "{\n", "[{", "\n```", " {"):
        tid = vocab.token_id(text)
        if tid is not None:
            assert tid in other, text
    for text in ("`", "``", "Hello", "}", "[", "json", "\n", "<tool_call>", "<|im_end|>"):
        tid = vocab.token_id(text)
        assert tid is not None and tid not in other, text
    assert vocab.token_id("```") in other and vocab.token_id("{") in other  # both exist as single tokens
    # every opener really is one: its text, stripped of leading whitespace, starts a fence or JSON
    for tid in openers.other.tolist():
        assert vocab.token_bytes[tid].lstrip(b" \t\r\n").startswith((b"```", b"{", b"[{"))
    assert openers.whitespace[vocab.token_id("\n\n")] and not openers.whitespace[vocab.token_id("Hello")]


def test_steering_refuses_an_opener_whose_first_token_is_free_text(tokenizer):
    """Qwen3 spells mistral's ``[TOOL_CALLS]`` in pieces, the first ``[T``: text may go on after it."""
    with pytest.raises(ProcessorError, match=r"format 'mistral' .* '\[TOOL_CALLS\]' is 6 token\(s\) there \('\[T', "):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, mode="strings", format="mistral", steer_to_blocks=True)


# -- steering on the logits ----------------------------------------------------------------------------


def _step(proc, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return proc(ids, scores.clone())


@pytest.mark.parametrize("rows", [1, 3], ids=["host-row", "batched"])
def test_steering_moves_only_opener_mass_at_call_points(tokenizer, openers, rows):
    """Each row starts at a call point; only the opener pool changes, by exactly its log-sum-exp."""
    prompt = _prompt(tokenizer)
    ids = _ids(tokenizer, [prompt] * rows)
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(rows, N_COLUMNS, generator=gen) * 3
    fence, brace = tokenizer.convert_tokens_to_ids("```"), tokenizer.convert_tokens_to_ids("{")
    scores[:, fence] += 30  # the model would open a fence
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=64, mode="strings", reasoning="disabled")
    steered = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, max_new_tokens=64, mode="strings", reasoning="disabled", steer_to_blocks=True
    )
    before = _step(plain, ids, scores)
    after = _step(steered, ids, scores)
    opener = openers.block_opener
    pooled = np.zeros(N_COLUMNS, dtype=bool)
    pooled[openers.other] = True
    pooled[opener] = True
    untouched = torch.from_numpy(~pooled)
    assert torch.equal(after[:, untouched], before[:, untouched])  # bit for bit
    assert torch.isneginf(after[:, torch.from_numpy(openers.other)]).all()
    expected = torch.logsumexp(before[:, torch.from_numpy(openers.steered)].double(), dim=1).float()
    assert torch.equal(after[:, opener], expected)
    assert (after.argmax(dim=1) == opener).all() and (before.argmax(dim=1) == fence).all()
    # every other token keeps its log-probability: the normaliser is unchanged, up to the float32 rounding of
    # the one pooled logit (a relative 6e-8 of the pooled mass)
    lp_before, lp_after = torch.log_softmax(before.double(), 1), torch.log_softmax(after.double(), 1)
    finite = untouched & torch.isfinite(before[0])
    assert torch.allclose(lp_after[:, finite], lp_before[:, finite], atol=1e-6, rtol=0)
    assert torch.allclose(lp_after[:, opener].exp(), lp_before[:, torch.from_numpy(openers.steered)].exp().sum(1))
    assert steered.steered_steps == rows
    assert brace in openers.other.tolist()


def test_steering_stops_after_text_and_comes_back_after_reasoning(tokenizer, openers):
    """Whitespace keeps a call point; a word ends it; after </think> a new one begins."""
    opts = {"max_new_tokens": 64, "mode": "strings", "reasoning": "enabled"}
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, **opts)
    steered = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, steer_to_blocks=True, **opts)
    prompt = _ids(tokenizer, [_prompt(tokenizer)])
    gen = torch.Generator().manual_seed(3)
    tok = tokenizer.convert_tokens_to_ids

    def run(continuation: list[int]) -> list[bool]:
        """Per step: whether steering changed anything."""
        changed = []
        ids = prompt
        for token in [None, *continuation]:
            if token is not None:
                ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
            scores = torch.randn(1, N_COLUMNS, generator=gen)
            changed.append(not torch.equal(_step(plain, ids, scores), _step(steered, ids, scores)))
        return changed

    newline, word = tok("ĊĊ"), tok("Hello")
    assert run([newline, word, newline]) == [True, True, False, False]
    think = [tok("<think>"), tok("Ċ"), tok("hm"), tok("Ċ"), tok("</think>"), newline, word]
    # in the reasoning nothing is steered; right after it (and after its "\n\n") a call point again
    assert run(think) == [True, False, False, False, False, True, True, False]


def test_steering_never_revives_a_masked_opener(tokenizer):
    """tool_choice='none' removes the opener: steering must leave the fence alone."""
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, mode="strings", tool_choice="none", reasoning="disabled", steer_to_blocks=True
    )
    plain = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, mode="strings", tool_choice="none", reasoning="disabled")
    ids = _ids(tokenizer, [_prompt(tokenizer)])
    scores = torch.randn(1, N_COLUMNS, generator=torch.Generator().manual_seed(1))
    assert torch.equal(_step(proc, ids, scores), _step(plain, ids, scores))
    assert proc.steered_steps == 0


class _Prefer(LogitsProcessor):
    """Stands in for a model that wants to open a code fence: a large bonus on one token at the first step."""

    def __init__(self, token: int, prompt_length: int):
        self.token, self.prompt_length = token, prompt_length

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] == self.prompt_length:
            scores[:, self.token] += 50.0
        return scores


def _turns(tokenizer, out, prompt_length):
    eos = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    texts = []
    for row in out[:, prompt_length:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        texts.append(tokenizer.decode(row[:cut], skip_special_tokens=False))
    return texts


@pytest.mark.parametrize("steer", [False, True], ids=["plain", "steered"])
def test_a_fence_at_the_start_becomes_a_valid_block_when_steered(model, tokenizer, steer):
    inputs = tokenizer([_prompt(tokenizer)] * 2, return_tensors="pt", padding=True)
    length = inputs["input_ids"].shape[1]
    fence = tokenizer.convert_tokens_to_ids("```")
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, max_new_tokens=48, mode="strings", reasoning="disabled", steer_to_blocks=steer
    )
    out = model.generate(
        **inputs, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id,
        logits_processor=LogitsProcessorList([_Prefer(fence, length), proc]),
    )  # fmt: skip
    for text, first in zip(_turns(tokenizer, out, length), out[:, length].tolist(), strict=True):
        parsed = parse_turn(text, SEED_TOOLS, tool_mode="strings")
        if steer:
            assert first == tokenizer.convert_tokens_to_ids("<tool_call>")
            assert parsed.errors == () and len(parsed.tool_calls) >= 1, text
        else:
            assert first == fence and text.startswith("```") and not parsed.blocks


# -- call-first required -----------------------------------------------------------------------------


@pytest.mark.parametrize("reasoning", ["disabled", "enabled"])
def test_required_opens_with_the_call(model, tokenizer, reasoning):
    inputs = tokenizer([_prompt(tokenizer, f"Task {i}") for i in range(3)], return_tensors="pt", padding=True)
    length = inputs["input_ids"].shape[1]
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, max_new_tokens=60, mode="strings", tool_choice="required", reasoning=reasoning
    )
    torch.manual_seed(0)
    out = model.generate(
        **inputs, max_new_tokens=60, do_sample=True, temperature=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
        logits_processor=LogitsProcessorList([proc]),
    )  # fmt: skip
    for text, first in zip(_turns(tokenizer, out, length), out[:, length].tolist(), strict=True):
        parsed = parse_turn(text, SEED_TOOLS, tool_mode="strings")
        assert parsed.errors == () and parsed.tool_calls, text
        assert not (parsed.content or "").strip(), text  # the turn is the call(s), nothing else
        # the first token opens the block: its added token, or the first piece of its spelling
        piece = tokenizer.decode([first])
        assert piece and ("<tool_call>".startswith(piece) or (reasoning == "enabled" and piece == "<think>")), text


def test_prose_first_lets_text_come_before_the_call(tokenizer):
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, mode="strings", tool_choice="required", prose_first=True, reasoning="disabled"
    )
    first = proc.grammar.mask(proc.grammar.start)
    hello = tokenizer.convert_tokens_to_ids("Hello")
    assert first.banned is not None and hello not in first.banned.tolist()
    call_first = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, mode="strings", tool_choice="required",
                                         reasoning="disabled")  # fmt: skip
    only = call_first.grammar.mask(call_first.grammar.start)
    assert only.allowed is not None and hello not in only.allowed.tolist()
    assert tokenizer.convert_tokens_to_ids("<tool_call>") in only.allowed.tolist()


# -- a pre-filled opening ----------------------------------------------------------------------------


def test_assistant_prefix_continues_inside_the_block(model, tokenizer):
    opening = "<tool_call>\n"
    inputs = tokenizer([_prompt(tokenizer) + opening] * 2, return_tensors="pt", padding=True)
    length = inputs["input_ids"].shape[1]
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, max_new_tokens=40, mode="strings", tool_choice="required", reasoning="disabled",
        assistant_prefix=opening,
    )  # fmt: skip
    torch.manual_seed(1)
    out = model.generate(
        **inputs, max_new_tokens=40, do_sample=True, temperature=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
        logits_processor=LogitsProcessorList([proc]),
    )  # fmt: skip
    for text in _turns(tokenizer, out, length):
        assert text.startswith('{"name": "'), text  # straight into the call object
        parsed = parse_turn(opening + text, SEED_TOOLS, tool_mode="strings")
        assert parsed.errors == () and parsed.tool_calls and not parsed.content, text


def test_an_impossible_assistant_prefix_is_refused(tokenizer):
    with pytest.raises(
        ProcessorError,
        match=r"assistant_prefix 'Hello' \(the text already in the assistant turn.*is not a valid start of a turn",
    ):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, tool_choice="required", reasoning="disabled",
                                assistant_prefix="Hello")  # fmt: skip
    with pytest.raises(ProcessorError, match="steer_to_blocks must be True or False"):
        ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, steer_to_blocks="yes")
