"""Tests of toolgrammar.schema: loading, validation errors, normalization, fingerprints, the real corpus."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrammar.errors import ToolgrammarError, ToolSchemaError, ToolSchemaWarning
from toolgrammar.schema import (
    ANNOTATION_KEYWORDS,
    SUPPORTED_KEYWORDS,
    Tool,
    ToolSet,
    copies,
    load_tools,
    loading,
    normalize,
    plain,
)
from toolgrammar.schema import toolset as toolset_module
from toolgrammar.schema.arguments import BAD_ARGUMENT_CHARACTER

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


def entry(parameters: Any = None, name: str = "t", **function: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, **function}
    if parameters is not None:
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def load_one(parameters: Any, mode: str = "schema") -> dict[str, Any]:
    return load_tools([entry(parameters)], mode=mode)["t"].parameters  # type: ignore[arg-type]


def schema_error(
    parameters: Any, match: str, *, pointer: str, keyword: str | None, mode: str = "schema"
) -> ToolSchemaError:
    """Load one tool named 't' and check the error's class, message, tool, pointer and keyword."""
    with pytest.raises(ToolSchemaError, match=match) as info:
        load_tools([entry(parameters)], mode=mode)  # type: ignore[arg-type]
    error = info.value
    assert (error.tool, error.pointer, error.keyword) == ("t", pointer, keyword)
    assert str(error).startswith("tool 't'")
    return error


def entries_error(entries: Any, match: str, *, tool: str | None, pointer: str = "") -> ToolSchemaError:
    with pytest.raises(ToolSchemaError, match=match) as info:
        load_tools(entries)
    assert (info.value.tool, info.value.pointer) == (tool, pointer)
    return info.value


# --------------------------------------------------------------------------------------------------
# Files


def test_file_list_and_wrapper_and_pathlike(tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps([WEATHER]), encoding="utf-8")
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"tools": [WEATHER]}), encoding="utf-8")
    from_str = load_tools(str(listing))
    assert from_str.names == ("get_weather",)
    assert load_tools(listing) == from_str  # os.PathLike
    assert load_tools(wrapped) == from_str
    assert load_tools([WEATHER]).fingerprint == from_str.fingerprint


def test_file_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ToolSchemaError, match=r"tool file '.*nope\.json' does not exist") as info:
        load_tools(missing)
    assert (info.value.tool, info.value.pointer, info.value.keyword) == (None, "", None)


def test_str_source_is_a_path_even_when_it_looks_like_json() -> None:
    with pytest.raises(
        ToolSchemaError, match=r"does not exist \(a str source is a path; for JSON text pass json\.loads"
    ):
        load_tools(json.dumps([WEATHER]))


def test_file_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ToolSchemaError, match="is a directory, not a file"):
        load_tools(tmp_path)


def test_file_not_json_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"type": "function",\n   "function": {"name": "x",}}\n]', encoding="utf-8")
    with pytest.raises(ToolSchemaError, match=r"bad\.json:3:29: not valid JSON: Expecting property name"):
        load_tools(bad)


def test_file_with_nan_is_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "nan.json"
    bad.write_text('[{"name": "x", "parameters": {"type": "object", "properties": {"a": {"const": NaN}}}}]')
    with pytest.raises(ToolSchemaError, match="not valid JSON: NaN is not valid JSON"):
        load_tools(bad)


def test_file_not_utf8(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'[{"name": "caf\xe9"}]')
    with pytest.raises(ToolSchemaError, match="is not UTF-8 text"):
        load_tools(bad)


@pytest.mark.parametrize(
    ("content", "got"),
    [
        pytest.param('{"name": "x"}', "object", id="object-without-tools"),
        pytest.param("42", "number", id="number"),
        pytest.param('"tools"', "string", id="string"),
    ],
)
def test_file_not_a_list(tmp_path: Path, content: str, got: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(
        ToolSchemaError, match=rf'holds a JSON {got}; it must hold a list of tools or {{"tools": \[\.\.\.\]}}'
    ):
        load_tools(bad)


def test_file_tools_key_not_a_list(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"tools": {"name": "x"}}', encoding="utf-8")
    with pytest.raises(ToolSchemaError, match='"tools" is a JSON object; it must be a list of tools'):
        load_tools(bad)


def test_file_wrapper_with_unknown_keys(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"tools": [], "tool_choice": "auto"}', encoding="utf-8")
    with pytest.raises(ToolSchemaError, match=r"unknown key\(s\) 'tool_choice' beside \"tools\""):
        load_tools(bad)


def test_source_of_the_wrong_type() -> None:
    with pytest.raises(ToolSchemaError, match="tool source is bytes"):
        load_tools(b"[]")  # type: ignore[arg-type]
    with pytest.raises(ToolSchemaError, match="tool source is a int"):
        load_tools(3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Entries


def test_both_entry_shapes_give_the_same_tool() -> None:
    fn = WEATHER["function"]
    openai = load_tools([WEATHER])
    bare = load_tools([fn])
    flat = load_tools([{"type": "function", **fn}])  # the Responses API's flat shape
    assert openai.fingerprint == bare.fingerprint == flat.fingerprint
    for toolset in (openai, bare, flat):
        tool = toolset["get_weather"]
        assert tool.description == "Get the current weather for a city."
        assert tool.parameters == {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        }
        assert toolset.to_openai() == [WEATHER]
    assert openai["get_weather"].source == WEATHER
    assert bare["get_weather"].source == fn


def test_single_entry_mapping_and_tools_mapping() -> None:
    assert load_tools(WEATHER).names == ("get_weather",)
    assert load_tools({"tools": [WEATHER]}).names == ("get_weather",)
    assert load_tools([]).names == ()


def test_missing_null_and_empty_parameters_mean_no_arguments() -> None:
    empty = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    toolset = load_tools([{"name": "a"}, {"name": "b", "parameters": None}, {"name": "c", "parameters": {}}])
    for tool in toolset:
        assert tool.parameters == empty
        assert tool.description is None
    assert load_tools([{"name": "a"}], mode="strings")["a"].parameters == empty
    assert load_tools([{"name": "c", "parameters": {}}], mode="strings")["c"].parameters == empty


def test_entry_not_an_object() -> None:
    entries_error([WEATHER, ["get_time"]], r"tool entry #1 is a JSON array; an entry is an object", tool="#1")


def test_function_not_an_object() -> None:
    entries_error([{"type": "function", "function": "f"}], r'"function" is a JSON string', tool="#0")


def test_type_other_than_function() -> None:
    entries_error(
        [{"type": "code_interpreter", "function": {"name": "run"}}],
        r'tool entry #0 has "type": \'code_interpreter\'; only "function" tools can be called',
        tool="run",
    )


def test_unknown_entry_keys_are_named() -> None:
    entries_error(
        [{"type": "function", "function": {"name": "f"}, "extra": 1, "more": 2}],
        r"unknown key\(s\) 'extra', 'more' in the tool entry #0; allowed keys: 'function', 'type'",
        tool="f",
    )
    entries_error(
        [{"type": "function", "function": {"name": "f", "parameter": {}}}],
        r"unknown key\(s\) 'parameter' in the tool \"function\" object #0; allowed keys: 'description', 'name', "
        r"'parameters', 'strict'",
        tool="f",
    )
    entries_error(
        [{"name": "f", "arguments": {}}],
        r"unknown key\(s\) 'arguments' in the tool entry #0; allowed keys: 'description', 'name', 'parameters', "
        r"'strict', 'type'",
        tool="f",
    )


def test_missing_name() -> None:
    entries_error([{"parameters": {}}], r'tool entry #0 has no "name"; every tool needs one', tool="#0")


def test_empty_name() -> None:
    entries_error([WEATHER, entry(name="")], "tool entry #1 has an empty name", tool="#1")


def test_name_not_a_string() -> None:
    entries_error([{"name": 7}], '"name" is a JSON number; it must be a string', tool="#0")


def test_duplicate_name_names_both_indices() -> None:
    error = entries_error(
        [WEATHER, entry(name="other"), WEATHER],
        r"duplicate tool name: entries #0 and #2 are both named 'get_weather'; tool names must be unique",
        tool="get_weather",
    )
    assert error.keyword is None


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("get weather", id="space"),
        pytest.param("1st", id="leading-digit"),
        pytest.param("-x", id="leading-dash"),
        pytest.param("a" * 129, id="too-long"),
        pytest.param("météo", id="non-ascii"),
        pytest.param("f\n", id="trailing-newline"),
        pytest.param("f<x>", id="markup"),
        pytest.param('say"hi', id="quote"),
    ],
)
def test_name_the_formats_cannot_carry(name: str) -> None:
    entries_error(
        [entry(name=name)],
        re.escape(
            "the tool-call formats cannot carry this name: a tool name must match ^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$"
        ),
        tool=name,
    )


@pytest.mark.parametrize("name", ["a", "_", "a" * 128, "mcp.server:tool-name_2", "ThinQ_Connect"])
def test_names_the_formats_carry(name: str) -> None:
    assert load_tools([entry(name=name)]).names == (name,)


def test_description_and_strict_types() -> None:
    entries_error([entry(description=3)], '"description" is a JSON number; it must be a string', tool="t")
    entries_error([entry(strict="yes")], '"strict" is a JSON string; it must be true or false', tool="t")
    assert load_tools([entry(strict=True)])["t"].source["function"]["strict"] is True


def test_non_json_data_is_rejected_with_its_pointer() -> None:
    schema_error(obj(a={"enum": ("x", "y")}), "a tuple is not JSON data", pointer="/properties/a/enum", keyword=None)
    schema_error(
        obj(a={"const": float("nan")}), "nan is not a JSON number", pointer="/properties/a/const", keyword=None
    )
    schema_error({"type": "object", "properties": {1: {}}}, "key 1 is a int", pointer="/properties", keyword=None)


