"""The strict parser: one assistant turn -> reasoning, content and checked tool-call blocks.

Format-agnostic entry points; the format's own parser does the reading
(:meth:`toolgrammar.formats.base.ToolCallFormat.parse_turn`) and :mod:`toolgrammar.formats.checks` does the
per-call checks, so every format reports the same error kinds with the same messages.

* :func:`parse_turn` parses a whole turn (the harness parses a turn only after it ends).
* :class:`TurnStreamParser` takes the turn in chunks of any size and emits OpenAI-style deltas
  (content, reasoning, and each tool call once it is complete and checked: never a partial call,
  never an invalid one). Its final parse is exactly :func:`parse_turn` of the whole text, for every
  chunking.

Parse modes (``mode``). ``strict`` (default): a block ends at the first closing marker after its
complete JSON value, so a ``</tool_call>`` inside a JSON string stays in the string (CanIToolCall's
``marker-in-arguments``). ``seed``: the seed harness's exact regular expression
``<tool_call>(.*?)</tool_call>|<tool_call>(.*)``, under which that same call is cut inside its
string (``invalid-json``) and its tail leaks into ``content``; keep it to reproduce the seed's
numbers. Both modes check each block on its own and report an unclosed block as ``truncated``
(never a call). :mod:`toolgrammar.formats.hermes.parser` documents the details.

``reasoning_started=True`` says the generation prompt already opened ``<think>`` (Qwen3
Thinking-2507 prompts end with ``<think>\\n``): the turn is reasoning up to its first
``</think>``, all of it when the turn is cut before one. It is the same as parsing the turn with the
opener written in front, which is how it is passed to formats: every format gets it for free.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from toolgrammar.formats import get_format
from toolgrammar.formats.calls import ToolCall, TurnParse
from toolgrammar.schema import ToolSet, load_tools

if TYPE_CHECKING:
    from toolgrammar.formats.base import ParseMode, ToolCallFormat
    from toolgrammar.schema import ToolSet

DeltaKind = Literal["content", "reasoning", "tool_call"]


class StreamState(Protocol):
    """What a format's incremental parser provides: pieces that no later text can change."""

    def feed(self, chunk: str) -> Sequence[tuple[str, Any]]:
        """Add text; return the ``("content"|"reasoning", text)`` / ``("tool_call", ToolCall)`` pieces
        that became final, in order."""
        ...


@dataclass(frozen=True)
class Delta:
    """One streamed increment of a turn's parse, OpenAI-client style."""

    kind: DeltaKind
    text: str = ""
    """The new text (``content`` and ``reasoning`` deltas)."""
    call: ToolCall | None = None
    """The complete, checked call (``tool_call`` deltas)."""
    index: int = 0
    """``tool_call`` deltas: the call's position among the turn's valid calls."""

    def to_openai(self) -> dict[str, Any]:
        """The ``choices[].delta`` object of a chat-completion chunk."""
        if self.kind == "content":
            return {"content": self.text}
        if self.kind == "reasoning":
            return {"reasoning_content": self.text}
        if self.call is None:  # pragma: no cover - constructed only with a call
            raise ValueError("a tool_call delta needs a call")
        return {
            "tool_calls": [
                {
                    "index": self.index,
                    "type": "function",
                    "function": {"name": self.call.name, "arguments": self.call.arguments_json()},
                }
            ]
        }


def load_toolset(tools: Any, *, tool_mode: str | None = None) -> ToolSet:
    """``tools`` as a :class:`~toolgrammar.schema.toolset.ToolSet`, via :func:`~toolgrammar.schema.loading.load_tools`.

    A ToolSet is returned as is unless ``tool_mode`` names another argument mode; anything else is
    loaded in ``tool_mode`` (default ``"schema"``).
    """

    if tool_mode is None:
        tool_mode = tools.mode if isinstance(tools, ToolSet) else "schema"
    return load_tools(tools, mode=tool_mode)  # type: ignore[arg-type]


def parse_turn(
    text: str,
    tools: Any,
    *,
    format: str | ToolCallFormat = "hermes",
    mode: ParseMode = "strict",
    reasoning_started: bool = False,
    tool_mode: str | None = None,
) -> TurnParse:
    """Parse one whole assistant turn.

    ``tools``: a :class:`~toolgrammar.schema.toolset.ToolSet` or anything ``load_tools`` accepts (loaded in
    ``tool_mode``, default ``"schema"``). ``format``: a registered format name or object. ``mode``:
    ``"strict"`` or ``"seed"`` (see the module docstring). Bad model output never raises: it
    becomes blocks with errors. Raises :class:`~toolgrammar.errors.ToolSchemaError` for bad tools.
    """
    return _parse(get_format(format), text, load_toolset(tools, tool_mode=tool_mode), mode, reasoning_started)


def _parse(fmt: ToolCallFormat, text: str, tools: ToolSet, mode: ParseMode, reasoning_started: bool) -> TurnParse:
    if not reasoning_started:
        return fmt.parse_turn(text, tools, mode=mode)
    prefix = fmt.markers.think_open
    parsed = fmt.parse_turn(prefix + text, tools, mode=mode)
    shift = len(prefix)
    return dataclasses.replace(
        parsed,
        blocks=tuple(dataclasses.replace(b, start=b.start - shift, end=b.end - shift) for b in parsed.blocks),
    )


