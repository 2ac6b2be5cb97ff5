"""The public surface: every exported name resolves, and the light modules stay light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import toolgrammar

LIGHT_MODULES = [
    "toolgrammar",
    "toolgrammar.schema.loading",
    "toolgrammar.formats.calls",
    "toolgrammar.formats",
    "toolgrammar.formats.hermes",
    "toolgrammar.automata",
    "toolgrammar.automata.compile",
    "toolgrammar.schema",
    "toolgrammar.vocab",
    "toolgrammar.values.json_grammar",
    "toolgrammar.turn.grammar",
    "toolgrammar.turn.parser",
    "toolgrammar.runtime.token_table",
    "toolgrammar.runtime.token_grammar",
    "toolgrammar.runtime.cursor",
    "toolgrammar.evaluate.other_shapes",
    "toolgrammar.runtime.steering",
]


@pytest.mark.parametrize("name", toolgrammar.__all__)
def test_every_exported_name_resolves(name):
    assert getattr(toolgrammar, name) is not None


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = toolgrammar.nope


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_modules_import_no_framework(module):
    code = (
        f"import sys, {module}\n"
        "from toolgrammar.turn.grammar import compile_turn\n"
        "compile_turn([{'name': 'f', 'parameters': {'type': 'object', 'properties': {'a': {'type': 'string'}}}}],"
        " cache=False)\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulled in {out.stdout.strip()}"
