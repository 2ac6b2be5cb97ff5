"""The size estimate refuses schemas whose automaton would explode, before building any automaton.

Refusals are proved early by operation counts (the compiler is replaced by a function that fails the
test), never by wall-clock time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolgrammar import automata as automaton
from toolgrammar.automata import compile as automata_compile
from toolgrammar.automata import size, subset
from toolgrammar.automata.size import MAX_ESTIMATED_SIZE, estimate_size
from toolgrammar.errors import SchemaTooLargeError, ToolSchemaError
from toolgrammar.formats import get_format
from toolgrammar.formats.options import options_from_kwargs
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import compile_turn

from toolsets import TOOLSETS

ROOT = Path(__file__).resolve().parents[2]


def _tool(parameters: dict[str, Any], name: str = "big") -> list[dict[str, Any]]:
    return [{"name": name, "parameters": parameters}]


def optional_strings(n: int) -> list[dict[str, Any]]:
    return _tool({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}})


def array_of_objects(max_items: int, min_items: int = 0) -> list[dict[str, Any]]:
    item = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
        "required": ["a", "b", "c"],
    }
    xs = {"type": "array", "items": item, "minItems": min_items, "maxItems": max_items}
    return _tool({"type": "object", "properties": {"xs": xs}, "required": ["xs"]})


def nested_arrays(max_items: int, depth: int = 3, min_items: int = 0) -> list[dict[str, Any]]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": min_items, "maxItems": max_items}
    return _tool({"type": "object", "properties": {"x": schema}, "required": ["x"]})


EXPLODING = [
    # (tools, options, pointer, keyword, remedy): the shapes of issue 11, item 3. The arrays there (maxItems
    # 200 objects; 10 x 10 x 10) are now built an item at a time (test_long_arrays_...): with every item
    # required (minItems = maxItems) nothing is left to build later, and they are still refused.
    (optional_strings(1000), {}, "", "required", "mark fewer properties optional (1000 of 1000"),
    (optional_strings(200), {"format": "qwen-xml"}, "", "required", "mark fewer properties optional (200 of 200"),
    (array_of_objects(200, 200), {}, "/properties/xs", "maxItems", "lower maxItems (now 200; about"),
    (nested_arrays(10, min_items=10), {}, "/properties/x", "maxItems", "flatten the nesting"),
    (nested_arrays(10, min_items=10), {"format": "qwen-xml"}, "/properties/x", "maxItems", "flatten the nesting"),
]


@pytest.mark.parametrize(
    ("tools", "options", "pointer"),
    [
        (array_of_objects(200), {}, "/properties/xs"),
        (nested_arrays(10), {}, "/properties/x"),
        (nested_arrays(10), {"format": "qwen-xml"}, "/properties/x"),
    ],
)
def test_long_arrays_compile_an_item_at_a_time_instead_of_being_refused(
    tools: Any, options: dict[str, Any], pointer: str
) -> None:
    """The arrays issue 11 listed as exploding: estimated whole past the limit, so built an item at a time
    (``automaton.LAZY_REPEAT_FROM``): their estimate is then the items every value has and one more, under the
    limit, and they compile (walks through them: ``test_lazy.py``)."""
    toolset = load_tools(tools)
    fmt = get_format(options.get("format", "hermes"))
    block = fmt.block_grammar(toolset, options_from_kwargs(**options))
    assert estimate_size(block) < MAX_ESTIMATED_SIZE
    lazy = [n for n in _repeats(block) if automaton.lazy_repeat(n)]
    assert lazy, "no repeat of the arrays is built an item at a time"
    compile_turn(tools, cache=False, **options)


def _repeats(node: automaton.Node) -> list[automaton.Repeat]:
    return [n for n in automaton.nodes_of(node) if isinstance(n, automaton.Repeat)]


@pytest.fixture
def no_automaton(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail on any automaton construction: NFA states, DFA compiles (the refusal must come first)."""
    calls: list[str] = []

    def refuse(*_args: object, **_kwargs: object) -> None:
        calls.append("built")
        raise AssertionError("an automaton was built before the size check refused the schema")

    monkeypatch.setattr(automata_compile, "compile_dfa", refuse)
    monkeypatch.setattr("toolgrammar.automata.skeleton.compile_dfa", refuse)
    monkeypatch.setattr("toolgrammar.turn.grammar.compile_dfa", refuse)
    monkeypatch.setattr(subset._NFA, "new", refuse)
    return calls


@pytest.mark.parametrize(("tools", "options", "pointer", "keyword", "remedy"), EXPLODING)
def test_exploding_schemas_are_refused_before_any_automaton(
    no_automaton: list[str], tools: Any, options: dict[str, Any], pointer: str, keyword: str, remedy: str
) -> None:
    with pytest.raises(SchemaTooLargeError) as info:
        compile_turn(tools, cache=False, **options)
    error = info.value
    assert no_automaton == []
    assert isinstance(error, ToolSchemaError)  # callers catching schema errors catch this one too
    assert (error.tool, error.pointer, error.keyword) == ("big", pointer, keyword)
    assert error.limit == MAX_ESTIMATED_SIZE < error.estimate
    message = str(error)
    assert message.startswith("tool 'big'")
    assert (f"at {pointer}:" in message) if pointer else ("the arguments schema (/)" in message)
    assert f"estimated at {error.estimate:,} states" in message
    assert "MAX_ESTIMATED_SIZE" in message
    assert remedy in message


