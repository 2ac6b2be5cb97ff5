"""Judging: the verdicts on one assistant turn (strict parse, other-shape calls, an unclosed block's call)
and the counts of a run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgrammar.evaluate.compare.config import CompareConfig, Task
from toolgrammar.evaluate.other_shapes import find_other_shape_calls
from toolgrammar.evaluate.sandbox import Sandbox
from toolgrammar.formats import get_format
from toolgrammar.formats.calls import Block, TurnParse
from toolgrammar.turn.parser import parse_turn


def _norm_argument(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        while text.startswith("./"):
            text = text[2:]
        return text.rstrip("/") or text
    return value


def arguments_match(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Every expected argument present with the same value (paths compared without ``./`` or a trailing ``/``)."""
    return all(k in actual and _norm_argument(actual[k]) == _norm_argument(v) for k, v in expected.items())


@dataclass
class Conversation:
    task: Task
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    sandbox: Sandbox | None = None


def _parse(text: str, tools: Any, config: CompareConfig) -> TurnParse:
    return parse_turn(
        text, tools, format=config.format, mode=config.parse_mode, reasoning_started=config.reasoning == "prefilled"
    )


def _inside_unclosed(text: str, parse: TurnParse, tools: Any, config: CompareConfig) -> dict[str, Any] | None:
    """The verdict on the call inside a turn's last block when the turn ended before closing it.

    Such a block is ``truncated``, and that is its error; what the model wrote inside it (an unknown
    tool, an invented argument...) is judged too, by parsing the turn once more with the format's
    closer appended. ``None`` when the turn has no unclosed block; else ``{"kind": KIND | None,
    "call": {"name", "arguments"} | None}`` (``kind`` ``None``: the call inside would be valid).
    """
    if not parse.blocks or parse.blocks[-1].closed:
        return None
    closed = _parse(get_format(config.format).closed_cut_block(text), tools, config)
    if len(closed.blocks) != len(parse.blocks) or not closed.blocks[-1].closed:
        return {"kind": "truncated", "call": None}
    block = closed.blocks[-1]
    return {
        "kind": block.error.kind if block.error else None,
        "call": block.call.to_dict() if block.call else None,
    }


def judge_turn(text: str, tools: Any, config: CompareConfig) -> dict[str, Any]:
    """The verdicts on one assistant turn's text: its parse, its other-shape calls, its unclosed block."""
    return parse_and_judge_turn(text, tools, config)[1]


def parse_and_judge_turn(text: str, tools: Any, config: CompareConfig) -> tuple[TurnParse, dict[str, Any]]:
    """The turn's parse and :func:`judge_turn`'s verdicts on it."""
    parse = _parse(text, tools, config)
    return parse, {
        "parse": parse.to_dict(),
        "block_names": [_block_name(b, config) for b in parse.blocks],
        "error_kinds": [e.kind for e in parse.errors],
        "errors": [e.message for e in parse.errors],
        "other_shape_calls": [c.to_dict() for c in find_other_shape_calls(parse.content, tools)],
        "inside_unclosed": _inside_unclosed(text, parse, tools, config),
    }


def budget_closed(turn: Mapping[str, Any]) -> bool:
    """Whether the turn's last block was closed by the budget: the turn used every token, and its text ends
    with that block, closed (a value that grew until the budget made the block close: a run-away)."""
    blocks = turn["parse"]["blocks"]
    if turn["finish"] != "length" or not blocks or not blocks[-1]["closed"]:
        return False
    return blocks[-1]["end"] >= len(turn["text"].rstrip())


def rejudge_run(record: Mapping[str, Any], task: Task, tools: Any, config: CompareConfig) -> dict[str, Any]:
    """A run record judged again from its turns' texts by the current judge (older reports, benches)."""
    turns = [{**t, **judge_turn(t["text"], tools, config)} for t in record["turns"]]
    return summarize_run(Conversation(task, [], turns, stop=record["stop"]))


