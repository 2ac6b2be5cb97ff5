"""The block reader of the ``llama4-pythonic`` format: a Python list of calls, ``[f(a=1), g()]``.

Blocks
    The calls of a turn are one block: a list that starts at ``[`` directly followed by a name and ``(``
    (``[get_weather(``), anywhere in the message, or at ``<|python_start|>`` (the list follows, then
    ``<|python_end|>``). A ``[`` followed by anything else (``[1]``, ``[note]``) is content. The list
    ends at its matching ``]`` (quote and escape aware: brackets inside strings do not count). A list
    that never closes by the turn's end is ``truncated``.

Checks (strict)
    The list must be a Python expression (:func:`ast.parse`) that is a non-empty list of calls of a
    plain name with keyword arguments only, each value a literal (:func:`ast.literal_eval`) that is
    JSON: strings, integers, finite floats, ``True`` / ``False`` / ``None``, lists and dicts with string
    keys; else ``malformed-block`` (the whole list: no call of a broken list is returned). After
    ``<|python_start|>``, a missing list or a missing ``<|python_end|>`` is ``malformed-block`` too.
    Then each call on its own: :func:`toolgrammar.formats.checks.check_call` (one block per call).

Whitespace
    Content is kept verbatim (``strip_whitespace`` is false), as for Llama 3.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.reader import NOT_A_BLOCK, NotABlock, Opener
from toolgrammar.formats.reader import check_mode as check_reader_mode
from toolgrammar.formats.spec import format_spec

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)
BLOCK: dict[str, Any] = format_spec("toolgrammar.formats.llama4_pythonic")["block"]
_HEAD = re.compile(r"\[[A-Za-z_][A-Za-z0-9_]*\(")
_HEAD_PREFIX = re.compile(r"\[(?:[A-Za-z_][A-Za-z0-9_]*)?")
_WS = " \t\n\r"


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("llama4-pythonic", mode, MODES)


@dataclass(frozen=True)
class Span:
    """The call list: ``text[start:end]`` is the block, ``text[body_start:body_end]`` the list."""

    start: int
    body_start: int
    body_end: int
    end: int
    closed: bool
    tagged: bool
    fault: str | None = None
    """A markup fault found while cutting (no list after ``<|python_start|>``, no ``<|python_end|>``)."""


class PythonListScanner:
    """Finds where the Python list that starts at an offset ends (brackets outside strings)."""

    __slots__ = ("_depth", "_escape", "_quote", "pos")

    def __init__(self, start: int) -> None:
        self.pos = start
        self._depth = 0
        self._quote = ""
        self._escape = False

    def feed(self, text: str) -> int:
        """Scan on from where the last call stopped; the offset just past the list, or -1."""
        i, n = self.pos, len(text)
        while i < n:
            ch = text[i]
            i += 1
            if self._quote:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == self._quote:
                    self._quote = ""
            elif ch in "'\"":
                self._quote = ch
            elif ch in "([{":
                self._depth += 1
            elif ch in ")]}":
                self._depth -= 1
                if self._depth == 0:
                    self.pos = i
                    return i
        self.pos = i
        return -1


class ListEnd:
    """Reads one call list from its opener on, as the text grows."""

    __slots__ = ("_done", "_list_start", "_scanner", "close", "confirmed", "open", "start", "tagged")

    def __init__(self, start: int, tagged: bool, markers: Markers) -> None:
        self.start = start
        self.tagged = tagged
        self.close = markers.block_close
        self.confirmed = tagged
        self._list_start = -1 if tagged else start
        self._scanner: PythonListScanner | None = None if tagged else PythonListScanner(start)
        self.open = markers.block_open
        self._done = -1

    def advance(self, text: str, final: bool) -> Span | NotABlock | None:
        if not self.confirmed:
            if _HEAD.match(text, self.start):
                self.confirmed = True
            else:
                m = _HEAD_PREFIX.match(text, self.start)
                if not final and m is not None and m.end() == len(text):
                    return None
                return NOT_A_BLOCK
        if self._list_start == -1:
            i = self.start + len(self.open)
            while i < len(text) and text[i] in _WS:
                i += 1
            if i == len(text) and not final:
                return None
            if i == len(text) or text[i] != "[":
                return self._broken(text, final, f"no call list after {self.open}")
            self._list_start = i
            self._scanner = PythonListScanner(i)
        assert self._scanner is not None
        if self._done == -1:
            self._done = self._scanner.feed(text)
        done = self._done
        if done == -1:
            return Span(self.start, self._list_start, len(text), len(text), False, self.tagged) if final else None
        if not self.tagged:
            return Span(self.start, self._list_start, done, done, True, False)
        rest = text[done:]
        if rest.startswith(self.close):
            return Span(self.start, self._list_start, done, done + len(self.close), True, True)
        if not final and self.close.startswith(rest):
            return None
        return Span(self.start, self._list_start, done, done, True, True, f"no {self.close} after the call list")

    def _broken(self, text: str, final: bool, fault: str) -> Span | None:
        close = text.find(self.close, self.start + len(self.open))
        if close != -1:
            body = self.start + len(self.open)
            return Span(self.start, body, close, close + len(self.close), True, True, fault)
        if not final:
            return None
        return Span(self.start, self.start + len(self.open), len(text), len(text), True, True, fault)


class PythonicBlocks:
    """The llama4-pythonic :class:`~toolgrammar.formats.reader.BlockReader` (strict mode)."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False
    strip_whitespace: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open), Opener(BLOCK["list_open"]))

    def open_block(self, start: int, opener: Opener) -> ListEnd:
        return ListEnd(start, opener.text == self.markers.block_open, self.markers)

    def check(self, text: str, cut: Span, tools: ToolSet) -> Block | tuple[Block, ...]:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]

        def error(kind: Any, message: str) -> Block:
            return Block(
                raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=CallError(kind, message)
            )

        if not cut.closed:
            return error("truncated", "error: tool call is truncated: the turn ended inside the call list")
        if cut.fault is not None:
            return error("malformed-block", f"error: malformed call list: {cut.fault}")
        calls = read_calls(body)
        if isinstance(calls, str):
            return error("malformed-block", f"error: malformed call list: {calls}")
        blocks = []
        for k, (name, arguments, lo, hi) in enumerate(calls):
            start = cut.start if k == 0 else cut.body_start + lo
            end = cut.end if k == len(calls) - 1 else cut.body_start + calls[k + 1][2]
            verdict = check_call({"name": name, "arguments": arguments}, tools)
            piece = text[start:end]
            if isinstance(verdict, CallError):
                blocks.append(Block(raw=piece, body=body[lo:hi], start=start, end=end, closed=True, error=verdict))
            else:
                blocks.append(Block(raw=piece, body=body[lo:hi], start=start, end=end, closed=True, call=verdict))
        return tuple(blocks)


