"""A varied set of tool lists for the invariant tests (soundness, completeness, termination)."""

from __future__ import annotations

from pathlib import Path

SEED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List a directory.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search files.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                "required": ["pattern", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the tests.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": []},
        },
    },
]

TYPED_TOOLS = [
    {
        "name": "calculate",
        "parameters": {
            "type": "object",
            "properties": {
                "x": {"type": "integer"},
                "y": {"type": "number"},
                "exact": {"type": "boolean"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["x", "y"],
        },
    },
    {
        "name": "set_mode",
        "parameters": {
            "type": "object",
            "properties": {"mode": {"enum": ["fast", 'say "hi"', "café ☕", 3, None]}, "level": {"const": "max"}},
            "required": ["mode"],
        },
    },
]

NESTED_TOOLS = [
    {
        "name": "create_event",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "when": {
                    "type": "object",
                    "properties": {"start": {"type": "string"}, "minutes": {"type": "integer"}},
                    "required": ["start"],
                },
                "attendees": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                "where": {"$ref": "#/$defs/place"},
            },
            "required": ["title", "when"],
            "$defs": {
                "place": {
                    "anyOf": [
                        {"type": "string"},
                        {
                            "type": "object",
                            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                            "required": ["lat", "lon"],
                        },
                    ]
                }
            },
        },
    },
]

PREFIX_TOOLS = [
    {
        "name": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "paths": {"type": "array", "items": {"type": "string"}}},
            "required": [],
        },
    },
    {"name": "ping", "parameters": {"type": "object", "properties": {}}},
    {"name": "noop"},
]

FREEFORM_TOOLS = [
    {
        "name": "store",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {}, "meta": {"type": "object"}},
            "required": ["key", "value"],
        },
    },
]

TOOLSETS = {
    "seed-strings": SEED_TOOLS,
    "typed": TYPED_TOOLS,
    "nested": NESTED_TOOLS,
    "shared-prefixes": PREFIX_TOOLS,
    "freeform": FREEFORM_TOOLS,
}

FIXTURES_DIR = Path(__file__).parent / "data"
