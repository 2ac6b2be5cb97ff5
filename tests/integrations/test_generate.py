"""The token budget stated once: ``generate_turn`` / ``generate_turns``, ``generate_kwargs()``, and the
warnings when a processor's budget and its generation's disagree (tiny random Qwen3, real Qwen3 tokenizer)."""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from toolgrammar import GeneratedTurn, TokenBudgetWarning, generate_turn, generate_turns
from toolgrammar.errors import ProcessorError, ToolSchemaError
from toolgrammar.evaluate.models import tiny_random_qwen3
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.integrations.hf_generate import GenerateError

from toolsets import SEED_TOOLS

N_COLUMNS = 151_936
MESSAGES = [{"role": "user", "content": "The test for is_even fails. Read src/numbers.py first."}]
NO_THINKING = {"enable_thinking": False}


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_random_qwen3()


@pytest.fixture(scope="module")
def tokenizer(qwen3_tokenizer: Any) -> Any:
    return qwen3_tokenizer  # shared: never mutated here (a test that needs another template copies it)


@contextmanager
def budget_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every TokenBudgetWarning raised inside, none filtered out as a repeat."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found: list[warnings.WarningMessage] = []
        yield found
    found.extend(w for w in caught if issubclass(w.category, TokenBudgetWarning))


def check_turn(turn: GeneratedTurn, tokenizer: Any, budget: int) -> None:
    """What every turn promises: valid, closed calls within the budget, the text decoded as the recipe says."""
    assert turn.parsed.errors == (), (turn.text, [e.message for e in turn.parsed.errors])
    assert all(block.closed for block in turn.parsed.blocks), turn.text
    assert turn.processor_error is None
    assert 0 < len(turn.token_ids) <= budget
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    assert (turn.finish == "stop") == (turn.token_ids[-1] in ends)
    assert not ends & set(turn.token_ids[:-1])  # cut at the first end of turn
    written = turn.token_ids[:-1] if turn.finish == "stop" else turn.token_ids
    assert turn.text == tokenizer.decode(list(written), skip_special_tokens=False)


class _Recorder(LogitsProcessor):
    """Keeps the raw scores of the first step (it runs before the grammar's processor)."""

    def __init__(self) -> None:
        self.first: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.first is None:
            self.first = scores.clone()
        return scores


class _PreferAtStart(LogitsProcessor):
    """Makes one token the model's clear favourite at the first step only."""

    def __init__(self, token: int) -> None:
        self.token = token
        self.start: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.start is None:
            self.start = input_ids.shape[1]
        if input_ids.shape[1] == self.start:
            scores[:, self.token] += 50.0
        return scores


class _AfterOneToken(StoppingCriteria):
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        return torch.ones(input_ids.shape[0], dtype=torch.bool)


# -- generate_turn ------------------------------------------------------------------------------


def test_required_with_a_small_budget_makes_a_valid_call_within_it(model, tokenizer):
    budget = 32  # about twice the shortest call (15 tokens): the budget, not the random model, closes the block
    torch.manual_seed(budget)
    with budget_warnings() as found:
        turn = generate_turn(
            model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=budget, tool_choice="required",
            chat_template_kwargs=NO_THINKING, do_sample=True, top_k=0,
        )  # fmt: skip
    assert found == []  # one budget: nothing to disagree
    check_turn(turn, tokenizer, budget)
    assert turn.tool_calls and turn.text.startswith("<tool_call>")  # required: the turn is the call
    assert turn.reasoning == "disabled"
    expected = tokenizer.apply_chat_template(
        MESSAGES, tools=SEED_TOOLS, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert turn.prompt == expected and expected.rstrip().endswith("</think>")


@pytest.mark.parametrize("close", [True, False])
def test_close_on_stop_is_a_processor_option_not_a_generate_one(model, tokenizer, close, monkeypatch):
    """``close_on_stop`` goes to the processor (a ``generate`` keyword would be refused by transformers)."""
    from toolgrammar.integrations import hf_generate

    seen = []
    real = hf_generate.ToolCallLogitsProcessor

    def spy(*args, **kwargs):
        processor = real(*args, **kwargs)
        seen.append(processor.close_on_stop)
        return processor

    monkeypatch.setattr(hf_generate, "ToolCallLogitsProcessor", spy)
    torch.manual_seed(3)
    turn = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=32, tool_choice="required", close_on_stop=close,
        chat_template_kwargs=NO_THINKING, do_sample=True, top_k=0,
    )  # fmt: skip
    check_turn(turn, tokenizer, 32)
    assert seen == [close]


