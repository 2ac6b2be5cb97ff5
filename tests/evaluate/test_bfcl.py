"""BFCL in toolgrammar: its data located and loaded, its tools converted, its AST checker mirrored, and
``toolgrammar compare --suite bfcl:...``.

Where BFCL lives. ``bfcl-eval==2026.3.23`` is **not** installed into this project's environment and is
not an extra: ``pip install --dry-run bfcl-eval==2026.3.23`` into ``.venv`` would move ``numpy`` 2.4.6 to
1.26.4 (its pin) and pin ``filelock==3.20.0`` and ``networkx==3.3`` (torch's), and it pulls two dozen
vendor SDKs. toolgrammar never imports it (``toolgrammar.evaluate.bfcl`` reads its data files only), so users
install it with ``pip install --no-deps``. The tests marked ``slow`` here build a separate venv in a
temporary folder: ``bfcl-eval==2026.3.23`` with ``--no-deps``, then only what BFCL's loading, tool
conversion, Qwen handler and evaluation runner import (:data:`REFERENCE_PACKAGES`). BFCL's own code then
runs in that venv through ``tests/bfcl_reference.py`` (a subprocess); its verdicts are compared with
``toolgrammar.evaluate.bfcl``'s. ``$TOOLGRAMMAR_TEST_BFCL_VENV`` names an existing such venv to reuse.

The fast tests need no BFCL install: the checker's rules on hand-written cases, the schema adaptation, the
data locator on a fake distribution, and the CLI on the tiny random model over a two-item data folder
(copied from BFCL's simple_python, Apache-2.0).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from toolgrammar.errors import ToolSchemaError
from toolgrammar.evaluate import bfcl
from toolgrammar.evaluate.bfcl import BfclItem, DecodeError, check_ast, decode_hermes, score_decoded
from toolgrammar.evaluate.compare import CompareConfig, CompareError, Generation
from toolgrammar.schema import load_tools

HERE = Path(__file__).resolve().parents[1]
REFERENCE_PACKAGES = [
    "filelock==3.20.0",
    "tenacity",
    "overrides",
    "requests",
    "openai",
    "python-dotenv",
    "tqdm",
    "numpy==1.26.4",
    "pandas",
    "tree-sitter==0.21.3",
    "tree-sitter-java==0.21.0",
    "tree-sitter-javascript==0.21.4",
]
"""What BFCL's code on the tested paths imports (utils, model_handler.utils and its Java/JS parsers,
QwenFCHandler and its OSSHandler base, eval_runner and its helpers), pinned as bfcl-eval pins them."""


# -- helpers ------------------------------------------------------------------------------------------


def _block(name: str, arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _item(category: str, functions: list[dict[str, Any]], answer: list[dict[str, Any]] | None) -> BfclItem:
    return BfclItem("x", category, ({"role": "user", "content": "q"},), tuple(functions), answer and tuple(answer))


TRIANGLE = {
    "name": "geometry.area_triangle",
    "description": "Area of a triangle.",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "float", "description": "Base."},
            "height": {"type": "integer", "description": "Height."},
            "unit": {"type": "string", "description": "Unit."},
            "sides": {"type": "array", "items": {"type": "integer"}, "description": "Sides."},
            "style": {"type": "dict", "description": "Style.", "properties": {"color": {"type": "string"}}},
        },
        "required": ["base", "height"],
    },
}
TRIANGLE_ANSWER = {
    "geometry.area_triangle": {
        "base": [10.0],
        "height": [5],
        "unit": ["square meters", ""],
        "sides": [[3, 4, 5], ""],
        "style": [{"color": ["red", "Dark-Red"]}, ""],
    }
}


# -- the checker's rules, by hand -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "valid", "error_type"),
    [
        ({"base": 10.0, "height": 5}, True, None),
        ({"base": 10, "height": 5}, True, None),  # an int is accepted for a float
        ({"base": 10.0, "height": 5.0}, False, "type_error:simple"),  # a float is not an int
        ({"base": 10.0, "height": True}, False, "type_error:simple"),  # nor is a bool
        ({"base": 10.0}, False, "simple_function_checker:missing_required"),
        ({"base": 10.0, "height": 5, "color": "red"}, False, "simple_function_checker:unexpected_param"),
        ({"base": 10.0, "height": 6}, False, "value_error:others"),
        ({"base": 10.0, "height": 5, "unit": "Square-Meters"}, True, None),  # case, spaces and -_.,/*^ ignored
        ({"base": 10.0, "height": 5, "unit": "square feet"}, False, "value_error:string"),
        ({"base": 10.0, "height": 5, "sides": [3, 4, 5]}, True, None),
        ({"base": 10.0, "height": 5, "sides": [5, 4, 3]}, False, "value_error:list/tuple"),  # lists keep order
        # BFCL's nested type check passes on any answer that is not a list (here the optional ""): a value error
        ({"base": 10.0, "height": 5, "sides": [3, 4, "5"]}, False, "value_error:list/tuple"),
        ({"base": 10.0, "height": 5, "style": {"color": "dark red"}}, True, None),
        ({"base": 10.0, "height": 5, "style": {"colour": "red"}}, False, "value_error:dict_key"),
        ({"base": 10.0, "height": 5, "style": {"color": "blue"}}, False, "value_error:dict_value"),
    ],
)
def test_simple_checker_rules(arguments, valid, error_type):
    verdict = check_ast([TRIANGLE], [{"geometry_area_triangle": arguments}], [TRIANGLE_ANSWER], "simple_python")
    assert (verdict.valid, verdict.error_type) == (valid, error_type), verdict


def test_strings_compare_with_quotes_made_double():
    answer = [{"geometry.area_triangle": {"base": [10.0], "height": [5], "unit": ["rock 'n' roll"]}}]
    output = [{"geometry_area_triangle": {"base": 10.0, "height": 5, "unit": 'Rock "n" Roll'}}]
    assert check_ast([TRIANGLE], output, answer, "simple_python").valid


def test_names_with_dots_follow_underscore_to_dot():
    answer, arguments = [TRIANGLE_ANSWER], {"base": 10.0, "height": 5}
    assert check_ast([TRIANGLE], [{"geometry_area_triangle": arguments}], answer, "simple_python").valid
    dotted = check_ast([TRIANGLE], [{"geometry.area_triangle": arguments}], answer, "simple_python")
    assert dotted.error_type == "simple_function_checker:wrong_func_name"
    assert check_ast(
        [TRIANGLE], [{"geometry.area_triangle": arguments}], answer, "simple_python", underscore_to_dot=False
    ).valid


def test_optional_parameter_needs_empty_string_in_possible_answers():
    answer = [{"geometry.area_triangle": {"base": [10.0], "height": [5], "unit": ["meters"]}}]
    verdict = check_ast([TRIANGLE], [{"geometry_area_triangle": {"base": 10.0, "height": 5}}], answer, "live_simple")
    assert verdict.error_type == "simple_function_checker:missing_optional"


def test_nested_type_check_of_a_list_without_optional_answer():
    answer = [{"geometry.area_triangle": {"base": [10.0], "height": [5], "sides": [[3, 4, 5]]}}]
    output = [{"geometry_area_triangle": {"base": 10.0, "height": 5, "sides": [3, 4, "5"]}}]
    assert check_ast([TRIANGLE], output, answer, "simple_python").error_type == "type_error:nested"


def test_parallel_is_order_free_and_counts_calls():
    answer = [
        {"geometry.area_triangle": {"base": [1.0], "height": [2]}},
        {"geometry.area_triangle": {"base": [3.0], "height": [4]}},
    ]
    first, second = {"base": 1.0, "height": 2}, {"base": 3.0, "height": 4}
    name = "geometry_area_triangle"
    for order in ([first, second], [second, first]):
        assert check_ast([TRIANGLE], [{name: a} for a in order], answer, "parallel").valid
    short = check_ast([TRIANGLE], [{name: first}], answer, "parallel")
    assert short.error_type == "parallel_function_checker_no_order:wrong_count"
    twice = check_ast([TRIANGLE], [{name: first}, {name: first}], answer, "live_parallel_multiple")
    assert twice.error_type == "parallel_function_checker_no_order:cannot_find_match"


def test_decode_hermes_reads_blocks_as_bfcls_qwen_handler():
    assert decode_hermes("no call here") == []
    two = _block("a", {"x": 1}) + "\n" + _block("b", {})
    assert decode_hermes(two) == [{"a": {"x": 1}}, {"b": {}}]
    assert decode_hermes("<think>\n" + _block("a", {}) + "\n</think>\n\nnothing") == []  # only what follows </think>
    assert decode_hermes('<tool_call>\n{"name": "a", "arguments": {"x": 1}\n</tool_call>') == []  # bad JSON dropped
    assert decode_hermes('<tool_call>{"name": "a", "arguments": {}}</tool_call>') == []  # no newlines: not seen
    for broken in ('{"name": "a", "arguments": "{}"}', '{"name": "a"}', "[1, 2]", '{"name": ["a"], "arguments": {}}'):
        with pytest.raises(DecodeError):
            decode_hermes(f"<tool_call>\n{broken}\n</tool_call>")


def test_relevance_rules():
    irrelevant = _item("irrelevance", [TRIANGLE], None)
    relevant = _item("live_relevance", [TRIANGLE], None)
    call = [{"geometry_area_triangle": {}}]
    assert score_decoded(irrelevant, []).valid and score_decoded(irrelevant, DecodeError("x")).valid
    assert score_decoded(irrelevant, call).error_type == "irrelevance_error:decoder_success"
    assert score_decoded(relevant, call).valid
    assert score_decoded(relevant, [{}]).error_type == "relevance_error:decoder_failed"
    simple = _item("simple_python", [TRIANGLE], [TRIANGLE_ANSWER])
    assert score_decoded(simple, DecodeError("x")).error_type == "ast_decoder:decoder_failed"
    assert score_decoded(simple, []).error_type == "simple_function_checker:wrong_count"


def test_conversion_to_openai_tools_and_grammar_tools():
    tools = bfcl.to_openai_tools([TRIANGLE], "simple_python")
    function = tools[0]["function"]
    assert tools[0]["type"] == "function" and function["name"] == "geometry_area_triangle"
    assert function["description"].endswith(" Note that the provided function is in Python 3 syntax.")
    properties = function["parameters"]["properties"]
    assert function["parameters"]["type"] == "object"
    assert properties["base"] == {
        "type": "number",
        "description": "Base. This is a float type value.",
        "format": "float",
    }
    assert properties["style"]["type"] == "object" and properties["sides"]["items"] == {"type": "integer"}
    assert TRIANGLE["parameters"]["type"] == "dict"  # the input is not modified
    toolset, notes = bfcl.grammar_tools(tools)
    assert notes == [
        "tool 'geometry_area_triangle', at /properties/base/format: format 'float' dropped: the grammar does not "
        "enforce it (lenient=True)"
    ]
    assert toolset.names == ("geometry_area_triangle",)
    assert toolset["geometry_area_triangle"].parameters["properties"]["base"] == {"type": "number"}
    assert toolset.to_openai() == tools  # the chat template shows the tools as BFCL sends them
    assert load_tools(toolset) is toolset


def test_grammar_tools_loads_strictly_when_it_can():
    clean = {"type": "dict", "properties": {"height": {"type": "integer", "maximum": 9}}, "required": ["height"]}
    tools = bfcl.to_openai_tools([{**TRIANGLE, "parameters": clean}], "parallel")
    toolset, notes = bfcl.grammar_tools(tools)
    assert notes == [] and toolset == load_tools(tools)
    strings, notes = bfcl.grammar_tools(bfcl.to_openai_tools([TRIANGLE], "simple_python"), mode="strings")
    assert strings.mode == "strings" and notes == []  # the strings mode reads only the top-level names
    assert strings["geometry_area_triangle"].parameters["properties"]["base"] == {"type": "string"}


def test_grammar_tools_drops_what_the_grammar_cannot_enforce_and_says_so():
    def deep(kind: str) -> dict[str, Any]:
        return {"type": "array", "items": {"type": kind, "items": {"type": "any"}}}

    messy = {
        "name": "book",
        "description": "Book.",
        "parameters": {
            "type": "dict",
            "properties": {
                "adults": {"type": "integer", "description": "N.", "enum": ["1", "2"]},
                "free": {"type": "boolean", "description": "F.", "enum": ["True", "False"]},
                "tags": {"type": "array", "description": "T.", "items": {"type": "string"}, "enum": ["a", "b"]},
                "when": {"type": "dict", "description": "W.", "required": ["day"]},
                "fee": {"type": "integer", "description": "Fee.", "maximum": 400, "minItems": 1},
                # BFCL converts the types of two levels of items; below, its own names stay
                "rooms": {"type": "array", "description": "R.", "items": {"type": "array", "items": deep("Hashtable")}},
                "pairs": {"type": "array", "description": "P.", "items": {"type": "array", "items": deep("tuple")}},
            },
            "required": ["adults", "kids"],
            "optional": ["free"],
        },
        "response": {"type": "dict", "properties": {"ok": {"type": "boolean"}}},
    }
    tools = bfcl.to_openai_tools([messy], "live_multiple")
    toolset, notes = bfcl.grammar_tools(tools)

    def note(at: str, what: str, by: str = "bfcl.grammar_tools") -> str:
        return f"tool 'book', at {at}: {what} ({by})"

    by = "lenient=True"

    ignored = "(JSON Schema ignores it there)"
    assert notes == [
        note("/", "key 'response' of the function object dropped (load_tools does not take it)"),
        note("/properties/rooms/items/items/items/type", 'type "Hashtable" read as "object"'),
        note("/optional", "BFCL's optional flag dropped (required decides what is required)", by),
        note("/required", 'required names ["kids"] dropped: no property declares them', by),
        note("/properties/adults/enum", 'enum ["1", "2"] dropped: no value is of type "integer"', by),
        note("/properties/free/enum", 'enum ["True", "False"] dropped: no value is of type "boolean"', by),
        note("/properties/tags/enum", 'enum ["a", "b"] dropped: no value is of type "array"', by),
        note("/properties/when/required", 'required names ["day"] dropped: no property declares them', by),
        note(
            "/properties/fee/minItems", f'minItems dropped: it applies to arrays, the type is "integer" {ignored}', by
        ),
        note(
            "/properties/rooms/items/items/items/items",
            f'items dropped: it applies to arrays, the type is "object" {ignored}',
            by,
        ),
        note("/properties/pairs/items/items/items/type", 'type "tuple" read as "array"', by),
        note("/properties/pairs/items/items/items/items/type", 'type "any" read as any value (type dropped)', by),
    ]
    parameters = toolset["book"].parameters
    assert parameters["properties"]["adults"] == {"type": "integer"}
    assert parameters["properties"]["fee"] == {"type": "integer", "maximum": 400}  # enforceable: kept
    deepest = {name: parameters["properties"][name]["items"]["items"]["items"] for name in ("pairs", "rooms")}
    assert deepest == {"pairs": {"type": "array", "items": {}}, "rooms": {"type": "object", "additionalProperties": {}}}
    assert "enum" not in parameters["properties"]["free"] and parameters["required"] == ["adults"]
    assert "response" not in toolset["book"].source["function"] and "response" in tools[0]["function"]


def test_grammar_tools_raises_what_it_cannot_adapt():
    def one(schema: dict[str, Any]) -> list[dict[str, Any]]:
        doc = {"name": "f", "description": "F.", "parameters": {"type": "dict", "properties": {"a": schema}}}
        return bfcl.to_openai_tools([doc], "simple_python")

    with pytest.raises(ToolSchemaError, match="multipleOf"):  # nothing to adapt: lenient loading's own error
        bfcl.grammar_tools(one({"type": "integer", "description": "A.", "multipleOf": 5}))
    with pytest.raises(ToolSchemaError, match="uniqueItems"):  # required dropped by lenient loading, still refused
        bfcl.grammar_tools(one({"type": "array", "description": "A.", "uniqueItems": True, "required": ["x"]}))


def test_java_categories_are_refused():
    with pytest.raises(bfcl.BfclError, match="Java/JavaScript"):
        bfcl.check_category("simple_java")
    with pytest.raises(CompareError, match="unknown or unsupported"):
        from toolgrammar.evaluate.bfcl_suite import parse_suite

        parse_suite("bfcl:simple,multiple")


# -- locating data without importing the package -----------------------------------------------------------


def _fake_site(tmp_path: Path, items: list[dict[str, Any]], answers: list[dict[str, Any]]) -> Path:
    """A site-packages folder holding a minimal bfcl-eval distribution (data files and dist-info)."""
    site = tmp_path / "site"
    data = site / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    (site / "bfcl_eval" / "__init__.py").write_text("raise RuntimeError('bfcl_eval must not be imported')\n")
    (data / "BFCL_v4_simple_python.json").write_text("".join(json.dumps(i) + "\n" for i in items))
    (data / "possible_answer" / "BFCL_v4_simple_python.json").write_text("".join(json.dumps(a) + "\n" for a in answers))
    info = site / "bfcl_eval-2026.3.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bfcl_eval\nVersion: 2026.3.23\n")
    files = ["bfcl_eval/__init__.py", "bfcl_eval/data/BFCL_v4_simple_python.json"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return site


# Two of BFCL's simple_python items (bfcl-eval 2026.3.23, Apache-2.0), as the package ships them.
SAMPLE_ITEMS = [
    {
        "id": "simple_python_0",
        "question": [
            [{"role": "user", "content": "Find the area of a triangle with a base of 10 units and height of 5 units."}]
        ],
        "function": [
            {
                "name": "calculate_triangle_area",
                "description": "Calculate the area of a triangle given its base and height.",
                "parameters": {
                    "type": "dict",
                    "properties": {
                        "base": {"type": "integer", "description": "The base of the triangle."},
                        "height": {"type": "integer", "description": "The height of the triangle."},
                        "unit": {
                            "type": "string",
                            "description": "The unit of measure (defaults to 'units' if not specified)",
                        },
                    },
                    "required": ["base", "height"],
                },
            }
        ],
    },
    {
        "id": "simple_python_1",
        "question": [[{"role": "user", "content": "Calculate the factorial of 5 using math functions."}]],
        "function": [
            {
                "name": "math.factorial",
                "description": "Calculate the factorial of a given number.",
                "parameters": {
                    "type": "dict",
                    "properties": {
                        "number": {
                            "type": "integer",
                            "description": "The number for which factorial needs to be calculated.",
                        }
                    },
                    "required": ["number"],
                },
            }
        ],
    },
]
SAMPLE_ANSWERS = [
    {
        "id": "simple_python_0",
        "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}],
    },
    {"id": "simple_python_1", "ground_truth": [{"math.factorial": {"number": [5]}}]},
]


def test_locate_data_through_metadata_without_importing(tmp_path, monkeypatch):
    monkeypatch.delenv(bfcl.DATA_ENV, raising=False)
    site = _fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS)
    data = bfcl.locate_data([site])
    assert data.version == "2026.3.23" and data.root == site / "bfcl_eval" / "data"
    assert "bfcl_eval" not in sys.modules
    items = bfcl.load_category("simple_python", data)
    assert [i.id for i in items] == ["simple_python_0", "simple_python_1"]
    assert items[1].possible_answer == ({"math.factorial": {"number": [5]}},)
    assert items[0].messages[0]["role"] == "user"
    with pytest.raises(bfcl.BfclError, match=r"pip install --no-deps bfcl-eval==2026\.3\.23"):
        bfcl.locate_data([tmp_path / "empty"])
    monkeypatch.setenv(bfcl.DATA_ENV, str(site / "bfcl_eval" / "data"))
    assert bfcl.locate_data([tmp_path / "empty"]).version is None


# -- the suite in the side-by-side mode ------------------------------------------------------------------------


class _Scripted:
    """Per item: the free side writes the right call as fenced JSON, the constrained side as a block."""

    name = source = "scripted"

    def __init__(self, toolset: Any):
        self.toolset = toolset

    def render(self, messages, tools):
        return json.dumps(messages)

    def generate(self, prompts, *, constrained, seed, on_step=None):
        question = json.loads(prompts[0])[-1]["content"]
        name, arguments = (
            ("calculate_triangle_area", {"base": 10, "height": 5})
            if "triangle" in question
            else ("math_factorial", {"number": 6})  # a wrong value
        )
        call = json.dumps({"name": name, "arguments": arguments})
        text = f"<tool_call>\n{call}\n</tool_call>" if constrained else f"```json\n{call}\n```"
        return [Generation(text=text, tokens=len(text) // 4, finish="stop")]


def test_suite_counts_bfcl_accuracy_side_by_side(tmp_path, monkeypatch):
    from toolgrammar.evaluate.bfcl_suite import parse_suite, run_suite, suite_rows

    monkeypatch.delenv(bfcl.DATA_ENV, raising=False)
    data = bfcl.locate_data([_fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS)])
    config = CompareConfig(model="scripted", mode="schema", limit=None, out=str(tmp_path / "out"), progress=False)
    report = run_suite(config, parse_suite("bfcl:simple_python"), generator_factory=_Scripted, data=data)
    accuracy = report.categories["simple_python"]["bfcl"]
    assert (accuracy["free"]["valid"], accuracy["constrained"]["valid"]) == (0, 1)
    assert accuracy["free"]["valid_any_shape"] == 1  # the fenced triangle call was right, in the wrong shape
    assert accuracy["free"]["error_types"] == {"simple_function_checker:wrong_count": 2}
    assert accuracy["constrained"]["error_types"] == {"value_error:others": 1}
    summary = report.categories["simple_python"]["summary"]
    assert summary["errors_hidden"] == 2 and summary["modes"]["free"]["other_shape_calls"]["fenced"] == 2
    (row,) = suite_rows(report)
    assert row[:5] == ("simple_python", "2", "0/2 (0%)", "1/2 (50%)", "1/2 (50%)")
    assert row[8] == "2 (0)"  # two blocks, none closed by a stop (the scripted generator reports none)
    assert "| simple_python | 2 |" in (tmp_path / "out" / "bfcl-report.md").read_text()
    lines = (tmp_path / "out" / "bfcl-runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == ["simple_python_0", "simple_python_1"]


def test_suite_chart_shows_the_reports_accuracy_per_category(tmp_path, monkeypatch):
    from toolgrammar.evaluate.bfcl_suite import CHART_FILE, chart_series, parse_suite, run_suite

    monkeypatch.delenv(bfcl.DATA_ENV, raising=False)
    data = bfcl.locate_data([_fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS)])
    out = tmp_path / "out"
    config = CompareConfig(model="scripted", mode="schema", limit=None, out=str(out), progress=False)
    report = run_suite(config, parse_suite("bfcl:simple_python"), generator_factory=_Scripted, data=data)
    categories, series = chart_series(report)
    # The scripted sides (see the test above): free 0/2 as BFCL reads it, 1/2 with fenced calls read, and
    # the constrained blocks 1/2 (the factorial call has a wrong value).
    assert categories == ["simple_python"]
    assert series == {
        "free": [(0, 2)],
        "free, other shapes read too": [(1, 2)],
        "constrained, auto, steered": [(1, 2)],
    }
    chart = (out / CHART_FILE).read_bytes()
    assert chart[:8] == b"\x89PNG\r\n\x1a\n" and len(chart) > 5000
    assert f"![BFCL accuracy per category]({CHART_FILE})" in (out / "bfcl-report.md").read_text()
    # Without matplotlib: a note instead, and no chart left from the run before.
    monkeypatch.setattr("toolgrammar.evaluate.bfcl_suite.has_matplotlib", lambda: False)
    run_suite(config, parse_suite("bfcl:simple_python"), generator_factory=_Scripted, data=data)
    assert not (out / CHART_FILE).exists()
    assert "No chart: matplotlib is not installed" in (out / "bfcl-report.md").read_text()


class _GatedScripted(_Scripted):
    """``_Scripted`` with a relevance gate: relevant only for the triangle request (a fixed score each)."""

    def relevance(self, conversations, tools):
        from toolgrammar.evaluate.relevance import Relevance

        scores = [0.7 if "triangle" in messages[-1]["content"] else -0.4 for messages in conversations]
        return [Relevance(v, v >= 0.0, 0.0, "pmi") for v in scores]

    def generate(self, prompts, *, constrained, seed, on_step=None, steer_rows=None):
        assert (steer_rows is not None) == constrained  # the verdicts reach the constrained side only
        return super().generate(prompts, constrained=constrained, seed=seed, on_step=on_step)


def _gated_suite(tmp_path, monkeypatch, steer_gate: str, generator_factory):
    """The sample ``simple_python`` items through the suite with a scripted gate."""
    from toolgrammar.evaluate.bfcl_suite import parse_suite, run_suite

    monkeypatch.delenv(bfcl.DATA_ENV, raising=False)
    data = bfcl.locate_data([_fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS)])
    config = CompareConfig(model="scripted", mode="schema", limit=None, out=str(tmp_path / "out"), progress=False,
                           steer_gate=steer_gate)  # fmt: skip
    return run_suite(config, parse_suite("bfcl:simple_python"), generator_factory=generator_factory, data=data)


def test_suite_reports_the_relevance_gate(tmp_path, monkeypatch):
    report = _gated_suite(tmp_path, monkeypatch, "pmi", _GatedScripted)
    gate = report.categories["simple_python"]["bfcl"]["constrained"]["gate"]
    assert gate == {"runs": 2, "let_steer": 1, "scores": [0.7, -0.4], "score_texts": ["0.70", "-0.40"],
                    "method": "pmi", "threshold": 0.0}  # fmt: skip
    assert "gate" not in report.categories["simple_python"]["bfcl"]["free"]
    text = (tmp_path / "out" / "bfcl-report.md").read_text()
    assert "## Relevance gate" in text and "`--steer-gate pmi`" in text
    assert "| simple_python | 1/2 | 0.70, -0.40 |" in text


class _CombinedGateScripted(_GatedScripted):
    """A ``pmi+name`` gate: pmi as ``_GatedScripted``, name 0.9 for the triangle request and 0.3 otherwise."""

    def relevance(self, conversations, tools):
        from toolgrammar.evaluate.relevance import Relevance

        out = []
        for messages in conversations:
            triangle = "triangle" in messages[-1]["content"]
            pmi = Relevance(0.7 if triangle else 0.2, True, 0.0, "pmi")
            name = Relevance(0.9 if triangle else 0.3, triangle, 0.5, "name")
            out.append(Relevance((1 + triangle) / 2, triangle, 1.0, "pmi+name", (pmi, name)))
        return out


def test_suite_reports_a_combined_gate_per_part(tmp_path, monkeypatch):
    report = _gated_suite(tmp_path, monkeypatch, "pmi+name", _CombinedGateScripted)
    gate = report.categories["simple_python"]["bfcl"]["constrained"]["gate"]
    assert (gate["let_steer"], gate["method"], gate["threshold"], gate["scores"]) == (1, "pmi+name", 1.0, [1.0, 0.5])
    runs = [json.loads(line) for line in (tmp_path / "out" / "bfcl-runs.jsonl").read_text().splitlines()]
    parts = [r["constrained"]["steer_gate"]["parts"] for r in runs if r.get("type") == "run"]
    assert [[p["method"] for p in each] for each in parts] == [["pmi", "name"]] * 2
    text = (tmp_path / "out" / "bfcl-report.md").read_text()
    assert "`--steer-gate pmi+name`" in text and "log-probability gain" in text and "name one of the offered" in text
    assert "| simple_python | 1/2 | pmi 0.70 / name 0.90, pmi 0.20 / name 0.30 |" in text


def test_cli_suite_on_the_tiny_model(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from toolgrammar.cli import main

    site = _fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS)
    monkeypatch.setenv(bfcl.DATA_ENV, str(site / "bfcl_eval" / "data"))
    out = tmp_path / "o"
    args = ["--suite", "bfcl:simple_python", "--model", "tiny-random", "--limit", "2", "--max-new-tokens", "12"]
    code = main(["compare", "--no-progress", *args, "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "simple_python" in printed and "BFCL accuracy" in printed
    report = json.loads((out / "bfcl-report.json").read_text())
    assert list(report["categories"]) == ["simple_python"]
    assert report["config"]["mode"] == "schema"
    assert report["categories"]["simple_python"]["summary"]["runs"] == 2
    assert report["categories"]["simple_python"]["bfcl"]["constrained"]["runs"] == 2
    markdown = (out / "bfcl-report.md").read_text()
    assert markdown.count("| simple_python | 2 |") == 1
    assert not (out / "report.md").exists()  # the default report is not written in suite mode


def test_cli_default_compare_is_unchanged_by_the_suite_option(tmp_path, capsys):
    """Without --suite: the bundled tasks, arguments 'strings', report.md, no BFCL file."""
    pytest.importorskip("torch")
    from toolgrammar.cli import main

    out = tmp_path / "o"
    args = ["--model", "tiny-random", "--limit", "1", "--max-new-tokens", "8", "--out", str(out)]
    assert main(["compare", "--no-progress", *args]) == 0, capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["mode"] == "strings" and report["config"]["tasks"] is None
    assert (out / "report.md").is_file() and not (out / "bfcl-report.md").exists()


def test_cli_suite_bad_input_exits_2(tmp_path, monkeypatch, capsys):
    from toolgrammar.cli import main

    monkeypatch.setenv(bfcl.DATA_ENV, str(_fake_site(tmp_path, SAMPLE_ITEMS, SAMPLE_ANSWERS) / "bfcl_eval" / "data"))
    for args, message in (
        (["--suite", "bfcl:simple_java"], "Java/JavaScript"),
        (["--suite", "gorilla:simple"], "the only suite is BFCL"),
        (["--suite", "bfcl:simple_python", "--turns", "2"], "single-turn"),
    ):
        assert main(["compare", "--no-progress", *args, "--out", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err


# -- against BFCL itself (slow: a separate venv) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def bfcl_python(tmp_path_factory) -> Path:
    """The Python of a venv holding bfcl-eval 2026.3.23 (--no-deps) and what its tested code imports."""
    given = os.environ.get("TOOLGRAMMAR_TEST_BFCL_VENV")
    if given:
        return Path(given) / "bin" / "python"
    venv = tmp_path_factory.mktemp("bfcl-venv")
    python = venv / "bin" / "python"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "bfcl-eval==2026.3.23"],
        [str(python), "-m", "pip", "install", "-q", *REFERENCE_PACKAGES],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"could not build the BFCL venv ({' '.join(step[2:5])}...): {done.stderr[-800:]}")
    return python


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _ask_bfcl(python: Path, request: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    env = {**os.environ, "BFCL_PROJECT_ROOT": str(tmp_path / "bfcl-root")}
    done = subprocess.run(
        [str(python), str(HERE / "bfcl_reference.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def bfcl_data(bfcl_python) -> bfcl.BfclData:
    return bfcl.locate_data([_site_packages(bfcl_python)], use_env=False)


@pytest.mark.slow
def test_data_located_and_loaded_like_bfcl(bfcl_python, bfcl_data, tmp_path):
    """On the real package: found by its metadata (never imported), every category loaded as BFCL's own
    loaders load it (ids, messages, functions, ground truth)."""
    assert bfcl_data.version == bfcl.PINNED_VERSION
    assert bfcl_data.root.name == "data" and bfcl_data.root.parent.name == "bfcl_eval"
    assert "bfcl_eval" not in sys.modules
    counts = {c: len(bfcl.load_category(c, bfcl_data)) for c in bfcl.CATEGORIES}
    assert counts["simple_python"] == 400 and counts["multiple"] == 200 and counts["irrelevance"] == 240
    reference = _ask_bfcl(bfcl_python, {"categories": list(bfcl.CATEGORIES), "convert": [], "cases": []}, tmp_path)
    for category in bfcl.CATEGORIES:
        ours = bfcl.load_category(category, bfcl_data)
        theirs = reference["items"][category]
        assert [i.id for i in ours] == [e["id"] for e in theirs]
        for item, entry in zip(ours, theirs, strict=True):
            assert list(item.messages) == entry["question"][0]
            assert list(item.functions) == entry["function"]
            assert (list(item.possible_answer) if item.possible_answer else None) == entry["ground_truth"]


@pytest.mark.slow
def test_tools_converted_like_bfcl_and_loadable(bfcl_python, bfcl_data, tmp_path):
    """Every item's tools equal BFCL's convert_to_tool(..., OPENAI_COMPLETIONS) output (language hint included,
    Java/JS too), and every Python item's tools load through grammar_tools (strict, else lenient, else adapted)."""
    categories = [*bfcl.CATEGORIES, "simple_java", "simple_javascript"]
    reference = _ask_bfcl(bfcl_python, {"categories": [], "convert": categories, "cases": []}, tmp_path)
    compared = 0
    for category in categories:
        for entry_id, tools in reference["tools"][category].items():
            functions = next(
                json.loads(line)["function"]
                for line in bfcl_data.prompt_file(category).read_text().splitlines()
                if line.strip() and json.loads(line)["id"] == entry_id
            )
            assert bfcl.to_openai_tools(functions, category) == tools, entry_id
            compared += 1
            if category in bfcl.CATEGORIES:
                assert len(bfcl.grammar_tools(tools)[0]) == len(tools)  # some items offer no tool
    assert compared == 3641