# --------------------------------------------------------------------------------------------------
# parameters: structure


@pytest.mark.parametrize(
    ("parameters", "match", "pointer", "keyword"),
    [
        pytest.param([], r"parameters is a JSON array; it must be an object schema", "", None, id="list"),
        pytest.param("object", r"parameters is a JSON string", "", None, id="string"),
        pytest.param(
            {"type": "array", "items": {"type": "string"}},
            r'parameters is not an object schema: its "type" must be "object" \(got \'array\'\)',
            "/type",
            "type",
            id="array",
        ),
        pytest.param(
            {"properties": {"a": {"type": "string"}}},
            r'its "type" must be "object" \(got missing\)',
            "/type",
            "type",
            id="no-type",
        ),
        pytest.param(
            {"type": ["object", "null"], "properties": {}},
            r"its \"type\" must be \"object\" \(got \['object', 'null'\]\)",
            "/type",
            "type",
            id="nullable-object",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["schema", "strings"])
def test_parameters_not_an_object_schema(
    parameters: Any, match: str, pointer: str, keyword: str | None, mode: str
) -> None:
    schema_error(parameters, match, pointer=pointer, keyword=keyword, mode=mode)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\u2028b", id="line-separator"),
        pytest.param("a<b", id="lt"),
        pytest.param("a>b", id="gt"),
        pytest.param("k=v", id="equals"),
    ],
)
@pytest.mark.parametrize("mode", ["schema", "strings"])
def test_argument_names_the_formats_cannot_carry(name: str, mode: str) -> None:
    schema_error(
        {"type": "object", "properties": {name: {"type": "string"}}},
        r"argument name .* cannot be carried by the tool-call formats \(qwen-xml writes <parameter=NAME>\)",
        pointer=f"/properties/{name}",
        keyword="properties",
        mode=mode,
    )


def test_nested_property_names_are_plain_json_keys() -> None:
    # Only argument names become markup (<parameter=NAME>); nested keys are JSON strings, escaped as usual.
    parameters = load_one(obj(a=obj(**{"x=1": {"type": "string"}, "": {"type": "integer"}})))
    assert list(parameters["properties"]["a"]["properties"]) == ["x=1", ""]
    assert load_one(obj(**{"key with space": {"type": "number"}}))["properties"] == {
        "key with space": {"type": "number"}
    }


def test_properties_not_an_object() -> None:
    schema_error(
        {"type": "object", "properties": ["a"]},
        "properties is a JSON array",
        pointer="/properties",
        keyword="properties",
    )


@pytest.mark.parametrize("mode", ["schema", "strings"])
@pytest.mark.parametrize(
    ("required", "match", "pointer"),
    [
        pytest.param("a", r"required is a JSON string; it must be a list of property names", "/required", id="string"),
        pytest.param(["a", 1], r"required is a JSON array with non-string items", "/required", id="non-string"),
        pytest.param(
            ["a", "b"],
            r"required names 'b', which is not in properties \(declared: 'a'\)",
            "/required/1",
            id="undeclared",
        ),
        pytest.param(["a", "a"], r"required lists 'a' twice", "/required/1", id="twice"),
    ],
)
def test_required_must_name_declared_properties(required: Any, match: str, pointer: str, mode: str) -> None:
    schema_error(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": required},
        match,
        pointer=pointer,
        keyword="required",
        mode=mode,
    )


def test_required_in_a_nested_object() -> None:
    schema_error(
        obj(a={"type": "object", "properties": {"x": {}}, "required": ["y"]}),
        r"required names 'y', which is not in properties \(declared: 'x'\)",
        pointer="/properties/a/required/0",
        keyword="required",
    )


def test_required_on_a_map_node_names_no_property() -> None:
    schema_error(
        obj(m={"type": "object", "additionalProperties": {"type": "string"}, "required": ["k"]}),
        r"required names 'k', which is not in properties \(declared: none\)",
        pointer="/properties/m/required/0",
        keyword="required",
    )


# --------------------------------------------------------------------------------------------------
# parameters: keywords


def _keywords_to_reject() -> list[str]:
    # Every keyword of JSON Schema 2020-12 (as jsonschema knows it) that is not supported, plus the OpenAPI and
    # vendor keywords seen in real tool lists. A keyword added to jsonschema shows up here automatically.
    known = set(jsonschema.Draft202012Validator.VALIDATORS) | {"$anchor", "$dynamicAnchor", "$vocabulary"}
    extra = {"nullable", "discriminator", "x-order", "example", "strict", "optional"}
    return sorted((known | extra) - SUPPORTED_KEYWORDS - ANNOTATION_KEYWORDS)


@pytest.mark.parametrize("keyword", _keywords_to_reject())
def test_every_unsupported_keyword_is_rejected_by_name(keyword: str) -> None:
    error = schema_error(
        obj(a={"type": "string", keyword: 1}),
        rf"unsupported keyword {re.escape(repr(keyword))}: the grammar does not enforce it",
        pointer=f"/properties/a/{keyword}",
        keyword=keyword,
    )
    message = str(error)
    assert "supported keywords: $defs, $ref, additionalProperties, allOf, anyOf, const, definitions, enum" in message
    assert "annotations, dropped: $comment, $id, $schema, default, deprecated, description, examples" in message


def test_keyword_lists_are_as_documented() -> None:
    supported = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items",
        "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    }  # fmt: skip
    annotations = {
        "description", "title", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly",
        "writeOnly",
    }  # fmt: skip
    assert (supported, annotations) == (SUPPORTED_KEYWORDS, ANNOTATION_KEYWORDS)
    assert not SUPPORTED_KEYWORDS & ANNOTATION_KEYWORDS


def test_unsupported_keyword_at_the_top_and_deep_inside() -> None:
    schema_error(
        {"type": "object", "minProperties": 1},
        "unsupported keyword 'minProperties'",
        pointer="/minProperties",
        keyword="minProperties",
    )
    schema_error(
        obj(a={"type": "array", "items": {"anyOf": [{"type": "string", "contentMediaType": "x"}, {"type": "null"}]}}),
        r"unsupported keyword 'contentMediaType': the grammar does not enforce it \(content annotations are not "
        "enforced",
        pointer="/properties/a/items/anyOf/0/contentMediaType",
        keyword="contentMediaType",
    )


def test_one_of_whose_branches_may_overlap_says_use_any_of() -> None:
    # Disjoint branches (by type) are exact: oneOf is then anyOf. Overlapping ones cannot be enforced.
    assert load_one(obj(a={"oneOf": [{"type": "string"}, {"type": "integer"}]}))["properties"]["a"] == {
        "anyOf": [{"type": "string"}, {"type": "integer"}]
    }
    schema_error(
        obj(a={"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}),
        r"oneOf branches #0 and #1 may both match one value, and the grammar cannot enforce that exactly one "
        r"branch matches.*Use anyOf if a value may match both",
        pointer="/properties/a/oneOf",
        keyword="oneOf",
    )


def test_nullable_says_use_a_type_list() -> None:
    schema_error(
        obj(a={"type": "string", "nullable": True}),
        r"OpenAPI's nullable is not JSON Schema: use \"type\": \[\"T\", \"null\"\]",
        pointer="/properties/a/nullable",
        keyword="nullable",
    )


@pytest.mark.parametrize("value", [True, {"type": "string"}], ids=["true", "schema"])
def test_additional_properties_at_the_top_level(value: Any) -> None:
    schema_error(
        {"type": "object", "properties": {}, "additionalProperties": value},
        r"at the top level of parameters is not supported: the strict parser rejects unknown arguments",
        pointer="/additionalProperties",
        keyword="additionalProperties",
    )


@pytest.mark.parametrize("value", [True, {"type": "string"}], ids=["true", "schema"])
def test_additional_properties_schema_with_properties(value: Any) -> None:
    schema_error(
        obj(a={"type": "object", "properties": {"x": {}}, "additionalProperties": value}),
        r"together with properties is not supported",
        pointer="/properties/a/additionalProperties",
        keyword="additionalProperties",
    )


def test_additional_properties_not_a_schema() -> None:
    schema_error(
        obj(a={"type": "object", "additionalProperties": "no"}),
        r"additionalProperties is a JSON string; it must be false or a schema",
        pointer="/properties/a/additionalProperties",
        keyword="additionalProperties",
    )


def test_other_keywords_at_the_top_level() -> None:
    schema_error(
        {"type": "object", "properties": {}, "enum": [{}]},
        r"enum is not supported at the top level of parameters",
        pointer="/enum",
        keyword="enum",
    )


def test_local_ref_that_does_not_resolve() -> None:
    schema_error(
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}, "$defs": {"Unit": {"type": "string"}}},
        r"\$ref '#/\$defs/Missing' does not resolve: nothing at /\$defs/Missing in this tool's parameters "
        r"\(definitions here: #/\$defs/Unit\)",
        pointer="/properties/a/$ref",
        keyword="$ref",
    )


@pytest.mark.parametrize(
    "ref",
    ["https://example.com/unit.json", "unit.json#/Unit", "#Unit", 3],
    ids=["url", "relative-file", "anchor", "not-a-string"],
)
def test_ref_that_is_not_local(ref: Any) -> None:
    schema_error(
        obj(a={"$ref": ref}),
        r"is not local: only references inside this tool's parameters",
        pointer="/properties/a/$ref",
        keyword="$ref",
    )


