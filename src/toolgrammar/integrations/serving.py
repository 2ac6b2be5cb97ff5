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
* :func:`assistant_prefill` finds the text a prefilled assistant message (``continue_final_message``)
  already put into the turn, and :func:`check_admission` refuses, before the request runs, what the
  constraint cannot answer right (a budget below the call the policy forces, ``min_tokens`` past the
  end of the turn, ``ignore_eos``, ``include_stop_str_in_output``, a prefill the grammar cannot
  continue), each with the parameter and the fix.
* :class:`CallExtractor` turns a whole turn into ``(content, calls)``; :class:`StreamingCallExtractor`
  does it incrementally and always adds up to the same result, for every chunking. With a prefill,
  both read the prefill and the continuation as one turn and return the continuation's content and the calls
  whose blocks end in the continuation (a call the prefill opened and the model finished, not one wholly prefilled).

What goes where. A valid block becomes a call; everything else stays in ``content``, verbatim: the
reasoning part (``<think>...</think>``, which is where vLLM puts it when no reasoning parser is
configured; with one, the tool parser never sees it), and any block that is not a valid call (a
block cut by the end of the turn, or one the constraint did not cover), so nothing the model wrote
is lost. ``content`` is stripped of surrounding whitespace and is ``None`` when empty, as vLLM's own
parsers return it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgrammar.automata.nodes import DEAD
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format, registered_format
from toolgrammar.formats.options import reasoning_after
from toolgrammar.formats.reader import BlockSpan, TurnStreamState
from toolgrammar.formats.streaming import ArgumentDeltas, PartialCallReader, StreamingError
from toolgrammar.integrations.vllm import compile_spec
from toolgrammar.runtime.stops import checked_stops
from toolgrammar.runtime.token_grammar import TokenGrammar, token_grammar

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.schema import ToolSet
    from toolgrammar.turn.grammar import TurnGrammar
    from toolgrammar.vocab import Vocabulary


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
    reasoning: str | None = None,
) -> dict[str, Any]:
    """The logits processor's spec for one chat request, checked by compiling it.

    ``reasoning``: the grammar's option as the rendered prompt reads (:func:`prompt_reasoning`); without it,
    it follows ``enable_thinking`` (Qwen3's switch: ``False`` renders an empty reasoning part into the prompt,
    so the turn has none; otherwise the turn may open with one).
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
        "reasoning": reasoning or ("disabled" if thinking is False else "enabled"),
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


def message_text(content: Any, *, where: str) -> str:
    """A chat message's ``content`` as text: a string, or the text parts of a list of parts, joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and all(isinstance(part, Mapping) for part in content):
        kinds = {part.get("type") for part in content}
        if kinds <= {"text"}:
            return "".join(str(part.get("text", "")) for part in content)
    raise GrammarError(f"{where}: a prefilled assistant message must be text, got {content!r:.200}")


def render_head(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    chat_template: str | None = None,
) -> str | None:
    """The generation prompt of a chat request, as the engine renders it: the conversation (up to a final
    assistant message, a prefill, which the engine continues) with the generation prompt. ``None`` where the
    template cannot be rendered here (a tokenizer without one); logged once per tokenizer."""
    head = list(messages[:-1]) if messages and messages[-1].get("role") == "assistant" else list(messages)
    kwargs = dict(chat_template_kwargs or {})
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    try:
        prompt = tokenizer.apply_chat_template(head, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs)
    except Exception as error:  # a template that cannot render here: the callers fall back
        key = id(tokenizer)
        if key not in _UNRENDERED:
            _UNRENDERED.add(key)
            logger.warning(
                "toolgrammar: the chat template cannot be rendered here (%s: %s); the reasoning part is read from "
                "enable_thinking and a prefill is taken as the message's own text",
                type(error).__name__,
                error,
            )
        return None
    return prompt if isinstance(prompt, str) else None


_UNRENDERED: set[int] = set()
"""Tokenizers whose template :func:`render_head` could not render (logged once each)."""


