"""The llama.cpp route on a real llama.cpp (llama-cpp-python): a tiny random GGUF with the real Qwen3 tokenizer.

The processor llama-cpp-python calls per token is checked bit for bit against the transformers processor on
the very (ids, scores) llama.cpp handed it, option by option; generate_turn's turns are valid, within
budget, decoded as llama.cpp renders them. Runs in its own CI step (scripts/test-llamacpp.sh: pytest -m llamacpp).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import llama_cpp  # collected only where it is installed (tests/conftest.py)
import numpy as np
import pytest
import torch

from toolgrammar.errors import ProcessorError, TokenBudgetWarning
from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf
from toolgrammar.integrations.generated_turn import GenerateError
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.llamacpp import LlamaToolCallProcessor, generate_turn, llama_vocabulary
from toolgrammar.turn.parser import parse_turn

from toolsets import SEED_TOOLS, TYPED_TOOLS

pytestmark = pytest.mark.llamacpp

MESSAGES = [{"role": "user", "content": "The test for is_even fails. Read src/numbers.py first."}]
NO_THINKING = {"enable_thinking": False}


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = write_tiny_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return llama_cpp.Llama(str(path), n_ctx=2048, n_threads=2, seed=0, verbose=False)


@pytest.fixture(scope="module")
def vocab(llm: Any) -> Any:
    return llama_vocabulary(llm)


def test_the_vocabulary_read_from_llama_cpp_is_qwen3s(vocab: Any, qwen3_vocab: Any) -> None:
    """Each id's bytes as llama.cpp renders them are the tokenizer's own. llama.cpp's loader also makes the FIM
    tokens and the BPE token ``</s>`` control tokens and ends of generation (it stops at them): so does the
    vocabulary read from it."""
    n = qwen3_vocab.n_tokens
    assert vocab.token_bytes[:n] == qwen3_vocab.token_bytes
    fim = {qwen3_vocab.token_id(t) for t in ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")}
    ends_too = {qwen3_vocab.token_id(t) for t in ("<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "</s>")}
    assert vocab.special_ids & set(range(n)) == qwen3_vocab.special_ids | fim | ends_too
    assert vocab.eos_ids == qwen3_vocab.eos_ids | ends_too
    assert all(i in vocab.special_ids for i in range(n, vocab.n_tokens))  # padding ids: never text
    assert {qwen3_vocab.token_id("<tool_call>"), qwen3_vocab.token_id("<think>")} <= vocab.added_ids


def test_the_vocabulary_is_read_once_per_model(llm: Any, vocab: Any) -> None:
    assert llama_vocabulary(llm) is vocab
    with pytest.raises(ProcessorError, match=r"expected a llama_cpp\.Llama"):
        llama_vocabulary(object())


class Recorder:
    """A processor wrapped to keep what llama.cpp handed it and what it returned, per call."""

    def __init__(self, inner: LlamaToolCallProcessor) -> None:
        self.inner = inner
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        ids, before = np.array(input_ids, copy=True), np.array(scores, dtype=np.float32, copy=True)
        out = self.inner(input_ids, scores)
        self.calls.append((ids, before, np.array(out, copy=True)))
        return out


def prompt_of(llm: Any, tools: list[dict]) -> str:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata["tokenizer.chat_template"]
    formatter = Jinja2ChatFormatter(template, eos_token="<|im_end|>", bos_token="")
    return formatter(messages=MESSAGES, tools=tools, **NO_THINKING).prompt


OPTION_SETS = [
    pytest.param({"tool_choice": "required"}, id="required"),
    pytest.param({"tool_choice": "auto", "steer_to_blocks": True}, id="auto-steered"),
    pytest.param({"tool_choice": "required", "prefix_true": True, "close_on_stop": False}, id="prefix-true"),
    pytest.param({"tool_choice": "auto", "stop_strings": ["\n\n", "Done"]}, id="stops"),
    pytest.param({"tool_choice": "required", "parallel_tool_calls": False, "prefix_true": True}, id="single-call"),
]


@pytest.mark.parametrize("options", OPTION_SETS)
@pytest.mark.parametrize("seed", [0, 1])
def test_each_step_equals_the_transformers_processors_step(llm: Any, vocab: Any, options: dict, seed: int) -> None:
    """llama.cpp's per-token calls, replayed through the transformers processor: the same row, bit for bit."""
    budget = 48
    tools = TYPED_TOOLS
    proc = LlamaToolCallProcessor(llm, tools, max_new_tokens=budget, reasoning="disabled", **options)
    recorder = Recorder(proc)
    prompt = prompt_of(llm, tools)
    llm.set_seed(seed)
    out = llm.create_completion(
        prompt,
        max_tokens=budget,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        seed=seed,
        logits_processor=llama_cpp.LogitsProcessorList([recorder]),
    )
    assert recorder.calls, "llama.cpp never called the processor"
    assert proc.error is None
    reference = ToolCallLogitsProcessor(vocab, tools, max_new_tokens=budget, reasoning="disabled", **options)
    prompt_length = len(recorder.calls[0][0])
    for step, (ids, before, after) in enumerate(recorder.calls):
        assert len(ids) == prompt_length + step  # one call per token, the whole sequence each time
        expected = reference(torch.from_numpy(ids.astype(np.int64))[None], torch.from_numpy(before.copy())[None])
        np.testing.assert_array_equal(after, expected[0].numpy(), err_msg=f"step {step}")
    text = out["choices"][0]["text"]
    turn = parse_turn(text, reference.turn_grammar.tools, format="hermes")
    assert turn.errors == (), text
    if options.get("tool_choice") == "required":
        assert turn.tool_calls, text