@pytest.mark.parametrize(
    ("parameters", "pointer", "target"),
    [
        pytest.param(
            {
                "type": "object",
                "properties": {"tree": {"$ref": "#/$defs/Node"}},
                "$defs": {"Node": obj(children={"type": "array", "items": {"$ref": "#/$defs/Node"}})},
            },
            "/$defs/Node/properties/children/items/$ref",
            "/$defs/Node",
            id="self",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/definitions/A"}},
                "definitions": {"A": obj(b={"$ref": "#/definitions/B"}), "B": obj(a={"$ref": "#/definitions/A"})},
            },
            "/definitions/B/properties/a/$ref",
            "/definitions/A",
            id="mutual",
        ),
        pytest.param(
            obj(a=obj(b={"$ref": "#/properties/a"})), "/properties/a/properties/b/$ref", "/properties/a", id="ancestor"
        ),
        pytest.param(obj(a={"$ref": "#"}), "/properties/a/$ref", "the parameters root", id="root"),
    ],
)
def test_recursive_ref(parameters: dict[str, Any], pointer: str, target: str) -> None:
    schema_error(
        parameters,
        rf"recursive schema: \$ref .* refers back to {re.escape(target)}, which contains this \$ref; "
        r"the grammar must be regular",
        pointer=pointer,
        keyword="$ref",
    )


def test_ref_with_constraining_siblings() -> None:
    schema_error(
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/S", "type": "string"}}, "$defs": {"S": {}}},
        r"type beside \$ref is not supported together: move it into the referenced schema",
        pointer="/properties/a/type",
        keyword="type",
    )


def test_errors_inside_a_definition_point_into_it() -> None:
    schema_error(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/S"}},
            "$defs": {"S": {"type": "string", "format": "hostname"}},
        },
        "format 'hostname' is not enforced by the grammar",
        pointer="/$defs/S/format",
        keyword="format",
    )


def test_unused_definitions_are_not_checked() -> None:
    # They constrain nothing, so they are dropped like annotations.
    parameters = {"type": "object", "properties": {}, "$defs": {"Unused": {"type": "string", "pattern": "x"}}}
    assert load_one(parameters)["properties"] == {}


def test_defs_not_an_object() -> None:
    schema_error(
        {"type": "object", "$defs": []},
        r"\$defs is a JSON array; it must map names to schemas",
        pointer="/$defs",
        keyword="$defs",
    )


def test_enum_empty() -> None:
    schema_error(
        obj(a={"type": "string", "enum": []}),
        r"enum is empty, so no value could ever be generated",
        pointer="/properties/a/enum",
        keyword="enum",
    )
    schema_error(
        obj(a={"enum": "abc"}),
        r"enum is a JSON string; it must be a non-empty list of values",
        pointer="/properties/a/enum",
        keyword="enum",
    )


@pytest.mark.parametrize(
    ("node", "match", "pointer"),
    [
        pytest.param(
            {"type": "string", "enum": ["c", 3]},
            r"enum value #1 3 does not fit its own node: 3 is not of type 'string'",
            "/enum/1",
            id="string",
        ),
        pytest.param(
            {"type": "integer", "enum": [1, 2.5]},
            r"enum value #1 2.5 does not fit its own node",
            "/enum/1",
            id="integer",
        ),
        pytest.param(
            {"type": "number", "enum": [True]}, r"enum value #0 true does not fit", "/enum/0", id="bool-is-not-a-number"
        ),
        pytest.param(
            {"type": ["string", "null"], "enum": ["a", None, 0]},
            r"enum value #2 0 does not fit",
            "/enum/2",
            id="type-list",
        ),
        pytest.param(
            {"type": "array", "items": {"type": "integer"}, "enum": [[1], ["x"]]},
            r"enum value #1 \[\"x\"\] does not fit",
            "/enum/1",
            id="siblings",
        ),
    ],
)
def test_enum_value_violating_the_node(node: dict[str, Any], match: str, pointer: str) -> None:
    schema_error(obj(a=node), match, pointer="/properties/a" + pointer, keyword="enum")


def test_const_violating_the_type() -> None:
    schema_error(
        obj(a={"type": "boolean", "const": "true"}),
        r"const \"true\" does not fit its own node: 'true' is not of type 'boolean'",
        pointer="/properties/a/const",
        keyword="const",
    )


def test_enum_and_const_together() -> None:
    schema_error(
        obj(a={"enum": [1], "const": 1}),
        "enum and const on the same node",
        pointer="/properties/a/const",
        keyword="const",
    )


def test_min_items_greater_than_max_items() -> None:
    schema_error(
        obj(a={"type": "array", "minItems": 3, "maxItems": 2}),
        r"minItems 3 is greater than maxItems 2: no array satisfies both",
        pointer="/properties/a/minItems",
        keyword="minItems",
    )


@pytest.mark.parametrize("keyword", ["minItems", "maxItems"])
@pytest.mark.parametrize("value", [-1, 1.5, "2", True], ids=["negative", "float", "string", "bool"])
def test_negative_or_non_integer_bounds(keyword: str, value: Any) -> None:
    schema_error(
        obj(a={"type": "array", keyword: value}),
        rf"{keyword} must be a non-negative integer, got {re.escape(json.dumps(value))}",
        pointer=f"/properties/a/{keyword}",
        keyword=keyword,
    )


@pytest.mark.parametrize(
    ("type_", "match"),
    [
        pytest.param(
            "str", r"unknown type \"str\" \(did you mean 'string'\?\): JSON Schema types are string, number", id="str"
        ),
        pytest.param("float", r"unknown type \"float\" \(did you mean 'number'\?\)", id="float"),
        pytest.param("any", r"unknown type \"any\": JSON Schema types are", id="any"),
        pytest.param(["string", "date"], r"unknown type \"date\"", id="in-a-list"),
        pytest.param(3, r"unknown type 3", id="not-a-string"),
        pytest.param([], r"type is an empty list; name at least one type", id="empty-list"),
        pytest.param(["string", "string"], r"type lists a name twice", id="twice"),
    ],
)
def test_unknown_type_names(type_: Any, match: str) -> None:
    schema_error(obj(a={"type": type_}), match, pointer="/properties/a/type", keyword="type")


@pytest.mark.parametrize(
    ("node", "keyword", "match"),
    [
        pytest.param(
            {"type": "string", "items": {}},
            "items",
            r"items applies to arrays, but this node's type is \"string\"",
            id="items-on-string",
        ),
        pytest.param(
            {"minItems": 1},
            "minItems",
            r'minItems applies to arrays, but this node has no "type": add "type": "array"',
            id="untyped-minItems",
        ),
        pytest.param(
            {"type": ["string", "null"], "properties": {}},
            "properties",
            r"properties applies to objects, but this node's type is \[\"string\", \"null\"\]",
            id="properties-on-string",
        ),
        pytest.param(
            {"required": []},
            "required",
            r'required applies to objects, but this node has no "type": add "type": "object"',
            id="untyped-required",
        ),
    ],
)
def test_keywords_on_a_node_of_another_type(node: dict[str, Any], keyword: str, match: str) -> None:
    schema_error(obj(a=node), match, pointer=f"/properties/a/{keyword}", keyword=keyword)


def test_any_of_with_constraining_siblings_is_distributed() -> None:
    # The siblings hold in every branch: A and (B or C) is (A and B) or (A and C).
    assert load_one(obj(a={"type": "string", "anyOf": [{"enum": ["a"]}, {"maxLength": 2}]}))["properties"]["a"] == {
        "anyOf": [{"type": "string", "enum": ["a"]}, {"type": "string", "maxLength": 2}]
    }
    # A branch the siblings exclude matches nothing and is dropped; when all are, the node is refused.
    assert load_one(obj(a={"type": "string", "anyOf": [{"type": "integer"}, {"maxLength": 2}]}))["properties"]["a"] == {
        "type": "string",
        "maxLength": 2,
    }
    schema_error(
        obj(a={"type": "string", "anyOf": [{"type": "integer"}, {"type": "null"}]}),
        r"no branch of the anyOf/oneOf is compatible with the rest of the node",
        pointer="/properties/a",
        keyword="anyOf",
    )


def test_any_of_empty() -> None:
    schema_error(
        obj(a={"anyOf": []}),
        "anyOf must be a non-empty list of schemas",
        pointer="/properties/a/anyOf",
        keyword="anyOf",
    )


def test_tuple_items() -> None:
    schema_error(
        obj(a={"type": "array", "items": [{"type": "string"}]}),
        r"items is a list \(tuple validation\), which is not supported",
        pointer="/properties/a/items",
        keyword="items",
    )


def test_false_and_non_object_subschemas() -> None:
    schema_error(
        obj(a=False),
        r"this one is false \(it matches nothing; remove the property instead\)",
        pointer="/properties/a",
        keyword=None,
    )
    schema_error(
        obj(a="string"),
        r"a schema must be a JSON object; this one is a JSON string",
        pointer="/properties/a",
        keyword=None,
    )


def test_too_deep_and_too_large() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ToolSchemaError, match="the schema nests deeper than 64 levels"):
        load_tools([entry(obj(a=deep))])
    # Each definition uses the previous one twice: 2**20 nodes once inlined.
    defs = {"D0": {"type": "string"}} | {
        f"D{i}": obj(x={"$ref": f"#/$defs/D{i - 1}"}, y={"$ref": f"#/$defs/D{i - 1}"}) for i in range(1, 21)
    }
    with pytest.raises(ToolSchemaError, match=r"grows past 20000 nodes once every \$ref is inlined") as info:
        load_tools([entry({"type": "object", "properties": {"a": {"$ref": "#/$defs/D20"}}, "$defs": defs})])
    assert info.value.keyword == "$ref"


def test_very_deep_json_is_an_error_not_a_crash() -> None:
    value: Any = 0
    for _ in range(5000):
        value = [value]
    with pytest.raises(ToolSchemaError, match="nests too deeply"):
        load_tools([entry(obj(a={"const": value}))])


def test_errors_share_one_base_class() -> None:
    with pytest.raises(ToolgrammarError):
        load_tools([entry(name="")])
    with pytest.raises(ValueError):
        load_tools([entry(name="")])


# --------------------------------------------------------------------------------------------------
# Normalization (golden)