class TurnStreamParser:
    """Parse a turn fed in chunks; emits deltas as they become final.

    ``feed(chunk)`` returns the new deltas (possibly none); ``end()`` returns the last ones;
    ``finish()`` ends the stream if needed and returns the :class:`~toolgrammar.formats.calls.TurnParse`,
    which is exactly ``parse_turn(whole_text, ...)``. The deltas of a stream always add up to that
    parse: content and reasoning concatenated, tool calls in order (``tool_call`` deltas carry
    complete, valid calls only, so a cut-off call is never sent).

    What waits: a call until its block closes; text that may be the start of a marker; trailing
    whitespace (it may be the end of the turn). Unless ``reasoning_started`` is set, the text before
    the first ``<tool_call>`` or ``<think>`` also waits until a ``</think>``, one of those, or the end
    decides whether it was reasoning (a prompt that opened ``<think>`` leaves only the ``</think>``
    in the turn); pass ``reasoning_started=True`` when the prompt opened it.

    Example::

        stream = TurnStreamParser(tools)
        for chunk in chunks:
            for delta in stream.feed(chunk):
                send(delta.to_openai())
        for delta in stream.end():
            send(delta.to_openai())
        turn = stream.finish()
    """

    def __init__(
        self,
        tools: Any,
        *,
        format: str | ToolCallFormat = "hermes",
        mode: ParseMode = "strict",
        reasoning_started: bool = False,
        tool_mode: str | None = None,
    ) -> None:
        self.format = get_format(format)
        self.tools = load_toolset(tools, tool_mode=tool_mode)
        self.mode: ParseMode = mode
        self.reasoning_started = reasoning_started
        self._chunks: list[str] = []
        self._state: StreamState = self.format.stream_state(self.tools, mode=mode, reasoning_started=reasoning_started)
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._result: TurnParse | None = None
        self.deltas: list[Delta] = []
        """Every delta emitted so far, in order."""

    @property
    def text(self) -> str:
        """The turn so far."""
        return "".join(self._chunks)

    @property
    def ended(self) -> bool:
        return self._result is not None

    def feed(self, chunk: str) -> list[Delta]:
        """Add the next chunk of the turn; return the deltas that became final."""
        if self._result is not None:
            raise ValueError("the stream has ended; start a new TurnStreamParser for the next turn")
        if not chunk:
            return []
        self._chunks.append(chunk)
        return self._record(self._state.feed(chunk))

    def end(self) -> list[Delta]:
        """End the turn; return the remaining deltas (calls the turn's end resolved, trailing text)."""
        if self._result is not None:
            return []
        final = _parse(self.format, self.text, self.tools, self.mode, self.reasoning_started)
        self._result = final
        pieces: list[tuple[str, Any]] = []
        for kind, emitted, value in (
            ("reasoning", self._reasoning, final.reasoning_content),
            ("content", self._content, final.content),
        ):
            done, want = "".join(emitted), value or ""
            if not want.startswith(done):
                raise RuntimeError(f"internal error: streamed {kind} {done!r} is not a prefix of the final {want!r}")
            if len(want) > len(done):
                pieces.append((kind, want[len(done) :]))
        calls = list(final.tool_calls)
        if calls[: len(self._calls)] != self._calls:
            raise RuntimeError("internal error: streamed tool calls differ from the final parse's")
        pieces.extend(("tool_call", call) for call in calls[len(self._calls) :])
        return self._record(pieces)

    def finish(self) -> TurnParse:
        """End the turn (if not ended yet) and return its parse."""
        self.end()
        if self._result is None:  # pragma: no cover - end() always sets it
            raise RuntimeError("internal error: no parse after end()")
        return self._result

    def _record(self, pieces: Sequence[tuple[str, Any]]) -> list[Delta]:
        out: list[Delta] = []
        for kind, value in pieces:
            if kind == "content":
                self._content.append(value)
                out.append(Delta("content", text=value))
            elif kind == "reasoning":
                self._reasoning.append(value)
                out.append(Delta("reasoning", text=value))
            elif kind == "tool_call":
                out.append(Delta("tool_call", call=value, index=len(self._calls)))
                self._calls.append(value)
            else:  # pragma: no cover - a format's stream state returned something unknown
                raise RuntimeError(f"internal error: unknown stream piece kind {kind!r}")
        self.deltas.extend(out)
        return out


def accumulate(deltas: list[Delta]) -> dict[str, Any]:
    """What an OpenAI client holds after these deltas: ``{"content", "reasoning_content", "tool_calls"}``
    (``None`` for empty text; calls as ``{"name", "arguments"}`` with decoded arguments)."""
    content = "".join(d.text for d in deltas if d.kind == "content")
    reasoning = "".join(d.text for d in deltas if d.kind == "reasoning")
    calls = [
        {"name": d.call.name, "arguments": json.loads(d.call.arguments_json())}
        for d in deltas
        if d.kind == "tool_call" and d.call is not None
    ]
    return {"content": content or None, "reasoning_content": reasoning or None, "tool_calls": calls}


__all__ = ["Delta", "TurnStreamParser", "accumulate", "load_toolset", "parse_turn"]