# The sample of (model output, item) pairs: every AST item's possible answer written as a Qwen turn, and
# one wrong value; for a seeded sample of items per category, the answer perturbed every way below.


def _first(options: list[Any]) -> tuple[bool, Any]:
    chosen = [o for o in options if o != ""]
    return (bool(chosen), chosen[0]) if chosen else (False, None)


def _value_of(option: Any, doc: dict[str, Any]) -> Any:
    """A possible-answer option as a value: a dict option holds lists of accepted values per key."""
    kind = doc.get("type")
    if kind == "dict" and isinstance(option, dict):
        return {k: v for k, (ok, v) in ((k, _first(vs)) for k, vs in option.items()) if ok}
    if kind == "array" and doc.get("items", {}).get("type") == "dict" and isinstance(option, list):
        return [_value_of(o, {"type": "dict"}) for o in option]
    return option


def _answer_calls(item: BfclItem) -> list[tuple[str, str, dict[str, Any]]]:
    """(BFCL name, OpenAI name, arguments) per expected call: the first accepted value of each parameter."""
    calls = []
    for entry in item.possible_answer or ():
        ((name, params),) = entry.items()
        doc = next(f for f in item.functions if f["name"] == name)["parameters"]["properties"]
        arguments = {}
        for param, options in params.items():
            ok, option = _first(options)
            if ok:
                arguments[param] = _value_of(option, doc.get(param, {}))
        calls.append((name, name.replace(".", "_"), arguments))
    return calls


