"""The tiny random models the vLLM server tests serve, checked without vLLM: each family's real tokenizer and
chat template land in the model folder, the logit width covers the tokenizer, the generation config ends
the turn on the template's end-of-turn tokens; and a mistral-common tokenizer (vLLM's ``--tokenizer-mode
mistral``) yields the vocabulary toolgrammar reads from mistral-common's own files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

HF_FAMILIES = ("qwen3", "qwen3.5", "deepseek-v3.1", "glm-4.7")
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]  # fmt: skip


@pytest.mark.slow  # about 5 s a family: writing the weights and loading the tokenizer
@pytest.mark.parametrize("name", HF_FAMILIES)
def test_hf_family_folder_has_the_real_tokenizer_and_template(name: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from toolgrammar.testing.vllm_server import FAMILIES, write_tiny_random_model

    family = FAMILIES[name]
    path = write_tiny_random_model(tmp_path / name, family)
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    eos = json.loads((path / "generation_config.json").read_text())["eos_token_id"]
    assert config["vocab_size"] >= len(tokenizer) and config["vocab_size"] % 64 == 0
    assert tokenizer.convert_ids_to_tokens(eos) == list(family.eos_tokens)
    kwargs: dict[str, Any] = {family.thinking_kwarg: False} if family.thinking_kwarg else {}
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert prompt.rstrip().endswith(("</think>", "<think>", "<｜Assistant｜>")), prompt[-200:]
    # DeepSeek-V3.1's template never reads `tools` (its model card puts tool descriptions in the system message).
    assert ("read_file" in prompt) == (name != "deepseek-v3.1"), prompt[-200:]
    assert write_tiny_random_model(tmp_path / name, family) == path  # a second call finds the model


def _stub(path: Path, *, tekken: bool) -> Any:
    """The attributes of vLLM's ``MistralTokenizer`` that toolgrammar reads."""
    inner = SimpleNamespace(file_path=str(path))
    return SimpleNamespace(IS_MISTRAL_TOKENIZER=True, is_tekken=tekken, instruct=SimpleNamespace(tokenizer=inner))


@pytest.mark.parametrize("tekken", [True, False], ids=["tekken", "sentencepiece"])
def test_mistral_common_tokenizer_reads_its_own_file(tekken: bool, tmp_path: Path) -> None:
    from toolgrammar.formats.mistral.vocab import (
        PIP,
        SENTENCEPIECE_V3_FILE,
        TEKKEN_FILE,
        sentencepiece_v3_vocabulary,
        tekken_vocabulary,
    )
    from toolgrammar.integrations.tokenizers import vocabulary_of
    from toolgrammar.packages import package_file

    source = package_file("mistral_common", PIP, *(TEKKEN_FILE if tekken else SENTENCEPIECE_V3_FILE))
    copy = tmp_path / ("tekken.json" if tekken else "tokenizer.model.v3")  # as the model folder holds it
    shutil.copyfile(source, copy)
    vocab = vocabulary_of(_stub(copy, tekken=tekken))
    assert vocab is (tekken_vocabulary() if tekken else sentencepiece_v3_vocabulary())


def test_mistral_family_folder(tmp_path: Path) -> None:
    from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary
    from toolgrammar.testing.vllm_server import write_tiny_random_model

    path = write_tiny_random_model(tmp_path / "m", "mistral-v3")
    vocab = sentencepiece_v3_vocabulary()
    assert (path / "tokenizer.model.v3").is_file() and not (path / "tokenizer.json").exists()
    assert json.loads((path / "config.json").read_text())["vocab_size"] == vocab.n_tokens == 32768
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == sorted(vocab.eos_ids)


READINGS = {
    # family: (no switch sent, thinking off, thinking on), as each real template renders its generation prompt
    "qwen3": ("enabled", "disabled", "enabled"),  # Qwen3 leaves the opening to the model
    "qwen3.5": ("prefilled", "disabled", "prefilled"),  # Qwen3.5 opens <think> itself
    "deepseek-v3.1": ("disabled", "disabled", "prefilled"),  # its switch is `thinking`, off unless sent
    "deepseek-v3": ("disabled", "disabled", "disabled"),  # the template has no reasoning part at all
    "glm-4.7": ("prefilled", "disabled", "prefilled"),
}


@pytest.mark.slow  # about 5 s a family: writing the weights and loading the tokenizer
@pytest.mark.parametrize("name", list(READINGS))
def test_the_reasoning_option_is_read_off_the_rendered_prompt(name: str, tmp_path: Path) -> None:
    """The server's constraint starts the turn where the family's real template leaves it: inside an opened
    reasoning part, after a closed one, or where the model may open one; each template's own switch and default."""
    from transformers import AutoTokenizer

    from toolgrammar.integrations.serving import prompt_reasoning
    from toolgrammar.testing.vllm_server import FAMILIES, write_tiny_random_model

    family = FAMILIES[name]
    tokenizer = AutoTokenizer.from_pretrained(write_tiny_random_model(tmp_path / name, family))
    switch = family.thinking_kwarg or "enable_thinking"
    messages = [{"role": "user", "content": "hi"}]
    got = tuple(
        prompt_reasoning(tokenizer, messages, format=family.format, tools=TOOLS, chat_template_kwargs=kwargs)
        for kwargs in ({}, {switch: False}, {switch: True})
    )
    assert got == READINGS[name]
    # A prefilled assistant message is read up to that message: the same reading as the bare conversation.
    prefilled = [*messages, {"role": "assistant", "content": "Sure"}]
    assert prompt_reasoning(tokenizer, prefilled, format=family.format, tools=TOOLS) == READINGS[name][0]