def prompt_reasoning(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    format: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    chat_template: str | None = None,
    head: str | None = None,
) -> str | None:
    """The grammar's ``reasoning`` option for a chat request, read off its rendered generation prompt
    (:func:`~toolgrammar.formats.options.reasoning_after`): a template that opens the reasoning part
    (Qwen3.5, GLM-4.7, DeepSeek-V3.1 with thinking on) starts the turn inside it, one that closes it or never
    writes one gives a turn without one. The switch a template reads differs (``enable_thinking``,
    ``thinking``), and so does its default: only the rendered prompt tells. A conversation that ends with an
    assistant message (a prefill) is read up to that message. ``head``: that prompt, where the caller rendered
    it already (:func:`render_head`). ``None`` where the template cannot be rendered here (the caller falls back
    to ``enable_thinking``).
    """
    prompt = head
    if prompt is None:
        prompt = render_head(
            tokenizer, messages, tools=tools, chat_template_kwargs=chat_template_kwargs, chat_template=chat_template
        )
    if prompt is None:
        return None
    kwargs = dict(chat_template_kwargs or {})
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    markers = get_format(format).markers
    return reasoning_after(
        prompt,
        markers.think_open,
        markers.think_close,
        enable_thinking=kwargs.get("enable_thinking"),
        template=template if isinstance(template, str) else None,
    )