def test_a_strided_row_is_masked_as_a_contiguous_one(llm: Any, vocab: Any) -> None:
    """llama-cpp-python hands a strided view of its token array: the processor answers with the same row."""
    rng = np.random.default_rng(0)
    ids = np.array(llm.tokenize(prompt_of(llm, SEED_TOOLS).encode(), add_bos=False, special=True), dtype=np.intc)
    scores = rng.standard_normal(vocab.n_tokens).astype(np.float32)
    table = np.zeros(vocab.n_tokens, dtype=[("id", np.intc), ("logit", np.float32), ("p", np.float32)])
    table["logit"] = scores
    strided = table["logit"]
    assert not strided.flags.c_contiguous
    a = LlamaToolCallProcessor(vocab, SEED_TOOLS, max_new_tokens=32, tool_choice="required")(ids, strided)
    b = LlamaToolCallProcessor(vocab, SEED_TOOLS, max_new_tokens=32, tool_choice="required")(ids, scores.copy())
    np.testing.assert_array_equal(a, b)
    assert np.isinf(b).sum() > 0


def _replay(proc: Any, ids: np.ndarray, vocab: Any, *, seed: int, steps: int = 12) -> list[np.ndarray]:
    """Random logits, greedy, one generation from ``ids``: each step's processed row."""
    rng = np.random.default_rng(seed)
    proc.reset()
    rows = []
    for _ in range(steps):
        row = proc(ids, (rng.standard_normal(vocab.n_tokens) * 4).astype(np.float32))
        rows.append(row.copy())
        ids = np.append(ids, np.intc(int(np.argmax(row))))
    return rows


def test_one_processor_steers_the_generations_it_is_told_to(llm: Any, vocab: Any) -> None:
    """``steer`` switched between generations (a relevance gate's verdicts): a held-back generation is bit for bit
    the unsteered processor's, a steered one the steered processor's, on the same processor."""
    ids = np.array(llm.tokenize(prompt_of(llm, SEED_TOOLS).encode(), add_bos=False, special=True), dtype=np.intc)
    options = {"max_new_tokens": 32, "tool_choice": "auto", "reasoning": "disabled"}
    switched = LlamaToolCallProcessor(vocab, SEED_TOOLS, steer_to_blocks=True, **options)
    steered = _replay(LlamaToolCallProcessor(vocab, SEED_TOOLS, steer_to_blocks=True, **options), ids, vocab, seed=4)
    plain = _replay(LlamaToolCallProcessor(vocab, SEED_TOOLS, **options), ids, vocab, seed=4)
    assert any(not np.array_equal(a, b) for a, b in zip(steered, plain, strict=True))  # steering acts here
    for steer, expected in ((False, plain), (True, steered), (False, plain)):
        switched.steer = steer
        assert switched.steer is steer
        got = _replay(switched, ids, vocab, seed=4)
        for step, (a, b) in enumerate(zip(got, expected, strict=True)):
            np.testing.assert_array_equal(a, b, err_msg=f"steer={steer}, step {step}")
    with pytest.raises(ProcessorError, match="steer must be True or False"):
        switched.steer = 1
    unsteered = LlamaToolCallProcessor(vocab, SEED_TOOLS, **options)
    assert unsteered.steer is False
    with pytest.raises(ProcessorError, match="steer needs steer_to_blocks=True"):
        unsteered.steer = False


