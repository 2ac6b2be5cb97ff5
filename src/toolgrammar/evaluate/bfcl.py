"""The Berkeley Function Calling Leaderboard (BFCL): its data, its tools, and its AST checker, mirrored.

BFCL (``bfcl-eval`` on PyPI, Apache-2.0; the pinned release is :data:`PINNED_VERSION`) ships its test
categories and their ground truth inside the package (``bfcl_eval/data/BFCL_v4_<category>.json`` and
``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json``, one JSON object a line). This module reads
them **without importing bfcl_eval**: the package pins ``numpy==1.26.4``, ``filelock==3.20.0`` and two
dozen SDKs, and its import chain needs them; only its data files are used here. It is found through
``importlib.metadata`` (the distribution's files, then ``PathFinder.find_spec`` on the top-level name,
which locates a package without running it), or through ``$TOOLGRAMMAR_BFCL_DATA`` (a ``data`` folder).
``pip install --no-deps bfcl-eval==2026.3.23`` is therefore enough.

Three things are mirrored from BFCL 2026.3.23, each function citing the one it follows:

- the items (:func:`load_category`): ``question[0]`` is the single turn's messages, ``function`` the
  function docs in BFCL's own dialect (``"type": "dict"`` / ``"float"`` / ``"tuple"`` / ``"any"``...);
- the conversion of those docs to OpenAI tools (:func:`to_openai_tools`), exactly as BFCL's
  OpenAI-style function-calling handlers do it (``utils.add_language_specific_hint_to_function_doc``
  then ``model_handler.utils.convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)``:
  a language hint appended to each description, ``dict`` -> ``object``, ``float`` -> ``number`` with
  ``"format": "float"`` and a note in the description, ``tuple`` -> ``array``, ``any`` -> ``string``,
  ``.`` in tool names -> ``_``);
- the scoring (:func:`score_decoded`, :func:`check_ast`): ``eval_checker/ast_eval/ast_checker.py`` and the
  relevance rule of ``eval_checker/eval_runner.py``, including their quirks, with the checker's
  ``underscore_to_dot`` set as for OpenAI models (the names were changed by the conversion), and
  :func:`decode_hermes`: how BFCL's Qwen function-calling handler (``QwenFCHandler``) reads a turn.

The AST checker is ported for the Python categories (:data:`CATEGORIES`); BFCL's Java and JavaScript
categories go through its Java/JS literal converters (700 lines of string parsing) and are refused.
No torch, no transformers: standard library only.
"""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.metadata
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgrammar.errors import ToolgrammarError, ToolSchemaError
from toolgrammar.schema import JSON_TYPES, LENIENT_TYPE_NAMES, load_tools, load_tools_lenient

if TYPE_CHECKING:
    from toolgrammar.schema import ToolSet

__all__ = [
    "AST_CATEGORIES",
    "CATEGORIES",
    "DATA_ENV",
    "DISTRIBUTION",
    "GORILLA_TO_OPENAPI",
    "PINNED_VERSION",
    "RELEVANCE_CATEGORIES",
    "BfclData",
    "BfclError",
    "BfclItem",
    "DecodeError",
    "Verdict",
    "add_language_hint",
    "check_ast",
    "decode_hermes",
    "load_category",
    "locate_data",
    "score_decoded",
    "to_openai_tools",
]

DISTRIBUTION = "bfcl-eval"
PACKAGE = "bfcl_eval"
PINNED_VERSION = "2026.3.23"
DATA_ENV = "TOOLGRAMMAR_BFCL_DATA"
"""An environment variable naming a ``bfcl_eval/data`` folder; it wins over the installed package."""
VERSION_PREFIX = "BFCL_v4"
"""``bfcl_eval.constants.category_mapping.VERSION_PREFIX``: the data files' name prefix."""

AST_CATEGORIES: tuple[str, ...] = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
"""Single-turn Python categories scored by the AST checker against ``possible_answer``."""
RELEVANCE_CATEGORIES: tuple[str, ...] = ("irrelevance", "live_irrelevance", "live_relevance")
"""Scored by the relevance rule: ``*irrelevance`` passes when the turn makes no call, ``live_relevance`` when it
makes one (``eval_runner._evaluate_single_relevance_entry``); they have no possible answers."""
CATEGORIES: tuple[str, ...] = AST_CATEGORIES + RELEVANCE_CATEGORIES

# bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI, verbatim.
GORILLA_TO_OPENAPI: dict[str, str] = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}

# ast_checker.PYTHON_TYPE_MAPPING and PYTHON_NESTED_TYPE_CHECK_LIST, verbatim.
PYTHON_TYPE_MAPPING: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
PYTHON_NESTED_TYPE_CHECK_LIST = ("array", "tuple")


class BfclError(ToolgrammarError, ValueError):
    """BFCL data that cannot be found or read, or a category this module does not score."""


class DecodeError(ValueError):
    """The turn cannot be decoded into calls the way BFCL's handler decodes it (a decoder failure)."""


# --------------------------------------------------------------------------------------------------
# Locating the data


@dataclass(frozen=True)
class BfclData:
    """Where BFCL's data folder is, and which release it came from."""

    root: Path
    """The folder holding ``BFCL_v4_<category>.json`` and ``possible_answer/``."""
    version: str | None
    """The installed distribution's version; ``None`` when found through :data:`DATA_ENV`."""
    source: str
    """How it was found, in words (for reports)."""

    def prompt_file(self, category: str) -> Path:
        return self.root / f"{VERSION_PREFIX}_{category}.json"

    def answer_file(self, category: str) -> Path:
        return self.root / "possible_answer" / f"{VERSION_PREFIX}_{category}.json"


def _install_hint() -> str:
    return (
        f"install the data with `pip install --no-deps {DISTRIBUTION}=={PINNED_VERSION}` (only its data files are "
        f"read; --no-deps keeps its pins off your environment), or set ${DATA_ENV} to a bfcl_eval/data folder"
    )


def locate_data(paths: Sequence[str | os.PathLike[str]] | None = None, *, use_env: bool = True) -> BfclData:
    """Find BFCL's data folder without importing ``bfcl_eval``.

    Order: ``$TOOLGRAMMAR_BFCL_DATA`` (when ``use_env``); the ``bfcl-eval`` distribution's metadata on
    ``paths`` (default ``sys.path``), its data folder located through the files it installed; then
    ``importlib.machinery.PathFinder.find_spec("bfcl_eval", paths)`` (a top-level lookup: finds the folder,
    runs nothing). Raises :class:`BfclError` with the install line when none has the data.
    """
    if use_env and os.environ.get(DATA_ENV):
        root = Path(os.environ[DATA_ENV])
        if not (root / f"{VERSION_PREFIX}_simple_python.json").is_file():
            raise BfclError(f"${DATA_ENV}={str(root)!r} holds no {VERSION_PREFIX}_simple_python.json")
        return BfclData(root, None, f"${DATA_ENV} ({root})")
    search = [str(p) for p in paths] if paths is not None else None
    for dist in importlib.metadata.distributions(name=PACKAGE, **({"path": search} if search is not None else {})):
        files = dist.files or []
        marker = next((f for f in files if f.as_posix() == f"{PACKAGE}/data/{VERSION_PREFIX}_simple_python.json"), None)
        if marker is None:
            continue
        root = Path(str(dist.locate_file(marker))).parent
        if root.is_dir():
            version = dist.version
            return BfclData(root, version, f"{DISTRIBUTION} {version} ({root})")
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE, search)
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))) / "data"
        if (root / f"{VERSION_PREFIX}_simple_python.json").is_file():
            return BfclData(root, None, f"{PACKAGE} package folder ({root})")
    raise BfclError(f"BFCL's data is not installed: {_install_hint()}")


# --------------------------------------------------------------------------------------------------
# Items


