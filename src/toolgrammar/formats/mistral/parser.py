"""The block reader of the Mistral formats: ``[TOOL_CALLS]NAME[ARGS]{json}`` (v11+) and ``[TOOL_CALLS] [...]`` (v3).

Blocks, ``args`` shape (``mistral``, ``mistral-think-text``)
    A call starts at ``[TOOL_CALLS]``. The name runs to ``[ARGS]`` (optionally ``NAME[CALL_ID]ID``, the id
    letters and digits, not part of the call); the arguments are the JSON value after ``[ARGS]`` and the
    call ends where it ends (string and escape aware: ``[TOOL_CALLS]`` inside a string stays there). A
    ``[TOOL_CALLS]`` before any ``[ARGS]`` ends the call (``malformed-block``); a turn that ends before
    ``[ARGS]`` or inside the JSON leaves it ``truncated`` (``...[TOOL_CALLS]`` at the very end: no call,
    and the marker is not content). A body after ``[ARGS]`` that is not JSON runs to the next
    ``[TOOL_CALLS]`` or the end of the turn (``invalid-json``).

Blocks, ``array`` shape (``mistral-v3``)
    The calls of a turn are one JSON array after ``[TOOL_CALLS]``; the block ends where the array ends, and
    each element ``{"name", "arguments"}`` (any key order) is one call, checked on its own. A body that is
    not a JSON array runs to the end of the turn (``invalid-json`` / ``wrong-keys``).

Checks (strict)
    ``json.loads`` (``raw-newline-in-string`` / ``invalid-json``), then
    :func:`toolgrammar.formats.checks.check_call`. A name that is empty or holds markup is ``malformed-block``.

Reasoning and whitespace
    The shared turn reader: ``[THINK]``...``[/THINK]`` (or the format's own markers); a ``[TOOL_CALLS]`` inside
    the reasoning is reasoning. Leading and trailing whitespace of content is stripped (sentencepiece
    writes a word boundary before the first word of a v3 turn).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import JsonValueScanner, json_error_kind, loads
from toolgrammar.formats.reader import Opener
from toolgrammar.formats.reader import check_mode as check_reader_mode

if TYPE_CHECKING:
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)
_CALL_ID = re.compile(r"[A-Za-z0-9]+")
_BAD_NAME = re.compile(r"[\[\]\s{}]")


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("mistral", mode, MODES)


@dataclass(frozen=True)
class Span:
    """One block: ``text[start:end]``; ``text[head_start:head_end]`` the name part (``args`` shape),
    ``text[body_start:body_end]`` the JSON."""

    start: int
    head_start: int
    head_end: int
    body_start: int
    body_end: int
    end: int
    closed: bool
    fault: str | None = None


class CallEnd:
    """Finds where one block ends as the text grows."""

    __slots__ = (
        "_done",
        "_head_end",
        "_scanned",
        "_scanner",
        "_search",
        "args",
        "body_start",
        "head_start",
        "opener",
        "shape",
        "start",
    )

    def __init__(self, start: int, markers: Markers, block: dict[str, Any]) -> None:
        self.start = start
        self.opener = markers.block_open
        self.shape = block["shape"]
        self.args = block.get("args", "")
        self.head_start = start + len(self.opener)
        self.body_start = -1 if self.shape == "args" else self.head_start
        self._search = self.head_start
        self._scanner = JsonValueScanner()
        self._scanned = self.body_start
        self._done = -1
        self._head_end = self.head_start

    def advance(self, text: str, final: bool) -> Span | None:
        hs = self.head_start
        if self.body_start == -1:  # the name part, up to [ARGS]
            a = text.find(self.args, self._search)
            t = text.find(self.opener, self._search)
            if t != -1 and (a == -1 or t < a):
                return Span(self.start, hs, t, t, t, t, True, f"no {self.args} before the next {self.opener}")
            if a == -1:
                if final:
                    return Span(self.start, hs, len(text), len(text), len(text), len(text), False)
                self._search = max(hs, len(text) - max(len(self.args), len(self.opener)) + 1)
                return None
            self.body_start = self._scanned = a + len(self.args)
            self._head_end = a
        if self._scanner.state in ("before", "value"):
            end = self._scanner.feed(text, self._scanned)
            self._scanned = len(text)
            if end >= 0:
                self._done = end
        head_end = self._head_end
        if self._scanner.state == "done":
            return Span(self.start, hs, head_end, self.body_start, self._done, self._done, True)
        if self._scanner.state == "broken":  # not JSON: to the next opener or the end of the turn
            t = text.find(self.opener, self.body_start)
            if t != -1:
                return Span(self.start, hs, head_end, self.body_start, t, t, True)
            return Span(self.start, hs, head_end, self.body_start, len(text), len(text), True) if final else None
        if final:
            return Span(self.start, hs, head_end, self.body_start, len(text), len(text), False)
        return None


class MistralBlocks:
    """The Mistral :class:`~toolgrammar.formats.reader.BlockReader` (strict mode), for one block shape."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers, block: dict[str, Any]) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.block = block
        self.openers: tuple[Opener, ...] = (Opener(markers.block_open),)

    def open_block(self, start: int, opener: Opener) -> CallEnd:
        return CallEnd(start, self.markers, self.block)

    def check(self, text: str, cut: Span, tools: ToolSet) -> Block | tuple[Block, ...]:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]

        def block(verdict: ToolCall | CallError) -> Block:
            if isinstance(verdict, CallError):
                return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=verdict)
            return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, call=verdict)

        if cut.fault is not None:
            return block(CallError("malformed-block", f"error: malformed tool call: {cut.fault}"))
        if not cut.closed:
            return block(CallError("truncated", "error: tool call is truncated: the turn ended inside the call"))
        obj = _decode(body)
        if isinstance(obj, CallError):
            return block(obj)
        if self.block["shape"] == "array":
            return self._array(text, cut, obj, tools, block)
        head = text[cut.head_start : cut.head_end]
        name, sep, call_id = head.partition(self.block["call_id"])
        if not name or _BAD_NAME.search(name) or (sep and not _CALL_ID.fullmatch(call_id)):
            return block(CallError("malformed-block", f"error: malformed tool call head {head!r}"))
        return block(check_call({"name": name, "arguments": obj}, tools))

    def _array(self, text: str, cut: Span, obj: Any, tools: ToolSet, block: Any) -> Block | tuple[Block, ...]:
        keys = {self.block["name_key"], self.block["arguments_key"]}
        if not isinstance(obj, list) or not obj:
            return block(
                CallError("wrong-keys", f"error: {self.markers.block_open} must be followed by a JSON array of calls")
            )
        out = []
        for item in obj:
            if isinstance(item, dict) and set(item) == keys:
                item = {"name": item[self.block["name_key"]], "arguments": item[self.block["arguments_key"]]}
            out.append(block(check_call(item, tools)))
        return tuple(out)


def _decode(body: str) -> Any:
    kind: Literal["invalid-json"] = "invalid-json"
    try:
        return loads(body)
    except RecursionError:
        return CallError(kind, "error: tool call is not valid JSON: nesting too deep")
    except ValueError as error:
        return CallError(json_error_kind(error), f"error: tool call is not valid JSON: {error}")


def render_call(name: str, arguments: dict[str, Any], markers: Markers, block: dict[str, Any]) -> str:
    """One call as mistral-common renders it (``args`` shape; the ``array`` shape renders a one-call array)."""
    if block["shape"] == "array":
        item = {block["name_key"]: name, block["arguments_key"]: arguments}
        return markers.block_open + block["array_open"][:-1] + json.dumps([item], ensure_ascii=False)
    return f"{markers.block_open}{name}{block['args']}{json.dumps(arguments, ensure_ascii=False)}"


__all__ = ["MODES", "CallEnd", "MistralBlocks", "Span", "render_call"]
