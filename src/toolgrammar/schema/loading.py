"""Tool lists -> validated, normalized tools: the one place tool schemas are read.

:func:`load_tools` takes the OpenAI tool list (``{"type": "function", "function": {...}}``), bare
``{"name", "description", "parameters"}`` entries, a JSON file holding either, or a :class:`ToolSet`,
checks everything once and returns an immutable :class:`ToolSet`. Every later stage (grammar, parser,
processors) reads the *normalized* schemas and never the originals, so a constraint is either enforced
or rejected here with a :class:`~toolgrammar.errors.ToolSchemaError` that names the tool, the JSON
pointer of the offending node (relative to the tool's ``parameters``) and the keyword. Nothing is
dropped silently except the annotation keywords (:data:`~toolgrammar.schema.keywords.ANNOTATION_KEYWORDS`),
which constrain nothing.

Each entry is checked by :mod:`~toolgrammar.schema.entries`, its parameters normalized by
:mod:`~toolgrammar.schema.normalize` (the contract of the normalized schema is there). Loading remembers
recent tool lists and tools in memory, and keeps the lists the careful normalizer had to read on disk
(:mod:`toolgrammar.cache`).

This module imports the standard library, ``jsonschema`` and numpy (for its cache entries): no torch, no
transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolgrammar import cache, caches
from toolgrammar.errors import ToolSchemaError, ToolSchemaWarning
from toolgrammar.schema.entries import load_entry
from toolgrammar.schema.sources import read_tool_file, unwrap_tools_mapping
from toolgrammar.schema.toolset import FINGERPRINT_VERSION, ArgumentMode, Tool, ToolSet, check_mode


def load_tools(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | Mapping[str, Any] | ToolSet,
    *,
    mode: ArgumentMode = "schema",
    lenient: bool = False,
) -> ToolSet:
    """Validate and normalize a tool list.

    Parameters
    ----------
    source : str | os.PathLike | Sequence[Mapping] | Mapping | ToolSet
        A path to a JSON file (a ``str`` is always a path) holding a list of entries or
        ``{"tools": [...]}``; a list of entries; a mapping ``{"tools": [...]}`` or one entry; or a
        :class:`ToolSet` (returned as is when its mode is ``mode``, re-normalized from its sources
        otherwise). An entry is ``{"type": "function", "function": {"name", "description"?,
        "parameters"?, "strict"?}}`` or bare ``{"name", "description"?, "parameters"?}`` (``"type":
        "function"`` and ``"strict"`` allowed too). Missing, ``null`` or empty (``{}``) ``parameters`` means
        no arguments: ``{}`` is how vLLM's, SGLang's and CanIToolCall's glm/llama tool lists spell it.
    mode : {"schema", "strings"}, default: "schema"
        ``"schema"`` enforces each tool's JSON Schema; ``"strings"`` makes every declared argument a
        string (the seed harness's rule) and checks only the structure of ``parameters``.
    lenient : bool, default: False
        Read dirty real-world schemas (BFCL's Java/JavaScript type names, OpenAPI's ``nullable``,
        vendor keywords) instead of refusing them: each rewrite and each dropped keyword is reported
        with :class:`~toolgrammar.errors.ToolSchemaWarning` (``warnings.warn``) naming the tool, the
        pointer and what was done. What it maps: the type names of
        :data:`~toolgrammar.schema.keywords.LENIENT_TYPE_NAMES`;
        ``nullable: true`` (``null`` added to ``type``); draft 4's boolean ``exclusiveMinimum`` /
        ``exclusiveMaximum``; a property's draft 3 boolean ``required`` (into its object's
        ``required``); a ``oneOf`` whose branches may overlap (read as ``anyOf``). What it drops:
        BFCL's ``optional`` flag (``required`` decides), an unknown ``format``, Draft 2020-12's
        content annotations (``contentEncoding``...), and every keyword JSON Schema does not define
        (``example``, ``x-...``, ``discriminator``...). Constraints JSON Schema defines and the
        grammar cannot enforce (``multipleOf``, ``not``, ``uniqueItems``...) are still refused: the
        normalized schema, which the strict parser judges with, never loses one silently. Unused
        ``$defs`` entries are not checked (dirty input often holds dirty definitions nothing uses).

    Returns
    -------
    ToolSet

    Raises
    ------
    ToolSchemaError
        On anything that cannot be compiled; the message says what, where, and how to fix it.
    """
    check_mode(mode)
    if not isinstance(lenient, bool):
        raise ToolSchemaError(f"lenient must be True or False, got {lenient!r}")
    if isinstance(source, ToolSet):
        if source.mode == mode:
            return source
        entries: Sequence[Any] = [tool.source for tool in source.tools]
    elif isinstance(source, str | os.PathLike):
        entries = read_tool_file(source)
    elif isinstance(source, bytes | bytearray):
        raise ToolSchemaError(
            "tool source is bytes; pass a path (str or Path), a list of entries, a mapping or a ToolSet "
            "(for JSON text, pass json.loads(text))"
        )
    elif isinstance(source, Mapping):
        entries = unwrap_tools_mapping(source, where="tool mapping")
    elif isinstance(source, Sequence):
        entries = source
    else:
        raise ToolSchemaError(
            f"tool source is a {type(source).__name__}; pass a path, a list of entries, a mapping or a ToolSet"
        )

    # Processors are built again and again for the same tools: remember recent results (and, for lists the
    # careful normalizer had to read, keep them on disk for the next process), and the tools themselves, which
    # come back in other lists.
    try:
        # Key order is kept (property order shapes the grammar), so equal text means an equal tool (list).
        texts: list[str] | None = [_ENTRY_TEXT.encode(entry) for entry in entries]
    except (TypeError, ValueError, RecursionError):
        texts = None  # not plain JSON data: the checks below will say what is wrong
    if texts is None:
        return _load_uncached(entries, mode, lenient)
    memo_key = mode + ("\0lenient" if lenient else "") + "\0[" + ", ".join(texts) + "]"  # json.dumps(entries)
    with _recent_lock:
        remembered = _recent.get(memo_key)
        if remembered is not None:
            _recent.move_to_end(memo_key)
    if remembered is not None and _same_entries(remembered[0], entries):
        _warn(remembered[1])  # a lenient load warns every time, cached or not
        return remembered[0]
    if remembered is not None:  # equal text, other data (an int key, a tuple): validated without the caches
        return _load_uncached(entries, mode, lenient)
    notes = []
    if lenient:  # not on disk: its warnings are part of the result
        toolset = _load_entries(entries, mode, lenient, notes)
    else:
        disk_key = hashlib.sha256((FINGERPRINT_VERSION + "\0" + memo_key).encode()).hexdigest()
        toolset = _from_disk(disk_key, mode)
        if toolset is not None and not _same_entries(toolset, entries):
            return _load_uncached(entries, mode, lenient)
        if toolset is None:
            careful: list[str] = []
            toolset = _load_entries(entries, mode, lenient, notes, careful, texts)
            # A list of plain schemas is read again faster than its entry is written and read back
            # (200 nested tools: 15 ms to validate, 7 ms to write, 5 ms to read).
            if careful:
                _to_disk(disk_key, toolset)
    with _recent_lock:
        _recent[memo_key] = (toolset, tuple(notes))
        if len(_recent) > MAX_RECENT_LISTS:
            _recent.popitem(last=False)
    _warn(notes)
    return toolset


def load_tools_lenient(source: Any, *, mode: ArgumentMode = "schema") -> tuple[ToolSet, list[str]]:
    """``load_tools(source, mode=mode, lenient=True)`` with its reports returned instead of warned.

    Returns the tool set and one note per rewrite or dropped keyword (the :class:`ToolSchemaWarning`
    messages, in order); any other warning is passed on. For callers that log or show the notes
    themselves (the vLLM server, the BFCL suite). Uses :func:`warnings.catch_warnings`, which is
    process-wide: a warning another thread raises meanwhile may land among these and be passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toolset = load_tools(source, mode=mode, lenient=True)
    notes = []
    for warning in caught:
        if issubclass(warning.category, ToolSchemaWarning):
            notes.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return toolset, notes