def test_named_tool_calls_exactly_that_tool(model, tokenizer):
    torch.manual_seed(1)
    turn = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=48, tool_choice="write_file", do_sample=True, top_k=0
    )
    check_turn(turn, tokenizer, 48)
    assert [call.name for call in turn.tool_calls] == ["write_file"]
    assert turn.reasoning == "enabled"  # Qwen3's template, thinking on by default: the turn may reason first


def test_auto_calls_when_the_model_opens_a_block_and_runs_the_callers_processors_first(model, tokenizer):
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")
    turn = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=40, chat_template_kwargs=NO_THINKING,
        logits_processor=[_PreferAtStart(opener)], do_sample=False,
    )  # fmt: skip
    check_turn(turn, tokenizer, 40)
    assert turn.token_ids[0] == opener and turn.tool_calls

    # Free text stays free, control tokens included, and the text keeps them: decoded without skipping special
    # tokens, as the grammar saw it.
    control = tokenizer.convert_tokens_to_ids("<|vision_start|>")
    prose = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=32, chat_template_kwargs=NO_THINKING,
        logits_processor=[_PreferAtStart(control)], do_sample=False,
    )  # fmt: skip
    check_turn(prose, tokenizer, 32)
    assert prose.token_ids[0] == control and prose.text.startswith("<|vision_start|>")
    assert prose.parsed.content is not None and prose.parsed.content.startswith("<|vision_start|>")


def test_a_batch_is_left_padded_and_each_row_decoded_on_its_own(model, tokenizer):
    short = [{"role": "user", "content": "Hi."}]
    long = [{"role": "user", "content": "Compute something with several numbers, " * 6}]
    batch = _Recorder()
    options: dict[str, Any] = {
        "max_new_tokens": 32, "tool_choice": "required", "chat_template_kwargs": NO_THINKING, "do_sample": False
    }  # fmt: skip
    turns = generate_turns(model, tokenizer, [short, long], SEED_TOOLS, logits_processor=[batch], **options)
    assert len(turns) == 2 and turns[0].prompt != turns[1].prompt
    for row, (turn, chat) in enumerate(zip(turns, [short, long], strict=True)):
        check_turn(turn, tokenizer, 32)
        assert turn.tool_calls
        assert chat[0]["content"] in turn.prompt
        single = _Recorder()
        one_step = StoppingCriteriaList([_AfterOneToken()])  # all the comparison needs
        alone = generate_turn(
            model, tokenizer, chat, SEED_TOOLS, logits_processor=[single], stopping_criteria=one_step, **options
        )
        assert alone.prompt == turn.prompt
        # Padding on the left, masked out: each row's first logits are the unpadded prompt's.
        assert batch.first is not None and single.first is not None
        assert torch.allclose(batch.first[row], single.first[0], atol=1e-4), row