def assistant_prefill(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    chat_template: str | None = None,
    head: str | None = None,
) -> str:
    """The text that a conversation ending in an assistant message puts into the assistant turn.

    Rendered as the engine renders it (``continue_final_message``): the conversation before that message
    with the generation prompt, then the whole conversation continuing the final message; the turn's
    text is what the second adds to the first (Qwen3's template also writes the empty reasoning part
    there). Where a template renders the two otherwise, the message's own text. ``head``: the first rendering,
    where the caller has it already (:func:`render_head`).
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise GrammarError("a prefill needs a conversation whose last message is the assistant's")
    own = message_text(messages[-1].get("content"), where="messages[-1].content")
    kwargs = dict(chat_template_kwargs or {})
    if chat_template is not None:  # the request's own template, as the engine renders it with
        kwargs["chat_template"] = chat_template
    if head is None:
        head = render_head(
            tokenizer, messages, tools=tools, chat_template_kwargs=chat_template_kwargs, chat_template=chat_template
        )
    try:
        whole = tokenizer.apply_chat_template(
            list(messages), tools=tools, continue_final_message=True, tokenize=False, **kwargs
        )
    except Exception:  # a template that cannot render the pieces: the message's own text is the turn's
        return own
    if isinstance(head, str) and isinstance(whole, str) and whole.startswith(head) and whole.endswith(own):
        return whole[len(head) :]
    return own


def min_tokens_limit(grammar: TokenGrammar, start: int) -> int | None:
    """The largest minimum length (``min_tokens``, ``min_new_tokens``) a turn from ``start`` can take safely.

    An engine honours a minimum length by masking the end-of-turn tokens until that many tokens are
    written; where a complete turn allows nothing but its end, nothing is left. A call may be complete
    after fewer tokens than any bound computed ahead, so the only safe values are those that cannot
    reach a complete call: 1 where the turn's first token may be something else than its end, 0 where
    it may not. ``None`` (no limit) under ``tool_choice="none"``: free text can always go on.
    """
    if grammar.grammar.options.tool_choice == "none":
        return None
    mask = grammar.mask(start)  # builds the state's row where it is not built yet (a prefill inside a call)
    if mask.all_allowed:
        return 1
    ends = np.array(sorted(grammar.vocab.eos_ids), dtype=np.int64)
    if mask.allowed is not None:
        return 1 if bool(np.isin(mask.allowed, ends, invert=True).any()) else 0
    return 1 if mask.n_allowed > len(ends) else 0


def check_admission(
    spec: Mapping[str, Any],
    vocab: Vocabulary,
    *,
    max_tokens: int | None,
    min_tokens: int = 0,
    ignore_eos: bool = False,
    include_stop_str_in_output: bool = False,
) -> None:
    """Refuse (:class:`~toolgrammar.errors.GrammarError`, an HTTP 400 on the server) what a constrained turn
    cannot answer right, before it runs; each message names the parameter and the fix.

    * ``ignore_eos``: the model would write on past the end of its turn, where no grammar holds.
    * ``include_stop_str_in_output``: it would put the end-of-turn token's text into ``content``.
    * ``max_tokens`` below the tokens the shortest turn needs (only a policy that forces a call,
      ``required`` or a named tool, needs any): the call would be cut.
    * ``min_tokens`` above :func:`min_tokens_limit` (1; any under ``tool_choice="none"``): the model could
      be held past the end of a complete turn.
    * An ``assistant_prefix`` (a prefill) the grammar cannot continue, and stop token ids outside the vocabulary.
    """
    if ignore_eos:
        raise GrammarError(
            "ignore_eos=true with tools: the model would write on past the end of its turn, where no tool-call "
            "grammar holds; remove ignore_eos (or send no tools)"
        )
    if include_stop_str_in_output:
        raise GrammarError(
            "include_stop_str_in_output=true with tools: the end-of-turn token's text would land in content, and a "
            "stop ends the turn before its text is written (stops are honoured where the turn may end); remove "
            "include_stop_str_in_output"
        )
    checked_stops(spec.get("stop"), spec.get("stop_token_ids"), vocab.n_tokens, where="the request")
    grammar = token_grammar(compile_spec(dict(spec)), vocab)
    prefix = spec.get("assistant_prefix", "")
    start = grammar.walk_text(prefix) if prefix else grammar.start
    if start == DEAD:
        raise GrammarError(
            f"the prefilled assistant message {prefix[-160:]!r} is not the start of a turn these tools and this "
            f"tool_choice allow, so it cannot be continued: end it where a turn may go on (outside a tool call, or "
            "inside one that the tools allow), or send it without continue_final_message"
        )
    need = int(grammar.dist[start])
    choice = grammar.grammar.options.tool_choice
    if max_tokens is not None and max_tokens < need:
        raise GrammarError(
            f"max_tokens={max_tokens} is too small for tool_choice={choice!r}: the shortest call these tools allow "
            f"takes {need} tokens; raise max_tokens (or max_completion_tokens) to at least {need}, or use "
            "tool_choice='auto'"
        )
    limit = min_tokens_limit(grammar, start)
    if limit is not None and min_tokens > limit:
        raise GrammarError(
            f"min_tokens={min_tokens} with tools under tool_choice={choice!r}: vLLM hides the end of the turn until "
            f"{min_tokens} tokens are written, and a turn whose call is complete sooner has nothing left to write but "
            f"its end; use min_tokens of at most {limit}, or remove it"
        )


def _outside_calls(text: str, spans: Sequence[BlockSpan], *, start: int = 0) -> str:
    """``text`` from ``start`` on, less the blocks that are valid calls and the markup between messages."""
    pieces, at = [], start
    for span in spans:
        if span.end > start and span.leaves_content:
            pieces.append(text[at : max(span.start, at)])
            at = span.end
    pieces.append(text[at:])
    return "".join(pieces)


class CallExtractor:
    """A whole turn -> ``(content, calls)`` (see the module docstring for what stays in content).

    ``prefix``: the text a prefilled assistant message already put into the turn (:func:`assistant_prefill`);
    the turn read is the prefix and the continuation; content comes from the continuation only, and so do the
    calls (those whose blocks end after the prefix).
    """

    def __init__(self, tools: ToolSet, *, format: str = "hermes", prefix: str = "") -> None:
        self.tools = tools
        self.format = get_format(format)
        self.prefix = prefix

    def read(self, text: str) -> TurnStreamState[Any]:
        """The turn reader over the whole of ``text`` (its :attr:`~TurnStreamState.spans` locate every block)."""
        state = self.format.stream_state(self.tools, read_reasoning=False)
        state.feed(text)
        state.finish()
        return state

    def extract(self, text: str) -> tuple[str | None, list[ToolCall]]:
        whole = self.prefix + text
        spans = self.read(whole).spans
        start = len(self.prefix)
        content = _outside_calls(whole, spans, start=start).strip()
        # The calls the continuation wrote or finished: a block that ends inside the prefill is the client's own
        # text, like the prefill's content.
        calls = [b.call for span in spans if span.valid and span.end > start for b in span.blocks if b.call]
        return content or None, calls


@dataclass(frozen=True)
class CallDelta:
    """One piece of a streamed call, as an OpenAI ``delta.tool_calls`` entry carries it."""

    index: int
    """The call's place among the calls of the turn's continuation, from 0."""
    name: str | None
    """The tool's name: on the call's first piece, and only there."""
    arguments: str
    """The next fragment of ``function.arguments`` (empty on a first piece that has no argument text yet)."""


class StreamingCallExtractor:
    """:class:`CallExtractor` on a turn that arrives in pieces.

    ``feed(delta)`` returns the content that became final and the :class:`CallDelta` pieces of the calls;
    ``finish()`` returns the rest; :attr:`calls` holds the calls whose blocks have closed. Content and calls of
    a stream add up to ``extract(whole turn)``, for every chunking.

    With ``stream_arguments`` (what a constrained turn gets: the grammar admits only prefixes of valid calls),
    a call's first piece comes once its name is complete, then ``arguments`` fragments as the block grows
    (:class:`~toolgrammar.formats.streaming.PartialCallReader`): each one final, their concatenation the
    call's ``arguments_json()``. Without it, a call arrives whole, in one piece, once its block closes as a
    valid call; a block that is not one goes to content, verbatim (a fragment already sent cannot be taken
    back, so only a constrained stream should stream arguments).

    What waits: text that may be the start of a block opener, and trailing whitespace (it may be the end of
    the turn). The turn is read once, incrementally (:class:`~toolgrammar.formats.reader.TurnStreamState`,
    with reasoning left in content), so a turn costs time linear in its length however it is split.
    """

    def __init__(
        self, tools: ToolSet, *, format: str = "hermes", prefix: str = "", stream_arguments: bool = False
    ) -> None:
        self.format = get_format(format)
        self.tools = tools
        self.stream_arguments = stream_arguments
        self._state = self.format.stream_state(tools, read_reasoning=False)
        self._state.feed(prefix)
        self._prefix_len = len(prefix)
        self._pos = len(prefix)
        """Characters of the turn already emitted (as content or as calls) or left behind as markup."""
        self._spans_read = 0
        self._reader: PartialCallReader | None = None
        self._reader_at = -1
        """Where the block the reader reads starts."""
        self._streams: list[ArgumentDeltas] = []
        """One per call begun in the open block."""
        self._started = False
        """Whether non-whitespace content has been emitted (leading whitespace is dropped)."""
        self._held_space = ""
        self.calls: list[ToolCall] = []

    def feed(self, delta: str) -> tuple[str, list[CallDelta]]:
        self._state.feed(delta)
        return self._advance(final=False)

    def finish(self) -> tuple[str, list[CallDelta]]:
        self._state.finish()
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> tuple[str, list[CallDelta]]:
        state, text = self._state, self._state.text
        pieces: list[str] = []
        out: list[CallDelta] = []
        for span in state.spans[self._spans_read :]:
            self._spans_read += 1
            if span.end <= self._prefix_len or not span.leaves_content:
                continue  # the prefill's own, or not a call: text (content takes it below)
            pieces.append(text[self._pos : max(span.start, self._pos)])
            self._pos = span.end
            if span.blocks:
                out.extend(self._close(span))
        open_at = state.open_block
        upto = len(text) if final else (open_at if open_at is not None else state.settled)
        if upto > self._pos:
            pieces.append(text[self._pos : upto])
            self._pos = upto
        if open_at is not None and self.stream_arguments:
            out.extend(self._grow(open_at, text))
        return self._content("".join(pieces), final=final), out

    def _grow(self, start: int, text: str) -> list[CallDelta]:
        """The new pieces of the calls of the block open at ``start``."""
        if self._reader is None or self._reader_at != start:
            self._reader, self._reader_at, self._streams = PartialCallReader(self.format, self.tools), start, []
        out = []
        for i, partial in enumerate(self._reader.read(text[start:])):
            if i == len(self._streams):
                self._streams.append(ArgumentDeltas())
            stream = self._streams[i]
            fragment = stream.feed(partial)
            name = stream.name_delta()
            if name is not None or fragment:
                out.append(CallDelta(len(self.calls) + i, name, fragment))
        return out

    def _close(self, span: BlockSpan) -> list[CallDelta]:
        """The rest of each call of a block that closed as valid calls."""
        streams = self._streams if self._reader is not None and self._reader_at == span.start else []
        self._reader, self._reader_at, self._streams = None, -1, []
        out = []
        for i, block in enumerate(span.blocks):
            call = block.call
            assert call is not None  # a valid span
            arguments = call.arguments_json()
            stream = streams[i] if i < len(streams) else ArgumentDeltas()
            if stream.name not in (None, call.name) or not arguments.startswith(stream.sent):
                raise StreamingError(
                    f"the streamed call {stream.name!r} {stream.sent[-40:]!r} is not a prefix of the call the block "
                    f"holds, {call.name!r} {arguments[-40:]!r}"
                )
            stream.name = call.name
            name = stream.name_delta()
            if name is not None or len(arguments) > len(stream.sent):
                out.append(CallDelta(len(self.calls), name, arguments[len(stream.sent) :]))
            self.calls.append(call)
        return out

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


__all__ = [
    "CallDelta",
    "CallExtractor",
    "StreamingCallExtractor",
    "assistant_prefill",
    "check_admission",
    "compiled_turn",
    "constraint_spec",
    "message_text",
    "min_tokens_limit",
    "prompt_reasoning",
    "render_head",
    "tool_choice_option",
]