@dataclass(frozen=True)
class BfclItem:
    """One BFCL test entry of a single-turn category, with its ground truth."""

    id: str
    category: str
    messages: tuple[dict[str, Any], ...]
    """``question[0]``: the only turn's messages (``system``/``user``/``assistant``)."""
    functions: tuple[dict[str, Any], ...]
    """The function docs as BFCL ships them (its own types: ``dict``, ``float``, ``tuple``, ``any``...)."""
    possible_answer: tuple[dict[str, Any], ...] | None
    """``ground_truth``: one ``{function name: {parameter: [accepted values]}}`` per expected call;
    ``None`` for the relevance categories."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    # bfcl_eval.utils.load_file: one JSON object per non-empty line
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise BfclError(f"{path}:{number}: malformed JSON line ({error.msg})") from error
    return entries


def check_category(category: str) -> None:
    """Raise :class:`BfclError` unless ``category`` is one this module loads and scores."""
    if category in CATEGORIES:
        return
    if category in ("simple_java", "simple_javascript"):
        raise BfclError(
            f"BFCL category {category!r} is not supported: its checker converts Java/JavaScript literals "
            "(bfcl_eval.eval_checker.ast_eval.type_convertor), which toolgrammar does not port"
        )
    raise BfclError(f"unknown or unsupported BFCL category {category!r}; supported: {', '.join(CATEGORIES)}")


def load_category(category: str, data: BfclData | None = None) -> list[BfclItem]:
    """The items of one category, in the file's order, each with its possible answers (by id)."""
    check_category(category)
    data = data or locate_data()
    prompts = _read_jsonl(data.prompt_file(category))
    answers: dict[str, Any] = {}
    if category in AST_CATEGORIES:
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(data.answer_file(category))}
    items = []
    for entry in prompts:
        question = entry.get("question")
        if not isinstance(question, list) or len(question) != 1 or not isinstance(question[0], list):
            raise BfclError(f"{category} item {entry.get('id')!r}: expected one turn in 'question'")
        truth = None
        if category in AST_CATEGORIES:
            if entry["id"] not in answers:
                raise BfclError(f"{category} item {entry['id']!r} has no possible answer")
            truth = tuple(answers[entry["id"]])
        items.append(
            BfclItem(
                id=entry["id"],
                category=category,
                messages=tuple(question[0]),
                functions=tuple(entry["function"]),
                possible_answer=truth,
            )
        )
    return items


# --------------------------------------------------------------------------------------------------
# Function docs -> OpenAI tools


def _language_hint(category: str) -> str:
    # bfcl_eval.utils._get_language_specific_hint
    if "javascript" in category:
        return " Note that the provided function is in JavaScript syntax."
    if "java" in category:
        return " Note that the provided function is in Java 8 SDK syntax."
    return " Note that the provided function is in Python 3 syntax."


def add_language_hint(functions: Iterable[Mapping[str, Any]], category: str) -> list[dict[str, Any]]:
    """``bfcl_eval.utils._func_doc_language_specific_pre_processing`` on a copy: the hint BFCL adds to every
    description at generation time (``load_dataset_entry(..., include_language_specific_hint=True)``), and
    for Java/JavaScript every parameter made a string described in words."""
    functions = [copy.deepcopy(dict(f)) for f in functions]
    java, js = "java" in category and "javascript" not in category, "javascript" in category
    for item in functions:
        item["description"] = item["description"] + _language_hint(category)
        properties = item["parameters"]["properties"]
        if java:
            for value in properties.values():
                if value["type"] == "any":
                    value["description"] += (
                        " This parameter can be of any type of Java object in string representation."
                    )
                else:
                    value["description"] += f" This is Java {value['type']} type parameter in string representation."
                if value["type"] in ("ArrayList", "Array"):
                    value["description"] += (
                        f" The list elements are of type {value['items']['type']};"
                        " they are not in string representation."
                    )
                    del value["items"]
                value["type"] = "string"
        elif js:
            for value in properties.values():
                if value["type"] == "any":
                    value["description"] += (
                        " This parameter can be of any type of JavaScript object in string representation."
                    )
                else:
                    value["description"] += (
                        f" This is JavaScript {value['type']} type parameter in string representation."
                    )
                if value["type"] == "array":
                    value["description"] += (
                        f" The list elements are of type {value['items']['type']};"
                        " they are not in string representation."
                    )
                    del value["items"]
                if value["type"] == "dict" and "properties" in value:
                    value["description"] += (
                        " The dictionary entries have the following schema; they are not in string representation. "
                        + json.dumps(value["properties"])
                    )
                    del value["properties"]
                value["type"] = "string"
    return functions