def test_a_template_that_opens_the_reasoning_gives_prefilled(model, tokenizer):
    plain = "{{- '<|im_start|>assistant\\n' }}"
    assert tokenizer.chat_template.count(plain) == 1
    thinking = copy.copy(tokenizer)
    thinking.chat_template = tokenizer.chat_template.replace(plain, "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    torch.manual_seed(3)
    turn = generate_turn(
        model, thinking, MESSAGES, SEED_TOOLS, max_new_tokens=48, tool_choice="required", do_sample=True, top_k=0
    )
    assert turn.prompt.endswith("<think>\n") and turn.reasoning == "prefilled"
    check_turn(turn, thinking, 48)
    assert turn.tool_calls and "</think>" in turn.text  # the grammar closed the reasoning, then called
    with pytest.raises(GenerateError, match="ends inside a reasoning part it opened: use reasoning='prefilled'"):
        generate_turn(model, thinking, MESSAGES, SEED_TOOLS, max_new_tokens=48, reasoning="enabled")


# -- stops, min_new_tokens, prefills ------------------------------------------------------------------


def _spy_generate(model: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every keyword set ``model.generate`` was called with (the call itself goes through)."""
    calls: list[dict[str, Any]] = []
    real = model.generate

    def spy(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    return calls


def test_a_stop_string_inside_the_call_is_text_and_goes_to_the_processor(model, tokenizer, monkeypatch):
    calls = _spy_generate(model, monkeypatch)
    torch.manual_seed(4)
    turn = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=40, tool_choice="required", stop_strings=["}"],
        chat_template_kwargs=NO_THINKING, do_sample=True, top_k=0,
    )  # fmt: skip
    check_turn(turn, tokenizer, 40)
    assert turn.parsed.ok and turn.tool_calls and turn.text.count("}") >= 2  # the call's braces are all there
    assert len(calls) == 1 and "stop_strings" not in calls[0]  # generate never saw it: it would have cut the call
    (processor,) = [p for p in calls[0]["logits_processor"] if isinstance(p, ToolCallLogitsProcessor)]
    assert processor.stop_strings == ("}",)


@pytest.mark.parametrize("how", ["stop_strings", "stop_token_ids"])
def test_a_stop_in_free_text_ends_the_turn_with_the_end_of_turn_token(model, tokenizer, how):
    """The model's favourite first token is a stop: its mass goes to the end of turn, and the turn is empty."""
    word = tokenizer.convert_tokens_to_ids("Hello")
    stop: dict[str, Any] = {"stop_strings": "Hel"} if how == "stop_strings" else {"stop_token_ids": [word]}
    turn = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=16, chat_template_kwargs=NO_THINKING,
        logits_processor=[_PreferAtStart(word)], do_sample=False, **stop,
    )  # fmt: skip
    check_turn(turn, tokenizer, 16)
    assert turn.text == "" and turn.finish == "stop"
    assert len(turn.token_ids) == 1  # the end of turn, at once (check_turn: it is an end-of-turn token)
    plain = generate_turn(
        model, tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=16, chat_template_kwargs=NO_THINKING,
        logits_processor=[_PreferAtStart(word)], do_sample=False,
    )  # fmt: skip
    assert plain.text.startswith("Hello")  # without the stop, the favourite is written


def test_min_new_tokens_above_one_is_refused_and_one_runs(model, tokenizer):
    """A call may be complete sooner than any bound known ahead, so only a minimum that cannot reach one holds."""
    options: dict[str, Any] = {"max_new_tokens": 32, "tool_choice": "required", "chat_template_kwargs": NO_THINKING}
    with pytest.raises(
        GenerateError,
        match=r"min_new_tokens=2 could hold the model past the end of its turn: .* under "
        r"tool_choice='required' a call may be complete sooner.* lower it to at most 1 new token",
    ):
        generate_turn(_NoGenerate(), tokenizer, MESSAGES, SEED_TOOLS, min_new_tokens=2, **options)
    torch.manual_seed(2)
    turn = generate_turn(model, tokenizer, MESSAGES, SEED_TOOLS, min_new_tokens=1, do_sample=True, top_k=0,
                         **options)  # fmt: skip
    check_turn(turn, tokenizer, 32)
    assert turn.tool_calls


PREFILL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "'


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_a_prefilled_assistant_message_is_continued_by_the_grammar(model, tokenizer, thinking):
    chat = [*MESSAGES, {"role": "assistant", "content": PREFILL}]
    torch.manual_seed(5)
    turn = generate_turn(
        model, tokenizer, chat, SEED_TOOLS, max_new_tokens=16, chat_template_kwargs={"enable_thinking": thinking},
        do_sample=True, top_k=0,
    )  # fmt: skip
    # Qwen3's template writes the empty reasoning part into the turn when thinking is on: it is part of the prefill.
    prefix = ("<think>\n\n</think>\n\n" if thinking else "") + PREFILL
    head = tokenizer.apply_chat_template(
        MESSAGES, tools=SEED_TOOLS, add_generation_prompt=True, tokenize=False, enable_thinking=thinking
    )
    assert turn.prompt == head + prefix and turn.text.startswith(prefix)
    assert turn.reasoning == ("enabled" if thinking else "disabled")  # read from the prompt before the prefill
    assert turn.parsed.ok and [call.name for call in turn.tool_calls] == ["read_file"], turn.text
    assert turn.processor_error is None and "path" in turn.tool_calls[0].arguments
    written = turn.token_ids[:-1] if turn.finish == "stop" else turn.token_ids
    assert turn.text == prefix + tokenizer.decode(list(written), skip_special_tokens=False)


@pytest.mark.parametrize(
    ("conversations", "kwargs", "error", "match"),
    [
        ([[*MESSAGES, {"role": "assistant", "content": '<tool_call>\n{"name": "delete_everything"'}]], {},
         ProcessorError, r"is not a valid start of a turn .* so the grammar cannot continue it"),
        ([[*MESSAGES, {"role": "assistant", "content": PREFILL}]], {"assistant_prefix": "<tool_call>\n"},
         GenerateError, r"ends with an assistant message, .* and assistant_prefix is given too"),
        ([[*MESSAGES, {"role": "assistant", "content": PREFILL}], MESSAGES], {},
         GenerateError, r"conversations\[0\] ends with an assistant message \(a prefill\) but conversations\[1\] "
                        r"does not"),
        ([[*MESSAGES, {"role": "assistant", "content": PREFILL}], [*MESSAGES, {"role": "assistant", "content": "Hi"}]],
         {}, GenerateError, r"conversations\[0\] and conversations\[1\] prefill different text"),
        ([[{"role": "assistant", "content": PREFILL}]], {}, GenerateError, r"is only an assistant message"),
        ([[*MESSAGES, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]], {},
         GenerateError, r"conversations\[0\]\[-1\]: .* a prefilled assistant message must be text"),
    ],
)  # fmt: skip
def test_a_prefill_that_cannot_be_continued_is_refused_before_generating(
    tokenizer, conversations, kwargs, error, match
):
    with pytest.raises(error, match=match):
        generate_turns(_NoGenerate(), tokenizer, conversations, SEED_TOOLS, max_new_tokens=32,
                       chat_template_kwargs=NO_THINKING, **kwargs)  # fmt: skip


# -- bad input -----------------------------------------------------------------------------------


class _NoGenerate:
    """A model that must never be asked to generate: each error below comes before any generation."""

    generation_config = None

    def generate(self, **kwargs: Any) -> Any:
        raise AssertionError("generate() was called")


BAD_TOOLS = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}]