def test_refs_are_inlined_as_deep_copies() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "origin": {"$ref": "#/$defs/Point", "description": "where from"},
            "dest": {"$ref": "#/definitions/Point2"},
            "unit": {"$ref": "#/$defs/Unit"},
        },
        "required": ["origin"],
        "$defs": {
            "Point": {
                "type": "object",
                "title": "Point",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            },
            "Unit": {"enum": ["km", "mi"]},
        },
        "definitions": {"Point2": {"$ref": "#/$defs/Point"}},
    }
    point = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": []}
    normalized = load_one(parameters)
    assert normalized == {
        "type": "object",
        "properties": {"origin": point, "dest": point, "unit": {"enum": ["km", "mi"]}},
        "required": ["origin"],
        "additionalProperties": False,
    }
    assert normalized["properties"]["origin"] is not normalized["properties"]["dest"]
    normalized["properties"]["origin"]["properties"]["x"]["type"] = "string"
    assert normalized["properties"]["dest"]["properties"]["x"] == {"type": "number"}


def test_ref_pointer_escapes() -> None:
    parameters = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/a~1b"}, "b": {"$ref": "#/$defs/c%20d"}, "c": {"$ref": "#/$defs/e~0f"}},
        "$defs": {"a/b": {"type": "string"}, "c d": {"type": "integer"}, "e~f": {"type": "null"}},
    }
    assert load_one(parameters)["properties"] == {
        "a": {"type": "string"},
        "b": {"type": "integer"},
        "c": {"type": "null"},
    }


def test_top_level_ref() -> None:
    parameters = {
        "$ref": "#/$defs/Args",
        "$defs": {"Args": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    }
    assert load_one(parameters) == {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    }


def test_annotations_are_dropped_everywhere() -> None:
    annotations = {
        "description": "d", "title": "T", "default": 1, "examples": [1], "$comment": "c", "deprecated": False,
        "readOnly": False, "writeOnly": False,
    }  # fmt: skip
    parameters = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:t",
        "type": "object",
        "title": "Args",
        "properties": {
            "n": {"type": "integer", **annotations},
            "tags": {"type": "array", "items": {"type": "string", **annotations}, **annotations},
            "opt": {"anyOf": [{"type": "string", **annotations}, {"type": "null"}], **annotations},
        },
    }
    assert load_one(parameters) == {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": [],
        "additionalProperties": False,
    }


def test_type_lists_enum_const_and_array_bounds_are_kept() -> None:
    node = {"type": ["integer", "null"], "enum": [1, 2, None]}
    assert load_one(obj(a=node, b={"const": "x"}, c={"type": "array", "minItems": 1, "maxItems": 3}))["properties"] == {
        "a": node,
        "b": {"const": "x"},
        "c": {"type": "array", "minItems": 1, "maxItems": 3},
    }


def test_object_nodes_are_records_or_maps() -> None:
    parameters = obj(
        record={"type": "object", "properties": {"x": {"type": "string"}}},
        closed_record={"properties": {"x": {}}, "required": ["x"], "additionalProperties": False, "type": "object"},
        empty_closed={"type": "object", "additionalProperties": False},
        bare={"type": "object"},
        nullable_bare={"type": ["object", "null"]},
        map={"type": "object", "additionalProperties": {"type": "integer", "description": "count"}},
        any_map={"type": "object", "additionalProperties": True},
        any_value={"description": "anything"},
        true_schema=True,
    )
    assert load_one(parameters)["properties"] == {
        "record": {"type": "object", "properties": {"x": {"type": "string"}}, "required": []},
        "closed_record": {"properties": {"x": {}}, "required": ["x"], "additionalProperties": False, "type": "object"},
        "empty_closed": {"type": "object", "additionalProperties": False, "properties": {}, "required": []},
        "bare": {"type": "object", "additionalProperties": {}},
        "nullable_bare": {"type": ["object", "null"], "additionalProperties": {}},
        "map": {"type": "object", "additionalProperties": {"type": "integer"}},
        "any_map": {"type": "object", "additionalProperties": {}},
        "any_value": {},
        "true_schema": {},
    }


def test_property_and_keyword_order_follow_the_schema() -> None:
    parameters = {
        "required": ["z"],
        "properties": {"z": {"enum": ["b", "a"], "type": "string"}, "a": {"type": "integer"}, "m": {"type": "boolean"}},
        "type": "object",
    }
    normalized = load_one(parameters)
    assert list(normalized) == ["type", "properties", "required", "additionalProperties"]
    assert list(normalized["properties"]) == ["z", "a", "m"]
    assert list(normalized["properties"]["z"]) == ["enum", "type"]


def test_the_original_is_not_mutated_nor_aliased() -> None:
    original = copy.deepcopy(WEATHER)
    given = copy.deepcopy(WEATHER)
    toolset = load_tools([given])
    assert given == original
    given["function"]["parameters"]["properties"]["city"]["type"] = "integer"
    assert toolset["get_weather"].parameters["properties"]["city"] == {"type": "string"}
    assert toolset["get_weather"].source == original
    exported = toolset.to_openai()
    exported[0]["function"]["name"] = "changed"
    assert toolset.to_openai() == [original]


def test_normalized_schemas_are_valid_json_schema() -> None:
    parameters = load_one(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "$defs": {"A": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}}},
        }
    )
    jsonschema.Draft202012Validator.check_schema(parameters)
    validator = jsonschema.Draft202012Validator(parameters)
    assert validator.is_valid({"a": [{"k": "v"}], "b": None})
    assert not validator.is_valid({"a": [{"k": 1}]})
    assert not validator.is_valid({"c": 1})  # the top level is closed


# --------------------------------------------------------------------------------------------------
# strings mode


def test_top_level_ref_to_a_non_object() -> None:
    schema_error(
        {"$ref": "#/$defs/Args", "$defs": {"Args": {"type": "array"}}},
        r'parameters is not an object schema: its "type" must be "object" \(got \'array\'\)',
        pointer="/$defs/Args/type",
        keyword="type",
    )


def test_strings_mode_golden() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "pattern": "^/"},  # not checked in this mode
            "count": {"type": "integer", "minimum": 0},
            "opts": {"$ref": "#/$defs/Missing"},
        },
        "required": ["path"],
        "additionalProperties": True,
    }
    assert load_one(parameters, mode="strings") == {
        "type": "object",
        "properties": {"path": {"type": "string"}, "count": {"type": "string"}, "opts": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }


def test_strings_mode_top_level_ref() -> None:
    schema_error(
        {"type": "object", "$ref": "#/$defs/Args"},
        r"the strings mode reads the top-level properties directly: inline the top-level \$ref",
        pointer="/$ref",
        keyword="$ref",
        mode="strings",
    )


def test_unknown_mode() -> None:
    with pytest.raises(ToolSchemaError, match=r"unknown argument mode 'text'; use one of 'schema', 'strings'"):
        load_tools([WEATHER], mode="text")  # type: ignore[arg-type]


def test_toolset_source_same_mode_is_returned_as_is_other_mode_is_renormalized() -> None:
    toolset = load_tools([WEATHER])
    assert load_tools(toolset) is toolset
    strings = load_tools(toolset, mode="strings")
    assert strings.mode == "strings"
    assert strings["get_weather"].parameters["properties"]["unit"] == {"type": "string"}
    assert load_tools(strings, mode="schema") == toolset
    assert strings.to_openai() == toolset.to_openai() == [WEATHER]


# --------------------------------------------------------------------------------------------------
# ToolSet


def test_toolset_mapping_api() -> None:
    toolset = load_tools([WEATHER, {"name": "get_time"}])
    assert len(toolset) == 2
    assert [t.name for t in toolset] == ["get_weather", "get_time"]
    assert toolset.names == ("get_weather", "get_time")
    assert "get_time" in toolset
    assert "nope" not in toolset
    assert 3 not in toolset
    assert isinstance(toolset["get_time"], Tool)
    assert toolset.get("get_time") is toolset["get_time"]
    assert toolset.get("nope") is None
    with pytest.raises(KeyError, match=r"unknown tool 'nope'; known tools: 'get_weather', 'get_time'"):
        toolset["nope"]


def test_toolset_is_immutable_and_hashable() -> None:
    toolset = load_tools([WEATHER])
    with pytest.raises(AttributeError):
        toolset.mode = "strings"  # type: ignore[misc]
    again = load_tools([copy.deepcopy(WEATHER)])
    assert toolset == again
    assert hash(toolset) == hash(again)
    assert {toolset: 1}[again] == 1
    assert hash(toolset["get_weather"]) == hash(again["get_weather"])


def test_toolset_constructor_checks() -> None:
    tool = load_tools([WEATHER])["get_weather"]
    with pytest.raises(ToolSchemaError, match="duplicate tool name: entries #0 and #1"):
        ToolSet((tool, tool))
    with pytest.raises(ToolSchemaError, match="unknown argument mode"):
        ToolSet((tool,), "json")  # type: ignore[arg-type]
    with pytest.raises(ToolSchemaError, match=r"ToolSet.tools\[0\] is a dict, not a Tool"):
        ToolSet(({"name": "x"},))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Fingerprint

GOLDEN_FINGERPRINT = "d6adaae9bc08de6a6369e0da512b51944f8ee8890036a77b85a73c5fb5cf0af1"


def test_fingerprint_is_pinned() -> None:
    # A change here invalidates every cache keyed by it: bump _FINGERPRINT_VERSION on purpose, then update.
    assert load_tools([WEATHER]).fingerprint == GOLDEN_FINGERPRINT


def test_fingerprint_is_the_hash_of_the_canonical_payload() -> None:
    """The fingerprint spells its payload around each tool's canonical text: the same bytes as encoding the
    whole payload at once, with non-ASCII and escaped text, a missing description and both modes."""
    import hashlib

    city = {"city": {"type": "string", "description": "Stadt"}}
    weather = {"type": "object", "properties": city, "required": ["city"]}
    entries = [
        {"name": "fe", "description": 'caf\u00e9 "quoted" \\ \n\u2028', "parameters": weather},
        {"name": "g", "parameters": {"type": "object", "properties": {'\u00fc"': {"enum": ["\u00e9", 1.5, None]}}}},
    ]
    for mode in ("schema", "strings"):
        toolset = load_tools(entries, mode=mode)
        payload = {
            "version": toolset_module.FINGERPRINT_VERSION,
            "mode": mode,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": toolset_module._canonical(t.parameters)}
                for t in toolset
            ],
        }
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        assert toolset.fingerprint == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_fingerprint_is_the_same_in_another_process() -> None:
    code = (
        "import json, sys; from toolgrammar.schema import load_tools; "
        "print(load_tools(json.loads(sys.argv[1])).fingerprint)"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    for seed in ("0", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps([WEATHER])],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": src},
        )
        assert out.stdout.strip() == GOLDEN_FINGERPRINT


