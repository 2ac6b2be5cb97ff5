"""An OpenAI chat request's tool fields -> toolgrammar's constraint, and the model's turn -> OpenAI tool calls.

The engine-independent half of the vLLM tool-parser plugin (:mod:`toolgrammar.integrations.vllm_tool_parser`); no
vLLM import, so it is tested on its own and any OpenAI-compatible server can reuse it.

* :func:`constraint_spec` reads ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the chat
  template's ``enable_thinking`` of a request and returns the spec the logits processor takes
  (:mod:`toolgrammar.integrations.vllm`, ``extra_args["toolgrammar"]``), checked by compiling it. The budget is
  not in it: the processor reads the request's ``max_tokens`` itself.
* :func:`request_setting` reads a yes/no setting of a request: its ``vllm_xargs`` key if it has one,
  else the server's environment variable, else off. Two exist: steering (:data:`STEER_XARG`,
  :data:`STEER_ENV`; :mod:`toolgrammar.runtime.steering`) and lenient schema loading (:data:`LENIENT_XARG`,
  :data:`LENIENT_ENV`; ``load_tools(..., lenient=True)``).
* :class:`CallExtractor` turns a whole turn into ``(content, calls)``; :class:`StreamingCallExtractor`
  does it incrementally and always adds up to the same result, for every chunking.

What goes where. A valid block becomes a call; everything else stays in ``content``, verbatim: the
reasoning part (``<think>...</think>``, which is where vLLM puts it when no reasoning parser is
configured; with one, the tool parser never sees it), and any block that is not a valid call (a
block cut by the end of the turn, or one the constraint did not cover), so nothing the model wrote
is lost. ``content`` is stripped of surrounding whitespace and is ``None`` when empty, as vLLM's own
parsers return it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format, registered_format
from toolgrammar.formats.text import partial_suffix
from toolgrammar.integrations.vllm import compile_spec
from toolgrammar.turn.parser import parse_turn

if TYPE_CHECKING:
    from toolgrammar.formats.calls import ToolCall, TurnParse
    from toolgrammar.schema import ToolSet
    from toolgrammar.turn.grammar import TurnGrammar


def tool_choice_option(tool_choice: Any) -> str:
    """An OpenAI ``tool_choice`` (``None``, ``"auto"``, ``"required"``, ``"none"``, or
    ``{"type": "function", "function": {"name": ...}}``) as the grammar's ``tool_choice`` option."""
    if tool_choice is None:
        return "auto"
    if isinstance(tool_choice, str):
        if tool_choice in ("auto", "required", "none"):
            return tool_choice
        raise GrammarError(f"tool_choice must be 'auto', 'required', 'none' or a named function, got {tool_choice!r}")
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if tool_choice.get("type", "function") == "function" and isinstance(name, str) and name:
            return name
    raise GrammarError(
        "tool_choice must be 'auto', 'required', 'none' or {'type': 'function', 'function': {'name': ...}}, "
        f"got {tool_choice!r}"
    )


