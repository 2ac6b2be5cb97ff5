"""toolgrammar.integrations.outlines in a real outlines ``Generator`` (tiny random Qwen3, real Qwen3 tokenizer),
and the regex exports in outlines-core."""

from __future__ import annotations

import contextlib
import importlib
import random
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import outlines
import outlines_core
import pytest
import torch
from outlines.types import Regex
from transformers import StoppingCriteria, StoppingCriteriaList

from toolgrammar.errors import ProcessorError
from toolgrammar.evaluate.models import tiny_random_qwen3
from toolgrammar.integrations.outlines import ToolCallGenerator, ToolCallProcessor, ToolPrompt, chat_prompt
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from toolsets import PREFIX_TOOLS, SEED_TOOLS, TYPED_TOOLS

SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0}


@pytest.fixture(scope="module")
def model(qwen3_tokenizer) -> Any:
    """outlines' own model object, built by outlines' own constructor."""
    return outlines.from_transformers(tiny_random_qwen3(), qwen3_tokenizer)


class _Final(StoppingCriteria):
    """Keeps the sequences of the last step: the tokens behind the strings outlines returns."""

    def __init__(self) -> None:
        self.ids: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.ids = input_ids.clone()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _generated(model: Any, prompts: list[str], final: _Final) -> list[list[int]]:
    """Per row, the generated tokens up to the end of the turn; checks that the prompt went in as it is."""
    tokenizer = model.hf_tokenizer
    assert final.ids is not None
    eos = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    rows = []
    for prompt, row in zip(prompts, final.ids.tolist(), strict=True):
        prompt_ids = tokenizer(prompt)["input_ids"]
        padded = len(tokenizer(prompts, padding=True)["input_ids"][0])
        assert row[padded - len(prompt_ids) : padded] == prompt_ids  # not wrapped in the template a second time
        new = row[padded:]
        rows.append(new[: next((i for i, t in enumerate(new) if t in eos), len(new))])
    return rows


def _decoded(model: Any, rows: list[list[int]]) -> list[str]:
    return [model.hf_tokenizer.decode(row, skip_special_tokens=False) for row in rows]


@contextlib.contextmanager
def _biased(model: Any, tokens: list[int], by: float) -> Iterator[None]:
    """The model's logits for ``tokens`` raised by ``by``: a model that keeps reaching for them."""
    lm_head = model.model.lm_head
    bias = torch.zeros(lm_head.out_features)
    bias[tokens] = by
    handle = lm_head.register_forward_hook(lambda _module, _inputs, out: out + bias)
    try:
        yield
    finally:
        handle.remove()


# -- the processor in outlines.Generator ---------------------------------------------------------


