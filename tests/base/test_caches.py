"""The registry of in-memory caches: every cache registers itself, and one clear() gives a new process."""

from __future__ import annotations

import pytest

from toolgrammar import caches
from toolgrammar.automata import skeleton
from toolgrammar.runtime.token_grammar import token_grammar
from toolgrammar.turn.grammar import compile_turn

TOOLS = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]


def test_every_layer_registers_its_caches():
    import toolgrammar.runtime.token_table
    import toolgrammar.schema
    import toolgrammar.values  # noqa: F401

    names = caches.registered()
    for name in (
        "automata.parts",
        "automata.edges",
        "automata.skeletons",
        "automata.tails",
        "runtime.token_grammars",
        "schema.recent_tools",
        "values.parts",
    ):
        assert names.get(name) == "compiled", name
    assert names["runtime.text_exits"] == "tokenizer"


def test_clear_forgets_what_the_process_compiled(qwen3_vocab):
    turn = compile_turn(TOOLS, cache=False)
    first = token_grammar(turn, qwen3_vocab)
    assert token_grammar(turn, qwen3_vocab) is first  # kept
    emptied = caches.clear()
    assert "runtime.token_grammars" in emptied and "runtime.text_exits" not in emptied
    assert token_grammar(turn, qwen3_vocab) is not first


def test_clear_by_prefix_and_keep(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(caches, "_registry", {})
    caches.register("a.one", lambda: calls.append("a.one"))
    caches.register("a.two", lambda: calls.append("a.two"))
    caches.register("ab", lambda: calls.append("ab"))  # "a" is a name prefix, not a string prefix
    caches.register("b", lambda: calls.append("b"), scope="tokenizer")
    assert caches.clear("a") == ["a.one", "a.two"]
    assert calls == ["a.one", "a.two"]
    calls.clear()
    assert caches.clear(scope=None, keep=("a.two",)) == ["a.one", "ab", "b"]
    assert calls == ["a.one", "ab", "b"]
    with pytest.raises(ValueError, match="scope must be 'compiled' or 'tokenizer'"):
        caches.register("c", lambda: None, scope="session")  # type: ignore[arg-type]


def test_a_cleared_skeleton_is_compiled_again(monkeypatch):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", "off")
    caches.clear("automata")
    compile_turn(TOOLS, cache=False)
    assert skeleton.skeleton_count() > 0
    caches.clear("automata.skeletons")
    assert skeleton.skeleton_count() == 0