def _weather(**changes: Any) -> list[dict[str, Any]]:
    tool = copy.deepcopy(WEATHER)
    for path, value in changes.items():
        node = tool["function"]
        *parents, last = path.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return [tool]


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(_weather(name="get_forecast"), id="name"),
        pytest.param(_weather(description="Other."), id="description"),
        pytest.param(_weather(parameters__required=[]), id="required"),
        pytest.param(_weather(parameters__properties__city={"type": ["string", "null"]}), id="type"),
        pytest.param(_weather(parameters__properties__unit={"type": "string", "enum": ["f", "c"]}), id="enum-order"),
        pytest.param(
            _weather(
                parameters__properties={"unit": {"type": "string", "enum": ["c", "f"]}, "city": {"type": "string"}}
            ),
            id="property-order",
        ),
        pytest.param([*_weather(), {"name": "get_time"}], id="one-more-tool"),
    ],
)
def test_fingerprint_changes_with_what_shapes_the_grammar(changed: list[dict[str, Any]]) -> None:
    assert load_tools(changed).fingerprint != GOLDEN_FINGERPRINT


def test_fingerprint_changes_with_the_mode() -> None:
    assert load_tools([WEATHER], mode="strings").fingerprint != GOLDEN_FINGERPRINT


@pytest.mark.parametrize(
    "same",
    [
        pytest.param(_weather(parameters__title="Args"), id="annotation"),
        pytest.param(
            _weather(parameters__properties__city={"type": "string", "description": "A city."}), id="nested-annotation"
        ),
        pytest.param(_weather(parameters__properties__unit={"enum": ["c", "f"], "type": "string"}), id="keyword-order"),
        pytest.param(
            _weather(
                parameters__properties__unit={"$ref": "#/definitions/Unit"},
                parameters__additionalProperties=False,
                parameters__required=["city"],
                parameters__definitions={"Unit": {"type": "string", "enum": ["c", "f"]}},
            ),
            id="ref-spelling",
        ),
        pytest.param([WEATHER["function"]], id="bare-shape"),
    ],
)
def test_fingerprint_ignores_what_does_not(same: list[dict[str, Any]]) -> None:
    assert load_tools(same).fingerprint == GOLDEN_FINGERPRINT


# --------------------------------------------------------------------------------------------------
# The real corpus: every tool list of every CanIToolCall fixture


def _fixture_root() -> Path | None:
    spec = importlib.util.find_spec("canitoolcall")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "_data" / "fixtures"


