"""llama.cpp's own tool-call grammar as the side-by-side mode's third side, and the ``name`` gate in llama.cpp.

A real llama-server (built from the llama.cpp llama-cpp-python vendors: scripts/llama-server.sh, run by
scripts/test-llamacpp.sh) on a tiny random GGUF with the real Qwen3 tokenizer: the side's raw tokens come back and
are judged by the strict parser; under ``required`` llama.cpp's grammar opens the call; the turn decoded here is
the text the server itself read. The ``name`` gate measured in llama.cpp equals the transformers one on the same
weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolgrammar.bundled import bundled_tools_path
from toolgrammar.evaluate.compare import CompareConfig, run_compare
from toolgrammar.evaluate.compare.llama_server import LlamaServer, LlamaServerSide, request_body
from toolgrammar.evaluate.compare.llamacpp_generation import N_CTX, LlamaCppGenerator, load_gguf
from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf
from toolgrammar.schema import load_tools
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from llama_grammar import LlamaGrammar

pytestmark = pytest.mark.llamacpp

TASKS = [
    {"id": "stats", "prompt": "Show me textkit/stats.py.", "expected_tool": "read_file"},
    {"id": "readme", "prompt": "Read the README.md.", "expected_tool": "read_file"},
]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def loaded(gguf: Path) -> Any:
    return load_gguf(str(gguf))


@pytest.fixture(scope="module")
def server(gguf: Path) -> Any:
    started = LlamaServer(gguf, n_ctx=N_CTX, threads=2)
    yield started
    started.close()


@pytest.mark.parametrize(("tool_choice", "lazy"), [("required", False), ("auto", True)])
def test_the_side_runs_under_llama_cpps_grammar_from_the_tools(
    server: Any, loaded: Any, tool_choice: str, lazy: bool
) -> None:
    """llama.cpp builds a grammar naming every offered tool (lazy under ``auto``: it wakes at ``<tool_call>``);
    the side's text is decoded from the server's own tokens and is what the server itself read."""
    tools = load_tools(bundled_tools_path(), mode="schema")
    config = CompareConfig(tool_choice=tool_choice, mode="schema", temperature=1.0, max_new_tokens=32)
    side = LlamaServerSide(server, loaded.vocab.token_bytes, loaded.vocab.eos_ids)
    conversations = [[{"role": "user", "content": t["prompt"]}] for t in TASKS]
    outputs = side.generate(conversations, tools.to_openai(), config, seed=3)
    assert len(outputs) == 2 and all(o.processor_error is None and 0 < o.tokens <= 33 for o in outputs)
    grammar = side.settings["grammar"]
    assert all(f'"{name}"' in grammar for name in tools.names)
    assert side.settings["grammar_lazy"] is lazy
    if lazy:
        assert any("<tool_call>" in json.dumps(t) for t in side.settings["grammar_triggers"])
    answer = server.chat(request_body(conversations[0], tools.to_openai(), config, seed=3 * 65_537))
    assert outputs[0].text and answer["choices"][0]["message"]["content"].endswith(outputs[0].text)
    # the same request again gives the same turn: the side is seeded per row like the others
    assert side.generate(conversations[:1], tools.to_openai(), config, seed=3)[0].text == outputs[0].text


def test_compare_with_the_llama_server_side(tmp_path: Path, gguf: Path) -> None:
    """``compare --backend llama.cpp --llama-server``: three sides on the same tasks and seeds; toolgrammar's side
    makes no error; llama.cpp's side is judged by the same parser and reported beside it."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    config = CompareConfig(
        model=str(gguf), backend="llama.cpp", llama_server=True, tasks=str(tasks), seeds=(0,), max_new_tokens=40,
        temperature=1.0, tool_choice="required", mode="schema", out=str(tmp_path / "out"), progress=False,
    )  # fmt: skip
    report = run_compare(config)
    assert report.constrained_errors == 0
    server = report.summary["modes"]["llama-server"]
    assert server["runs"] == 2 and server["tokens"] > 0 and server["processor_errors"] == 0
    # the grammar llama.cpp ran this side under is kept with the report
    written = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert written["environment"]["llama_server"]["grammar_lazy"] is False
    assert "tool-read-file" in written["environment"]["llama_server"]["grammar"]
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "| metric | free | toolgrammar | llama.cpp's own |" in markdown