def test_the_smallest_part_over_the_limit_is_named(no_automaton: list[str]) -> None:
    # Many optional properties, one of them an oversized array: the array is named, not the object.
    props: dict[str, Any] = {f"p{i}": {"type": "string"} for i in range(5)}
    props["deep"] = nested_arrays(10, min_items=10)[0]["parameters"]["properties"]["x"]
    with pytest.raises(SchemaTooLargeError) as info:
        compile_turn(_tool({"type": "object", "properties": props}), cache=False)
    assert info.value.pointer == "/properties/deep"
    assert no_automaton == []


def test_refusal_is_linear_in_the_schema() -> None:
    # Operation count instead of time: estimates are memoized per node, so refusing 1,000 optional
    # properties visits each node of their tree (about fifty per property) a bounded number of times,
    # although the estimate itself counts the n^2/2 pairs of the subset construction.
    visits = 0
    original = size._estimate

    def counting(node: automaton.Node, sub: Any) -> int:
        nonlocal visits
        visits += 1
        return original(node, sub)

    tools = load_tools(optional_strings(1000))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(size, "_estimate", counting)
        with pytest.raises(SchemaTooLargeError):
            compile_turn(tools, cache=False)
    assert 1000 < visits < 100 * 1000


def _sets() -> dict[str, Any]:
    sets = dict(TOOLSETS)
    sets["bundled"] = json.loads((ROOT / "src/toolgrammar/data/tools.json").read_text())
    sets["seed_tools.json"] = json.loads((ROOT / "examples/tools/seed_tools.json").read_text())
    return sets


@pytest.mark.parametrize("name", sorted(_sets()))
def test_known_tool_sets_are_far_below_the_limit(name: str) -> None:
    tools = _sets()[name]
    for mode in ("schema", "strings"):
        toolset = load_tools(tools, mode=mode)
        for fmt_name in ("hermes", "qwen-xml"):
            fmt = get_format(fmt_name)
            for whitespace in ("canonical", "flexible"):
                for escape in (False, True):
                    opts = options_from_kwargs(format=fmt_name, whitespace=whitespace, escape_markers=escape)
                    block = fmt.block_grammar(toolset, opts)  # raises if any part were over the limit
                    for tool in toolset:
                        one = options_from_kwargs(
                            format=fmt_name, whitespace=whitespace, escape_markers=escape, tool_choice=tool.name
                        )
                        assert estimate_size(fmt.block_grammar(toolset, one)) * 2 <= MAX_ESTIMATED_SIZE
                    assert estimate_size(block) > 0


@pytest.mark.parametrize("name", sorted(_sets()))
def test_known_tool_sets_still_compile(name: str) -> None:
    grammar = compile_turn(_sets()[name], cache=False)
    assert grammar.dfa.n_states > 1


def test_schemas_just_under_the_limit_compile() -> None:
    # Shapes of the same kinds, small enough: accepted, and what they accept is unchanged.
    grammar = compile_turn(array_of_objects(3), cache=False, reasoning="disabled", tool_choice="required")
    call = '<tool_call>\n{"name": "big", "arguments": {"xs": [{"a": "x", "b": 1, "c": true}]}}\n</tool_call>'
    assert grammar.dfa.matches([*call.encode(), automaton.EOS])
    compile_turn(nested_arrays(3), cache=False)
    compile_turn(optional_strings(20), cache=False, format="qwen-xml")


def test_estimate_grows_with_the_shapes_that_explode(monkeypatch: pytest.MonkeyPatch) -> None:
    # Optional properties: quadratic pairs; bounded repeats: multiply when nested.
    monkeypatch.setattr("toolgrammar.values.json_grammar.MAX_ESTIMATED_SIZE", 10**12)  # estimate past the limit

    def args_estimate(tools: list[dict[str, Any]]) -> int:
        toolset = load_tools(tools)
        return estimate_size(get_format("hermes").block_grammar(toolset, options_from_kwargs()))

    assert args_estimate(optional_strings(400)) > 4 * args_estimate(optional_strings(100))
    assert args_estimate(nested_arrays(6)) > 6 * args_estimate(nested_arrays(3))


def test_a_refused_part_is_named_where_each_tool_uses_it() -> None:
    """Parts of schemas are kept process-wide once built (``json_grammar.schema_node``); a refused one is not,
    so the same oversized part is refused again at its own place in the next tool."""
    xs = array_of_objects(200, 200)[0]["parameters"]["properties"]["xs"]
    for name, prop in (("first", "xs"), ("second", "rows")):
        tools = _tool({"type": "object", "properties": {prop: xs}, "required": [prop]}, name=name)
        with pytest.raises(SchemaTooLargeError) as got:
            compile_turn(tools, cache=False)
        assert got.value.tool == name and got.value.pointer == f"/properties/{prop}"


def test_the_whole_automaton_is_refused_where_an_array_is_built_an_item_at_a_time(tmp_path, capsys) -> None:
    """``TurnGrammar.dfa`` (every item at once) says why it is not built; ``toolgrammar grammar`` compiles the
    tool list all the same and says it has no whole automaton to count."""
    from toolgrammar.cli import main
    from toolgrammar.errors import GrammarError

    tools = array_of_objects(200)
    grammar = compile_turn(tools, cache=False)
    lazily = r"1 array\(s\) of its tools \(up to 200 items\) are built an item at a time"
    with pytest.raises(GrammarError, match=lazily):
        grammar.dfa  # noqa: B018 - the property is the operation under test
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    assert main(["grammar", "--tools", str(path)]) == 0
    assert "1 tools, automaton built as a turn goes (an array built an item at a time" in capsys.readouterr().out
    assert main(["grammar", "--tools", str(path), "--export", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["dfa_states"] is None
