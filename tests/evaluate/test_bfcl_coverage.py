"""Real BFCL schemas compile: a fixed sample of ``bench/bfcl_coverage.py``'s run (issue 13, goal 1).

``tests/data/bfcl_sample.json`` holds 51 function docs copied verbatim from ``bfcl-eval`` 2026.3.23 (Apache-2.0;
``tests/data/README.md``): every single-turn category, Java and JavaScript included, the multi-turn docs (with their
``response`` key), one of each kind of contradiction (enum values of another type, keywords of another type,
undeclared required names) that strict loading refuses and lenient loading drops, and the slowest schema of the
full run. Each is converted as BFCL converts it (:func:`toolgrammar.evaluate.bfcl.to_openai_tools`), loaded strictly,
else
leniently (with the exact warnings expected), and through :func:`toolgrammar.evaluate.bfcl.grammar_tools` (with the
exact
notes expected), then compiled for a call to it, whole automaton. No BFCL install needed.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from toolgrammar.errors import ToolSchemaError, ToolSchemaWarning
from toolgrammar.evaluate import bfcl
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import compile_turn

SAMPLE = json.loads((Path(__file__).resolve().parents[1] / "data" / "bfcl_sample.json").read_text(encoding="utf-8"))


def _id(entry: dict[str, Any]) -> str:
    return f"{entry['source']}:{entry['function']['name']}"


def test_the_sample_is_varied():
    schemas = SAMPLE["schemas"]
    assert SAMPLE["license"] == "Apache-2.0" and len(schemas) == 51
    assert Counter(e["outcome"] for e in schemas) == {"strict": 25, "lenient": 26}
    # one of each contradiction BFCL's data holds (lenient loading drops them, with a warning each)
    assert Counter(e.get("lenient_reason") for e in schemas) == {None: 45, "enum": 3, "required": 2, "minItems": 1}
    categories = {e["category"] for e in schemas}
    assert {*bfcl.CATEGORIES, "simple_java", "simple_javascript", "multi_turn_base"} <= categories
    assert sum("response" in e["function"] for e in schemas) == 5  # multi-turn docs carry their return value


@pytest.mark.parametrize("entry", SAMPLE["schemas"], ids=_id)
def test_real_bfcl_schema_compiles_strictly_or_leniently(entry):
    tools = bfcl.to_openai_tools([entry["function"]], entry["category"])
    name = tools[0]["function"]["name"]
    function = {k: v for k, v in tools[0]["function"].items() if k != "response"}  # not the parameters schema
    bare = [{"type": "function", "function": function}]
    if entry["outcome"] == "strict":
        toolset = load_tools(bare)
    else:
        with pytest.raises(ToolSchemaError) as refused:
            load_tools(bare)
        if "lenient_reason" in entry:  # a contradiction: strict names it, lenient drops it with a warning
            assert refused.value.keyword == entry["lenient_reason"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            toolset = load_tools(bare, lenient=True)
        assert all(w.category is ToolSchemaWarning for w in caught)
        assert [str(w.message) for w in caught] == entry["warnings"]

    adapted, notes = bfcl.grammar_tools(tools)
    assert notes == entry["grammar_tools_notes"]
    own = [note for note in notes if note.endswith("(bfcl.grammar_tools)")]
    # grammar_tools changes nothing load_tools itself reads (the response key aside)
    assert adapted[name].parameters == toolset[name].parameters
    assert len(own) == ("response" in entry["function"])
    if not own:
        assert adapted.to_openai() == tools  # the chat template shows the tool as BFCL sends it

    turn = compile_turn(adapted, tool_choice=name, cache=False)
    assert turn.tools.names == (name,)
    assert turn.dfa.accepting.any()  # the whole automaton, every argument compiled