def test_required_calls_are_valid_and_close_within_the_budget(model):
    prompt = chat_prompt(model, "Read the file notes.txt", SEED_TOOLS, enable_thinking=False)
    assert prompt.reasoning == "disabled"
    budget = 32
    processor = ToolCallProcessor(
        model, SEED_TOOLS, max_new_tokens=budget, tool_choice="required", mode="strings", reasoning=prompt.reasoning
    )
    generator = outlines.Generator(model, processor=processor)
    prompts = [prompt] * 4
    final = _Final()
    torch.manual_seed(0)
    texts = generator.batch(prompts, max_new_tokens=budget, stopping_criteria=StoppingCriteriaList([final]), **SAMPLING)
    rows = _generated(model, prompts, final)
    assert processor.errors == [None] * 4
    assert texts == _decoded(model, rows)
    for text, row in zip(texts, rows, strict=True):
        parsed = parse_turn(text, SEED_TOOLS, tool_mode="strings")
        assert parsed.errors == (), (text, [e.message for e in parsed.errors])
        assert parsed.tool_calls and text.startswith("<tool_call>") and text.endswith("</tool_call>"), text
        assert len(row) <= budget

    # The same rows without the budget: the random model does not close its strings in time.
    unbounded = ToolCallProcessor(
        model, SEED_TOOLS, max_new_tokens=None, tool_choice="required", mode="strings", reasoning=prompt.reasoning
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the processor may warn that it has no budget: that is the point here
        cut = outlines.Generator(model, processor=unbounded).batch(prompts, max_new_tokens=budget, **SAMPLING)
    kinds = [{e.kind for e in parse_turn(text, SEED_TOOLS, tool_mode="strings").errors} for text in cut]
    assert any("truncated" in k for k in kinds), cut


def test_a_named_tool_through_the_convenience_generator(model):
    prompt = chat_prompt(model, [{"role": "user", "content": "Add 2 and 3."}], TYPED_TOOLS, enable_thinking=False)
    generator = ToolCallGenerator(model, TYPED_TOOLS, max_new_tokens=40, tool_choice="calculate", reasoning="disabled")
    torch.manual_seed(0)
    text = generator(prompt, **SAMPLING)
    parsed = parse_turn(text, TYPED_TOOLS)
    assert parsed.errors == (), (text, [e.message for e in parsed.errors])
    assert [c.name for c in parsed.tool_calls] == ["calculate"], text
    assert isinstance(parsed.tool_calls[0].arguments["x"], int)


def test_auto_calls_are_valid_and_the_returned_text_is_the_checked_text(model):
    """A model that keeps reaching for the opener and for control tokens, under ``auto``.

    outlines decodes with ``skip_special_tokens=True``: the control tokens the model writes in free
    text vanish from its string. ``exact_text`` keeps them out of free text, so the string is the text
    the grammar checked; without it the string and the tokens part ways.
    """
    tokenizer = model.hf_tokenizer
    prompt = chat_prompt(model, "List the files, then read one.", SEED_TOOLS)
    assert prompt.reasoning == "enabled"
    processor = ToolCallProcessor(model, SEED_TOOLS, max_new_tokens=48, reasoning=prompt.reasoning)
    control = list(processor.control_ids)
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")
    prompts = [prompt] * 4
    runs = {}
    with _biased(model, control, 8.0), _biased(model, [opener], 11.0):
        for exact in (True, False):
            generator = ToolCallGenerator(
                model, SEED_TOOLS, max_new_tokens=48, reasoning=prompt.reasoning, exact_text=exact
            )
            final = _Final()
            torch.manual_seed(0)
            texts = generator.batch(prompts, stopping_criteria=StoppingCriteriaList([final]), **SAMPLING)
            rows = _generated(model, prompts, final)
            assert generator.processor.errors == [None] * 4
            runs[exact] = (texts, rows)
    texts, rows = runs[True]
    assert texts == _decoded(model, rows)
    assert not any(t in control for row in rows for t in row)
    calls = 0
    for text in texts:
        parsed = parse_turn(text, SEED_TOOLS)
        assert parsed.errors == (), (text, [e.message for e in parsed.errors])
        calls += len(parsed.tool_calls)
    assert calls > 0
    texts, rows = runs[False]
    assert any(t in control for row in rows for t in row)
    assert texts != _decoded(model, rows)


def test_the_processor_refuses_a_budget_too_small_for_a_forced_call(model):
    with pytest.raises(ProcessorError, match="too small for tool_choice='required'"):
        ToolCallProcessor(model, SEED_TOOLS, max_new_tokens=3, tool_choice="required")


def test_the_convenience_generator_keeps_the_budget_and_the_reasoning_of_the_prompt(model):
    prompt = chat_prompt(model, "hi", SEED_TOOLS, enable_thinking=False)
    generator = ToolCallGenerator(model, SEED_TOOLS, max_new_tokens=32, reasoning="enabled")
    with pytest.raises(ProcessorError, match="reasoning='disabled'"):
        generator(prompt)
    generator = ToolCallGenerator(model, SEED_TOOLS, max_new_tokens=32, reasoning=prompt.reasoning)
    with pytest.raises(ProcessorError, match="differs from the processor's budget"):
        generator(prompt, max_new_tokens=64)


# -- the prompt -----------------------------------------------------------------------------------

_PREFILLED_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n<think>\n"
)