@pytest.mark.parametrize(
    ("messages", "tools", "kwargs", "error", "match"),
    [
        ("hello", SEED_TOOLS, {}, GenerateError, "messages must be a list of chat messages .* got str"),
        (MESSAGES[0], SEED_TOOLS, {}, GenerateError, "messages must be a list of chat messages .* got dict"),
        ([], SEED_TOOLS, {}, GenerateError, "messages is empty"),
        ([{"content": "hi"}], SEED_TOOLS, {}, GenerateError, r"messages\[0\] must be a message dict with a 'role'"),
        (MESSAGES, BAD_TOOLS, {}, ToolSchemaError, "tool 'f'"),
        (MESSAGES, SEED_TOOLS, {"max_new_tokens": 0}, GenerateError, "max_new_tokens must be a positive int"),
        (MESSAGES, SEED_TOOLS, {"max_new_tokens": True}, GenerateError, "max_new_tokens must be a positive int"),
        (MESSAGES, SEED_TOOLS, {"max_length": 900}, GenerateError, "max_length is set by generate_turn"),
        (MESSAGES, SEED_TOOLS, {"num_return_sequences": 2}, GenerateError, "num_return_sequences must be 1"),
        (MESSAGES, SEED_TOOLS, {"chat_template_kwargs": {"tools": []}}, GenerateError, "may not set tools"),
        (MESSAGES, SEED_TOOLS, {"reasoning": "disabled", "chat_template_kwargs": {"enable_thinking": True}},
         GenerateError, "reasoning='disabled' contradicts chat_template_kwargs enable_thinking=True"),
        (MESSAGES, SEED_TOOLS, {"reasoning": "prefilled"}, GenerateError, "does not end by opening a reasoning"),
        (MESSAGES, SEED_TOOLS, {"tool_choice": "required", "max_new_tokens": 3, "reasoning": "disabled"},
         ProcessorError, "max_new_tokens=3 is too small for tool_choice='required'"),
        (MESSAGES, SEED_TOOLS, {"min_new_tokens": 2, "reasoning": "disabled"}, GenerateError,
         r"min_new_tokens=2 could hold the model past the end of its turn: .* under tool_choice='auto' a call may "
         r"be complete sooner.* lower it to at most 1"),
        (MESSAGES, SEED_TOOLS, {"generation_config": GenerationConfig(min_new_tokens=3), "tool_choice": "auto"},
         GenerateError, r"min_new_tokens=3 could hold the model past the end of its turn"),
        (MESSAGES, SEED_TOOLS, {"min_length": 10_000, "tool_choice": "required"}, GenerateError,
         r"min_length=10000 \(\d+ new tokens after the \d+-token prompt\) could hold the model past the end of "
         r"its turn.* lower it to at most 1 new token"),
        (MESSAGES, SEED_TOOLS, {"stop_strings": [""]}, ProcessorError, "each stop string must be 1 to 256 bytes"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_generating(tokenizer, messages, tools, kwargs, error, match):
    kwargs = {"max_new_tokens": 32, **kwargs}
    with pytest.raises(error, match=match):
        generate_turn(_NoGenerate(), tokenizer, messages, tools, **kwargs)


def test_generate_turns_refuses_a_single_conversation_and_a_tokenizer_without_template(tokenizer):
    with pytest.raises(GenerateError, match="this looks like one conversation: use generate_turn"):
        generate_turns(_NoGenerate(), tokenizer, MESSAGES, SEED_TOOLS, max_new_tokens=32)
    bare = copy.copy(tokenizer)
    bare.chat_template = None
    with pytest.raises(GenerateError, match="has no chat template"):
        generate_turn(_NoGenerate(), bare, MESSAGES, SEED_TOOLS, max_new_tokens=32)


# -- the manual route: generate_kwargs() and the disagreement warnings ---------------------------


def _inputs(tokenizer: Any) -> dict[str, torch.Tensor]:
    text = tokenizer.apply_chat_template(
        MESSAGES, tools=SEED_TOOLS, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    return tokenizer(text, return_tensors="pt")


def test_generate_kwargs_states_the_budget_once(model, tokenizer):
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=40, tool_choice="required",
                                   reasoning="disabled")  # fmt: skip
    kwargs = proc.generate_kwargs()
    assert set(kwargs) == {"logits_processor", "max_new_tokens"} and kwargs["max_new_tokens"] == 40
    assert isinstance(kwargs["logits_processor"], LogitsProcessorList) and list(kwargs["logits_processor"]) == [proc]
    inputs = _inputs(tokenizer)
    torch.manual_seed(0)
    with budget_warnings() as found:
        out = model.generate(**inputs, **proc.generate_kwargs(), do_sample=True, top_k=0)
    assert found == []
    assert proc.generate_budget == 40  # the processor did read generate's budget: the silence above means agreement
    assert out.shape[1] - inputs["input_ids"].shape[1] <= 40
    without = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, reasoning="disabled")
    assert set(without.generate_kwargs()) == {"logits_processor"}


@pytest.mark.parametrize(
    ("processor_budget", "generate_budget", "choice", "match"),
    [
        (64, 32, "required", r"built with max_new_tokens=64, but generate\(\) stops after 32 new tokens: a tool call "
                             r"still open at token 32 is cut off"),
        (32, 40, "auto", r"built with max_new_tokens=32, but generate\(\) allows 40 new tokens"),
        (None, 32, "required", r"built without max_new_tokens, but generate\(\) stops after 32 new tokens.*"
                               r"max_new_tokens=32"),
    ],
)  # fmt: skip
def test_a_processor_whose_budget_is_not_generates_warns_naming_both(
    model, tokenizer, processor_budget, generate_budget, choice, match
):
    proc = ToolCallLogitsProcessor(
        tokenizer, SEED_TOOLS, max_new_tokens=processor_budget, tool_choice=choice, reasoning="disabled"
    )
    inputs = _inputs(tokenizer)
    with budget_warnings() as found:
        out = model.generate(
            **inputs, logits_processor=LogitsProcessorList([proc]), max_new_tokens=generate_budget, do_sample=False,
            stopping_criteria=StoppingCriteriaList([_AfterOneToken()]),
        )  # fmt: skip
    assert out.shape[1] == inputs["input_ids"].shape[1] + 1  # the warning came at the start, before any token
    assert len(found) == 1, [str(w.message) for w in found]
    assert proc.generate_budget == generate_budget
    message = str(found[0].message)
    assert re.search(match, message), message
    assert "processor.generate_kwargs()" in message and "generate_turn" in message  # the fix
    assert found[0].filename == __file__  # it points at the generate() call, not into transformers


def _hand_loop(proc: ToolCallLogitsProcessor, tokenizer: Any, steps: int) -> None:
    """Drive the processor outside transformers: the model always wants the same plain word."""
    word = tokenizer.convert_tokens_to_ids("Hello")
    ids = torch.tensor([[1, 2, 3]])
    for _ in range(steps):
        scores = torch.zeros(1, N_COLUMNS)
        scores[0, word] = 10.0
        scores = proc(ids, scores)
        ids = torch.cat([ids, scores.argmax(dim=1, keepdim=True)], dim=1)


def test_outside_generate_a_loop_running_past_the_budget_warns_once(tokenizer):
    proc = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=6, reasoning="disabled")
    with budget_warnings() as found:
        _hand_loop(proc, tokenizer, 6)  # exactly the budget: nothing to say
    assert found == [] and proc.generate_budget is None
    with budget_warnings() as found:
        _hand_loop(proc, tokenizer, 10)  # a new generation, four steps past the budget
    assert len(found) == 1, [str(w.message) for w in found]
    message = str(found[0].message)
    assert "asks for new token 7, but this ToolCallLogitsProcessor was built with max_new_tokens=6" in message
    assert found[0].filename == __file__


def test_outside_generate_no_budget_warns_only_when_a_call_is_forced(tokenizer):
    forced = ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, tool_choice="required", reasoning="disabled")
    with budget_warnings() as found:
        forced(torch.tensor([[1, 2, 3]]), torch.zeros(1, N_COLUMNS))
    assert len(found) == 1 and "without max_new_tokens under tool_choice='required'" in str(found[0].message)
    with budget_warnings() as found:
        for choice in ("auto", "none"):
            _hand_loop(ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, tool_choice=choice, reasoning="disabled"),
                       tokenizer, 3)  # fmt: skip
    assert found == []