def _other_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return [value]


def _other_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + " and more"
    if isinstance(value, list):
        return [*value, value[0]] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "extra_key": "x"} if value else {"extra_key": "x"}
    return "x"


def _turn(calls: list[tuple[str, str, dict[str, Any]]], *, dotted: bool = False) -> str:
    return "\n".join(_block(bfcl_name if dotted else name, arguments) for bfcl_name, name, arguments in calls)


def _perturbations(item: BfclItem, rng: random.Random) -> list[tuple[str, str]]:
    """(label, turn text) pairs: the answer, and the answer made wrong (or differently right) one way each."""
    calls = _answer_calls(item)
    out = [("answer", _turn(calls)), ("dotted names", _turn(calls, dotted=True))]
    out += [("prose", "I cannot help with that."), ("think + answer", "<think>\nok\n</think>\n\n" + _turn(calls))]
    out += [("no newlines", _turn(calls).replace("<tool_call>\n", "<tool_call>"))]
    out += [("broken JSON", _turn(calls)[:-14] + "\n</tool_call>")]
    out += [
        ("arguments as a string", "<tool_call>\n" + json.dumps({"name": "f", "arguments": "{}"}) + "\n</tool_call>")
    ]
    if not calls:
        return out
    bfcl_name, name, arguments = calls[0]
    doc = next(f for f in item.functions if f["name"] == bfcl_name)["parameters"]
    rest = calls[1:]

    def with_args(new: dict[str, Any]) -> str:
        return _turn([(bfcl_name, name, new), *rest])

    out.append(("wrong name", _turn([(bfcl_name, name + "_v2", arguments), *rest])))
    out.append(("extra parameter", with_args({**arguments, "unexpected_param": "x"})))
    undeclared = [p for p in doc["properties"] if p not in arguments]
    if undeclared:
        out.append(("extra declared parameter", with_args({**arguments, undeclared[0]: "x"})))
    for param in doc["required"]:
        if param in arguments:
            out.append((f"missing required {param}", with_args({k: v for k, v in arguments.items() if k != param})))
            break
    for param, value in arguments.items():
        kind = doc["properties"].get(param, {}).get("type")
        out.append((f"wrong type {param}", with_args({**arguments, param: _other_type(value)})))
        out.append((f"wrong value {param}", with_args({**arguments, param: _other_value(value)})))
        if kind == "float" and isinstance(value, float) and value.is_integer():
            out.append((f"int for float {param}", with_args({**arguments, param: int(value)})))
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            out.append((f"float for int {param}", with_args({**arguments, param: float(value)})))
            out.append((f"bool for int {param}", with_args({**arguments, param: bool(value)})))
        if isinstance(value, str):
            variant = value.upper().replace(" ", "_") + "."
            out.append((f"string variant {param}", with_args({**arguments, param: variant})))
        if isinstance(value, list) and value:
            out.append((f"list reversed {param}", with_args({**arguments, param: value[::-1]})))
            if all(isinstance(v, str) for v in value):
                out.append((f"list items upper {param}", with_args({**arguments, param: [v.upper() for v in value]})))
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
                out.append((f"list items as strings {param}", with_args({**arguments, param: [str(v) for v in value]})))
        if isinstance(value, dict) and value:
            key = rng.choice(sorted(value))
            out.append((f"dict value None {param}", with_args({**arguments, param: {**value, key: None}})))
            out.append(
                (
                    f"dict missing key {param}",
                    with_args({**arguments, param: {k: v for k, v in value.items() if k != key}}),
                )
            )
    optional = [p for p, options in next(iter(item.possible_answer[0].values())).items() if "" in options]
    if optional and optional[0] in arguments:
        out.append(("optional left out", with_args({k: v for k, v in arguments.items() if k != optional[0]})))
    if len(calls) > 1:
        out.append(("calls reversed", _turn(calls[::-1])))
        out.append(("last call dropped", _turn(calls[:-1])))
        out.append(("first call twice", _turn([calls[0], *calls[:-1]])))
    else:
        out.append(("a second call", _turn([*calls, calls[0]])))
    return out


