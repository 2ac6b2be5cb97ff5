"""One assistant turn with transformers, the token budget stated once: template, generate, decode, parse.

    from toolgrammar import generate_turn

    turn = generate_turn(model, tokenizer, messages, tools, max_new_tokens=256, tool_choice="auto")
    turn.parsed.tool_calls   # the valid calls; turn.text is the turn as the model wrote it

:func:`generate_turn` renders the chat template with the tools, builds a
:class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor` and calls ``model.generate`` with the *same*
``max_new_tokens`` (the processor closes every block within the budget it is told, so the two must
agree), decodes the new tokens without skipping special tokens, and parses the turn with
:func:`~toolgrammar.turn.parser.parse_turn` under the same format and tools. :func:`generate_turns` does the
same for several conversations in one left-padded batch.

The grammar's ``reasoning`` option follows the chat template: see :func:`generate_turns`, which
also says how stops, ``min_new_tokens`` and a prefilled assistant message are handled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.options import Reasoning, reasoning_after
from toolgrammar.integrations.generated_turn import (
    GeneratedTurn,
    GenerateError,
    check_reasoning,
    checked_messages,
    checked_template_kwargs,
    is_prefilled,
    split_options,
)
from toolgrammar.integrations.hf import ToolCallLogitsProcessor
from toolgrammar.integrations.serving import assistant_prefill, min_tokens_limit
from toolgrammar.schema import load_tools
from toolgrammar.turn.parser import parse_turn

__all__ = ["GenerateError", "GeneratedTurn", "generate_turn", "generate_turns"]

_OWN_GENERATE_KWARGS = {
    "input_ids": "the prompts are rendered and encoded from the messages",
    "attention_mask": "the prompts are rendered and encoded from the messages",
    "inputs": "the prompts are rendered and encoded from the messages",
    "inputs_embeds": "the prompts are rendered and encoded from the messages",
    "max_length": "the budget is max_new_tokens, given once",
}
"""``model.generate`` arguments this module sets itself, with why."""


def generate_turn(
    model: Any,
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    *,
    max_new_tokens: int,
    tool_choice: str = "auto",
    parallel_tool_calls: bool = True,
    format: str = "hermes",
    mode: str = "schema",
    reasoning: Reasoning | None = None,
    steer_to_blocks: bool = False,
    close_on_stop: bool = True,
    prefix_true: bool = False,
    assistant_prefix: str = "",
    chat_template_kwargs: Mapping[str, Any] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    **kwargs: Any,
) -> GeneratedTurn:
    """Generate the next assistant turn of one conversation, every tool call in it valid.

    The token budget is stated once: ``max_new_tokens`` is both the processor's budget (a block that
    has started always closes within it, and none starts that could not) and ``model.generate``'s.

    Parameters
    ----------
    model, tokenizer :
        A transformers causal LM and its tokenizer, which must have a chat template.
    messages :
        The conversation so far: a list of chat messages (``{"role": ..., "content": ...}`` dicts,
        tool calls and tool results as the chat template takes them). When the last one is the
        assistant's, the turn continues it (a prefill; see :func:`generate_turns`).
    tools :
        Anything :func:`toolgrammar.schema.loading.load_tools` takes (an OpenAI tool list, bare
        ``{"name", "parameters"}`` entries, a JSON file path, a ToolSet). The chat template is given
        them as an OpenAI tool list. Bad tools raise :class:`~toolgrammar.errors.ToolSchemaError`
        before anything is rendered or generated.
    max_new_tokens :
        The one budget of the turn.
    tool_choice, parallel_tool_calls, format, steer_to_blocks, close_on_stop, prefix_true, assistant_prefix :
        As for :class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor`; the parse uses the same ``format``.
        ``assistant_prefix`` is also appended to the rendered prompt, and starts :attr:`GeneratedTurn.text`;
        it cannot be combined with a prefilled assistant message (which gives the prefix itself).
    mode :
        ``"schema"`` or ``"strings"``: how the tools' arguments are checked, by the grammar and the parse.
    reasoning :
        The grammar's ``reasoning`` option; ``None`` (the default) reads it from the rendered prompt,
        see :func:`generate_turns`.
    chat_template_kwargs :
        Extra keyword arguments of ``tokenizer.apply_chat_template`` (``{"enable_thinking": False}``).
    stop_strings, stop_token_ids :
        Stops honoured where the grammar allows the end of the turn and nowhere else: they go to the
        processor, never to ``model.generate`` (whose ``stop_strings`` would cut a call in the
        middle). Where the turn may end, a token that would complete a stop string, or a stop token,
        gives its probability to the end-of-turn token, so the turn ends there with the end-of-turn
        token and the stop's text is not written; inside a block or the reasoning they are text like
        any other. See :func:`generate_turns`.
    **kwargs :
        The other grammar options (``whitespace``, ``max_whitespace``, ``escape_markers``,
        ``after_calls``, ``prose_first``), and any other keyword argument of ``model.generate``
        (``do_sample``, ``temperature``, ``top_p``, ``num_beams``, ``logits_processor`` for processors
        of your own, run before this one...).

    Returns
    -------
    GeneratedTurn
        The turn's text, its token ids, its :class:`~toolgrammar.formats.calls.TurnParse`, the prompt.

    Raises
    ------
    GenerateError
        Messages that are not a list of message dicts, a ``max_new_tokens`` that is not a positive
        int, arguments this function sets itself (``max_length``, ``input_ids``...), ``reasoning``
        contradicting ``enable_thinking`` or the rendered prompt, a tokenizer without chat template,
        a ``min_new_tokens`` (or ``min_length``) that would hold the model past the end of its turn,
        a prefilled assistant message together with ``assistant_prefix``.
    ToolSchemaError, GrammarError, ProcessorError
        Bad tools, bad grammar options, bad stops, a budget too small for the call a policy forces, a
        prefill (or ``assistant_prefix``) the grammar cannot continue.
    """
    return generate_turns(
        model,
        tokenizer,
        [checked_messages(messages, "messages")],
        tools,
        max_new_tokens=max_new_tokens,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        format=format,
        mode=mode,
        reasoning=reasoning,
        steer_to_blocks=steer_to_blocks,
        close_on_stop=close_on_stop,
        prefix_true=prefix_true,
        assistant_prefix=assistant_prefix,
        chat_template_kwargs=chat_template_kwargs,
        stop_strings=stop_strings,
        stop_token_ids=stop_token_ids,
        **kwargs,
    )[0]


def generate_turns(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    tools: Any,
    *,
    max_new_tokens: int,
    tool_choice: str = "auto",
    parallel_tool_calls: bool = True,
    format: str = "hermes",
    mode: str = "schema",
    reasoning: Reasoning | None = None,
    steer_to_blocks: bool = False,
    close_on_stop: bool = True,
    prefix_true: bool = False,
    assistant_prefix: str = "",
    chat_template_kwargs: Mapping[str, Any] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    **kwargs: Any,
) -> list[GeneratedTurn]:
    """:func:`generate_turn` for several conversations at once: one ``generate`` call, one turn each, in order.

    The prompts are left-padded by hand (the tokenizer's ``padding_side`` is neither read nor
    changed) and each row is decoded on its own, cut at its first end-of-turn token.

    ``reasoning`` and the chat template: with ``reasoning=None`` the option follows the rendered
    prompt. A prompt that ends by opening the reasoning (``<think>``) gives ``"prefilled"``; one that
    ends by closing it (Qwen3 with ``enable_thinking=False`` renders an empty ``<think></think>``),
    or ``chat_template_kwargs={"enable_thinking": False}``, gives ``"disabled"``; anything else
    ``"enabled"`` (the turn may open with ``<think>``). An explicit ``reasoning`` sets
    ``enable_thinking`` to ``reasoning != "disabled"`` when ``chat_template_kwargs`` does not say,
    and must agree with it and with the rendered prompt when it does (:class:`GenerateError`).

    End of turn: generation stops at the tokenizer's end-of-turn tokens (the ones the grammar ends
    a turn with) as well as the model's own ``eos_token_id``. ``stop_strings`` and ``stop_token_ids``
    are not ``generate``'s: the processor honours them, where the grammar allows the end of the turn
    (in free text under ``tool_choice="auto"``, after the calls under ``required`` or a named tool)
    and nowhere else. There the probability of the tokens that would stop goes to the end-of-turn
    token, so a stop ends the turn with that token (``finish="stop"``) and its text is not written;
    inside a block or the reasoning part a stop string is text like any other, so it never cuts a
    call. Stopping criteria of your own (``max_time``, a ``StoppingCriteria``) may still stop a row
    before a block closes: the budget guarantee is about ``max_new_tokens`` only.

    ``min_new_tokens`` (and ``min_length``, which counts the padded prompt too): transformers masks
    the end-of-turn token until that many new tokens are written, which would push the model past
    the end of a turn the grammar says is complete (there, the end of the turn is all the grammar
    allows), and a call may be complete after fewer tokens than any bound known ahead. So a value
    above 1 is refused (:class:`GenerateError`; above 0 where the turn's first token can only be its
    end; any value is fine under ``tool_choice="none"``, where free text can always go on). The
    model's ``generation_config`` (or a ``generation_config`` argument) is checked the same way.

    A prefilled assistant message: when a conversation's last message is the assistant's, the turn
    continues it. The prompt is the conversation before it rendered with the generation prompt,
    followed by the text the template writes for that message (rendered with
    ``continue_final_message=True``; for Qwen3 with thinking on, the empty ``<think>\\n\\n</think>\\n\\n``
    and the message's content). That text is the turn's ``assistant_prefix``: the grammar walks it
    and continues from where it ends (a prefill it cannot continue, such as an unknown tool's name,
    is a :class:`~toolgrammar.errors.ProcessorError`), and :attr:`GeneratedTurn.text` starts with it.
    ``reasoning`` is read from the prompt before the prefill. Every conversation of a batch must
    prefill the same text (or none), and ``assistant_prefix`` cannot be given as well.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise GenerateError(
            f"max_new_tokens must be a positive int (the turn's one budget, the processor's and generate's), "
            f"got {max_new_tokens!r}"
        )
    if isinstance(conversations, str | bytes | Mapping) or not isinstance(conversations, Sequence):
        raise GenerateError(
            f"conversations must be a list of conversations (each a list of message dicts), "
            f"got {type(conversations).__name__}"
        )
    if not conversations:
        raise GenerateError("conversations is empty: give at least one conversation")
    if all(isinstance(c, Mapping) for c in conversations):
        raise GenerateError(
            "conversations must be a list of conversations, each a list of message dicts; this looks like one "
            "conversation: use generate_turn(model, tokenizer, messages, tools, ...) or wrap it in a list"
        )
    chats = [checked_messages(c, f"conversations[{i}]") for i, c in enumerate(conversations)]
    grammar_options, generate_kwargs = split_options(kwargs)
    for name, why in _OWN_GENERATE_KWARGS.items():
        if name in generate_kwargs:
            raise GenerateError(f"{name} is set by generate_turn itself ({why}); leave it out")
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise GenerateError(
            "num_return_sequences must be 1 (one turn per conversation); to sample several turns of one "
            "conversation, repeat it in the conversations list"
        )
    template_kwargs = checked_template_kwargs(chat_template_kwargs, reasoning)
    if not getattr(tokenizer, "chat_template", None):
        raise GenerateError(
            f"the tokenizer ({type(tokenizer).__name__}) has no chat template: generate_turn renders the "
            "conversation with it; load the model's instruct tokenizer"
        )

    # Tools first: a bad schema fails before any rendering or compiling, and the template is shown the
    # same tools, in the OpenAI shape chat templates expect, that the grammar checks against.
    toolset = load_tools(tools, mode=mode)  # type: ignore[arg-type]
    markers = get_format(format).markers
    openai_tools = toolset.to_openai()
    prefix = _prefix(tokenizer, chats, openai_tools, template_kwargs, assistant_prefix)
    # A prefilled conversation's prompt is what comes before its last message, with the generation prompt: the
    # reasoning is read there, and the prefill is walked by the grammar as the turn's prefix.
    rendered = [
        tokenizer.apply_chat_template(
            chat[:-1] if is_prefilled(chat) else chat,
            tools=openai_tools,
            add_generation_prompt=True,
            tokenize=False,
            **template_kwargs,
        )
        for chat in chats
    ]
    enable_thinking = template_kwargs.get("enable_thinking")
    found = {
        reasoning_after(p, markers.think_open, markers.think_close, enable_thinking=enable_thinking) for p in rendered
    }
    if len(found) > 1:
        raise GenerateError(
            f"the rendered prompts disagree on reasoning ({sorted(found)}): some end inside a reasoning part and "
            "some do not; generate them in separate calls"
        )
    read = found.pop()
    if reasoning is None:
        reasoning = read
    else:
        check_reasoning(reasoning, read)

    processor = ToolCallLogitsProcessor(
        tokenizer,
        toolset,
        max_new_tokens=max_new_tokens,
        mode=mode,
        steer_to_blocks=steer_to_blocks,
        close_on_stop=close_on_stop,
        prefix_true=prefix_true,
        assistant_prefix=prefix,
        stop_strings=stop_strings,
        stop_token_ids=stop_token_ids,
        format=format,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        reasoning=reasoning,
        **grammar_options,
    )
    # The largest minimum length that cannot hold a complete turn past its end (None: any).
    limit = min_tokens_limit(processor.grammar, processor.start_state)
    choice = processor.turn_grammar.options.tool_choice
    config = generate_kwargs.get("generation_config") or getattr(model, "generation_config", None)
    at_least = generate_kwargs.get("min_new_tokens", getattr(config, "min_new_tokens", None))
    if limit is not None and isinstance(at_least, int) and at_least > limit:
        raise GenerateError(_held_past_the_end(f"min_new_tokens={at_least}", at_least, limit, choice))
    prompts = [p + prefix for p in rendered]
    sequences, width, end_ids = _generate(
        model, tokenizer, processor, prompts, max_new_tokens, generate_kwargs, limit=limit, choice=choice
    )
    # Under beam search the processor's rows are beams, not the returned rows: no per-row error then.
    errors = processor.errors if len(processor.errors) == len(prompts) else [None] * len(prompts)
    turns = []
    for row, (prompt, ids) in enumerate(zip(prompts, sequences, strict=True)):
        new = ids[width:]
        end = next((i for i, t in enumerate(new) if t in end_ids), None)
        kept = new if end is None else new[:end]
        # Never skip special tokens: free text may hold control tokens, and skipping them would glue
        # the text around one into markup the grammar never let through ("<tool" + "<|vision_start|>"
        # + "_call>" would read as a block opener). The parser must see what the grammar saw.
        text = prefix + tokenizer.decode(kept, skip_special_tokens=False)
        parsed = parse_turn(
            text, processor.turn_grammar.tools, format=format, reasoning_started=reasoning == "prefilled"
        )
        turns.append(
            GeneratedTurn(
                text=text,
                token_ids=tuple(kept if end is None else new[: end + 1]),
                parsed=parsed,
                prompt=prompt,
                finish="length" if end is None else "stop",
                reasoning=reasoning,
                processor_error=errors[row],
            )
        )
    return turns


def _prefix(
    tokenizer: Any,
    chats: list[list[Mapping[str, Any]]],
    tools: list[dict[str, Any]],
    template_kwargs: dict[str, Any],
    assistant_prefix: str,
) -> str:
    """The text already in the assistant turn: ``assistant_prefix``, or the one prefill every conversation shares."""
    prefilled = [i for i, chat in enumerate(chats) if is_prefilled(chat)]
    if not prefilled:
        return assistant_prefix
    if assistant_prefix:
        raise GenerateError(
            f"conversations[{prefilled[0]}] ends with an assistant message, which the turn continues (a prefill), "
            "and assistant_prefix is given too: give the turn's start one way, the message or assistant_prefix"
        )
    if len(prefilled) < len(chats):
        raise GenerateError(
            f"conversations[{prefilled[0]}] ends with an assistant message (a prefill) but "
            f"conversations[{next(i for i in range(len(chats)) if i not in prefilled)}] does not: the turns of one "
            "batch start from one grammar state; generate them in separate calls"
        )
    texts = []
    for i, chat in enumerate(chats):
        if len(chat) < 2:
            raise GenerateError(
                f"conversations[{i}] is only an assistant message: a prefill continues a conversation, give the "
                "messages before it"
            )
        try:
            texts.append(assistant_prefill(tokenizer, chat, tools=tools, chat_template_kwargs=template_kwargs))
        except GrammarError as error:
            raise GenerateError(f"conversations[{i}][-1]: {error}") from None
    if len(set(texts)) > 1:
        other = next(i for i, text in enumerate(texts) if text != texts[0])
        raise GenerateError(
            f"conversations[0] and conversations[{other}] prefill different text ({texts[0][-60:]!r} and "
            f"{texts[other][-60:]!r}): the turns of one batch start from one grammar state; generate them in "
            "separate calls"
        )
    return texts[0]


def _held_past_the_end(what: str, new_tokens: int, limit: int, choice: str) -> str:
    """Why a minimum length is refused, and the fix."""
    return (
        f"{what} could hold the model past the end of its turn: transformers masks the end-of-turn token until "
        f"{new_tokens} new tokens are written, but under tool_choice={choice!r} a call may be complete sooner, and "
        f"where a turn is complete the end of the turn is all the grammar allows; "
        + (f"lower it to at most {limit} new token, or remove it" if limit else "remove it")
    )


def _generate(
    model: Any,
    tokenizer: Any,
    processor: ToolCallLogitsProcessor,
    prompts: list[str],
    max_new_tokens: int,
    generate_kwargs: dict[str, Any],
    *,
    limit: int | None,
    choice: str,
) -> tuple[list[list[int]], int, frozenset[int]]:
    """Run ``model.generate`` on the left-padded prompts; the rows, the padded prompt width, the end ids.

    ``limit``: the most new tokens a minimum length may ask for
    (:func:`~toolgrammar.integrations.serving.min_tokens_limit`); a ``min_length`` (it counts the padded
    prompt too) that asks for more is refused here, where the width is known."""
    import torch
    from transformers import LogitsProcessorList

    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(ids) for ids in encoded)
    config = getattr(model, "generation_config", None)
    length_config = generate_kwargs.get("generation_config") or config
    at_least = generate_kwargs.get("min_length", getattr(length_config, "min_length", None))
    if limit is not None and isinstance(at_least, int) and at_least - width > limit:
        raise GenerateError(
            _held_past_the_end(
                f"min_length={at_least} ({at_least - width} new tokens after the {width}-token prompt)",
                at_least - width,
                limit,
                choice,
            )
        )
    # Stop at the grammar's end-of-turn tokens too: past one, a row is no longer constrained, and a
    # model whose generation config names other end tokens would go on writing unchecked text.
    configured = generate_kwargs.pop("eos_token_id", getattr(config, "eos_token_id", None))
    configured = [configured] if isinstance(configured, int) else list(configured or ())
    end_ids = frozenset(processor.vocab.eos_ids) | frozenset(configured)
    pad = generate_kwargs.pop("pad_token_id", None)
    if pad is None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else getattr(config, "pad_token_id", None)
    if pad is None:
        pad = min(end_ids)
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    device = getattr(model, "device", None)
    if device is not None:
        input_ids, attention = input_ids.to(device), attention.to(device)
    # The user's processors run first and this one last, so nothing after it hands a masked token
    # its probability back.
    own = generate_kwargs.pop("logits_processor", None) or []
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        logits_processor=LogitsProcessorList([*own, processor]),
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(end_ids),
        pad_token_id=pad,
        **generate_kwargs,
    )
    sequences = getattr(out, "sequences", out)  # return_dict_in_generate=True gives an output object
    return sequences.tolist(), width, end_ids