STEER_ENV = "TOOLGRAMMAR_STEER_TO_BLOCKS"
"""The server-wide default of steering (``1``/``true``/``yes`` or ``0``/``false``/``no``; unset: off)."""
STEER_XARG = "toolgrammar_steer_to_blocks"
"""The ``vllm_xargs`` key that turns steering on or off for one request (overrides :data:`STEER_ENV`)."""
LENIENT_ENV = "TOOLGRAMMAR_LENIENT_SCHEMAS"
"""The server-wide default of lenient schema loading (unset: strict, a schema the grammar cannot enforce is refused)."""
LENIENT_XARG = "toolgrammar_lenient_schemas"
"""The ``vllm_xargs`` key that turns lenient loading on or off for one request (overrides :data:`LENIENT_ENV`)."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def flag(value: Any, *, where: str) -> bool:
    """A yes/no setting as a bool: ``True``/``False``, ``1``/``0``, or their spellings in ``true``/``false``,
    ``yes``/``no``, ``on``/``off`` (any case). vLLM's ``vllm_xargs`` turns a JSON ``true`` into ``1``, so
    both must mean the same. Raises :class:`~toolgrammar.errors.GrammarError` naming ``where`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise GrammarError(f"{where} must be true or false (or 1/0), got {value!r}")


def request_setting(xargs: Mapping[str, Any] | None, environ: Mapping[str, str], key: str, variable: str) -> bool:
    """A request's yes/no setting: its ``vllm_xargs[key]``, else the server's environment ``variable``, else off."""
    if xargs and key in xargs:
        return flag(xargs[key], where=f"vllm_xargs[{key!r}]")
    return flag(environ.get(variable, ""), where=f"the environment variable {variable}")


def constraint_spec(
    tools: Sequence[Mapping[str, Any]],
    *,
    format: str,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool | None = True,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    mode: str = "schema",
    steer_to_blocks: bool = False,
    lenient: bool = False,
) -> dict[str, Any]:
    """The logits processor's spec for one chat request, checked by compiling it.

    ``reasoning`` follows the chat template: ``enable_thinking=False`` (Qwen3's switch) renders an empty
    reasoning part into the prompt, so the turn has none; otherwise the turn may open with one.
    ``steer_to_blocks`` (:mod:`toolgrammar.runtime.steering`) and ``lenient`` (the tools loaded as
    ``load_tools(..., lenient=True)`` loads them) go into the spec only when on.
    Raises :class:`~toolgrammar.errors.ToolgrammarError` (a bad tool, an unknown named tool, ...).
    """
    registered_format(format, where="the tool parser's format")
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise GrammarError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
    thinking = (chat_template_kwargs or {}).get("enable_thinking", True)
    spec = {
        "tools": [dict(tool) for tool in tools],
        "mode": mode,
        "format": format,
        "tool_choice": tool_choice_option(tool_choice),
        "parallel_tool_calls": True if parallel_tool_calls is None else parallel_tool_calls,
        "reasoning": "disabled" if thinking is False else "enabled",
    }
    for name, value in (("steer_to_blocks", steer_to_blocks), ("lenient", lenient)):
        if not isinstance(value, bool):
            raise GrammarError(f"{name} must be true or false, got {value!r}")
        if value:
            spec[name] = True
    compiled_turn(spec)
    return spec


def compiled_turn(spec: dict[str, Any]) -> TurnGrammar:
    """The spec's turn grammar, from the processor's own cache (compiled once per distinct spec)."""

    return compile_spec(spec)


def _outside_valid_blocks(text: str, parsed: TurnParse) -> str:
    pieces, at = [], 0
    for block in parsed.blocks:
        if block.call is not None:
            pieces.append(text[at : block.start])
            at = block.end
    pieces.append(text[at:])
    return "".join(pieces)


class CallExtractor:
    """A whole turn -> ``(content, calls)`` (see the module docstring for what stays in content)."""

    def __init__(self, tools: ToolSet, *, format: str = "hermes") -> None:
        self.tools = tools
        self.format = get_format(format)

    def parse(self, text: str) -> TurnParse:
        return parse_turn(text, self.tools, format=self.format)

    def extract(self, text: str) -> tuple[str | None, list[ToolCall]]:
        parsed = self.parse(text)
        content = _outside_valid_blocks(text, parsed).strip()
        return content or None, list(parsed.tool_calls)


class StreamingCallExtractor:
    """:class:`CallExtractor` on a turn that arrives in pieces.

    ``feed(delta)`` returns the content that became final and the calls whose blocks closed;
    ``finish()`` returns the rest. Content and calls of a stream add up to ``extract(whole turn)``.
    What waits: a block until it closes as a valid call (a block that is not one goes to content,
    verbatim, when the turn ends), text that may be the start of the block opener, and trailing
    whitespace (it may be the end of the turn).
    Re-parsing happens only while a block is open: text with no opener in it passes straight through.
    """

    def __init__(self, tools: ToolSet, *, format: str = "hermes") -> None:
        self._extractor = CallExtractor(tools, format=format)
        self._opener = self._extractor.format.markers.block_open
        self._text = ""
        self._pos = 0
        """Characters of the turn already emitted (as content or as a call)."""
        self._started = False
        """Whether non-whitespace content has been emitted (leading whitespace is dropped)."""
        self._held_space = ""
        self.calls: list[ToolCall] = []

    def feed(self, delta: str) -> tuple[str, list[ToolCall]]:
        self._text += delta
        return self._advance(final=False)

    def finish(self) -> tuple[str, list[ToolCall]]:
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> tuple[str, list[ToolCall]]:
        text, start = self._text, self._pos
        stop = len(text) - (0 if final else partial_suffix(text, self._opener, start))
        spans: list[tuple[int, int, ToolCall]] = []
        if self._opener in text[start:]:
            parsed = self._extractor.parse(text)
            for block in parsed.blocks:
                if block.end <= start:
                    continue
                # Only a valid block is settled before the turn ends: the strict reader may still move the
                # end of an invalid one (a closer inside a string that is not finished yet).
                if not final and (block.call is None or block.end > stop):
                    stop = min(stop, block.start)
                    break
                if block.call is not None:
                    spans.append((block.start, block.end, block.call))
        pieces, at, calls = [], start, []
        for begin, end, call in spans:
            pieces.append(text[at:begin])
            calls.append(call)
            at = end
        pieces.append(text[at:stop])
        self._pos = max(stop, at)
        self.calls.extend(calls)
        return self._content("".join(pieces), final=final), calls

    def _content(self, new: str, *, final: bool) -> str:
        if not self._started:
            new = new.lstrip()
        if final:
            return "" if not new.strip() else self._flush(new.rstrip())
        body = new.rstrip()
        if not body:
            self._held_space += new
            return ""
        return self._flush(body, keep=new[len(body) :])

    def _flush(self, body: str, keep: str = "") -> str:
        out = (self._held_space if self._started else "") + body
        self._held_space = keep
        self._started = True
        return out


__all__ = ["CallExtractor", "StreamingCallExtractor", "compiled_turn", "constraint_spec", "tool_choice_option"]