def _relevance_cases(item: BfclItem) -> list[tuple[str, str]]:
    function = item.functions[0]
    name = function["name"].replace(".", "_")
    arguments = {p: "x" for p in function["parameters"]["required"]}
    return [
        ("prose", "That is not something these tools do."),
        ("a call", _block(name, arguments)),
        ("a call, no arguments", _block(name, {})),
        ("empty object", "<tool_call>\n{}\n</tool_call>"),
        ("broken JSON", _block(name, arguments)[:-14] + "\n</tool_call>"),
        ("arguments as a string", "<tool_call>\n" + json.dumps({"name": name, "arguments": "{}"}) + "\n</tool_call>"),
    ]


def _sample(data: bfcl.BfclData) -> list[tuple[BfclItem, str, str]]:
    rng = random.Random(13)
    cases: list[tuple[BfclItem, str, str]] = []
    for category in bfcl.CATEGORIES:
        items = bfcl.load_category(category, data)
        if category in bfcl.RELEVANCE_CATEGORIES:
            for item in rng.sample(items, min(12, len(items))):
                cases += [(item, label, text) for label, text in _relevance_cases(item)]
            continue
        for item in items:  # the whole category: its answer, and the first parameter's value made wrong
            calls = _answer_calls(item)
            cases.append((item, "answer", _turn(calls)))
            bfcl_name, name, arguments = calls[0]
            if arguments:
                param = next(iter(arguments))
                wrong = {**arguments, param: _other_value(arguments[param])}
                cases.append((item, "a wrong value", _turn([(bfcl_name, name, wrong), *calls[1:]])))
        for item in rng.sample(items, min(12, len(items))):
            cases += [(item, label, text) for label, text in _perturbations(item, rng)]
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("model", ["toolgrammar", "toolgrammar-dots"])
def test_verdicts_agree_with_bfcls_own_checker(bfcl_python, bfcl_data, tmp_path, model):
    """BFCL's QwenFCHandler + eval_runner (+ ast_checker) and toolgrammar.evaluate.bfcl give every pair the same
    verdict:
    the same valid flag and the same error_type. ``toolgrammar``: underscore_to_dot=True (OpenAI-style tools,
    what --suite uses); ``toolgrammar-dots``: False."""
    cases = _sample(bfcl_data)
    request = {
        "categories": list(bfcl.CATEGORIES),
        "convert": [],
        "cases": [{"category": i.category, "id": i.id, "text": t, "model": model} for i, _, t in cases],
    }
    theirs = _ask_bfcl(bfcl_python, request, tmp_path)["verdicts"]
    ours = []
    for item, _, text in cases:
        try:
            decoded: Any = decode_hermes(text)
        except DecodeError as error:
            decoded = error
        ours.append(score_decoded(item, decoded, underscore_to_dot=model == "toolgrammar").to_dict())
    disagreements = [
        (item.id, label, text, mine, reference)
        for (item, label, text), mine, reference in zip(cases, ours, theirs, strict=True)
        if (mine["valid"], mine["error_type"] if not mine["valid"] else None)
        != (reference["valid"], reference["error_type"] if not reference["valid"] else None)
    ]
    assert not disagreements, disagreements[:5]
    verdicts = Counter("valid" if v["valid"] else v["error_type"] for v in theirs)
    print(f"{model}: {len(cases)} pairs, identical verdicts; {dict(verdicts.most_common())}")
    assert len(cases) > 2000 and verdicts["valid"] > 1000
    expected_kinds = {
        "ast_decoder:decoder_failed",
        "simple_function_checker:wrong_func_name",
        "simple_function_checker:missing_required",
        "simple_function_checker:unexpected_param",
        "simple_function_checker:wrong_count",
        "type_error:simple",
        "type_error:nested",
        "value_error:string",
        "value_error:others",
        "value_error:list/tuple",
        "value_error:dict_value",
        "multiple_function_checker:wrong_count",
        "parallel_function_checker_no_order:wrong_count",
        "parallel_function_checker_no_order:cannot_find_match",
        "irrelevance_error:decoder_success",
        "relevance_error:decoder_failed",
    }
    if model == "toolgrammar":  # with dotted names kept, most perturbed calls already fail on the name
        assert expected_kinds <= set(verdicts), expected_kinds - set(verdicts)
    else:
        assert verdicts["simple_function_checker:wrong_func_name"] > 1000
