"""What arrives in a server request is data: it selects among registered formats, it never imports code.

``toolgrammar.integrations.vllm`` imports without vLLM, so the request-spec checks run in the default suite.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolgrammar.errors import GrammarError
from toolgrammar.formats import FORMATS, get_format, register_format, registered_format
from toolgrammar.integrations.vllm import _normalize_spec

from toolsets import SEED_TOOLS


@pytest.mark.parametrize(
    "format", ["os:abort", "sys:exit", "builtins:print", "toolgrammar.formats.hermes:HermesFormat"]
)
def test_a_request_cannot_name_code_to_import(format):
    with pytest.raises(GrammarError, match=r"may only name a registered format \(deepseek, .*hermes, .*qwen-xml"):
        _normalize_spec({"tools": SEED_TOOLS, "format": format})


def test_a_request_cannot_import_even_as_json_text():
    """The spec as JSON text, as the OpenAI server hands it over: refused before anything is imported."""
    code = (
        "import json, sys\n"
        "from toolgrammar.integrations.vllm import _normalize_spec\n"
        "from toolgrammar.errors import GrammarError\n"
        "try:\n"
        "    _normalize_spec(json.dumps({'tools': [], 'format': 'this_module_does_not_exist_x:attr'}))\n"
        "except GrammarError as e:\n"
        "    print('refused', 'this_module_does_not_exist_x' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "refused False", out.stderr


def test_registered_formats_are_selectable_by_requests():
    assert _normalize_spec({"tools": SEED_TOOLS, "format": "qwen-xml"})["format"] == "qwen-xml"
    assert _normalize_spec(json.dumps({"tools": SEED_TOOLS}))["tools"] == SEED_TOOLS  # no format: the default
    register_format("hermes-copy", "toolgrammar.formats.hermes:HermesFormat")
    try:
        assert registered_format("hermes-copy") == "hermes-copy"
        assert _normalize_spec({"tools": SEED_TOOLS, "format": "hermes-copy"})["format"] == "hermes-copy"
        assert get_format("hermes-copy").name == "hermes"
    finally:
        FORMATS.pop("hermes-copy")


@pytest.mark.parametrize(("name", "spec"), [("", "a:B"), ("x:y", "a:B"), ("ok", "no-colon"), ("ok", "a:b:c")])
def test_register_format_checks_its_input(name, spec):
    with pytest.raises(GrammarError):
        register_format(name, spec)
