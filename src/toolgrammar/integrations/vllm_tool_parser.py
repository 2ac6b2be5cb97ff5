"""vLLM tool-call parsers that also constrain: plain OpenAI requests get valid, parsed calls.

Start the server with a toolgrammar parser and the logits processor::

    python -m vllm.entrypoints.openai.api_server --model MODEL \\
        --enable-auto-tool-choice --tool-call-parser toolgrammar_hermes \\
        --logits-processors toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor

(``toolgrammar_<format>`` for any registered format: ``toolgrammar_qwen_xml`` for Qwen3-Coder's XML calls,
``toolgrammar_llama3_json``...; ``toolgrammar formats`` lists them). The parser names are registered by
toolgrammar's ``vllm.general_plugins`` entry point (:mod:`toolgrammar.integrations.vllm_plugin`); where
``VLLM_PLUGINS`` leaves it out, add ``--tool-parser-plugin toolgrammar.integrations.vllm_tool_parser``. Then any
OpenAI client, unmodified::

    client.chat.completions.create(model=..., messages=..., tools=tools, tool_choice="required")

For each chat request with ``tools``, :meth:`ToolgrammarToolParser.adjust_request` (which vLLM runs
before the request is turned into sampling parameters) builds toolgrammar's constraint from the
request's own ``tools``, ``tool_choice`` (``auto``, ``required``, a named function),
``parallel_tool_calls`` and ``chat_template_kwargs.enable_thinking``
(:func:`toolgrammar.integrations.serving.constraint_spec`), compiles it (a bad schema or an unknown named tool
is an HTTP 400 naming the tool and the JSON pointer), and hands it to the logits processor through
the request's ``extra_args``. The processor takes the request's ``max_tokens`` as the budget: a block
that has started closes within it. The model's turn is parsed by toolgrammar's strict parser into
``tool_calls`` and ``content`` (:mod:`toolgrammar.integrations.serving`). In a stream a call arrives the
OpenAI way: its first delta carries its index, id, type and name as soon as the name is complete, then
``function.arguments`` fragments as the block is written, each one final (the grammar admits only prefixes
of valid calls), their concatenation the non-streamed call's arguments byte for byte.

What vLLM decides, not this plugin:

* ``tool_choice="none"``: vLLM calls no tool parser for such a request (unless a reasoning parser
  is configured) and returns the turn as content; it is not constrained.
  ``--exclude-tools-when-tool-choice-none`` keeps the tools out of the prompt.
* The Responses API (``/v1/responses``) is passed through unconstrained (a warning is logged once):
  only Chat Completions requests are constrained.

Steering (:mod:`toolgrammar.runtime.steering`), for models that mean to call but write the call as fenced
or bare JSON (Qwen2.5-Coder-0.5B does): at a call point the probability of such an opener moves onto
the block opener, so the call becomes a real block and a real ``tool_calls`` entry. Off by default;
on for the whole server with ``TOOLGRAMMAR_STEER_TO_BLOCKS=1`` in its environment, and per request
with ``extra_body={"vllm_xargs": {"toolgrammar_steer_to_blocks": true}}`` (or ``false``), which wins.

Lenient schemas: a request's tools load strictly (a schema the grammar cannot enforce, such as
``format: "float"`` on a number or a keyword JSON Schema does not define, is an HTTP 400 naming the tool
and the pointer). ``TOOLGRAMMAR_LENIENT_SCHEMAS=1`` (server) or ``vllm_xargs`` key
``toolgrammar_lenient_schemas`` (request, wins) loads them as ``load_tools(..., lenient=True)`` does, and
logs each mapping or dropped keyword once per distinct tool list.

Refused with HTTP 400: a request that also sets ``response_format``/``structured_outputs`` next to
tools (two constraints would fight), and one whose ``vllm_xargs`` already holds a ``toolgrammar``
spec (this server builds it from the request's tools).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager
from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.gpt_oss import GptOssFormat
from toolgrammar.integrations.serving import (
    LENIENT_ENV,
    LENIENT_XARG,
    STEER_ENV,
    STEER_XARG,
    CallDelta,
    CallExtractor,
    StreamingCallExtractor,
    assistant_prefill,
    check_admission,
    compiled_turn,
    constraint_spec,
    prompt_reasoning,
    render_head,
    request_setting,
)
from toolgrammar.integrations.tokenizers import vocabulary_of
from toolgrammar.integrations.vllm import EXTRA_ARGS_KEY
from toolgrammar.integrations.vllm_plugin import tool_parsers
from toolgrammar.runtime.steering import CallPoints, call_openers
from toolgrammar.runtime.token_grammar import token_grammar

logger = logging.getLogger("toolgrammar.vllm")


class ToolgrammarToolParser(ToolParser):
    """Base of the per-format parsers: constrain in ``adjust_request``, parse with the strict parser."""

    format_name: ClassVar[str] = "hermes"
    # vLLM's own handling of required/named forces a JSON-array schema and parses that: ours is the
    # model's own block format, constrained by the processor, so vLLM must route those to us as "auto".
    supports_required_and_named = False
    structural_tag_model = None
    # Ask vLLM for the end-of-stream hook (finish_streaming): held text and a cut block come out there.
    engine_based_streaming = True

    _warned_responses: ClassVar[bool] = False

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self._stream: StreamingCallExtractor | None = None
        self._passthrough = False
        self._ids: list[str] = []
        """The id of each call streamed, by index."""

    # -- request -----------------------------------------------------------------------------------

    def adjust_request(self, request: Any) -> Any:
        if not request.tools:
            return request
        if not isinstance(request, ChatCompletionRequest):
            if not ToolgrammarToolParser._warned_responses:
                ToolgrammarToolParser._warned_responses = True
                logger.warning(
                    "toolgrammar: %s requests are not constrained (only Chat Completions are); tool calls are parsed "
                    "as the model writes them",
                    type(request).__name__,
                )
            return request
        if getattr(request, "_grammar_from_parser", False):
            # vLLM's Mistral parser (a Mistral tokenizer with --reasoning-parser mistral) put its own tool-call grammar
            # into the request before this runs, folding in any response_format: two constraints would fight.
            raise ValueError(
                "toolgrammar: vLLM's Mistral parser added its own tool-call grammar to this request; start the server "
                "without --reasoning-parser mistral (the toolgrammar parser reads [THINK] reasoning itself)"
            )
        if request.structured_outputs is not None or _constrains_format(request.response_format):
            raise ValueError(
                "toolgrammar: this server constrains tool calls; a request with tools cannot also set "
                "response_format or structured_outputs (send tool_choice='none' or no tools for structured output)"
            )
        xargs = dict(request.vllm_xargs or {})
        if EXTRA_ARGS_KEY in xargs:
            raise ValueError(
                f"toolgrammar: this server builds the constraint from the request's tools; remove "
                f"vllm_xargs[{EXTRA_ARGS_KEY!r}]"
            )
        try:
            head = render_head(  # once: what reasoning the turn starts with, and what a prefill adds, both read it
                self.model_tokenizer,
                _messages(request),
                tools=[tool.model_dump(exclude_none=True) for tool in request.tools],
                chat_template_kwargs=request.chat_template_kwargs,
                chat_template=request.chat_template,
            )
            spec = self._spec(request, head)
            self._take_over_request(request, spec, head)
        except ToolgrammarError as error:
            raise ValueError(f"toolgrammar: {error}") from error
        if spec.get("steer_to_blocks", False):
            self._check_steerable(spec)
        xargs[EXTRA_ARGS_KEY] = json.dumps(spec, ensure_ascii=False)
        request.vllm_xargs = xargs
        # The constraint applies the stops itself, where the turn may end (toolgrammar.runtime.stops):
        # vLLM would match them inside calls too and cut them.
        request.stop = []
        request.stop_token_ids = []
        # The markers are special tokens in some vocabularies; skipping them would hide the calls.
        request.skip_special_tokens = False
        return request

    def _take_over_request(self, request: Any, spec: dict[str, Any], head: str | None) -> None:
        """Move the request's stops and prefill into the spec, and refuse what the constraint cannot answer right
        (:func:`toolgrammar.integrations.serving.check_admission`)."""
        stop = request.stop
        if stop:
            spec["stop"] = [stop] if isinstance(stop, str) else list(stop)
        if request.stop_token_ids:
            spec["stop_token_ids"] = list(request.stop_token_ids)
        if getattr(request, "continue_final_message", False):
            prefix = assistant_prefill(
                self.model_tokenizer,
                _messages(request),
                tools=spec["tools"],
                chat_template_kwargs=request.chat_template_kwargs,
                chat_template=request.chat_template,
                head=head,
            )
            if prefix:
                spec["assistant_prefix"] = prefix
        budget = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
        check_admission(
            spec,
            vocabulary_of(self.model_tokenizer),
            max_tokens=budget,
            min_tokens=request.min_tokens or 0,
            ignore_eos=bool(request.ignore_eos),
            include_stop_str_in_output=bool(request.include_stop_str_in_output),
        )

    def _check_steerable(self, spec: dict[str, Any]) -> None:
        """Steering pools onto the block opener's first token: refuse (HTTP 400) where taking that token does not
        commit the turn to a block (:class:`toolgrammar.runtime.steering.CallPoints` says why)."""
        vocab = vocabulary_of(self.model_tokenizer)
        grammar = token_grammar(compiled_turn(spec), vocab)
        try:
            CallPoints(grammar, call_openers(vocab, get_format(self.format_name).markers.block_open))
        except ToolgrammarError as error:
            raise ValueError(
                f"toolgrammar: this request cannot be steered: {error}; send vllm_xargs {{{STEER_XARG!r}: false}} or "
                f"unset {STEER_ENV}"
            ) from error

    def _spec(self, request: Any, head: str | None = None) -> dict[str, Any]:
        """The request's constraint; its settings from its ``vllm_xargs``, else the server's environment."""
        xargs = request.vllm_xargs or {}
        tool_choice = request.tool_choice
        if hasattr(tool_choice, "model_dump"):
            tool_choice = tool_choice.model_dump()
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools]
        reasoning = prompt_reasoning(
            self.model_tokenizer,
            _messages(request),
            format=self.format_name,
            tools=tools,
            chat_template_kwargs=request.chat_template_kwargs,
            chat_template=request.chat_template,
            head=head,
        )
        return constraint_spec(
            tools,
            format=self.format_name,
            tool_choice=tool_choice,
            parallel_tool_calls=request.parallel_tool_calls,
            chat_template_kwargs=request.chat_template_kwargs,
            steer_to_blocks=request_setting(xargs, os.environ, STEER_XARG, STEER_ENV),
            lenient=request_setting(xargs, os.environ, LENIENT_XARG, LENIENT_ENV),
            reasoning=reasoning,
        )

    def _extractor(self, request: Any, streaming: bool) -> CallExtractor | StreamingCallExtractor | None:
        if not request.tools or request.tool_choice == "none":
            return None
        adjusted = _adjusted_spec(request)
        try:
            spec = adjusted or self._spec(request)
            tools = compiled_turn(spec).tools
        except ToolgrammarError as error:  # adjust_request refused it already; this is a request it never saw
            logger.error("toolgrammar: cannot parse this request's tool calls: %s", error)
            return None
        prefix = spec.get("assistant_prefix", "")
        if not streaming:
            return CallExtractor(tools, format=self.format_name, prefix=prefix)
        # Argument fragments cannot be taken back: only a constrained turn (adjust_request gave the processor its
        # spec, so every block closes as a valid call) streams them; any other arrives whole as its block closes.
        return StreamingCallExtractor(
            tools, format=self.format_name, prefix=prefix, stream_arguments=adjusted is not None
        )

    # -- whole turn ----------------------------------------------------------------------------------

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        extractor = self._extractor(request, streaming=False)
        if extractor is None:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)
        assert isinstance(extractor, CallExtractor)
        content, calls = extractor.extract(model_output)
        return ExtractedToolCallInformation(
            tools_called=bool(calls),
            tool_calls=[ToolCall(function=FunctionCall(name=c.name, arguments=c.arguments_json())) for c in calls],
            content=content,
        )

    # -- streaming -----------------------------------------------------------------------------------

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> DeltaMessage | None:
        if self._stream is None and not self._passthrough:
            stream = self._extractor(request, streaming=True)
            if stream is None:
                self._passthrough = True
            else:
                assert isinstance(stream, StreamingCallExtractor)
                self._stream = stream
        if self._stream is None:
            return DeltaMessage(content=delta_text) if delta_text else None
        return self._delta(*self._stream.feed(delta_text))

    def finish_streaming(self) -> DeltaMessage | None:
        if self._stream is None:
            return None
        return self._delta(*self._stream.finish())

    def _delta(self, content: str, pieces: list[CallDelta]) -> DeltaMessage | None:
        if not content and not pieces:
            return None
        deltas = []
        for piece in pieces:
            if piece.name is not None:  # a call's first piece: its index, id, type and name
                self._ids.append(make_tool_call_id())
                self.prev_tool_call_arr.append({"name": piece.name, "arguments": ""})
                self.streamed_args_for_tool.append("")
                function = DeltaFunctionCall(name=piece.name, arguments=piece.arguments)
                call_id = self._ids[piece.index]
                deltas.append(DeltaToolCall(index=piece.index, id=call_id, type="function", function=function))
            else:
                deltas.append(DeltaToolCall(index=piece.index, function=DeltaFunctionCall(arguments=piece.arguments)))
            # vLLM's end-of-stream bookkeeping sends what prev_tool_call_arr holds beyond streamed_args_for_tool:
            # every fragment is final and sent, so the two stay equal.
            self.streamed_args_for_tool[piece.index] += piece.arguments
            self.prev_tool_call_arr[piece.index]["arguments"] = self.streamed_args_for_tool[piece.index]
        if pieces:
            self.current_tool_id = pieces[-1].index
        return DeltaMessage(content=content or None, tool_calls=deltas)


def _messages(request: Any) -> list[Mapping[str, Any]]:
    """The request's messages as the mappings a chat template reads."""
    return [m if isinstance(m, Mapping) else m.model_dump(exclude_none=True) for m in request.messages]