def check_turn(turn: Any, vocab: Any, budget: int) -> None:
    assert turn.parsed.errors == (), (turn.text, [e.message for e in turn.parsed.errors])
    assert all(block.closed for block in turn.parsed.blocks), turn.text
    assert turn.processor_error is None
    assert 0 < len(turn.token_ids) <= budget
    ends = vocab.eos_ids  # llama.cpp's ends of generation, where generate_turn stops
    assert (turn.finish == "stop") == (turn.token_ids[-1] in ends)
    assert not ends & set(turn.token_ids[:-1])
    written = turn.token_ids[:-1] if turn.finish == "stop" else turn.token_ids
    assert turn.text == vocab.decode(written).decode("utf-8", "replace")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generate_turn_under_required_writes_valid_calls_within_the_budget(llm: Any, vocab: Any, seed: int) -> None:
    turn = generate_turn(
        llm, MESSAGES, SEED_TOOLS, max_new_tokens=40, tool_choice="required", temperature=1.0, seed=seed,
        chat_template_kwargs=NO_THINKING,
    )  # fmt: skip
    check_turn(turn, vocab, 40)
    assert turn.tool_calls
    assert turn.reasoning == "disabled"
    assert turn.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_generate_turn_with_the_shortest_budget_still_closes_the_call(llm: Any, vocab: Any) -> None:
    proc = LlamaToolCallProcessor(vocab, SEED_TOOLS, tool_choice="required", reasoning="disabled")
    shortest = int(proc.grammar.dist[proc.start_state])
    turn = generate_turn(
        llm, MESSAGES, SEED_TOOLS, max_new_tokens=shortest, tool_choice="required", temperature=1.0, seed=3,
        chat_template_kwargs=NO_THINKING,
    )  # fmt: skip
    check_turn(turn, vocab, shortest)
    assert turn.tool_calls
    with pytest.raises(ProcessorError, match="too small for tool_choice='required'"):
        generate_turn(llm, MESSAGES, SEED_TOOLS, max_new_tokens=shortest - 1, tool_choice="required")


def test_generate_turn_reads_reasoning_from_the_template(llm: Any, vocab: Any) -> None:
    turn = generate_turn(llm, MESSAGES, SEED_TOOLS, max_new_tokens=24, temperature=1.0, seed=0)
    check_turn(turn, vocab, 24)
    assert turn.reasoning == "enabled"


def test_generate_turn_with_an_assistant_prefix_continues_the_call(llm: Any, vocab: Any) -> None:
    prefix = '<tool_call>\n{"name": "read_file", "arguments": {"path": "'
    turn = generate_turn(
        llm, MESSAGES, SEED_TOOLS, max_new_tokens=40, assistant_prefix=prefix, temperature=1.0, seed=0,
        chat_template_kwargs=NO_THINKING,
    )  # fmt: skip
    assert turn.text.startswith(prefix)
    assert turn.parsed.errors == ()
    assert [c.name for c in turn.tool_calls][:1] == ["read_file"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive int"),
        ({"max_new_tokens": 8, "temperature": -1}, "temperature must be a number >= 0"),
        ({"max_new_tokens": 8, "logits_processor": []}, "logits_processor is set by generate_turn itself"),
        ({"max_new_tokens": 8, "reasoning": "disabled", "chat_template_kwargs": {"enable_thinking": True}},
         "contradicts chat_template_kwargs"),
        ({"max_new_tokens": 8, "chat_template_kwargs": {"tools": []}}, "may not set tools"),
    ],
)  # fmt: skip
def test_generate_turn_refuses_what_it_cannot_use(llm: Any, kwargs: dict, match: str) -> None:
    with pytest.raises(GenerateError, match=match):
        generate_turn(llm, MESSAGES, SEED_TOOLS, **kwargs)


def test_a_prefilled_assistant_message_is_refused_with_the_way_out(llm: Any) -> None:
    messages = [*MESSAGES, {"role": "assistant", "content": "<tool_call>\n"}]
    with pytest.raises(GenerateError, match="give the turn's start as assistant_prefix"):
        generate_turn(llm, messages, SEED_TOOLS, max_new_tokens=16)


def test_a_generation_past_the_processors_budget_warns_once(llm: Any, vocab: Any) -> None:
    proc = LlamaToolCallProcessor(vocab, SEED_TOOLS, max_new_tokens=4, reasoning="disabled")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = llm.create_completion(prompt_of(llm, SEED_TOOLS), max_tokens=12, temperature=0.0,
                                    logits_processor=llama_cpp.LogitsProcessorList([proc]))  # fmt: skip
    assert out["usage"]["completion_tokens"] > 4  # the generation asked for a token past the processor's budget
    found = [w for w in caught if issubclass(w.category, TokenBudgetWarning)]
    assert len(found) == 1 and "max_new_tokens=4" in str(found[0].message), [str(w.message) for w in found]
    kwargs = proc.completion_kwargs()
    assert kwargs["max_tokens"] == 4 and list(kwargs["logits_processor"]) == [proc]


