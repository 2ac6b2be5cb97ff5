"""Calls the model meant to make but wrote in another shape: fenced JSON, bare JSON.

A model that does not use the format's blocks often still *means* to call a tool: it writes
```` ```json\\n{"name": "read_file", "arguments": {...}}\\n``` ```` or the same object bare in its
prose. Such a call never runs, so it is an error of its own kind (:data:`OTHER_SHAPE_KIND`), and the
call inside it is judged with the same strict checks as a block (:func:`~toolgrammar.formats.checks.check_call`):
``unknown-tool``, ``missing-argument``, ``unknown-argument``, ``wrong-type``, ``wrong-keys``,
``raw-newline-in-string``, ``invalid-json``, ``truncated``. A ``parameters`` key (OpenAI's word) is
read as ``arguments``: the spelling of the key is part of the shape, already counted, and the call
inside is still judged.

What counts as such a call:

- *fenced*: inside a Markdown code fence (any language tag, or none; an unclosed fence runs to the
  end of the text), a JSON object, or a list of objects, with a string ``name`` and an ``arguments``
  or ``parameters`` key;
- *bare*: such an object in the text outside fences.

An object whose JSON does not decode still counts when its text starts like a call
(``{"name": "...", "arguments":`` or ``"parameters":``): its kind is then ``raw-newline-in-string``
(it decodes once raw line breaks are allowed in strings), ``truncated`` (it runs to the end of the
text) or ``invalid-json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from toolgrammar.formats.calls import CallError, ToolCall
from toolgrammar.formats.checks import check_call

if TYPE_CHECKING:
    from toolgrammar.schema import ToolSet

OTHER_SHAPE_KIND = "other-shape"
"""The error kind of a call written outside the format's blocks: it never runs."""

Shape = Literal["fenced", "bare"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(```|\Z)", re.DOTALL)
_CALL_START = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\\n]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:')
_STRICT = json.JSONDecoder()
_LENIENT = json.JSONDecoder(strict=False)


@dataclass(frozen=True)
class OtherShapeCall:
    """One call written in another shape, with the verdict the strict checks give it."""

    shape: Shape
    name: str | None
    """The name it gives (``None`` when it gives none that can be read)."""
    raw: str
    """The call's JSON text as written."""
    start: int
    """Offset of ``raw`` in the text searched."""
    call: ToolCall | None = None
    """The call it would be, had it been written as a block (when every check passes)."""
    error: CallError | None = None
    """The first failing check (``None`` when the call itself would be valid)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "name": self.name,
            "raw": self.raw,
            "start": self.start,
            "call": self.call.to_dict() if self.call else None,
            "error": self.error.to_dict() if self.error else None,
        }


def find_other_shape_calls(text: str | None, tools: ToolSet) -> list[OtherShapeCall]:
    """Every call in ``text`` (a turn's content, outside blocks) written as fenced or bare JSON, in order."""
    if not text:
        return []
    found: list[OtherShapeCall] = []
    outside: list[tuple[int, int]] = []
    last = 0
    for match in _FENCE.finditer(text):
        outside.append((last, match.start()))
        last = match.end()
        found += _calls_in(text, match.start(2), match.end(2), "fenced", tools, closed=bool(match.group(3)))
    outside.append((last, len(text)))
    for start, end in outside:
        found += _calls_in(text, start, end, "bare", tools, closed=end < len(text))
    found.sort(key=lambda c: c.start)
    return found


def _calls_in(text: str, start: int, end: int, shape: Shape, tools: ToolSet, *, closed: bool) -> list[OtherShapeCall]:
    """The calls whose JSON starts in ``text[start:end]``."""
    region = text[start:end]
    out: list[OtherShapeCall] = []
    position = 0
    while True:
        brace = [i for i in (region.find("{", position), region.find("[", position)) if i >= 0]
        if not brace:
            return out
        at = min(brace)
        try:
            value, stop = _STRICT.raw_decode(region, at)
            lenient = False
        except json.JSONDecodeError:
            try:
                value, stop = _LENIENT.raw_decode(region, at)
                lenient = True
            except json.JSONDecodeError as error:
                head = _CALL_START.match(region, at)
                if head is None:
                    position = at + 1
                    continue
                cut = not closed and _never_closes(region, at)
                kind: Literal["truncated", "invalid-json"] = "truncated" if cut else "invalid-json"
                raw = region[at:].rstrip() if kind == "truncated" else region[at : _line_end(region, at)]
                message = f"error: tool call is not valid JSON: {error}"
                out.append(
                    OtherShapeCall(shape, _unescape(head.group(1)), raw, start + at, error=CallError(kind, message))
                )
                position = at + len(head.group(0))
                continue
        items = value if isinstance(value, list) else [value]
        calls = [item for item in items if _call_like(item)]
        raw = region[at:stop]
        for item in calls:
            if lenient:
                error = CallError(
                    "raw-newline-in-string", "error: tool call is not valid JSON: raw line break in a string"
                )
                out.append(OtherShapeCall(shape, item["name"], raw, start + at, error=error))
                continue
            if "parameters" in item and "arguments" not in item:
                # the key's spelling is part of the shape (OpenAI's schema word): judge the call inside
                item = {"name": item["name"], "arguments": item["parameters"]} if len(item) == 2 else item
            verdict = check_call(item, tools)
            if isinstance(verdict, ToolCall):
                out.append(OtherShapeCall(shape, item["name"], raw, start + at, call=verdict))
            else:
                out.append(OtherShapeCall(shape, item["name"], raw, start + at, error=verdict))
        position = stop if calls else at + 1


def _call_like(item: Any) -> bool:
    return (
        isinstance(item, dict) and isinstance(item.get("name"), str) and ("arguments" in item or "parameters" in item)
    )


def _never_closes(text: str, at: int) -> bool:
    """Whether the brackets opened at ``text[at]`` are still open at the end of ``text`` (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in text[at:]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return False
    return True


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _unescape(name: str) -> str | None:
    try:
        return json.loads(f'"{name}"')
    except json.JSONDecodeError:
        return None


__all__ = ["OTHER_SHAPE_KIND", "OtherShapeCall", "find_other_shape_calls"]
