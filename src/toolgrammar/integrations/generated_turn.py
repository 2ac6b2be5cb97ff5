"""What every one-call generation route returns and checks alike: :class:`GeneratedTurn`, :class:`GenerateError`,
and the checks of the messages, the chat-template arguments and the ``reasoning`` option (torch-free)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats.calls import ToolCall, TurnParse
from toolgrammar.formats.options import GrammarOptions, Reasoning

OWN_TEMPLATE_KWARGS = frozenset(
    {"conversation", "tools", "add_generation_prompt", "continue_final_message", "tokenize", "return_dict",
     "return_tensors", "padding", "truncation"}
)  # fmt: skip
"""Chat-template arguments the routes set themselves (text out, tools in, the generation prompt on)."""
GRAMMAR_OPTIONS = frozenset(field.name for field in dataclasses.fields(GrammarOptions))
"""Keyword arguments of a route that go to the grammar; every other one goes to the engine's generate."""


def split_options(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` as (grammar options, the engine's generate arguments)."""
    grammar = {k: v for k, v in kwargs.items() if k in GRAMMAR_OPTIONS}
    return grammar, {k: v for k, v in kwargs.items() if k not in GRAMMAR_OPTIONS}


class GenerateError(ToolgrammarError, ValueError):
    """Arguments :func:`generate_turn` cannot use; the message says which and why."""


@dataclass(frozen=True)
class GeneratedTurn:
    """One generated assistant turn, decoded as written and judged by the strict parser."""

    text: str
    """The assistant turn: ``assistant_prefix`` (or the prefilled assistant message's text) followed by
    the new tokens decoded without skipping special tokens, up to (not including) the end-of-turn token."""
    token_ids: tuple[int, ...]
    """The new tokens of this row, its end-of-turn token included when it wrote one, padding
    excluded; never more than ``max_new_tokens``."""
    parsed: TurnParse
    """:func:`~toolgrammar.turn.parser.parse_turn` of :attr:`text` (same format and tools as the grammar)."""
    prompt: str
    """The text the model continued: the rendered chat template plus ``assistant_prefix`` (or the
    prefilled assistant message's text)."""
    finish: Literal["stop", "length"]
    """``stop``: the model ended the turn; ``length``: it used the whole budget."""
    reasoning: Reasoning
    """The grammar's ``reasoning`` option this turn was generated under."""
    processor_error: str | None = None
    """Why the row left the grammar, when it did (a bug: the grammar never lets a row go astray)."""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The valid calls of the turn, in order (``parsed.tool_calls``)."""
        return self.parsed.tool_calls


def checked_messages(messages: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise GenerateError(
            f"{where} must be a list of chat messages ({{'role': ..., 'content': ...}} dicts), "
            f"got {type(messages).__name__}"
        )
    if not messages:
        raise GenerateError(f"{where} is empty: give at least one message")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise GenerateError(f"{where}[{i}] must be a message dict with a 'role' string, got {message!r:.100}")
    return list(messages)


def is_prefilled(chat: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the conversation ends with the assistant's message, which the turn continues."""
    return chat[-1].get("role") == "assistant"


def checked_template_kwargs(kwargs: Mapping[str, Any] | None, reasoning: Reasoning | None = None) -> dict[str, Any]:
    """The chat template's extra arguments, checked; with an explicit ``reasoning``, ``enable_thinking`` follows
    it where the arguments do not say, and must agree with it where they do (:class:`GenerateError`)."""
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise GenerateError(f"chat_template_kwargs must be a dict, got {type(kwargs).__name__}")
    own = sorted(OWN_TEMPLATE_KWARGS & set(kwargs))
    if own:
        raise GenerateError(
            f"chat_template_kwargs may not set {', '.join(own)}: generate_turn renders the prompt text with the "
            "tools and the generation prompt itself"
        )
    checked = dict(kwargs)
    if reasoning is not None:
        enable = checked.setdefault("enable_thinking", reasoning != "disabled")
        if bool(enable) != (reasoning != "disabled"):
            raise GenerateError(
                f"reasoning={reasoning!r} contradicts chat_template_kwargs enable_thinking={enable!r}: give one "
                "of them (the other follows), or make them agree"
            )
    return checked


def check_reasoning(reasoning: Reasoning, read: Reasoning) -> None:
    """Refuse an explicit ``reasoning`` that cannot continue the prompt, whose own reading is ``read``."""
    if read == "prefilled" and reasoning != "prefilled":
        problem = "ends inside a reasoning part it opened"
    elif reasoning == "prefilled" and read != "prefilled":
        problem = "does not end by opening a reasoning part"
    elif reasoning == "enabled" and read == "disabled":
        problem = "has already closed the reasoning part"
    else:
        return  # "disabled" where reasoning could come: the grammar just allows none
    raise GenerateError(
        f"reasoning={reasoning!r} does not continue the rendered prompt, which {problem}: use reasoning={read!r}, "
        "or reasoning=None to follow the prompt"
    )


__all__ = [
    "GRAMMAR_OPTIONS",
    "OWN_TEMPLATE_KWARGS",
    "GenerateError",
    "GeneratedTurn",
    "check_reasoning",
    "checked_messages",
    "checked_template_kwargs",
    "is_prefilled",
    "split_options",
]
