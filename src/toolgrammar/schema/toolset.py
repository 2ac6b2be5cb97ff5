"""The validated tools: :class:`Tool`, :class:`ToolSet` (immutable, in one argument mode) and its fingerprint.

Build them with :func:`~toolgrammar.schema.loading.load_tools`; every later stage reads the normalized
:attr:`Tool.parameters` (the contract: :mod:`toolgrammar.schema.normalize`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.copies import plain_data

ArgumentMode = Literal["schema", "strings"]
"""How arguments are constrained: ``"schema"`` (each tool's JSON Schema) or ``"strings"`` (the seed
harness's rule: every declared argument is a string, required ones present, no unknown ones)."""

ARGUMENT_MODES: tuple[str, ...] = ("schema", "strings")

FINGERPRINT_VERSION = "toolgrammar.tools/1"
"""Names the data the fingerprint and the disk cache hash: a new one changes every fingerprint and cache key."""


@dataclass(frozen=True)
class Tool:
    """One validated tool.

    Equality compares every field; the hash uses the name and the normalized parameters.
    """

    name: str
    """The tool's name; matches :data:`~toolgrammar.schema.entries.TOOL_NAME_PATTERN`."""
    description: str | None
    """The tool's description as given, or ``None``."""
    parameters: dict[str, Any]
    """The normalized parameters schema (the contract: :mod:`toolgrammar.schema.normalize`)."""
    source: dict[str, Any]
    """A deep copy of the entry exactly as given (either shape), for chat templates and re-normalizing."""

    def __hash__(self) -> int:
        return hash((self.name, self.schema_json))

    @cached_property
    def schema_json(self) -> str:
        """:attr:`parameters` as canonical JSON: keywords sorted inside each schema node, the order of
        properties, enum values and lists kept (the grammar depends on them), compact separators."""
        return _canonical_json(self.parameters)

    def to_openai(self) -> dict[str, Any]:
        """This tool as an OpenAI tool entry with its original description and parameters."""
        fn = self.source.get("function", self.source)
        return {"type": "function", "function": plain_data({k: v for k, v in fn.items() if k != "type"}, "")}


@dataclass(frozen=True)
class ToolSet:
    """An immutable, validated tool list in one argument mode; build it with
    :func:`~toolgrammar.schema.loading.load_tools`.

    Iterating yields the tools in the order given; ``name in toolset`` and ``toolset[name]`` look tools
    up by name (``KeyError`` naming the known tools when absent).
    """

    tools: tuple[Tool, ...]
    """The tools, in the order given."""
    mode: ArgumentMode = "schema"
    """How arguments are constrained (:data:`ArgumentMode`)."""

    def __post_init__(self) -> None:
        check_mode(self.mode)
        object.__setattr__(self, "tools", tuple(self.tools))
        seen: dict[str, int] = {}
        for index, tool in enumerate(self.tools):
            if not isinstance(tool, Tool):
                raise ToolSchemaError(f"ToolSet.tools[{index}] is a {type(tool).__name__}, not a Tool; use load_tools")
            if tool.name in seen:
                raise ToolSchemaError(
                    f"duplicate tool name: entries #{seen[tool.name]} and #{index} are both named {tool.name!r}; "
                    "tool names must be unique",
                    tool=tool.name,
                )
            seen[tool.name] = index

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            known = ", ".join(repr(n) for n in self.names) or "(none)"
            raise KeyError(f"unknown tool {name!r}; known tools: {known}") from None

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @cached_property
    def _by_name(self) -> dict[str, Tool]:
        return {tool.name: tool for tool in self.tools}

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in order."""
        return tuple(tool.name for tool in self.tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._by_name.get(name) if isinstance(name, str) else None

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical JSON of the mode and the normalized tools; a cache key.

        Canonical: keywords sorted inside each schema node, property order kept (it shapes the grammar),
        compact separators, UTF-8. It depends on nothing but the data, so it is the same in every run and
        on every machine; annotations and ``$ref`` spelling do not change it, descriptions do.
        """
        # The text of {"version", "mode", "tools": [{"name", "description", "parameters"}]} in canonical JSON,
        # spelled around each tool's own canonical text rather than encoding every schema a second time.
        text = _canonical_text
        parts = [
            f'{{"name":{text(t.name)},"description":{text(t.description)},"parameters":{t.schema_json}}}'
            for t in self.tools
        ]
        payload = f'{{"version":{text(FINGERPRINT_VERSION)},"mode":{text(self.mode)},"tools":[{",".join(parts)}]}}'
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_openai(self) -> list[dict[str, Any]]:
        """The OpenAI tool list to give ``apply_chat_template``: original descriptions and parameters
        (fresh copies; the ``strings`` mode does not rewrite what the model is shown)."""
        return [tool.to_openai() for tool in self.tools]


def check_mode(mode: object) -> None:
    if mode not in ARGUMENT_MODES:
        raise ToolSchemaError(f"unknown argument mode {mode!r}; use one of {', '.join(map(repr, ARGUMENT_MODES))}")


def _canonical(schema: Any) -> Any:
    """Schema nodes with sorted keywords; property order and literal values kept as they are."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for keyword in sorted(schema):
        value = schema[keyword]
        if keyword == "properties":
            out[keyword] = [[name, _canonical(sub)] for name, sub in value.items()]
        elif keyword in ("items", "additionalProperties"):
            out[keyword] = _canonical(value)
        elif keyword == "anyOf":
            out[keyword] = [_canonical(branch) for branch in value]
        else:
            out[keyword] = value
    return out


def _canonical_json(schema: Any) -> str:
    return _canonical_text(_canonical(schema))


def _canonical_text(canonical: Any) -> str:
    return json.dumps(canonical, ensure_ascii=False, separators=(",", ":"))


__all__ = ["ARGUMENT_MODES", "FINGERPRINT_VERSION", "ArgumentMode", "Tool", "ToolSet", "check_mode"]