def _load_uncached(entries: Sequence[Any], mode: ArgumentMode, lenient: bool) -> ToolSet:
    notes: list[str] = []
    toolset = _load_entries(entries, mode, lenient, notes)
    _warn(notes, stacklevel=4)
    return toolset


def _same_entries(toolset: ToolSet, entries: Sequence[Any]) -> bool:
    """Whether ``entries`` are the data ``toolset`` was loaded from, not only the same JSON text.

    The caches are keyed by JSON text, and ``json`` writes an ``int`` key as a string and a tuple as a list,
    which loading refuses: such an entry must get its error, whatever was loaded before from the same text.
    Equality tells them apart (``{1: x} != {"1": x}``, ``(a,) != [a]``) where the text cannot."""
    return all(tool.source == entry for tool, entry in zip(toolset.tools, entries, strict=True))


def _warn(notes: Sequence[str], stacklevel: int = 3) -> None:
    for note in notes:
        # stacklevel 3: the warning points at the caller of load_tools.
        warnings.warn(note, ToolSchemaWarning, stacklevel=stacklevel)


def _to_disk(key: str, toolset: ToolSet) -> None:
    data = [[t.name, t.description, t.parameters, t.source] for t in toolset.tools]
    text = json.dumps(data, ensure_ascii=False).encode("utf-8")
    cache.save("tools", key, {"json": np.frombuffer(text, dtype=np.uint8)})