def read_calls(body: str) -> list[tuple[str, dict[str, Any], int, int]] | str:
    """``[(name, arguments, start, end), ...]`` of a call list (offsets into ``body``), or what is wrong."""
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError as exc:
        return f"not a Python expression ({exc.msg})"
    except ValueError as exc:  # a NUL character
        return f"not a Python expression ({exc})"
    node = tree.body
    if not isinstance(node, ast.List) or not node.elts:
        return "not a non-empty list of calls"
    offsets = _char_offsets(body)
    out = []
    for call in node.elts:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            return "an item that is not a call of a plain name"
        if call.args:
            return f"{call.func.id}: positional arguments (only keyword arguments name a parameter)"
        arguments: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is None:
                return f"{call.func.id}: ** arguments"
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return f"{call.func.id}({kw.arg}=...): the value is not a literal"
            problem = json_problem(value)
            if problem:
                return f"{call.func.id}({kw.arg}=...): {problem}"
            arguments[kw.arg] = value
        lo = offsets(call.lineno, call.col_offset)
        hi = offsets(call.end_lineno or call.lineno, call.end_col_offset or 0)
        out.append((call.func.id, arguments, lo, hi))
    return out


def _char_offsets(text: str) -> Any:
    """(line, UTF-8 column) as :mod:`ast` reports positions -> offset in ``text``."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        line = lines[lineno - 1] if lineno - 1 < len(lines) else ""
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    return offset


def json_problem(value: Any) -> str | None:
    """Why a literal is not a JSON value, or ``None``."""
    if value is None or isinstance(value, (bool, str, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "a non-finite number"
    if isinstance(value, list):
        return next((p for p in map(json_problem, value) if p), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "a dict key that is not a string"
        return next((p for p in map(json_problem, value.values()) if p), None)
    return f"a {type(value).__name__} (not a JSON value)"


def render_value(value: Any) -> str:
    """A JSON value as a Python literal (``repr``: ``'text'``, ``True``, ``None``, ``[1, 2]``, ``{'a': 1}``)."""
    return repr(value)


def render_call(name: str, arguments: dict[str, Any]) -> str:
    """One call, ``name(key=value, ...)`` (the list brackets are the block's)."""
    sep = BLOCK["argument_separator"]
    return f"{name}(" + sep.join(f"{k}={render_value(v)}" for k, v in arguments.items()) + ")"


__all__ = [
    "BLOCK",
    "MODES",
    "ListEnd",
    "PythonListScanner",
    "PythonicBlocks",
    "Span",
    "json_problem",
    "read_calls",
    "render_call",
]