def test_logit_bias_drops_the_processor_in_this_llama_cpp_python(llm: Any, vocab: Any) -> None:
    """docs/integrations/llamacpp.md warns that create_completion loses logits_processor when logit_bias is given
    (``list.extend`` returns None): true of the pinned version; this fails once llama-cpp-python mends it."""
    proc = LlamaToolCallProcessor(vocab, SEED_TOOLS, max_new_tokens=32, tool_choice="required", reasoning="disabled")
    kwargs = proc.completion_kwargs() | {"max_tokens": 4}
    llm.create_completion(prompt_of(llm, SEED_TOOLS), temperature=0.0, logit_bias={0: 0.0}, **kwargs)
    assert proc.row is None  # never called
    llm.create_completion(prompt_of(llm, SEED_TOOLS), temperature=0.0, **kwargs)
    assert proc.row is not None and proc.row.cursor.n_tokens == 3


def test_the_processor_refuses_bad_options_by_name(vocab: Any) -> None:
    with pytest.raises(ProcessorError, match="prefix_true must be True or False"):
        LlamaToolCallProcessor(vocab, SEED_TOOLS, prefix_true="yes")
    with pytest.raises(ProcessorError, match="max_new_tokens must be a positive int"):
        LlamaToolCallProcessor(vocab, SEED_TOOLS, max_new_tokens=0)
    with pytest.raises(ProcessorError, match="is not a valid start of a turn"):
        LlamaToolCallProcessor(vocab, SEED_TOOLS, assistant_prefix='<tool_call>\n{"name": "nope')
    proc = LlamaToolCallProcessor(vocab, SEED_TOOLS)
    with pytest.raises(ProcessorError, match="1-D each"):
        proc(np.zeros((1, 4), dtype=np.intc), np.zeros((1, vocab.n_tokens), dtype=np.float32))


def test_the_gguf_is_written_once(tmp_path: Path) -> None:
    path = write_tiny_random_gguf(tmp_path / "a.gguf")
    stamp = path.stat().st_mtime_ns
    assert write_tiny_random_gguf(path) == path and path.stat().st_mtime_ns == stamp


@pytest.fixture(scope="module")
def qwen25_coder() -> Any:
    """The embedded model's own GGUF (Q4_K_M), assembled from its PyPI pieces and hash-checked, in llama.cpp."""
    from toolgrammar.evaluate.models import qwen25_coder_gguf

    return llama_cpp.Llama(str(qwen25_coder_gguf()), n_ctx=4096, n_threads=2, seed=0, verbose=False)


@pytest.mark.slow
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_the_embedded_gguf_writes_valid_calls_in_llama_cpp(qwen25_coder: Any, tool_choice: str) -> None:
    """Greedy turns of the first bundled tasks on Qwen2.5-Coder-0.5B in llama.cpp: every call the strict parser
    accepts; under ``required`` every turn calls, and most call the tool the task expects."""
    import json

    from toolgrammar.bundled import bundled_tasks_path, bundled_tools_path

    tools = json.loads(bundled_tools_path().read_text(encoding="utf-8"))
    tasks = [json.loads(line) for line in bundled_tasks_path().read_text(encoding="utf-8").splitlines()[:3]]
    vocab = llama_vocabulary(qwen25_coder)
    expected = 0
    for task in tasks:
        turn = generate_turn(
            qwen25_coder, [{"role": "user", "content": task["prompt"]}], tools, max_new_tokens=64,
            tool_choice=tool_choice, steer_to_blocks=tool_choice == "auto",
        )  # fmt: skip
        check_turn(turn, vocab, 64)
        if tool_choice == "required":
            assert turn.tool_calls, turn.text
            expected += turn.tool_calls[0].name == task.get("expected_tool")
    if tool_choice == "required":
        assert expected >= len(tasks) // 2


def test_compare_runs_on_llama_cpp(tmp_path: Path) -> None:
    """``toolgrammar compare --backend llama.cpp``: the same runs on a GGUF, judged the same way; the constrained
    side makes no error, the report says which backend and model ran."""
    from toolgrammar.evaluate.compare import CompareConfig, run_compare

    gguf = write_tiny_random_gguf(tmp_path / "tiny.gguf")
    config = CompareConfig(
        model=str(gguf), backend="llama.cpp", limit=3, seeds=(0, 1), max_new_tokens=40, temperature=1.0,
        tool_choice="required", mode="schema", out=str(tmp_path / "out"), progress=False,
    )  # fmt: skip
    report = run_compare(config)
    constrained = report.summary["modes"]["constrained"]
    assert report.constrained_errors == 0
    assert constrained["runs"] == 6 and constrained["runs_with_valid_call"] == 6
    assert report.summary["modes"]["free"]["tokens"] > 0
    assert "in llama.cpp" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    runs = [json.loads(line) for line in (tmp_path / "out" / "runs.jsonl").read_text().splitlines()]
    assert all(r["constrained"]["turns"][0]["processor_error"] is None for r in runs if r.get("type") == "run")