def _fixtures() -> list[tuple[str, dict[str, Any]]]:
    root = _fixture_root()
    if root is None:
        return []
    found = []
    for path in sorted(root.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                fixture = json.loads(line)
                found.append((fixture["id"], fixture))
    return found


FIXTURES = _fixtures()
QWEN_FAMILIES = ("qwen3-hermes", "qwen3-xml")

# Derived by reading the fixtures' tool lists (not by running load_tools): the two Qwen families use only
# type, properties, required, enum, items, anyOf and the annotations description/default, with names that
# match the pattern, so none of their tool lists is rejected. In the other families, three gemma4 tool
# lists mark anyOf [..., {"type": "null"}] properties with OpenAPI's "nullable": true as well, which the
# schema mode rejects by name (the strings mode does not read property schemas). Several glm and llama
# tool lists spell "no arguments" as "parameters": {}, which is accepted.
EXPECTED_REJECTED: dict[tuple[str, str], tuple[str, str, str]] = {
    # (fixture id, mode): (tool, pointer, keyword)
    ("gemma4/nested-objects-and-arrays", "schema"): ("create_event", "/properties/location/nullable", "nullable"),
    ("gemma4/edge-values-key-with-space", "schema"): ("record", "/properties/none/nullable", "nullable"),
    ("gemma4/numeric-arguments", "schema"): ("calculate", "/properties/limit/nullable", "nullable"),
}


# Expected calls that break their own tool list's schema: parser tests copied from engines that never read schemas.
# The strict parser reports these as errors, so the grammar must not generate them.
SCHEMA_VIOLATING_CALLS = {
    "kimi/k3-vllm-call-thinking-disabled": "calls calc with {'x': 1}; calc declares no properties",
}


def test_the_corpus_is_there() -> None:
    assert _fixture_root() is not None, "canitoolcall is not installed (pip install -e '.[test]')"
    counts = {family: sum(1 for fid, _ in FIXTURES if fid.startswith(family + "/")) for family in QWEN_FAMILIES}
    assert counts == {"qwen3-hermes": 50, "qwen3-xml": 54}
    assert not [key for key in EXPECTED_REJECTED if key[0].split("/")[0] in QWEN_FAMILIES]


def _closed(schema: Any) -> Any:
    """The normalized schema as the grammar reads it: a record node allows its declared properties only."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _closed(value) for key, value in schema.items()}
    if "properties" in schema:
        out["properties"] = {name: _closed(sub) for name, sub in schema["properties"].items()}
        out["additionalProperties"] = False
    return out


@pytest.mark.parametrize("mode", ["schema", "strings"])
@pytest.mark.parametrize(("fixture_id", "fixture"), FIXTURES, ids=[fid for fid, _ in FIXTURES])
def test_every_fixture_tool_list(fixture_id: str, fixture: dict[str, Any], mode: str) -> None:
    tools = fixture.get("tools") or []
    expected = EXPECTED_REJECTED.get((fixture_id, mode))
    if expected is not None:
        tool, pointer, keyword = expected
        with pytest.raises(ToolSchemaError, match=rf"unsupported keyword '{keyword}'") as info:
            load_tools(tools, mode=mode)  # type: ignore[arg-type]
        assert (info.value.tool, info.value.pointer, info.value.keyword) == (tool, pointer, keyword)
        return
    toolset = load_tools(tools, mode=mode)  # type: ignore[arg-type]
    assert toolset.names == tuple(t.get("function", t)["name"] for t in tools)
    assert toolset.to_openai() == [t if "function" in t else {"type": "function", "function": t} for t in tools]
    for tool in toolset:
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
    if mode == "schema":
        # Completeness of the normalization: every call the fixture expects satisfies the normalized schema,
        # even read closed-world (a record node generates its declared properties only).
        calls = (fixture.get("expected") or {}).get("tool_calls") or []
        if fixture_id in SCHEMA_VIOLATING_CALLS:
            schemas = [jsonschema.Draft202012Validator(toolset[c["name"]].parameters) for c in calls]
            assert not all(v.is_valid(c["arguments"]) for v, c in zip(schemas, calls, strict=True))
            return
        for call in calls:
            schema = _closed(toolset[call["name"]].parameters)
            assert jsonschema.Draft202012Validator(schema).is_valid(call["arguments"]), call


# --------------------------------------------------------------------------------------------------
# Properties: inlining and normalizing never change what a schema accepts


_scalars = st.sampled_from(["string", "number", "integer", "boolean", "null"])
_leaf = st.one_of(
    _scalars.map(lambda t: {"type": t}),
    st.lists(st.text(alphabet="ab", max_size=2), min_size=1, max_size=3, unique=True).map(
        lambda v: {"type": "string", "enum": v}
    ),
    st.just({}),
    st.just({"const": 1, "description": "one"}),
    st.just({"$ref": "#/$defs/D"}),
    st.just({"type": "object"}),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def record(props: dict[str, Any], closed: bool, n_required: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "properties": props, "required": list(props)[:n_required]}
        if closed:
            node["additionalProperties"] = False
        return node

    return st.one_of(
        st.builds(
            record, st.dictionaries(st.sampled_from("abc"), children, max_size=3), st.booleans(), st.integers(0, 3)
        ),
        st.builds(lambda v: {"type": "object", "additionalProperties": v}, children),
        st.builds(
            lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + extra},
            children,
            st.integers(0, 2),
            st.integers(0, 2),
        ),
        st.lists(children, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs, "title": "choice"}),
        children.map(lambda c: {"type": ["array", "null"], "items": c}),
    )


_schemas = st.recursive(_leaf, _extend, max_leaves=6)
_definition = st.recursive(_leaf.filter(lambda s: "$ref" not in s), _extend, max_leaves=4)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.5, 1.0]) | st.text(alphabet="abc", max_size=2),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from("abc"), c, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(x=_schemas, y=_schemas, definition=_definition, values=st.lists(_json, min_size=1, max_size=6))
def test_normalization_keeps_what_the_schema_accepts(x: Any, y: Any, definition: Any, values: list[Any]) -> None:
    original = {
        "type": "object",
        "properties": {"x": x, "y": y},
        "additionalProperties": False,
        "$defs": {"D": definition},
    }
    normalized = load_one(original)
    assert "$ref" not in json.dumps(normalized)
    assert load_one(normalized) == normalized  # idempotent
    before, after = jsonschema.Draft202012Validator(original), jsonschema.Draft202012Validator(normalized)
    for value in values:
        for arguments in ({"x": value}, {"y": value}, {"x": value, "y": value}):
            assert before.is_valid(arguments) == after.is_valid(arguments), arguments


# --------------------------------------------------------------------------------------------------
# Lone surrogates (issue 11): refused with the tool, the pointer and the value, never a raw UnicodeEncodeError

_LONE = "\ud800"


@pytest.mark.parametrize(
    ("parameters", "pointer", "shown"),
    [
        (obj(e={"enum": [_LONE]}), "/properties/e/enum/0", '"\\ud800"'),
        (obj(e={"type": "string", "enum": ["ok", "x" + _LONE + "y"]}), "/properties/e/enum/1", '"x\\ud800y"'),
        (obj(c={"const": "\udfff"}), "/properties/c/const", '"\\udfff"'),
        (obj(**{_LONE: {"type": "string"}}), "/properties", '"\\ud800"'),
        (obj(o={"type": "object", "properties": {"k" + _LONE: {"type": "string"}}}), "/properties/o/properties", ""),
        (obj(d={"type": "string", "description": "half " + _LONE}), "/properties/d/description", ""),
        ({**obj(a={"$ref": "#/$defs/A"}), "$defs": {"A": {"enum": [_LONE]}}}, "/$defs/A/enum/0", ""),
    ],
)
@pytest.mark.parametrize("mode", ["schema", "strings"])
def test_lone_surrogates_are_refused_with_pointer_and_value(parameters: Any, pointer: str, shown: str, mode: str):
    with pytest.raises(ToolSchemaError, match="lone surrogate") as info:
        load_tools([entry(parameters)], mode=mode)  # type: ignore[arg-type]
    error = info.value
    assert (error.tool, error.pointer) == ("t", pointer)
    assert shown in str(error)
    str(error).encode("utf-8")  # the message itself is printable


def test_lone_surrogates_in_names_and_descriptions_are_refused():
    with pytest.raises(ToolSchemaError, match="must match") as info:
        load_tools([entry(obj(a={"type": "string"}), name="t" + _LONE)])
    str(info.value).encode("utf-8")
    with pytest.raises(ToolSchemaError, match=r"description .*lone surrogate") as info:
        load_tools([entry(obj(a={"type": "string"}), description="bad " + _LONE)])
    assert info.value.tool == "t"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    text=st.text(max_size=12),
    at=st.integers(0, 12),
    surrogate=st.integers(0xD800, 0xDFFF).map(chr),
    where=st.sampled_from(["enum", "key", "const", "default"]),
)
def test_any_lone_surrogate_anywhere_is_refused(text: str, at: int, surrogate: str, where: str) -> None:
    text = "".join(ch for ch in text if not 0xD800 <= ord(ch) <= 0xDFFF)
    bad = text[:at] + surrogate + text[at:]
    node = {
        "enum": {"enum": [bad]},
        "key": {"type": "object", "properties": {bad: {"type": "string"}}},
        "const": {"const": bad},
        "default": {"type": "string", "default": bad},
    }[where]
    with pytest.raises(ToolSchemaError, match="lone surrogate") as info:
        load_tools([entry(obj(p=node))])
    assert info.value.pointer.startswith("/properties/p")
    str(info.value).encode("utf-8")


@pytest.mark.parametrize("command", ["grammar", "parse"])
def test_the_cli_refuses_lone_surrogates_with_exit_code_2(tmp_path: Path, command: str) -> None:
    tools_file = tmp_path / "s.json"
    tools_file.write_text('[{"name":"t","parameters":{"type":"object","properties":{"e":{"enum":["\\ud800"]}}}}]')
    turn = tmp_path / "turn.txt"
    turn.write_text("hello")
    args = (
        ["grammar", "--tools", str(tools_file)]
        if command == "grammar"
        else ["parse", str(turn), "--tools", str(tools_file)]
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from toolgrammar.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src, "TOOLGRAMMAR_CACHE": "off"},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "tool 't', at /properties/e/enum/0" in done.stderr and '"\\ud800"' in done.stderr


# --------------------------------------------------------------------------------------------------
# Unused definitions are schemas too (issue 11)


@pytest.mark.parametrize(
    ("parameters", "pointer"),
    [
        ({**obj(a={"type": "string"}), "$defs": {"Unused": {"anyOf": []}}}, "/$defs/Unused/anyOf"),
        ({**obj(a={"type": "string"}), "definitions": {"Unused": {"type": "text"}}}, "/definitions/Unused/type"),
        ({**obj(a={"type": "string"}), "$defs": {"U": {"items": {"minItems": -1}}}}, "/$defs/U/items/minItems"),
        (
            obj(o={"type": "object", "properties": {}, "$defs": {"U": {"anyOf": []}}}),
            "/properties/o/$defs/U/anyOf",
        ),
    ],
)
def test_invalid_unused_definitions_are_refused(parameters: Any, pointer: str) -> None:
    with pytest.raises(ToolSchemaError, match=r"invalid schema in .*checked even when no \$ref uses it") as info:
        load_tools([entry(parameters)])
    assert (info.value.tool, info.value.pointer) == ("t", pointer)


def test_valid_unused_definitions_are_still_accepted() -> None:
    params = {**obj(a={"type": "string"}), "$defs": {"U": {"anyOf": [{"type": "string"}, {"pattern": "x"}]}}}
    assert load_one(params)["properties"] == {"a": {"type": "string"}}


def test_definitions_a_ref_inlined_are_not_meta_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The meta-schema check (milliseconds a call) runs on the definitions no ``$ref`` walked whole: an inlined
    one was checked keyword by keyword as it was normalized. A definition inside an inlined one is still
    looked at, and an invalid unused one is still refused."""
    checked: list[Any] = []
    real = jsonschema.Draft202012Validator.check_schema

    def counting(schema: Any, *args: Any, **kwargs: Any) -> None:
        checked.append(schema)
        real(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", counting)
    monkeypatch.setattr(normalize, "_META_CHECK", False)
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", "off")  # normalized now, not read back
    loading.clear_recent()
    used = {"type": "object", "properties": {"x": {"type": "integer"}}, "$defs": {"Inner": {"type": "string"}}}
    unused = {"type": "boolean"}
    params = {**obj(a={"$ref": "#/$defs/Used"}), "$defs": {"Used": used, "Unused": unused}}
    assert load_one(params)["properties"]["a"]["properties"] == {"x": {"type": "integer"}}
    assert checked == [used["$defs"]["Inner"], unused]
    params["$defs"]["Used"] = {**used, "$defs": {"Inner": {"anyOf": []}}}
    with pytest.raises(ToolSchemaError, match=r"invalid schema in .*checked even when no \$ref uses it") as info:
        load_tools([entry(params)])
    assert info.value.pointer == "/$defs/Used/$defs/Inner/anyOf"
    # A schema the fast path reads (definitions at the root only): the same definitions are meta-checked.
    checked.clear()
    loading.clear_recent()
    flat = {"type": "object", "properties": {"x": {"type": "integer"}}}
    params = {**obj(a={"$ref": "#/$defs/Used"}, b={"$ref": "#/$defs/Used"}), "$defs": {"Used": flat, "Unused": unused}}
    normalizer = normalize.Normalizer("t", params)
    assert normalizer.run()["properties"]["b"]["properties"] == {"x": {"type": "integer"}}
    assert normalizer.plain and normalizer.inlined == {"/$defs/Used"}
    assert checked == [unused]
    params["$defs"]["Unused"] = {"anyOf": []}
    with pytest.raises(ToolSchemaError, match=r"invalid schema in .*checked even when no \$ref uses it") as info:
        normalize.Normalizer("t", params).run()
    assert info.value.pointer == "/$defs/Unused/anyOf"


def _careful_copy(entry: dict[str, Any], tool: str) -> Any:
    """What ``_copy_entry`` did before its fast path: the pointer-building copy of every value."""
    return {
        key: _careful_copy(value, tool) if key == "function" else copies.plain_data(value, "", tool=tool)
        for key, value in entry.items()
    }


_ODD_SCALARS = st.sampled_from([float("nan"), float("inf"), "a\ud800b", (1, 2), True, 7, 2.5, None, "é"])
_ENTRY_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4), _ODD_SCALARS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.just("x\udc00")), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(parameters=_ENTRY_VALUES, function=st.booleans())
def test_the_fast_entry_copy_equals_the_careful_one(parameters: Any, function: bool) -> None:
    """The copy without pointers returns what the careful copy returns, and refuses what it refuses with
    the careful copy's own message (the fast path hands every odd value to it)."""
    entry = (
        {"type": "function", "function": {"name": "f", "parameters": parameters}}
        if function
        else {
            "name": "f",
            "parameters": parameters,
        }
    )
    try:
        expected = _careful_copy(entry, "f")
    except ToolSchemaError as error:
        with pytest.raises(ToolSchemaError) as got:
            copies.copy_entry(entry, "f")
        assert str(got.value) == str(error)
        return
    copied = copies.copy_entry(entry, "f")
    assert copied == expected  # NaN is refused above, so equality is well defined
    assert json.dumps(copied) == json.dumps(expected)  # same key order
    inner = copied.get("function", copied)
    assert inner is not entry.get("function", entry)
    if isinstance(parameters, dict | list):
        assert inner["parameters"] is not parameters


_NOISE = st.sampled_from(
    [
        {"minimum": 1},
        {"format": "date"},
        {"type": "int"},
        {"type": None},
        {"type": ["string", "string"]},
        {"type": []},
        {"const": 1},
        {"enum": []},
        {"enum": [1.0]},
        {"enum": [2.5]},
        {"enum": [[1]]},
        {"enum": ["x", 2]},
        {"required": ["zz"]},
        {"required": ["a", "a"]},
        {"required": "a"},
        {"minItems": 3, "maxItems": 1},
        {"minItems": -1},
        {"maxItems": True},
        {"items": [{}]},
        {"items": False},
        {"additionalProperties": True},
        {"additionalProperties": 3},
        {"properties": {"q": True, "a<b": {}}},
        {"properties": []},
        {"$ref": "#/$defs/X"},
        {"anyOf": [{"type": "string"}]},
    ]
)
"""One change that a plain node may or may not survive (the careful normalizer says which)."""


