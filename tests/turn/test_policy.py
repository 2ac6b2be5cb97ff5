"""The turn policy (:mod:`toolgrammar.turn.policy`): one description of the turn, lowered to two targets.

The engine's expression tree (:func:`toolgrammar.turn.grammar.turn_node`) and the xgrammar structural tag
(:func:`toolgrammar.turn.structural_tag.turn_structural_tag`) are both lowered from
:func:`~toolgrammar.turn.policy.turn_policy`. These tests hold the two lowerings to that: each lowers every
part type, each visits every part of the same policy object, neither reads an option or the format's
markup itself, and the tag keeps the exact JSON (and refusals) it had when it was written by hand.
Whether xgrammar accepts what the turn grammar accepts is checked in ``test_vllm.py``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from toolgrammar.automata.nodes import find_dispatches
from toolgrammar.errors import GrammarError
from toolgrammar.formats import get_format
from toolgrammar.formats.hermes import HermesFormat
from toolgrammar.formats.markers import Markers
from toolgrammar.formats.options import GrammarOptions, options_from_kwargs
from toolgrammar.schema import load_tools
from toolgrammar.turn import policy, structural_tag
from toolgrammar.turn.grammar import NodeLowering, turn_node
from toolgrammar.turn.structural_tag import _block_tag, _TagLowering, turn_structural_tag

TOOLS_FILE = Path(__file__).resolve().parents[2] / "examples" / "tools" / "seed_tools.json"
TOOLS = load_tools(json.loads(TOOLS_FILE.read_text(encoding="utf-8")))
LOWERINGS = (NodeLowering, _TagLowering)


class ThinkEndsAtBlock(HermesFormat):
    """hermes, but its parser also ends the reasoning at a block opener (as qwen-xml's does)."""

    name: ClassVar[str] = "think-ends-at-block"
    think_avoid: ClassVar[tuple[str, ...]] = ("</think>", "<tool_call>")


def _options(**kwargs: Any) -> GrammarOptions:
    return options_from_kwargs(**kwargs)


def _turn(options: GrammarOptions, fmt: Any = None, tools: Any = TOOLS) -> Any:
    """What turn_structural_tag reads of a TurnGrammar (its tools, options and format), without compiling."""
    return SimpleNamespace(tools=tools, options=options, format=fmt or get_format(options.format))


GRID = [
    {"tool_choice": c, "parallel_tool_calls": p, "reasoning": r, "after_calls": a, "prose_first": pf}
    for c, p, r, a in itertools.product(
        ("auto", "required", "none", "read_file"), (True, False), ("enabled", "disabled", "prefilled"), ("end", "text")
    )
    for pf in ((False, True) if c == "required" else (False,))
]
GRID_IDS = [
    f"{o['tool_choice']}-{'par' if o['parallel_tool_calls'] else 'one'}-{o['reasoning']}-{o['after_calls']}"
    + ("-prose" if o["prose_first"] else "")
    for o in GRID
]


# ------------------------------------------------------------------------------------------------
# Every part type has a rule in both targets
# ------------------------------------------------------------------------------------------------


def test_part_types_are_the_part_alias_and_each_has_a_lowering_method() -> None:
    assert set(typing.get_args(policy.Part)) == set(policy.PART_TYPES)
    assert set(policy._METHODS) == set(policy.PART_TYPES)
    assert set(policy._METHODS.values()) == set(policy.Lowering.__abstractmethods__)


@pytest.mark.parametrize("lowering", LOWERINGS, ids=lambda c: c.__name__)
def test_each_target_lowers_every_part_type_itself(lowering: type) -> None:
    assert not inspect.isabstract(lowering)
    missing = [name for name in policy._METHODS.values() if name not in lowering.__dict__]
    assert not missing, f"{lowering.__name__} does not lower {missing}"


def test_a_part_type_without_a_method_is_refused() -> None:
    methods = {n: (lambda self, part: None) for n in policy._METHODS.values() if n != "newlines"}
    incomplete = type("Incomplete", (policy.Lowering,), methods)  # every method but one
    with pytest.raises(TypeError, match="newlines"):
        incomplete()
    with pytest.raises(TypeError, match="not a part"):
        NodeLowering()("text")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Both lowerings walk the same policy object, all of it
# ------------------------------------------------------------------------------------------------


def _spy_lowerings(monkeypatch: pytest.MonkeyPatch, fixed: policy.TurnPolicy) -> dict[str, set[int]]:
    """Make turn_policy return ``fixed``; record, per lowering class, the ids of the parts it lowers."""
    seen: dict[str, set[int]] = {}
    original = policy.Lowering.__call__

    def spy(self: policy.Lowering[Any], part: policy.Part) -> Any:
        seen.setdefault(type(self).__name__, set()).add(id(part))
        return original(self, part)

    monkeypatch.setattr(policy, "turn_policy", lambda tools, options, fmt: fixed)
    monkeypatch.setattr(policy.Lowering, "__call__", spy)
    return seen


@pytest.mark.parametrize("kwargs", GRID, ids=GRID_IDS)
def test_both_lowerings_walk_every_part_of_the_same_policy(
    kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = _options(**kwargs)
    fmt = get_format("hermes")
    fixed = policy.turn_policy(TOOLS, options, fmt)
    every = {id(p) for p in fixed.parts()}
    seen = _spy_lowerings(monkeypatch, fixed)
    turn_node(TOOLS, options, fmt)
    turn_structural_tag(_turn(options, fmt))
    assert seen == {"NodeLowering": every, "_TagLowering": every}


def test_the_grid_uses_every_part_type() -> None:
    used: set[type] = set()
    for kwargs in GRID:
        used.update(type(p) for p in policy.turn_policy(TOOLS, _options(**kwargs), get_format("hermes")).parts())
    used.update(type(p) for p in policy.turn_policy(TOOLS, _options(), ThinkEndsAtBlock()).parts())
    assert used == set(policy.PART_TYPES)


def test_a_block_that_ends_the_reasoning_is_lowered_for_the_engine_and_refused_by_the_tag() -> None:
    fmt = ThinkEndsAtBlock()
    options = _options()
    turn = policy.turn_policy(TOOLS, options, fmt)
    reasoning = next(p for p in turn.parts() if isinstance(p, policy.Reasoning))
    assert reasoning.ends_at_block and reasoning.unclosed_then is not None
    lowering = NodeLowering()
    lowering(turn.turn)
    assert lowering.lowered == {id(p) for p in turn.parts()}
    with pytest.raises(GrammarError, match="format's reasoning, which a block may end"):
        turn_structural_tag(_turn(options, fmt))
    # With no calls in the turn the reasoning still may not hold the opener; the tag refuses it all the same.
    none = policy.turn_policy(TOOLS, _options(tool_choice="none"), fmt)
    reasoning = next(p for p in none.parts() if isinstance(p, policy.Reasoning))
    assert reasoning.ends_at_block and reasoning.unclosed_then is None
    with pytest.raises(GrammarError, match="format's reasoning"):
        turn_structural_tag(_turn(_options(tool_choice="none"), fmt))
    assert turn_structural_tag(_turn(_options(reasoning="disabled"), fmt))["type"] == "structural_tag"


# ------------------------------------------------------------------------------------------------
# The decisions live in turn_policy: the lowerings read no option and no markup
# ------------------------------------------------------------------------------------------------

DECISION_ATTRIBUTES = (
    set(GrammarOptions.__dataclass_fields__) - {"format"}  # ``format`` also names the format object and its name
) | {
    "named_tool",
    "selected_tools",
    "markers",
    "free_text_avoid",
    "free_text_not_prefixed",
    "think_avoid",
    "block_grammar",
    *Markers.__dataclass_fields__,
}


def _attributes_read(obj: Any) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


@pytest.mark.parametrize(
    "obj",
    [turn_node, NodeLowering, turn_structural_tag, structural_tag._refuse_unsayable, _TagLowering],
    ids=lambda o: o.__qualname__,
)
def test_the_lowerings_decide_nothing(obj: Any) -> None:
    read = _attributes_read(obj) & DECISION_ATTRIBUTES
    assert not read, f"{obj.__qualname__} reads {sorted(read)}: make that decision in policy.turn_policy"


# ------------------------------------------------------------------------------------------------
# What turn_policy decides
# ------------------------------------------------------------------------------------------------


def test_call_first_reasoning_allows_the_templates_newlines_and_shares_the_calls() -> None:
    turn = policy.turn_policy(TOOLS, _options(tool_choice="required"), get_format("hermes")).turn
    assert isinstance(turn, policy.OneOf)
    reasoning, no_reasoning = turn.items
    assert isinstance(reasoning, policy.Reasoning) and isinstance(no_reasoning, policy.NotStartingWith)
    assert reasoning.opener == "<think>" and not reasoning.may_stop and no_reasoning.word == "<think>"
    assert isinstance(reasoning.then, policy.Sequence)
    newlines, calls = reasoning.then.items
    assert newlines == policy.Newlines(0, 2)
    assert calls is no_reasoning.item  # one part: the engine compiles its tool dispatch once


@pytest.mark.parametrize("kwargs", GRID, ids=GRID_IDS)
def test_cut_points_and_reasoning_follow_the_options(kwargs: dict[str, Any]) -> None:
    options = _options(**kwargs)
    turn = policy.turn_policy(TOOLS, options, get_format("hermes"))
    parts = list(turn.parts())
    cut_ok = options.tool_choice in ("auto", "none")
    reasonings = [p for p in parts if isinstance(p, policy.Reasoning)]
    assert len(reasonings) == (options.reasoning != "disabled")
    for r in reasonings:
        assert r.may_stop == cut_ok
        assert (r.opener is None) == (options.reasoning == "prefilled")
    texts = [p for p in parts if isinstance(p, policy.FreeText)]
    assert all(t.safe for t in texts if not options.prose_first)
    assert [t.safe for t in texts if not t.safe] == ([False] if options.prose_first else [])
    blocks = [p for p in parts if isinstance(p, policy.Blocks)]
    assert len(blocks) == (options.tool_choice != "none")
    assert all(b.parallel == options.parallel_tool_calls for b in blocks)


def test_an_empty_tool_list_has_no_blocks_and_cannot_be_required() -> None:
    empty = load_tools([])
    for choice in ("auto", "none"):
        turn = policy.turn_policy(empty, _options(tool_choice=choice), get_format("hermes"))
        assert not any(isinstance(p, policy.Blocks) for p in turn.parts())
    with pytest.raises(GrammarError, match="needs at least one tool"):
        policy.turn_policy(empty, _options(tool_choice="required"), get_format("hermes"))


def test_the_policy_is_immutable() -> None:
    turn = policy.turn_policy(TOOLS, _options(), get_format("hermes"))
    with pytest.raises(AttributeError):
        turn.text.safe = False  # type: ignore[misc]


@pytest.mark.parametrize("kwargs", GRID, ids=GRID_IDS)
def test_the_engine_compiles_each_tool_dispatch_once(kwargs: dict[str, Any]) -> None:
    fmt = ThinkEndsAtBlock()  # its blocks appear twice: after the content and straight after the reasoning
    options = _options(**kwargs)
    block = fmt.block_grammar(TOOLS, options)
    node = turn_node(TOOLS, options, fmt)
    expected = 0 if options.tool_choice == "none" else len(find_dispatches(block))
    assert len(find_dispatches(node)) == expected


# ------------------------------------------------------------------------------------------------
# The structural tag: the same JSON as the hand-written exporter it replaced
# ------------------------------------------------------------------------------------------------


def _any(*excludes: str) -> dict[str, Any]:
    return {"type": "any_text", "excludes": list(excludes)}


def _seq(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sequence", "elements": list(elements)}


def _or(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "or", "elements": list(elements)}


def _opt(content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "optional", "content": content}


def _block(options: GrammarOptions) -> dict[str, Any]:
    return _block_tag(get_format("hermes").block_grammar(TOOLS, options), "<tool_call>", "</tool_call>")


def _many(block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tags_with_separator", "tags": [block], "separator": "\n", "at_least_one": True}


FREE = _any("<tool_call>")
NEWLINES = {"type": "regex", "pattern": "\\n{0,2}"}
TRAILING = {"type": "regex", "pattern": "\\n{0,1}"}  # a newline after the last block, before the end


def _calls(blocks: dict[str, Any]) -> dict[str, Any]:
    """The blocks, then what may end them when the turn ends there (``after_calls="end"``)."""
    return _seq(blocks, TRAILING)


def _thought(begin: str) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": _any(), "end": "</think>"}


UNFINISHED = _seq({"type": "const_string", "value": "<think>"}, _any("</think>"))

PINNED = [
    pytest.param(
        {},
        lambda b: _or(
            _seq(_thought("<think>"), _seq(FREE, _opt(_calls(_many(b))))),
            UNFINISHED,
            _seq(FREE, _opt(_calls(_many(b)))),
        ),
        id="auto",
    ),
    pytest.param({"tool_choice": "none"}, lambda b: _or(_seq(_thought("<think>"), FREE), UNFINISHED, FREE), id="none"),
    pytest.param(
        {"tool_choice": "none", "reasoning": "prefilled"},
        lambda b: _or(_seq(_thought(""), FREE), _any("</think>")),
        id="none-prefilled",
    ),
    pytest.param(
        {"tool_choice": "required", "reasoning": "disabled", "parallel_tool_calls": False},
        lambda b: _calls(b),
        id="required-one-disabled",
    ),
    pytest.param(
        {"tool_choice": "required"},
        lambda b: _or(_seq(_thought("<think>"), _seq(NEWLINES, _calls(_many(b)))), _calls(_many(b))),
        id="required",
    ),
    pytest.param(
        {"tool_choice": "required", "reasoning": "prefilled", "after_calls": "text"},
        lambda b: _seq(_thought(""), _seq(NEWLINES, _seq(_many(b), FREE))),
        id="required-prefilled-text",
    ),
    pytest.param(
        {"tool_choice": "required", "prose_first": True, "after_calls": "text", "reasoning": "disabled"},
        lambda b: _seq(FREE, _seq(_many(b), FREE)),
        id="required-prose-first-text",
    ),
    pytest.param(
        {"tool_choice": "read_file", "parallel_tool_calls": False, "reasoning": "prefilled"},
        lambda b: _seq(_thought(""), _seq(NEWLINES, _calls(b))),
        id="named-prefilled",
    ),
]


@pytest.mark.parametrize(("kwargs", "expected"), PINNED)
def test_structural_tag_keeps_its_json(kwargs: dict[str, Any], expected: Any) -> None:
    options = _options(**kwargs)
    tag = structural_tag.structural_tag(json.loads(TOOLS_FILE.read_text(encoding="utf-8")), cache=False, **kwargs)
    assert tag == {"type": "structural_tag", "format": expected(_block(options))}


@pytest.mark.parametrize(
    ("fmt", "kwargs", "match"),
    [
        pytest.param("qwen-xml", {}, "'qwen-xml' format: its free text must not start with '<function='", id="qwen"),
        # The format is refused even where this turn holds no free text (the first refusal wins, as before).
        pytest.param(
            "qwen-xml",
            {"tool_choice": "required", "reasoning": "disabled"},
            "free text must not start with",
            id="qwen-call-first",
        ),
        pytest.param("hermes", {"escape_markers": True}, "a block holds text that must avoid", id="escape-markers"),
    ],
)
def test_structural_tag_refuses_what_it_cannot_say(fmt: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(GrammarError, match=match):
        structural_tag.structural_tag(
            json.loads(TOOLS_FILE.read_text(encoding="utf-8")), format=fmt, cache=False, **kwargs
        )


def test_vllm_reexports_the_structural_tag() -> None:
    from toolgrammar.integrations import vllm

    assert vllm.structural_tag is structural_tag.structural_tag
    assert vllm.turn_structural_tag is structural_tag.turn_structural_tag
    assert vllm.xgrammar_regex is structural_tag.xgrammar_regex


# ------------------------------------------------------------------------------------------------
# Import weight
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module", ["toolgrammar.turn.policy", "toolgrammar.turn.grammar", "toolgrammar.turn.structural_tag"]
)
def test_policy_and_its_lowerings_import_no_framework(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "from toolgrammar.turn.structural_tag import structural_tag\n"
        "structural_tag([{'name': 'f', 'parameters': {'type': 'object', 'properties': {'a': {'type': 'string'}}}}],"
        " cache=False)\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'vllm', 'xgrammar') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulled in {out.stdout.strip()}"


class Wrapped(HermesFormat):
    """hermes, but its content is wrapped in a channel and a closer may end the turn (as kimi-k3's)."""

    name: ClassVar[str] = "wrapped"
    content_wrapper: ClassVar[tuple[str, str] | None] = ("<r>", "</r>")
    turn_close: ClassVar[str | None] = "</m>"


@pytest.mark.parametrize("reasoning", ["enabled", "disabled", "prefilled"])
def test_a_wrapped_content_and_a_turn_closer_are_lowered_by_every_target(reasoning: str) -> None:
    from toolgrammar.turn.exports import _RuleLowering

    options = _options(reasoning=reasoning)
    fixed = policy.turn_policy(TOOLS, options, Wrapped())
    texts = [p for p in fixed.parts() if isinstance(p, policy.FreeText)]
    assert texts and all(p.wrapper is not None and "</r>" in p.avoid for p in texts)
    first = texts[0].wrapper
    assert first == (("", "</r>") if reasoning == "disabled" else ("<r>", "</r>"))
    assert {p.before for p in fixed.parts() if isinstance(p, policy.End)} == {"</m>"}
    assert NodeLowering()(fixed.turn) is not None and _RuleLowering(fixed)(fixed.turn) is not None
    lowering = _TagLowering("wrapped")
    assert lowering(texts[0])["type"] == ("tag" if reasoning == "disabled" else "optional")
    with pytest.raises(GrammarError, match="right before the end of the turn"):
        turn_structural_tag(_turn(options, Wrapped()))
    # Every other format's policy has neither.
    plain = policy.turn_policy(TOOLS, options, get_format("hermes"))
    assert all(getattr(p, "wrapper", None) is None and getattr(p, "before", None) is None for p in plain.parts())