def test_chat_prompt_renders_the_tools_and_names_the_reasoning_option(model):
    disabled = chat_prompt(model, "hi", SEED_TOOLS, enable_thinking=False)
    assert isinstance(disabled, ToolPrompt)
    assert disabled.reasoning == "disabled"
    assert '"name": "read_file"' in disabled and "<tools>" in disabled
    assert chat_prompt(model, "hi", SEED_TOOLS).reasoning == "enabled"
    prefilled = chat_prompt(model, "hi", SEED_TOOLS, chat_template=_PREFILLED_TEMPLATE)
    assert prefilled.reasoning == "prefilled"
    # outlines wraps a plain string in the chat template as a user message; a ToolPrompt goes in as it is.
    adapter = model.type_adapter
    assert adapter.format_input(disabled) == str(disabled)
    assert adapter.format_input(str(disabled)) != str(disabled)


def test_importing_without_outlines_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "outlines", None)
    monkeypatch.delitem(sys.modules, "toolgrammar.integrations.outlines")
    with pytest.raises(ImportError, match=r"pip install 'toolgrammar\[outlines\]'"):
        importlib.import_module("toolgrammar.integrations.outlines")


# -- regex exports in outlines-core ---------------------------------------------------------------

_EXTRA_CHARS = "é日😀"


@pytest.fixture(scope="module")
def small_vocabulary() -> tuple[Any, dict[str, int]]:
    """One token per ASCII character and per test character: an Index builds in milliseconds."""
    ids = {chr(b): b for b in range(128)} | {c: 200 + i for i, c in enumerate(_EXTRA_CHARS)}
    return outlines_core.Vocabulary(300, {c.encode(): [i] for c, i in ids.items()}), ids


def _index_accepts(index: Any, ids: dict[str, int], text: str) -> bool:
    state = index.get_initial_state()
    for c in text:
        state = index.get_next_state(state, ids[c])
        if state is None:
            return False
    return bool(index.is_final_state(state))


LOOKAHEAD_EXPORTS = [
    pytest.param(SEED_TOOLS, {}, "block", True, id="block"),
    pytest.param(SEED_TOOLS, {"tool_choice": "required", "reasoning": "disabled"}, "turn", True, id="turn-required"),
    pytest.param(TYPED_TOOLS, {"tool_choice": "calculate", "reasoning": "disabled"}, "turn", True, id="turn-named"),
    pytest.param(SEED_TOOLS, {}, "turn", False, id="turn-auto"),
    pytest.param(SEED_TOOLS, {"tool_choice": "required"}, "turn", False, id="turn-required-reasoning"),
    pytest.param(SEED_TOOLS, {"reasoning": "prefilled"}, "turn", False, id="turn-prefilled"),
    pytest.param(SEED_TOOLS, {"escape_markers": True}, "block", False, id="block-escape-markers"),
    pytest.param(SEED_TOOLS, {"format": "qwen-xml"}, "block", False, id="block-qwen-xml"),
]


@pytest.mark.parametrize(("tools", "options", "which", "builds"), LOOKAHEAD_EXPORTS)
def test_which_lookahead_exports_outlines_core_builds(small_vocabulary, tools, options, which, builds):
    grammar = compile_turn(tools, **options)
    pattern = grammar.block_regex() if which == "block" else grammar.to_regex()
    vocabulary, _ = small_vocabulary
    if builds:
        outlines_core.Index(pattern, vocabulary)
    else:
        with pytest.raises(ValueError, match="Failed to build DFA"):
            outlines_core.Index(pattern, vocabulary)