def _intended_calls(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls one turn meant to make, in order: its blocks and its calls in other shapes.

    Each is ``{"name", "arguments", "valid", "shape"}``; ``arguments`` is ``None`` when the call
    could not be read, ``valid`` says whether it ran (a valid block). Blocks sit at their offset in
    the turn, other shapes at theirs in the content (the turn less its markup), close enough to order
    the two.
    """
    calls = []
    inside = turn.get("inside_unclosed") or {}
    for block, block_name in zip(turn["parse"]["blocks"], turn["block_names"], strict=True):
        call = block["call"]
        name = call["name"] if call else block_name
        arguments = call["arguments"] if call else None
        if not block["closed"] and inside.get("call"):
            arguments = inside["call"]["arguments"]  # cut before its closer, but its arguments can be read
        calls.append(
            (block["start"], {"name": name, "arguments": arguments, "valid": call is not None, "shape": "block"})
        )
    for other in turn["other_shape_calls"]:
        arguments = other["call"]["arguments"] if other["call"] else None
        calls.append(
            (other["start"], {"name": other["name"], "arguments": arguments, "valid": False, "shape": other["shape"]})
        )
    return [c for _, c in sorted(calls, key=lambda item: item[0])]


def _block_name(block: Block, config: CompareConfig) -> str | None:
    """The tool name a block gives: its call's, else what the format reads from the invalid block's text."""
    if block.call is not None:
        return block.call.name
    return get_format(config.format).block_name(block.raw)


def summarize_run(conversation: Conversation) -> dict[str, Any]:
    task = conversation.task
    turns = conversation.turns
    blocks = sum(len(t["parse"]["blocks"]) for t in turns)
    kinds = Counter(k for t in turns for k in t["error_kinds"])
    calls = [c for t in turns for c in t["parse"]["tool_calls"]]
    first = calls[0] if calls else None
    intended = [c for t in turns for c in _intended_calls(t)]
    first_intended = intended[0] if intended else None
    expected_tool, expected_arguments = task.expected_tool, task.expected_arguments

    def named(call: Mapping[str, Any] | None) -> bool:
        return bool(call and call["name"] == expected_tool)

    def with_arguments(call: Mapping[str, Any] | None) -> bool:
        return bool(
            named(call)
            and call is not None
            and isinstance(call.get("arguments"), dict)
            and arguments_match(expected_arguments or {}, call["arguments"])
        )

    has_tool, has_arguments = expected_tool is not None, expected_arguments is not None
    others = [c for t in turns for c in t["other_shape_calls"]]
    return {
        "turns": turns,
        "n_turns": len(turns),
        "stop": conversation.stop or "turn-limit",
        "blocks": blocks,
        "valid_calls": len(calls),
        "error_kinds": dict(kinds),
        "made_call": blocks > 0,
        "other_shape_calls": others,
        "other_shape_inner_kinds": dict(Counter(c["error"]["kind"] for c in others if c["error"])),
        "unclosed_inner_kinds": dict(
            Counter(
                t["inside_unclosed"]["kind"] or "valid"
                for t in turns
                if t.get("inside_unclosed") and t["inside_unclosed"]["kind"] != "truncated"
            )
        ),
        "intended_calls": len(intended),
        "first_call": first,
        "first_intended_call": first_intended,
        "expected_tool_hit": named(first) if has_tool else None,
        "expected_arguments_hit": with_arguments(first) if has_arguments else None,
        "expected_tool_any_shape_hit": named(first_intended) if has_tool else None,
        "expected_arguments_any_shape_hit": with_arguments(first_intended) if has_arguments else None,
        "tokens": sum(t["tokens"] for t in turns),
        "truncated_turns": sum(t["finish"] == "length" for t in turns),
        "budget_closed_blocks": sum(budget_closed(t) for t in turns),
        "processor_errors": [t["processor_error"] for t in turns if t["processor_error"]],
        # .get: turns recorded before the count existed are re-judged too (bench/quality.py --resume)
        "stop_closes": sum(t.get("stop_closes", 0) for t in turns),
    }