_ENUM_VALUES: dict[str, list[Any]] = {
    "string": ["x", "y", ""],
    "integer": [0, 1, -2],
    "number": [1, 2.5],
    "boolean": [True, False],
    "null": [None],
    "pair": ["x", None],
    "any": ["x", 1, None, True],
}


def _mostly(valid: st.SearchStrategy[Any], changed: st.SearchStrategy[Any], odds: int) -> st.SearchStrategy[Any]:
    """``valid``, or ``changed`` about one time in ``odds``."""
    return st.integers(1, odds).flatmap(lambda k: changed if k == odds else valid)


def _scalar_node(kind: str, enum_size: int, described: bool, foreign: Any) -> dict[str, Any]:
    node: dict[str, Any] = {} if kind == "any" else {"type": kind if kind != "pair" else ["string", "null"]}
    if described:
        node["description"] = "d"
    if enum_size:
        node["enum"] = _ENUM_VALUES[kind][:enum_size]
        if foreign is not _OWN:  # a value of another type, or of the type but another kind (2.5, 1.0)
            node["enum"] = [*node["enum"], foreign]
    return node


def _const_node(kind: str, value: Any) -> dict[str, Any]:
    if kind == "any":
        return {"const": value}
    return {"type": kind if kind != "pair" else ["string", "null"], "const": value}


_OWN = object()
_FOREIGN = st.sampled_from([2.5, 1.0, 1, True, None, "x", [1], {"a": 1}])
_SCALARS = st.one_of(
    st.builds(
        _scalar_node,
        st.sampled_from(list(_ENUM_VALUES)),
        st.integers(0, 3),
        st.booleans(),
        _mostly(st.just(_OWN), _FOREIGN, 3),
    ),
    # const: a value of the node's own type, or (one time in three) any other
    st.sampled_from(list(_ENUM_VALUES)).flatmap(
        lambda kind: st.builds(_const_node, st.just(kind), _mostly(st.sampled_from(_ENUM_VALUES[kind]), _FOREIGN, 3))
    ),
)
_REFS = _mostly(
    st.sampled_from([{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}, {"$ref": "#/definitions/C"}]),
    st.sampled_from(
        [
            {"$ref": "#/$defs/A", "description": "d"},
            {"$ref": "#/$defs/missing"},
            {"$ref": "#/$defs/A", "type": "object"},
            {"$ref": "#/properties/a"},
            {"$ref": "#/$defs/A~1x"},
        ]
    ),
    3,
)
"""References to the root's definitions (:data:`_TOPS_WITH_DEFINITIONS`), and a few the fast path declines."""


def _record(properties: dict[str, Any], required: list[str], closed: bool) -> dict[str, Any]:
    node: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": [r for r in required if r in properties],
    }
    if closed:
        node["additionalProperties"] = False
    return node


def _array(item: Any, lo: int | None, span: int | None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array", "items": item}
    if lo is not None:
        node["minItems"] = lo
    if span is not None:
        node["maxItems"] = (lo or 0) + span
    return node


def _plain_nodes(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "c", "d"])
    valid = st.one_of(
        st.builds(
            _record,
            st.dictionaries(names, children, max_size=3),
            st.lists(names, max_size=3, unique=True),
            st.booleans(),
        ),
        st.builds(_array, children, st.one_of(st.none(), st.integers(0, 2)), st.one_of(st.none(), st.integers(0, 2))),
        st.builds(lambda v: {"type": "object", "additionalProperties": v}, children),
        st.builds(lambda bs: {"anyOf": bs}, st.lists(children, min_size=1, max_size=3)),
        st.just({"type": "object"}),
        st.just(True),
    )
    noisy = st.tuples(valid.filter(lambda n: n is not True), _NOISE).map(lambda p: {**p[0], **p[1]})
    return _mostly(valid, noisy, 12)


_SCHEMA_NODES = st.recursive(
    _mostly(_SCALARS, st.tuples(_SCALARS, _NOISE).map(lambda p: {**p[0], **p[1]}), 12),
    _plain_nodes,
    max_leaves=8,
)
_VALID_TOPS = st.builds(
    _record,
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _SCHEMA_NODES, max_size=4),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3, unique=True),
    st.booleans(),
)
_TOP_SCHEMAS = _mostly(
    _VALID_TOPS,
    st.tuples(
        st.builds(
            _record,
            st.dictionaries(st.sampled_from(["a", "b"]), _SCHEMA_NODES, max_size=2),
            st.just(["a"]),
            st.booleans(),
        ),
        _NOISE,
    ).map(lambda p: {**p[0], **p[1]}),
    4,
)


def _with_definitions(root: dict[str, Any], defs: dict[str, Any], legacy: Any) -> dict[str, Any]:
    out = {**root, "$defs": defs}
    if legacy is not None:
        out["definitions"] = {"C": legacy}
    return out


_SCHEMAS_WITH_REFS = st.recursive(_mostly(_SCALARS, _REFS, 2), _plain_nodes, max_leaves=6)
_TOPS_WITH_DEFINITIONS = st.builds(
    _with_definitions,
    st.builds(
        _record,
        st.dictionaries(st.sampled_from(["a", "b", "c"]), _SCHEMAS_WITH_REFS, min_size=1, max_size=3),
        st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
        st.booleans(),
    ),
    st.fixed_dictionaries({"A": _SCALARS | _SCHEMAS_WITH_REFS}, optional={"B": _SCHEMAS_WITH_REFS}),
    st.one_of(st.none(), _SCHEMAS_WITH_REFS),
)
"""Records whose nodes refer to the root's ``$defs``/``definitions`` (recursively too: a definition may refer to
itself or to another)."""


def _fast_equals_careful(root: Any, name: str = "") -> bool:
    """The fast path's schema and inlined definitions are the careful normalizer's, or it declines (always
    where the careful one refuses); whether it read ``root``."""
    inlined: set[str] = set()
    try:
        fast = plain.plain_parameters(copy.deepcopy(root), inlined)
    except copies.NotPlain:
        fast = None
    careful_normalizer = normalize.Normalizer("f", root)
    try:
        careful = careful_normalizer.node(root, "", ancestors=(), top=True)
    except ToolSchemaError:
        assert fast is None, f"{name}: the fast path accepted a schema the careful normalizer refuses"
        return False
    if fast is None:
        return False
    assert json.dumps(fast) == json.dumps(careful), name
    assert inlined == careful_normalizer.inlined, name  # the definitions left for check_definitions are the same
    return True


@settings(max_examples=600, deadline=None, derandomize=True)
@given(root=_TOP_SCHEMAS)
def test_the_fast_normalizer_equals_the_careful_one(root: Any) -> None:
    """The pointer-free path for plain schemas returns exactly what the careful normalizer returns (key order
    included), and declines whatever the careful one refuses or reads otherwise."""
    _fast_equals_careful(root)


@settings(max_examples=600, deadline=None, derandomize=True)
@given(root=_TOPS_WITH_DEFINITIONS)
def test_the_fast_normalizer_inlines_references_as_the_careful_one(root: Any) -> None:
    """The same with ``$ref`` to the root's definitions: the same inlined schema and the same definitions
    marked as inlined; recursion, unknown names and references elsewhere are left to the careful path."""
    _fast_equals_careful(root)


def test_the_fast_normalizer_takes_plain_tool_lists() -> None:
    """Plain tools (the cold-start bench's shapes: strings, integers, enums, nested objects, bounded arrays,
    and in the varied one ``anyOf``, ``const``, nullable types and ``$ref`` to ``$defs``) take the fast path,
    so a change that made it decline them would show here."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from toolsets_cold import VARIED, toolset
    finally:
        sys.path.pop(0)
    refs = 0
    for shape, n in (("simple", 10), ("nested", 10), ("varied", len(VARIED))):
        for entry in toolset(shape, n, salt="t").tools:
            params = entry["function"]["parameters"]
            inlined: set[str] = set()
            fast = plain.plain_parameters(copy.deepcopy(params), inlined)
            careful = normalize.Normalizer("f", params)
            assert fast == careful.node(params, "", ancestors=(), top=True)
            assert inlined == careful.inlined
            refs += len(inlined)
    assert refs == 2  # the varied shape's order tool: Address and Item


def test_a_tool_seen_in_another_list_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server sees new lists of tools it has seen: each tool is validated once per entry text (strict
    loads), and a new list reuses it; the cache is bounded, and refusals are never kept."""
    loading.clear_recent()
    a, b, c = (entry(obj(x={"type": "integer"}), name=n) for n in ("a", "b", "c"))
    first = load_tools([a, b])
    second = load_tools([c, b, a])
    assert second["a"] is first["a"] and second["b"] is first["b"]
    assert second.names == ("c", "b", "a") and second.fingerprint != first.fingerprint
    assert load_tools([a], mode="strings")["a"] is not first["a"]  # another mode: validated again
    assert load_tools([entry(obj(x={"type": "integer", "description": "d"}), name="a")])["a"] is not first["a"]
    with pytest.warns(ToolSchemaWarning):  # a lenient load reads (and warns) every time
        lenient = load_tools([entry(obj(x={"type": "integer", "nullable": True}), name="a")], lenient=True)
    assert lenient["a"].parameters["properties"]["x"]["type"] == ["integer", "null"]
    bad = entry(obj(x={"type": "integr"}), name="bad")
    for listed in ([bad], [a, bad]):
        with pytest.raises(ToolSchemaError, match="unknown type"):
            load_tools(listed)
    monkeypatch.setattr(loading, "MAX_RECENT_TOOLS", 2)
    loading.clear_recent()
    load_tools([a, b, c])
    assert len(loading._recent_tools) == 2


