"""Per-call checks shared by every format's strict parser.

A format's parser finds the blocks and decodes each one into a ``{"name", "arguments"}`` object
(hermes: ``json.loads`` of the block body; qwen-xml: its ``<function=...>`` markup). From there on
the checks are the same for every format, and they are the seed harness's ``validate_call``
(``../shared/seeds/000_*.txt``, itself the Berkeley Function Calling Leaderboard's checks), in its
order, with its messages, and with a machine-readable :data:`~toolgrammar.formats.calls.ErrorKind` on top:

1. an object with exactly the keys ``name`` and ``arguments``, else ``wrong-keys``:
   ``error: a tool call must be a JSON object with exactly "name" and "arguments"``
2. a known tool, else ``unknown-tool``: ``error: unknown tool 'NAME'``
3. ``arguments`` an object, else ``arguments-not-object``: ``error: arguments must be a JSON object``
4. required arguments present and none unknown, else ``missing-argument`` / ``unknown-argument``:
   ``error: missing arguments [...], unknown arguments [...]``
5. ``strings`` mode: every value a string, else ``wrong-type``: ``error: every argument must be a string``;
   ``schema`` mode: valid against the tool's schema, else ``schema-violation``:
   ``error: arguments do not match the schema of 'NAME': PATH: MESSAGE; ...``

When a call both misses a required argument and has an unknown one, the message names both (as the
seed's does) and the kind is ``missing-argument``: a missing argument is the one the tool cannot run
without, and one kind per error keeps counts by kind summing to the number of errors.

Schema mode validates with ``jsonschema``'s Draft 2020-12 validator against the tool's normalized
``parameters`` (``tools.py`` is the one place schemas are read and normalized); one validator is
built per tool and cached. Formats are checked (``format`` is enforced by the grammar, so the judge
checks it too) with :data:`toolgrammar.schema.format_checker.FORMAT_CHECKER`, the same on every machine.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from toolgrammar.formats.calls import CallError, ToolCall

if TYPE_CHECKING:
    from toolgrammar.schema import ArgumentMode, Tool, ToolSet

WRONG_KEYS_MESSAGE = 'error: a tool call must be a JSON object with exactly "name" and "arguments"'
ARGUMENTS_NOT_OBJECT_MESSAGE = "error: arguments must be a JSON object"
WRONG_TYPE_MESSAGE = "error: every argument must be a string"

_VALIDATOR_CACHE_SIZE = 1024
_validators: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
"""id(tool) -> (tool, validator). The tool is kept in the entry so its id cannot be reused while cached."""


def check_call(obj: Any, tools: ToolSet) -> ToolCall | CallError:
    """Check one decoded call object against the offered tools (the seed's ``validate_call``).

    ``obj`` is what the format decoded from one block (for hermes, ``json.loads`` of its body).
    Returns the valid :class:`~toolgrammar.formats.calls.ToolCall`, or the first failing check as a
    :class:`~toolgrammar.formats.calls.CallError`. Never raises on bad model output.
    """
    if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
        return CallError("wrong-keys", WRONG_KEYS_MESSAGE)
    name = obj["name"]
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None:
        return CallError("unknown-tool", f"error: unknown tool {name!r}")
    arguments = obj["arguments"]
    if not isinstance(arguments, dict):
        return CallError("arguments-not-object", ARGUMENTS_NOT_OBJECT_MESSAGE)
    error = check_arguments(tool, arguments, tools.mode)
    if error is not None:
        return error
    return ToolCall(tool.name, arguments)


def check_arguments(tool: Tool, arguments: dict[str, Any], mode: ArgumentMode) -> CallError | None:
    """Check a call's ``arguments`` object against one tool; ``None`` when they are valid.

    Order: missing / unknown arguments (one message naming both, kind ``missing-argument`` when any
    is missing), then ``wrong-type`` (``strings`` mode) or ``schema-violation`` (``schema`` mode).
    """
    parameters = tool.parameters
    required = parameters.get("required", ())
    properties = parameters.get("properties", {})
    missing = sorted(set(required) - set(arguments))
    unknown = sorted(set(arguments) - set(properties))
    if missing or unknown:
        kind = "missing-argument" if missing else "unknown-argument"
        return CallError(kind, f"error: missing arguments {missing}, unknown arguments {unknown}")
    if mode == "strings":
        if any(not isinstance(value, str) for value in arguments.values()):
            return CallError("wrong-type", WRONG_TYPE_MESSAGE)
        return None
    if mode != "schema":
        raise ValueError(f"unknown argument mode {mode!r}; expected 'schema' or 'strings'")
    problems = schema_errors(tool, arguments)
    if problems:
        return CallError(
            "schema-violation", f"error: arguments do not match the schema of {tool.name!r}: {'; '.join(problems)}"
        )
    return None


def schema_errors(tool: Tool, arguments: Any) -> list[str]:
    """Every JSON Schema error of ``arguments`` against ``tool.parameters``, as ``PATH: MESSAGE``.

    Errors are sorted by their path in the arguments, so the message is the same on every run.
    """
    validator = _validator(tool)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{e.json_path}: {e.message}" for e in errors]


def _validator(tool: Tool) -> Any:
    key = id(tool)
    entry = _validators.get(key)
    if entry is not None and entry[0] is tool:
        _validators.move_to_end(key)
        return entry[1]
    from jsonschema import Draft202012Validator  # lazy: costs ~50 ms, only schema mode needs it

    from toolgrammar.schema import FORMAT_CHECKER  # lazy too: built with jsonschema

    validator = Draft202012Validator(tool.parameters, format_checker=FORMAT_CHECKER)
    _validators[key] = (tool, validator)
    if len(_validators) > _VALIDATOR_CACHE_SIZE:
        _validators.popitem(last=False)
    return validator


__all__ = ["check_arguments", "check_call", "schema_errors"]
