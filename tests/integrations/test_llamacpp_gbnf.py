"""The GBNF exports in llama.cpp itself (llama-cpp-python's build of it), not a reader of the dialect.

- every golden file under ``grammars/`` is parsed by llama.cpp's own grammar parser (``llama_sampler_init_grammar``
  returns no sampler on a grammar it cannot read);
- each export's verdict on a text equals toolgrammar's automaton's, on the texts ``tests/turn/test_exports.py``
  judges xgrammar and llguidance on (canonical calls, prose, reasoning, malformed turns, mutations, walks).
  llama.cpp judges a text as it constrains a generation: the text tokenized by the model's vocabulary (special
  tokens parsed), each token offered to the grammar sampler alone and accepted when it survives, and the
  end-of-generation token offered at the end (llama.cpp lets it through only where the grammar may end);
- a generation constrained by llama.cpp's grammar sampler alone (no toolgrammar processor) on a tiny random
  model, per format: every turn ends, and the strict parser accepts every call in it.

Runs in the llama.cpp CI step (scripts/test-llamacpp.sh); a vocabulary-only load of the tiny GGUF is enough for
the verdicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import llama_cpp  # collected only where it is installed (tests/conftest.py)
import numpy as np
import pytest

from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf
from toolgrammar.testing import accepts
from toolgrammar.turn.exports import to_gbnf
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn

from export_cases import CASES, case_id, export_texts, mutations, turn_of, walks
from llama_grammar import LlamaGrammar

pytestmark = pytest.mark.llamacpp

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def vocab_only(gguf: Path) -> Any:
    return llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)


def _golden_gbnf() -> list[Path]:
    return sorted(GRAMMARS.glob("*/*.gbnf"))


@pytest.mark.parametrize("path", _golden_gbnf(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_llama_cpp_parses_every_golden_gbnf(vocab_only: Any, path: Path) -> None:
    grammar = LlamaGrammar(vocab_only, path.read_text(encoding="utf-8"))
    try:
        assert grammar.loaded, f"llama.cpp's grammar parser refused {path} (its log above says where)"
    finally:
        grammar.close()


def test_the_golden_gbnf_files_cover_every_format() -> None:
    formats = {p.parent.name for p in _golden_gbnf()}
    assert formats == {p.name for p in GRAMMARS.iterdir() if p.is_dir()}
    assert len(formats) >= 19


NUL = "\x00"
"""llama.cpp's grammar engine ends a code-point sequence at 0, so no GBNF rule matches a raw U+0000: a text
holding one is rejected by llama.cpp wherever the automaton allows it (free text, reasoning)."""


def _verdicts(llm: Any, fmt: str, options: tuple[tuple[str, Any], ...], n_mutations: int, n_walks: int) -> None:
    turn = turn_of(fmt, options)
    grammar = LlamaGrammar(llm, to_gbnf(turn))
    assert grammar.loaded
    try:
        canonical, malformed = export_texts(turn)
        rng = np.random.default_rng(sum(map(ord, fmt + repr(options))))
        texts = canonical + malformed + mutations(canonical + malformed, rng, n_mutations)
        texts += walks(turn, canonical, rng, n_walks)
        wrong = []
        for text in dict.fromkeys(texts):
            expected = accepts(turn, text) and NUL not in text
            if grammar.matches(text) != expected:
                wrong.append(f"{'rejects' if expected else 'accepts'} {text!r}")
        assert not wrong, f"{len(wrong)} verdict(s) of llama.cpp differ from the automaton's:\n  " + "\n  ".join(
            wrong[:20]
        )
        if dict(options).get("tool_choice", "auto") != "none":
            assert all(grammar.matches(text) for text in canonical[:6] if accepts(turn, text))
            assert any(grammar.matches(text) for text in canonical[:6])
    finally:
        grammar.close()


def test_a_nul_is_the_one_text_llama_cpp_cannot_match(vocab_only: Any) -> None:
    """Free text with a raw U+0000: the automaton allows it, llama.cpp's grammar cannot say it."""
    turn = turn_of("hermes", ())
    grammar = LlamaGrammar(vocab_only, to_gbnf(turn))
    try:
        assert accepts(turn, "a\x00b") and not grammar.matches("a\x00b") and grammar.matches("a b")
    finally:
        grammar.close()


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_llama_cpp_judges_turns_as_the_automaton_does(vocab_only: Any, case: tuple[str, dict[str, Any]]) -> None:
    fmt, options = case
    key = tuple(sorted(options.items()))
    _verdicts(vocab_only, fmt, key, 60, 20)
    turn = turn_of(fmt, key)  # not vacuous: the malformed turns are rejected by both
    grammar = LlamaGrammar(vocab_only, to_gbnf(turn))
    try:
        assert not any(grammar.matches(text) or accepts(turn, text) for text in export_texts(turn)[1])
    finally:
        grammar.close()


def _other_formats() -> list[str]:
    from toolgrammar.formats import FORMATS
    from toolgrammar.turn.exports import without_grammar

    return [f for f in FORMATS if f not in ("hermes", "qwen-xml") and without_grammar(f) is None]


@pytest.mark.parametrize("fmt", _other_formats())
def test_llama_cpp_judges_every_familys_turns_as_the_automaton_does(vocab_only: Any, fmt: str) -> None:
    _verdicts(vocab_only, fmt, (), 40, 15)


# A tool set with no unbounded value (enums and booleans only): a random model under llama.cpp's grammar ends its
# turn within a few dozen tokens, so every generation can be judged whole.
CLOSED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "set_mode",
            "description": "Set the mode.",
            "parameters": {
                "type": "object",
                "properties": {"mode": {"enum": ["fast", "safe"]}, "verbose": {"type": "boolean"}},
                "required": ["mode"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "stop",
            "description": "Stop.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]


@pytest.fixture(scope="module")
def tiny_llm(gguf: Path) -> Any:
    return llama_cpp.Llama(str(gguf), n_ctx=1024, n_threads=2, seed=0, verbose=False)


GENERATION_FORMATS = ["hermes", "qwen-xml", "mistral", "llama3-json", "glm45", "deepseek-v3.1"]
"""One of each block shape (JSON in tags, XML parameters, a JSON list after a marker, bare JSON, GLM's key/value
tags, DeepSeek's markers): llama.cpp applies a grammar to the whole vocabulary at each token, seconds per turn."""


@pytest.mark.parametrize("fmt", GENERATION_FORMATS)
def test_a_generation_under_llama_cpps_grammar_alone_writes_valid_calls(tiny_llm: Any, fmt: str) -> None:
    turn = compile_turn(
        CLOSED_TOOLS, format=fmt, tool_choice="required", parallel_tool_calls=False, reasoning="disabled", cache=False
    )
    grammar = llama_cpp.LlamaGrammar.from_string(to_gbnf(turn), verbose=False)
    ended = 0
    for seed in range(2):
        out = tiny_llm.create_completion(
            "<|im_start|>assistant\n", max_tokens=160, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
            grammar=grammar,
        )  # fmt: skip
        choice = out["choices"][0]
        text = choice["text"]
        assert accepts(turn, text, complete=False), text  # never outside the grammar, even where cut
        if choice["finish_reason"] == "stop":
            ended += 1
            parsed = parse_turn(text, turn.tools, format=fmt)
            assert parsed.errors == () and len(parsed.tool_calls) == 1, text
    assert ended == 2, f"{fmt}: only {ended} of 2 generations ended within 160 tokens"