@pytest.mark.parametrize(
    ("unlike", "error"),
    [
        ({1: {"type": "string"}}, "key 1 is a int; JSON object keys are strings"),
        ({"1": {"type": "string"}, "required": ("1",)}, "a tuple is not JSON data"),
    ],
    ids=["int-key", "tuple"],
)
def test_data_that_only_looks_like_a_loaded_entry_is_refused_as_when_cold(unlike: dict[str, Any], error: str) -> None:
    """The caches are keyed by JSON text, in which an int key reads as a string and a tuple as a list: an entry
    that loading refuses must be refused whatever was loaded before from the same text (the whole list, or the
    tool in another list), with the error a first load gives."""
    properties = {k: v for k, v in unlike.items() if k != "required"}
    bad = {"name": "f", "parameters": {"type": "object", "properties": properties}}
    if "required" in unlike:
        bad["parameters"]["required"] = unlike["required"]
    good = json.loads(json.dumps(bad))
    assert json.dumps(good) == json.dumps(bad) and good != bad
    other = entry(obj(q={"type": "string"}), name="other")
    for remembered in ([good], [other, good]):
        loading.clear_recent()
        with pytest.raises(ToolSchemaError, match=re.escape(error)):
            load_tools([bad])
        load_tools(remembered)
        for listed in ([bad], [bad, other]):
            with pytest.raises(ToolSchemaError, match=re.escape(error)):
                load_tools(listed)
    assert load_tools([good])["f"].source == good  # the plain entry is still served


def test_an_entry_is_copied_from_its_text_only_where_that_copy_is_plain() -> None:
    """The copy read back from an entry's JSON text is used only where it equals the entry; text that may hold a
    surrogate goes to the careful copy, which refuses a lone one."""
    plain = {"name": "f", "description": "caf\u00e9", "parameters": {"type": "object", "properties": {}}}
    copied = copies.copy_of_text(plain, loading._ENTRY_TEXT.encode(plain))
    assert copied == plain and copied is not plain and copied["parameters"] is not plain["parameters"]
    astral = {**plain, "description": "\U0001f600"}  # written as a surrogate pair: the careful copy takes it
    assert copies.copy_of_text(astral, loading._ENTRY_TEXT.encode(astral)) is None
    loading.clear_recent()
    assert load_tools([astral])["f"].description == "\U0001f600"
    assert copies.copy_of_text({"name": "f", "x": (1,)}, '{"name": "f", "x": [1]}') is None
    lone = {"name": "f", "description": "a\ud800b"}
    assert copies.copy_of_text(lone, loading._ENTRY_TEXT.encode(lone)) is None
    loading.clear_recent()
    with pytest.raises(ToolSchemaError, match="lone surrogate"):
        load_tools([lone])


def test_remembered_lists_serve_their_warnings_to_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads loading lenient lists through a small list cache (constant eviction, thread switches every
    microsecond): every load returns its own list and gives its own warning, and none fails."""
    import threading

    monkeypatch.setattr(loading, "MAX_RECENT_LISTS", 2)
    lists = [[entry(obj(**{f"x{i}": {"type": "integer", "nullable": True}}), name=f"t{i}")] for i in range(5)]
    heard = threading.local()
    monkeypatch.setattr(loading, "_warn", lambda notes, stacklevel=3: heard.notes.extend(notes))
    failures: list[str] = []

    def work(k: int) -> None:
        heard.notes = []
        for n in range(60):
            i = (k + n) % len(lists)
            try:
                got = load_tools(lists[i], lenient=True)
            except Exception as error:  # a thread's exception would not reach the test otherwise
                failures.append(f"thread {k}, load {n}: {type(error).__name__}: {error}")
                return
            said, heard.notes = heard.notes, []
            if got.names != (f"t{i}",) or len(said) != 1 or f"x{i}" not in said[0]:
                failures.append(f"thread {k}, load {n}: {got.names} with notes {said}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        loading.clear_recent()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not failures, failures[:3]
    assert len(loading._recent) <= 2


_CACHE_SUBSCHEMAS = [
    {"type": "string"},
    {"type": "number"},
    {"type": "integer", "minimum": 1},  # a bound: read by the careful path, so its list goes to disk
    {"type": "string", "nullable": True},  # lenient only
    {"type": "integr"},  # refused
]


@st.composite
def _cache_entry(draw: st.DrawFn) -> dict[str, Any]:
    """An entry from a small pool, so that lists share tools and texts, sometimes turned into data with the
    same JSON text that loading refuses (an int key, a tuple)."""
    sub = copy.deepcopy(draw(st.sampled_from(_CACHE_SUBSCHEMAS)))
    props: dict[Any, Any] = {"0": sub, "1": {"type": "boolean"}}
    params = {"type": "object", "properties": props, "required": ["0"]}
    change = draw(st.sampled_from(["none"] * 4 + ["int key", "tuple"]))
    if change == "int key":
        params["properties"] = {0: sub, "1": props["1"]}
    elif change == "tuple":
        params["required"] = ("0",)
    return entry(params, name=draw(st.sampled_from(["a", "b", "c"])))


def _tool_name(entry: dict[str, Any]) -> str:
    return entry["function"]["name"]  # type: ignore[no-any-return]


def _outcome(load: Any) -> tuple[str, ...]:
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        try:
            got = load()
        except ToolSchemaError as error:
            return ("error", str(error))
    said = tuple(str(w.message) for w in heard)
    return ("tools", got.fingerprint, json.dumps([t.source for t in got]), *said)


def _read_everything(entries: list[dict[str, Any]], lenient: bool) -> tuple[str, ...]:
    """:func:`_outcome` of a load that keeps and reads no cache."""
    notes: list[str] = []
    try:
        got = loading._load_entries(entries, "schema", lenient, notes)
    except ToolSchemaError as error:
        return ("error", str(error))
    return ("tools", got.fingerprint, json.dumps([t.source for t in got]), *notes)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.lists(_cache_entry(), min_size=1, max_size=3, unique_by=_tool_name), st.booleans(),
                          st.booleans()), max_size=8))  # fmt: skip
def test_the_caches_never_change_what_loading_returns(loads: list[tuple[list[dict[str, Any]], bool, bool]]) -> None:
    """A sequence of loads (lists of tools sharing names and schemas, valid, lenient-only, refused or not JSON
    data; strict or lenient; the memory caches sometimes emptied so that the disk is read) returns from the
    caches exactly what a load that reads everything returns: the same tools, warnings and errors."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        old = os.environ.get("TOOLGRAMMAR_CACHE")
        os.environ["TOOLGRAMMAR_CACHE"] = root
        try:
            loading.clear_recent()
            for entries, lenient, forget in loads:
                if forget:
                    loading.clear_recent()
                cached = _outcome(lambda e=entries, lenient=lenient: load_tools(e, lenient=lenient))
                assert cached == _read_everything(entries, lenient)
        finally:
            if old is None:
                os.environ.pop("TOOLGRAMMAR_CACHE", None)
            else:
                os.environ["TOOLGRAMMAR_CACHE"] = old
            loading.clear_recent()


def _real_parameters() -> list[tuple[str, Any]]:
    """Every parameters schema of the CanIToolCall corpus (all families) and of the BFCL sample
    (``tests/data/bfcl_sample.json``, converted as the side-by-side mode converts it)."""
    from toolgrammar.evaluate import bfcl

    found = [
        (f"{fid}:{t.get('function', t).get('name')}", t.get("function", t).get("parameters"))
        for fid, fixture in FIXTURES
        for t in fixture.get("tools") or []
    ]
    sample = json.loads((Path(__file__).resolve().parents[1] / "data" / "bfcl_sample.json").read_text(encoding="utf-8"))
    for entry in sample["schemas"]:
        for tool in bfcl.to_openai_tools([entry["function"]], entry["category"]):
            found.append((f"bfcl:{entry['source']}:{tool['function']['name']}", tool["function"].get("parameters")))
    return [(name, params) for name, params in found if isinstance(params, dict) and params]


def test_the_fast_normalizer_equals_the_careful_one_on_real_schemas() -> None:
    """On real tool lists (the CanIToolCall corpus, the BFCL sample) the fast pass returns the careful
    normalizer's schema and inlined definitions wherever it reads one, and takes most of them."""
    schemas = _real_parameters()
    assert len(schemas) > 300, "the corpus or the BFCL sample is missing"
    taken = sum(_fast_equals_careful(params, name) for name, params in schemas)
    assert taken > len(schemas) // 2


def test_argument_names_refused_by_the_pattern_are_the_unicode_categories() -> None:
    """The pattern that refuses argument names spells exactly '<', '>', '=' and Unicode's Cc, Zl and Zp."""
    import unicodedata

    expected = {c for c in map(chr, range(0x110000)) if c in "<>=" or unicodedata.category(c) in ("Cc", "Zl", "Zp")}
    found = {c for c in map(chr, range(0x110000)) if BAD_ARGUMENT_CHARACTER.search(c)}
    assert found == expected


def test_load_tools_lenient_returns_the_reports_it_would_warn() -> None:
    """The notes are the warnings' messages, in order, and none escapes as a warning."""
    import warnings

    from toolgrammar.schema import load_tools_lenient

    dirty = [{"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "number", "format": "float"}, "b": {"type": "string", "optional": True}}}}]  # fmt: skip
    with pytest.warns(ToolSchemaWarning) as warned:
        expected = load_tools(dirty, lenient=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning escaping would raise here
        toolset, notes = load_tools_lenient(dirty)
    assert toolset == expected
    assert notes == [str(w.message) for w in warned] and len(notes) == 2
    assert "/properties/a/format" in notes[0] and "/properties/b/optional" in notes[1]