def _adjusted_spec(request: Any) -> dict[str, Any] | None:
    """The spec :meth:`ToolgrammarToolParser.adjust_request` put into the request (``None``: it did not)."""
    raw = (getattr(request, "vllm_xargs", None) or {}).get(EXTRA_ARGS_KEY)
    if not isinstance(raw, str):
        return None
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return spec if isinstance(spec, dict) else None


def _constrains_format(response_format: Any) -> bool:
    kind = getattr(response_format, "type", None)
    return response_format is not None and kind not in (None, "text")


def _bases(format_name: str) -> tuple[type, ...]:
    """The parser class's bases. vLLM reads a gpt-oss (harmony) turn with its own token-level parser and takes
    only a ``GptOssToolParser`` beside it (``HarmonyParser``): there this parser's part is the constraint
    (``adjust_request``), and the calls come from harmony's parser."""
    if isinstance(get_format(format_name), GptOssFormat):
        return (ToolgrammarToolParser, GptOssToolParser)
    return (ToolgrammarToolParser,)


def _parser_classes() -> dict[str, type[ToolgrammarToolParser]]:
    """One parser class per registered format (:func:`toolgrammar.integrations.vllm_plugin.tool_parsers`),
    registered with vLLM under its ``toolgrammar_<format>`` name and bound in this module under its class name
    (where the plugin's lazy registration looks it up)."""
    classes = {}
    for name, (format_name, class_name) in tool_parsers().items():
        cls = type(
            class_name,
            _bases(format_name),
            {
                "format_name": format_name,
                "__doc__": f"``--tool-call-parser {name}``: the {format_name!r} format "
                f"(:mod:`toolgrammar.formats`), constrained and parsed.",
                "__module__": __name__,
            },
        )
        ToolParserManager.register_module(name)(cls)
        classes[class_name] = cls
    return classes


PARSER_CLASSES = _parser_classes()
"""Class name -> parser class, for every registered format."""
globals().update(PARSER_CLASSES)


def __getattr__(name: str) -> type[ToolgrammarToolParser]:
    # A format registered after this module was imported (register_format at server start) gets its class here.
    for parser, (format_name, class_name) in tool_parsers().items():
        if class_name == name:
            cls = PARSER_CLASSES.get(class_name)
            if cls is None:
                cls = type(class_name, _bases(format_name), {"format_name": format_name, "__module__": __name__})
                ToolParserManager.register_module(parser)(cls)
                PARSER_CLASSES[class_name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PARSER_CLASSES", "ToolgrammarToolParser"]
