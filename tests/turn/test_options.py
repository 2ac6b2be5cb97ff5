"""Every grammar option is type-checked: a wrong type is a clear GrammarError, never a silent truthy value."""

from __future__ import annotations

import pytest

from toolgrammar.errors import GrammarError
from toolgrammar.formats.options import GrammarOptions
from toolgrammar.turn.grammar import compile_turn

TOOLS = [{"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("parallel_tool_calls", "no", "parallel_tool_calls must be True or False, got 'no' (str)"),
        ("parallel_tool_calls", 0, "parallel_tool_calls must be True or False, got 0 (int)"),
        ("parallel_tool_calls", None, "parallel_tool_calls must be True or False"),
        ("escape_markers", "false", "escape_markers must be True or False, got 'false' (str)"),
        ("prose_first", "yes", "prose_first must be True or False"),
        ("max_whitespace", "2", "max_whitespace must be an integer, got '2' (str)"),
        ("max_whitespace", 2.0, "max_whitespace must be an integer, got 2.0 (float)"),
        ("max_whitespace", True, "max_whitespace must be an integer, got True (bool)"),
        ("format", 1, "format must be a string, got 1 (int)"),
        ("reasoning", False, "reasoning must be a string, got False (bool)"),
        ("reasoning", ["enabled"], "reasoning must be a string"),
        ("whitespace", None, "whitespace must be a string, got None"),
        ("after_calls", 0, "after_calls must be a string"),
        ("tool_choice", 1, "tool_choice must be 'auto', 'required', 'none' or a tool name, got 1"),
    ],
)
def test_options_of_the_wrong_type_are_refused(option: str, value: object, message: str) -> None:
    with pytest.raises(GrammarError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        GrammarOptions(**{option: value})  # type: ignore[arg-type]
    with pytest.raises(GrammarError):
        compile_turn(TOOLS, cache=False, **{option: value})


def test_options_of_the_right_type_are_accepted() -> None:
    options = GrammarOptions(parallel_tool_calls=False, escape_markers=True, max_whitespace=3, whitespace="flexible")
    assert options.parallel_tool_calls is False and options.max_whitespace == 3
    assert compile_turn(TOOLS, cache=False, parallel_tool_calls=False).options.parallel_tool_calls is False