def _cast_to_openai_type(properties: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    # bfcl_eval.model_handler.utils._cast_to_openai_type, statement for statement (it edits in place). It maps
    # one or two levels of ``items`` and recurses into ``properties`` only: deeper nodes keep BFCL's types.
    for key, value in properties.items():
        if "type" not in value:
            properties[key]["type"] = "string"
        else:
            var_type = value["type"]
            if mapping is GORILLA_TO_OPENAPI and var_type == "float":
                properties[key]["format"] = "float"
                properties[key]["description"] += " This is a float type value."
            properties[key]["type"] = mapping.get(var_type, "string")
        node = properties[key]
        if node["type"] in ("array", "object"):
            if "properties" in node:
                node["properties"] = _cast_to_openai_type(node["properties"], mapping)
            elif "items" in node:
                node["items"]["type"] = mapping[node["items"]["type"]]
                if node["items"]["type"] == "array" and "items" in node["items"]:
                    node["items"]["items"]["type"] = mapping[node["items"]["items"]["type"]]
                elif node["items"]["type"] == "object" and "properties" in node["items"]:
                    node["items"]["properties"] = _cast_to_openai_type(node["items"]["properties"], mapping)
    return properties


def to_openai_tools(functions: Iterable[Mapping[str, Any]], category: str) -> list[dict[str, Any]]:
    """BFCL's function docs as the OpenAI tool list BFCL sends an OpenAI-style function-calling model.

    ``add_language_specific_hint_to_function_doc`` (generation loads items with the hint), then
    ``convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)``: ``.`` in a name
    becomes ``_`` (OpenAI names match ``^[a-zA-Z0-9_-]{1,64}$``), ``parameters.type`` becomes ``object``,
    each property's type is mapped by :data:`GORILLA_TO_OPENAPI` (unknown or missing: ``string``), and
    each entry is wrapped as ``{"type": "function", "function": ...}``. Everything else (``default``,
    ``enum``, ``optional``, ``required`` inside properties...) is passed on as BFCL passes it.
    """
    tools = []
    for item in add_language_hint(functions, category):
        if "." in item["name"]:
            item["name"] = re.sub(r"\.", "_", item["name"])
        item["parameters"]["type"] = "object"
        item["parameters"]["properties"] = _cast_to_openai_type(item["parameters"]["properties"], GORILLA_TO_OPENAPI)
        tools.append({"type": "function", "function": item})
    return tools


_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
"""The keys ``load_tools`` takes in a tool's ``function`` object (BFCL's multi-turn docs add ``response``)."""


def grammar_tools(tools: Sequence[Mapping[str, Any]], *, mode: str = "schema") -> tuple[ToolSet, list[str]]:
    """BFCL's OpenAI tools loaded for the grammar: strictly where they are valid, leniently where not.

    Returns the :class:`~toolgrammar.schema.toolset.ToolSet` (``mode``: ``"schema"`` or ``"strings"``) and the notes
    (one string per change: tool, pointer, what was done). Its sources (what a chat template shows) are the
    tools as BFCL sends them, less what step 3 drops. In turn:

    1. ``load_tools(tools)``: strict; no notes.
    2. ``load_tools(tools, lenient=True)``: every :class:`~toolgrammar.errors.ToolSchemaWarning` becomes a
       note. This is where BFCL's ``"format": "float"`` (on every float) and ``"optional"`` flag go, its
       type names below the depth BFCL converts (``tuple``, ``float``, ``dict``; ``any`` reads as any
       value), and its contradictions: an ``enum`` whose values do not fit the node's own ``type``
       (``["True", "False", "dontcare"]`` on a boolean: the type stays, it is what BFCL's checker checks),
       a keyword for another type than the node's (``minItems`` on an integer), ``required`` names no
       property declares. Whatever toolgrammar enforces (``maximum``, ``pattern``, ``minItems`` on an
       array, a known ``format``...) is kept and enforced.
    3. Only when lenient loading still refuses the list: what no JSON Schema reader could take, dropped
       or mapped here with a note ending in ``(bfcl.grammar_tools)``, and the list is loaded leniently
       again:

       - a type name neither JSON Schema nor lenient mode knows (``Hashtable``, ``Queue``...): mapped by
         :data:`GORILLA_TO_OPENAPI`, anything else ``string``, as BFCL maps the levels it converts;
       - keys of the ``function`` object ``load_tools`` does not take (the multi-turn docs' ``response``,
         the return value's description).

    Anything still refused raises :class:`~toolgrammar.errors.ToolSchemaError` (lenient loading's own
    error when step 3 changed nothing); a schema too large to build is refused later, by the compiler.
    Names and descriptions are never changed. ``bench/bfcl_coverage.py`` measures the three steps on every
    schema BFCL ships.
    """

    listed = [dict(t) for t in tools]
    try:
        return load_tools(listed, mode=mode), []  # type: ignore[arg-type]
    except ToolSchemaError:
        pass
    try:
        return _load_lenient(listed, mode, [])
    except ToolSchemaError as error:
        refused = error
    adapted, notes = _adapt(listed)
    if not notes:
        raise refused
    return _load_lenient(adapted, mode, notes)


def _load_lenient(tools: list[dict[str, Any]], mode: str, notes: list[str]) -> tuple[ToolSet, list[str]]:
    """``load_tools(tools, lenient=True)``, its reports appended to ``notes``."""

    toolset, reports = load_tools_lenient(tools, mode=mode)  # type: ignore[arg-type]
    return toolset, notes + reports


def _adapt(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Step 3 of :func:`grammar_tools`: a copy of ``tools`` without the slips lenient loading refuses."""

    notes: list[str] = []
    out = copy.deepcopy(tools)

    def note(tool: str, pointer: str, what: str) -> None:
        notes.append(f"tool {tool!r}, at {pointer or '/'}: {what} (bfcl.grammar_tools)")

    def map_types(schema: dict[str, Any], pointer: str, tool: str) -> None:
        """Type names neither JSON Schema nor lenient loading knows, read as BFCL reads them."""
        kind = schema.get("type")
        names = kind if isinstance(kind, list) else [kind]
        for index, name in enumerate(names):
            if isinstance(name, str) and name not in JSON_TYPES and name not in LENIENT_TYPE_NAMES:
                mapped = GORILLA_TO_OPENAPI.get(name, "string")
                note(tool, f"{pointer}/type", f"type {json.dumps(name)} read as {json.dumps(mapped)}")
                if isinstance(kind, list):
                    kind[index] = mapped
                else:
                    schema["type"] = mapped

    def node(schema: Any, pointer: str, tool: str) -> None:
        if not isinstance(schema, dict):
            return
        map_types(schema, pointer, tool)
        properties = schema.get("properties")
        for name, child in properties.items() if isinstance(properties, dict) else ():
            node(child, f"{pointer}/properties/{name.replace('~', '~0').replace('/', '~1')}", tool)
        node(schema.get("items"), f"{pointer}/items", tool)
        node(schema.get("additionalProperties"), f"{pointer}/additionalProperties", tool)
        for keyword in ("anyOf", "oneOf", "allOf"):
            branches = schema.get(keyword)
            for index, child in enumerate(branches if isinstance(branches, list) else ()):
                node(child, f"{pointer}/{keyword}/{index}", tool)

    for tool in out:
        function = tool.get("function", tool)
        if not isinstance(function, dict):
            continue
        name = str(function.get("name"))
        if "function" in tool:
            for key in [k for k in function if k not in _FUNCTION_KEYS]:
                del function[key]
                note(name, "", f"key {key!r} of the function object dropped (load_tools does not take it)")
        node(function.get("parameters"), "", name)
    return out, notes


# --------------------------------------------------------------------------------------------------
# Decoding a turn


def decode_hermes(text: str) -> list[dict[str, dict[str, Any]]]:
    """A Qwen turn's calls as BFCL reads them: ``[{name: {argument: value}}, ...]``; raises :class:`DecodeError`.

    Mirrors ``QwenFCHandler``: ``_parse_query_response_prompting`` keeps what follows ``</think>``;
    ``_extract_tool_calls`` takes every ``<tool_call>\\n(.*?)\\n</tool_call>`` (DOTALL) and drops the ones
    that are not JSON; ``decode_ast`` fails unless each is an object, and reads ``call["name"]`` and
    ``call["arguments"].items()`` (so a missing key or non-object arguments is a decoder failure too).
    A turn without blocks decodes to ``[]``.
    """
    if "</think>" in text:
        text = text.split("</think>")[-1].lstrip("\n")
    calls = []
    for match in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL):
        try:
            calls.append(json.loads(match))
        except Exception:  # BFCL: `except Exception: pass`
            continue
    if any(type(item) is not dict for item in calls):
        raise DecodeError(f"Model did not return a list of function calls: {text}")
    try:
        return [{call["name"]: dict(call["arguments"].items())} for call in calls]
    except Exception as error:  # KeyError, AttributeError, TypeError (an unhashable name)
        raise DecodeError(f"{type(error).__name__}: {error}") from error


# --------------------------------------------------------------------------------------------------
# Scoring


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one item: ``valid``, and when not, its ``error_type`` and first message."""

    valid: bool
    error_type: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "error_type": self.error_type, "error": self.error}


def _result(valid: bool, error_type: str | None = None, error: str | None = None) -> dict[str, Any]:
    return {"valid": valid, "error": [error] if error else [], "error_type": error_type}


def is_function_calling_format_output(decoded: Any) -> bool:
    """``bfcl_eval.utils.is_function_calling_format_output``: a list of ``{name: {params}}`` one-key dicts."""
    if type(decoded) is not list:
        return False
    for item in decoded:
        if type(item) is not dict or len(item) != 1 or type(next(iter(item.values()))) is not dict:
            return False
    return True


def is_empty_output(decoded: Any) -> bool:
    """``bfcl_eval.utils.is_empty_output``: ``[]``, ``[{}]`` and anything not in call format hold no call."""
    if not is_function_calling_format_output(decoded):
        return True
    return len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


def score_decoded(item: BfclItem, decoded: Any, *, underscore_to_dot: bool = True) -> Verdict:
    """BFCL's verdict on a decoded turn (:func:`decode_hermes`'s list), or on a :class:`DecodeError`.

    Relevance categories: ``eval_runner._evaluate_single_relevance_entry`` (a call = decoded and not
    :func:`is_empty_output`; ``*irrelevance`` passes without one, ``live_relevance`` with one). AST
    categories: ``eval_runner._evaluate_single_ast_entry`` (a decoder failure, then the output format,
    then :func:`check_ast`).
    """
    if item.category in RELEVANCE_CATEGORIES:
        call = not isinstance(decoded, BaseException) and not is_empty_output(decoded)
        if "irrelevance" in item.category:
            if call:
                return Verdict(False, "irrelevance_error:decoder_success", "Valid syntax. Successfully decode AST.")
            return Verdict(True)
        if not call:
            return Verdict(False, "relevance_error:decoder_failed", "Invalid syntax. Failed to decode AST.")
        return Verdict(True)
    if isinstance(decoded, BaseException):
        return Verdict(False, "ast_decoder:decoder_failed", f"Invalid syntax. Failed to decode AST. {decoded}")
    if not is_function_calling_format_output(decoded):
        return Verdict(False, "ast_decoder:decoder_wrong_output_format", "Did not output in the specified format.")
    assert item.possible_answer is not None
    return check_ast(
        list(item.functions), decoded, list(item.possible_answer), item.category, underscore_to_dot=underscore_to_dot
    )


def check_ast(
    functions: list[dict[str, Any]],
    model_output: list[dict[str, Any]],
    possible_answer: list[dict[str, Any]],
    category: str,
    *,
    underscore_to_dot: bool = True,
) -> Verdict:
    """``ast_checker.ast_checker`` for ``Language.PYTHON``: BFCL's verdict on decoded calls.

    ``functions`` are the docs as BFCL ships them (not the converted tools). ``underscore_to_dot``:
    the model config's flag (``True`` for OpenAI-style models, whose tool names had ``.`` replaced).
    """
    if "parallel" in category:
        result = _parallel_no_order(functions, model_output, possible_answer, underscore_to_dot)
    elif "multiple" in category:
        result = _multiple(functions, model_output, possible_answer, underscore_to_dot)
    elif len(model_output) != 1:
        result = _result(False, "simple_function_checker:wrong_count", "Wrong number of functions.")
    else:
        result = _simple(functions[0], model_output[0], possible_answer[0], underscore_to_dot)
    if result["valid"]:
        return Verdict(True)
    first = result["error"][0] if result["error"] else None
    return Verdict(False, result.get("error_type"), first if isinstance(first, str) else json.dumps(first))


def _find_description(functions: Any, name: str) -> Any:
    # ast_checker.find_description
    if type(functions) is list:
        for description in functions:
            if description["name"] == name:
                return description
        return None
    return functions


def _possible_answer_type(possible_answer: list[Any]) -> type | None:
    # ast_checker.get_possible_answer_type: the type of the first answer that is not "" (optional)
    for answer in possible_answer:
        if answer != "":
            return type(answer)
    return None


def _convert_func_name(name: str, underscore_to_dot: bool) -> str:
    # ast_checker.convert_func_name
    if "." in name and underscore_to_dot:
        return re.sub(r"\.", "_", name)
    return name


def _type_checker(
    param: str,
    value: Any,
    possible_answer: list[Any],
    expected_description: str,
    expected: type,
    nested: type | None,
) -> dict[str, Any]:
    # ast_checker.type_checker, with its flow kept: exact type equality (a bool is no int), a value of the
    # possible answers' type accepted as a "variable", and a nested check of one level that passes as soon as
    # one possible answer is not a list (an optional "").
    result: dict[str, Any] = {"valid": True, "error": [], "is_variable": False, "error_type": "type_error:simple"}
    is_variable = False
    answer_type = _possible_answer_type(possible_answer)
    if answer_type is not None and answer_type != expected:
        is_variable = True
    if type(value) is expected:  # BFCL compares types with ==: the same for these classes
        if nested is None:
            result["is_variable"] = is_variable
            return result
        for answer_item in possible_answer:
            flag = True
            if type(answer_item) is list:
                for value_item in value:
                    inner = _type_checker(param, value_item, answer_item, str(nested), nested, None)
                    if not inner["valid"]:
                        flag = False
                        break
            if flag:
                return {"valid": True, "error": [], "is_variable": is_variable}
        result["valid"] = False
        result["error"] = [
            f"Nested type checking failed for parameter {param!r}. Expected outer type {expected_description} with "
            f"inner type {nested}. Parameter value: {value!r}."
        ]
        result["error_type"] = "type_error:nested"
    answer_type = _possible_answer_type(possible_answer)
    if answer_type is not None and type(value) is answer_type:
        result["is_variable"] = True
        return result
    result["valid"] = False
    result["error"].append(
        f"Incorrect type for parameter {param!r}. Expected type {expected_description}, got {type(value).__name__}. "
        f"Parameter value: {value!r}."
    )
    result["error_type"] = "type_error:simple"
    return result


def standardize_string(text: str) -> str:
    """``ast_checker.standardize_string``: drop spaces and ``,./-_*^``, lowercase, ``'`` -> ``"``."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _string_checker(param: str, value: str, possible_answer: list[Any]) -> dict[str, Any]:
    # ast_checker.string_checker
    accepted = [standardize_string(a) for a in possible_answer if type(a) is str]
    if standardize_string(value) not in accepted:
        return _result(
            False,
            "value_error:string",
            f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible_answer}. Case insensitive.",
        )
    return _result(True)


def _standardized(value: Any) -> Any:
    return standardize_string(value) if type(value) is str else value


def _list_checker(param: str, value: list[Any], possible_answer: list[Any]) -> dict[str, Any]:
    # ast_checker.list_checker: top-level string items standardized, then == against each possible list
    # (BFCL indexes each answer with range(len(answer)): a "" answer becomes [], anything else is iterated)
    output = [_standardized(v) for v in value]
    accepted = [[_standardized(answer[j]) for j in range(len(answer))] for answer in possible_answer]
    if output not in accepted:
        return _result(
            False,
            "value_error:list/tuple",
            f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible_answer}.",
        )
    return _result(True)


def _dict_checker(param: str, value: dict[str, Any], possible_answers: list[Any]) -> dict[str, Any]:
    # ast_checker.dict_checker: each non-"" possible dict in turn; a key not in it, or a value (strings
    # standardized) not among its accepted values, fails that dict; so does a missing key without "".
    result = _result(False, "dict_checker:unclear")
    for answer in possible_answers:
        if answer == "":
            continue
        result = _result(False, "dict_checker:unclear")
        flag = True
        for key, item in value.items():
            if key not in answer:
                result = _result(False, "value_error:dict_key", f"Unexpected dict key parameter: '{key}'.")
                flag = False
                break
            accepted = [_standardized(answer[key][j]) for j in range(len(answer[key]))]
            if _standardized(item) not in accepted:
                result = _result(
                    False,
                    "value_error:dict_value",
                    f"Invalid value for parameter {key!r}: {item!r}. Expected one of {accepted}.",
                )
                flag = False
                break
        for key, accepted_values in answer.items():
            if key not in value and "" not in accepted_values:
                result = _result(False, "value_error:dict_key", f"Missing dict key parameter: '{key}'.")
                flag = False
                break
        if flag:
            return _result(True)
    return result


def _list_dict_checker(param: str, value: list[Any], possible_answers: list[Any]) -> dict[str, Any]:
    # ast_checker.list_dict_checker: the list's dicts in order against one possible list of dicts
    result = _result(False, "list_dict_checker:unclear")
    for answer in possible_answers:
        flag = True
        if len(value) != len(answer):
            result = _result(False, "value_error:list_dict_count", "Wrong number of dictionaries in the list.")
            continue
        for index in range(len(value)):
            result = _dict_checker(param, value[index], [answer[index]])
            if not result["valid"]:
                flag = False
                break
        if flag:
            return _result(True)
    return result


def _simple(
    description: dict[str, Any], output: dict[str, Any], possible: dict[str, Any], underscore_to_dot: bool
) -> dict[str, Any]:
    # ast_checker.simple_function_checker, Language.PYTHON branch
    answer = next(iter(possible.values()))
    name = _convert_func_name(description["name"], underscore_to_dot)
    details = description["parameters"]["properties"]
    required = description["parameters"]["required"]
    if name not in output:
        return _result(
            False, "simple_function_checker:wrong_func_name", f"Function name {name!r} not found in model output."
        )
    params = output[name]
    for param in required:
        if param not in params:
            return _result(False, "simple_function_checker:missing_required", f"Missing required parameter: {param!r}.")
    for param, raw_value in params.items():
        value = raw_value
        if param not in details or param not in answer:
            return _result(False, "simple_function_checker:unexpected_param", f"Unexpected parameter: {param!r}.")
        description_type = details[param]["type"]
        expected = PYTHON_TYPE_MAPPING[description_type]
        nested = None
        if description_type in PYTHON_NESTED_TYPE_CHECK_LIST:
            nested = PYTHON_TYPE_MAPPING[details[param]["items"]["type"]]
        if description_type == "tuple" and type(value) is tuple:
            value = list(value)
        if description_type == "float" and type(value) is int:  # Python's int -> float promotion
            value = float(value)
        checked = _type_checker(param, value, answer[param], description_type, expected, nested)
        if not checked["valid"]:
            return checked
        if not checked["is_variable"]:
            if expected is dict:
                result = _dict_checker(param, value, answer[param])
            elif expected is list and nested is dict:
                result = _list_dict_checker(param, value, answer[param])
            elif expected is str:
                result = _string_checker(param, value, answer[param])
            elif expected is list:
                result = _list_checker(param, value, answer[param])
            else:
                result = None
            if result is not None:
                if not result["valid"]:
                    return result
                continue
        if value not in answer[param]:
            return _result(
                False,
                "value_error:others",
                f"Invalid value for parameter {param!r}: {value!r}. Expected one of {answer[param]}.",
            )
    for param in answer:
        if param not in params and "" not in answer[param]:
            return _result(
                False,
                "simple_function_checker:missing_optional",
                f"Optional parameter {param!r} not provided and not marked as optional.",
            )
    return _result(True)


def _parallel_no_order(
    functions: list[dict[str, Any]],
    output: list[dict[str, Any]],
    possible_answers: list[dict[str, Any]],
    underscore_to_dot: bool,
) -> dict[str, Any]:
    # ast_checker.parallel_function_checker_no_order: each expected call, in order, takes the first
    # not yet matched output call that passes simple_function_checker
    if len(output) != len(possible_answers):
        return _result(False, "parallel_function_checker_no_order:wrong_count", "Wrong number of functions.")
    matched: list[int] = []
    result: dict[str, Any] = _result(True)
    for index, possible in enumerate(possible_answers):
        description = _find_description(functions, next(iter(possible)))
        for candidate in range(len(output)):
            if candidate in matched:
                continue
            result = _simple(description, output[candidate], possible, underscore_to_dot)
            if result["valid"]:
                matched.append(candidate)
                break
        if not result["valid"]:
            left = [i for i in range(len(output)) if i not in matched]
            return _result(
                False,
                "parallel_function_checker_no_order:cannot_find_match",
                f"Could not find a matching function among index {left} of model output for index {index} of "
                "possible answers.",
            )
    return _result(True)


def _multiple(
    functions: list[dict[str, Any]],
    output: list[dict[str, Any]],
    possible_answers: list[dict[str, Any]],
    underscore_to_dot: bool,
) -> dict[str, Any]:
    # ast_checker.multiple_function_checker: one call, checked against the expected function's doc
    if len(output) != len(possible_answers):
        return _result(False, "multiple_function_checker:wrong_count", "Wrong number of functions.")
    description = _find_description(functions, next(iter(possible_answers[0])))
    return _simple(description, output[0], possible_answers[0], underscore_to_dot)