PORTABLE = [
    pytest.param(SEED_TOOLS, {}, id="auto"),
    pytest.param(SEED_TOOLS, {"tool_choice": "required"}, id="required-reasoning"),
    pytest.param(SEED_TOOLS, {"reasoning": "prefilled", "after_calls": "text"}, id="prefilled-text-after"),
    pytest.param(SEED_TOOLS, {"tool_choice": "none"}, id="none"),
    pytest.param(SEED_TOOLS, {"escape_markers": True}, id="escape-markers"),
    pytest.param(PREFIX_TOOLS, {"whitespace": "flexible"}, id="prefix-flexible"),
    pytest.param(SEED_TOOLS, {"format": "qwen-xml"}, id="qwen-xml"),
]


def _texts(grammar: Any, seed: int) -> list[str]:
    fmt = grammar.format
    names = list(grammar.tools.names)
    calls = [fmt.render_call(names[0], {}), fmt.render_call(names[-1], {})]
    for tool in grammar.tools:
        keys = list(tool.parameters.get("properties", {}))
        if keys:
            calls.append(fmt.render_call(tool.name, {k: "x</tool_call> é😀" for k in keys}))
    pieces = ["<think>", "</think>", "<tool_call>", "</tool_call>", "\n", "<", "<th", "<tool_cal", "<function=", " ok"]
    pieces += [*calls, _EXTRA_CHARS, "\n\n"]
    rng = random.Random(seed)
    texts = ["", "Hello", "<think>\nhm\n</think>\n\n" + calls[0], calls[0] + "\n" + calls[-1], *calls]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 5))) for _ in range(300)]
    return texts


@pytest.mark.parametrize(("tools", "options"), PORTABLE)
def test_lookahead_free_exports_build_and_accept_the_same_texts(small_vocabulary, tools, options):
    vocabulary, ids = small_vocabulary
    grammar = compile_turn(tools, **options)
    for which, original, portable in [
        ("turn", grammar.to_regex(), grammar.to_regex(lookahead=False)),
        ("block", grammar.block_regex(), grammar.block_regex(lookahead=False)),
    ]:
        assert not re.search(r"\(\?<?[=!]", portable), which
        index = outlines_core.Index(portable, vocabulary)
        by_re, by_portable = re.compile(original, re.DOTALL), re.compile(portable, re.DOTALL)
        texts = _texts(grammar, seed=len(portable))
        if which == "block":
            texts = [t for t in texts if t.startswith(grammar.format.markers.block_open)]
        accepted = 0
        for text in texts:
            expected = by_re.fullmatch(text) is not None
            accepted += expected
            assert (by_portable.fullmatch(text) is not None) == expected, (which, text)
            assert _index_accepts(index, ids, text) == expected, (which, text)
        assert accepted >= 2, which  # the samples reach both sides of the language


def test_the_regex_route_carries_no_budget_and_the_processor_does(model):
    """outlines' own regex route, on the lookahead-free export, at the smallest budget a call fits in."""
    prompt = chat_prompt(model, "Add 2 and 3.", TYPED_TOOLS, enable_thinking=False)
    options = {"tool_choice": "calculate", "reasoning": "disabled"}
    shortest_probe = ToolCallProcessor(model, TYPED_TOOLS, max_new_tokens=None, **options)
    budget = int(shortest_probe.hf.grammar.dist[shortest_probe.hf.grammar.walk_text("")])
    regex_route = outlines.Generator(model, Regex(compile_turn(TYPED_TOOLS, **options).to_regex(lookahead=False)))
    torch.manual_seed(0)
    cut = regex_route.batch([prompt] * 3, max_new_tokens=budget, **SAMPLING)
    assert all("truncated" in {e.kind for e in parse_turn(text, TYPED_TOOLS).errors} for text in cut), cut
    generator = ToolCallGenerator(model, TYPED_TOOLS, max_new_tokens=budget, **options)
    torch.manual_seed(0)
    for text in generator.batch([prompt] * 3, **SAMPLING):
        parsed = parse_turn(text, TYPED_TOOLS)
        assert parsed.errors == () and [c.name for c in parsed.tool_calls] == ["calculate"], text