def test_the_name_gate_in_llama_cpp_equals_the_transformers_one(loaded: Any, gguf: Path) -> None:
    """The same weights in both engines (transformers de-quantizes the GGUF): the same name fit per request."""
    import torch
    from transformers import AutoModelForCausalLM

    from toolgrammar.evaluate.relevance import RelevanceGate
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    tools = load_tools(bundled_tools_path(), mode="strings")
    conversations = [[{"role": "user", "content": t["prompt"]}] for t in TASKS]
    conversations.append([{"role": "user", "content": "What is the capital of France?"}])
    generator = LlamaCppGenerator(loaded, tools, CompareConfig(backend="llama.cpp", steer_gate="name"))
    in_llama = generator.relevance(conversations, tools.to_openai())
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    gate = RelevanceGate(model, load_qwen3_tokenizer(), method="name")
    in_transformers = gate([(c, tools.to_openai()) for c in conversations])
    for a, b in zip(in_llama, in_transformers, strict=True):
        assert a.method == b.method == "name" and a.relevant == b.relevant
        assert a.score == pytest.approx(b.score, rel=1e-3, abs=1e-300)


def test_llama_cpps_grammar_takes_two_calls_in_one_block_which_the_format_has_not(server: Any, loaded: Any) -> None:
    """The grammar llama.cpp builds for Qwen's template lets one ``<tool_call>`` block hold several calls joined by
    commas; Qwen's format has one call per block, so the strict parser rejects that block, and toolgrammar's
    grammar never lets it be written."""
    tools = load_tools(bundled_tools_path(), mode="schema")
    side = LlamaServerSide(server, loaded.vocab.token_bytes, loaded.vocab.eos_ids)
    config = CompareConfig(tool_choice="auto", mode="schema", max_new_tokens=4)
    side.generate([[{"role": "user", "content": TASKS[0]["prompt"]}]], tools.to_openai(), config, seed=0)
    read = '{"name": "read_file", "arguments": {"path": "a.py"}}'
    grep = '{"name": "grep", "arguments": {"pattern": "x", "path": "."}}'
    one, two = f"<tool_call>\n{read}\n</tool_call>", f"<tool_call>\n{read}, {grep}\n</tool_call>"
    grammar = LlamaGrammar(loaded.llm, side.settings["grammar"])
    try:
        assert grammar.loaded and grammar.matches(one) and grammar.matches(two)
    finally:
        grammar.close()
    assert parse_turn(one, tools, format="hermes").ok and not parse_turn(two, tools, format="hermes").ok
    turn = compile_turn(tools, mode="schema", format="hermes")
    assert accepts(turn, one) and not accepts(turn, two)


def test_a_gates_held_back_rows_are_the_unsteered_processors_turns(loaded: Any) -> None:
    """``steer_rows`` in the llama.cpp generator: one processor, switched per row; a held-back row writes the turn the
    unsteered generator writes, a steered row the turn the steered generator writes (same seed, same prompt)."""
    tools = load_tools(bundled_tools_path(), mode="strings")
    prompts = [
        LlamaCppGenerator(loaded, tools, CompareConfig(backend="llama.cpp")).render(
            [{"role": "user", "content": t["prompt"]}], tools.to_openai()
        )
        for t in TASKS
    ]
    options = {"backend": "llama.cpp", "max_new_tokens": 24, "temperature": 1.0}
    steered = LlamaCppGenerator(loaded, tools, CompareConfig(steer_to_blocks=True, **options))
    plain = LlamaCppGenerator(loaded, tools, CompareConfig(**options))
    counted = steered.processor.steered_steps
    held = steered.generate(prompts, constrained=True, seed=2, steer_rows=[False, False])
    assert steered.processor.steered_steps == counted  # rows held back are never steered
    mixed = steered.generate(prompts, constrained=True, seed=2, steer_rows=[True, False])
    assert steered.processor.steered_steps > counted  # the row let through is
    all_steered = steered.generate(prompts, constrained=True, seed=2)
    unsteered = plain.generate(prompts, constrained=True, seed=2)
    assert [g.text for g in held] == [g.text for g in unsteered]
    assert mixed[0].text == all_steered[0].text and mixed[1].text == unsteered[1].text