def _from_disk(key: str, mode: ArgumentMode) -> ToolSet | None:
    """A tool list validated by an earlier process (keyed by the exact input text), read back as is."""
    entry = cache.load("tools", key, check=_check_cached_tools)
    if entry is None:
        return None
    try:
        data = json.loads(entry["json"].tobytes().decode("utf-8"))
        return ToolSet(tuple(Tool(n, d, p, src) for n, d, p, src in data), mode)
    except (ValueError, TypeError, ToolSchemaError):
        return None


def _check_cached_tools(entry: dict[str, np.ndarray]) -> str | None:
    if set(entry) != {"json"} or entry["json"].dtype != np.uint8 or entry["json"].ndim != 1:
        return "expected one uint8 array 'json'"
    return None


MAX_RECENT_LISTS = 64
"""Loaded tool lists kept process-wide by their entries' JSON text (least recently used out)."""

_recent: OrderedDict[str, tuple[ToolSet, tuple[str, ...]]] = OrderedDict()
"""Each remembered list with its lenient warnings (given again each time it is served), kept together so
that no reader finds one without the other."""
_recent_lock = threading.Lock()


def _load_entries(
    entries: Sequence[Any],
    mode: ArgumentMode,
    lenient: bool,
    notes: list[str],
    careful: list[str] | None = None,
    texts: Sequence[str] | None = None,
) -> ToolSet:
    """The tool set; ``careful`` (when given) receives the names of the tools the fast path did not read.

    ``texts`` (each entry as JSON text, strict loads only) names the entries: a tool loaded before from the
    same text is reused (:data:`MAX_RECENT_TOOLS`), with whether the careful path read it."""
    tools: list[Tool] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if texts is not None and careful is not None:
            tool = _recent_tool(entry, texts[index], index, mode, careful)
        else:
            tool = load_entry(entry, index, mode, lenient, notes, careful)
        if tool.name in first_index:
            raise ToolSchemaError(
                f"duplicate tool name: entries #{first_index[tool.name]} and #{index} are both named "
                f"{tool.name!r}; tool names must be unique (rename or drop one)",
                tool=tool.name,
            )
        first_index[tool.name] = index
        tools.append(tool)
    return ToolSet(tuple(tools), mode)


_ENTRY_TEXT = json.JSONEncoder(allow_nan=False)
"""``json.dumps(entry, allow_nan=False)``, without a new encoder per entry."""

MAX_RECENT_TOOLS = 2048
"""Validated tools kept process-wide by their entry's JSON text (strict loads; least recently used out)."""

_recent_tools: OrderedDict[tuple[str, str], tuple[Tool, bool]] = OrderedDict()
_recent_tools_lock = threading.Lock()


def _recent_tool(entry: Any, text: str, index: int, mode: ArgumentMode, careful: list[str]) -> Tool:
    """:func:`load_entry` (strict) of an entry whose JSON text is ``text``, reused when loaded before."""
    key = (mode, text)
    with _recent_tools_lock:
        got = _recent_tools.get(key)
        if got is not None:
            _recent_tools.move_to_end(key)
    if got is not None and got[0].source != entry:  # equal text, other data: see _same_entries
        return load_entry(entry, index, mode, False, [], careful)
    if got is None:
        mark: list[str] = []
        got = (load_entry(entry, index, mode, False, [], mark, text), bool(mark))
        with _recent_tools_lock:
            _recent_tools[key] = got
            if len(_recent_tools) > MAX_RECENT_TOOLS:
                _recent_tools.popitem(last=False)
    tool, was_careful = got
    if was_careful:
        careful.append(tool.name)
    return tool


def clear_recent() -> None:
    """Forget the tool lists and tools :func:`load_tools` remembers (in memory; the disk cache stays)."""
    with _recent_lock:
        _recent.clear()
    with _recent_tools_lock:
        _recent_tools.clear()


caches.register("schema.recent_tools", clear_recent)


__all__ = ["MAX_RECENT_LISTS", "MAX_RECENT_TOOLS", "clear_recent", "load_tools", "load_tools_lenient"]
