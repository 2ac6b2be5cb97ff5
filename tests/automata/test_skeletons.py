"""Shipped turn skeletons: up to date with the grammar code, read instead of compiled, never trusted blindly."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import toolgrammar
from toolgrammar import automata as A
from toolgrammar import cache, caches
from toolgrammar.automata import skeleton_store
from toolgrammar.formats import get_format
from toolgrammar.formats.options import options_from_kwargs
from toolgrammar.schema import clear_recent, load_tools
from toolgrammar.turn import shipped_skeletons
from toolgrammar.turn.grammar import compile_turn, turn_node

TOOLS = [
    {"name": "lookup_order", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    {"name": "cancel_order", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    {"name": "ping"},
]
REGENERATE = "run `python -m toolgrammar.turn.shipped_skeletons` to rewrite src/toolgrammar/data/skeletons/"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch):
    """No skeleton compiled or read before; the disk cache of whole grammars off (it would serve them)."""
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", "off")
    caches.clear("automata")
    clear_recent()
    yield
    caches.clear("automata")


def _node(fmt: str = "hermes", **options) -> A.Node:
    return turn_node(load_tools(TOOLS), options_from_kwargs(format=fmt, **options), get_format(fmt))


def test_every_shipped_skeleton_is_what_the_grammar_compiles_now():
    """Golden files: every configuration compiled afresh, against the shipped file of its key (none
    missing, none different, none left over)."""
    problems = shipped_skeletons.differences()
    assert problems == [], f"{len(problems)} shipped skeleton(s) out of date, e.g. {problems[:3]}: {REGENERATE}"
    assert len(list(skeleton_store.SHIPPED_DIR.glob("*.npz"))) > 100  # every format x policy, not a handful


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("hermes", {}), ("hermes", {"tool_choice": "required", "reasoning": "disabled"}), ("glm", {}),
     ("mistral", {"parallel_tool_calls": False}), ("hermes", {"tool_choice": "ping"})],
)  # fmt: skip
def test_a_turn_reads_its_skeleton_from_the_package_and_it_is_the_compiled_one(fmt, options):
    """Another tool list than the one the files were made with: the skeleton holds no tool, so it is read."""
    read = A.compile_skeleton(_node(fmt, **options))
    assert read.dfa.stats.get("shipped") is True, f"{fmt} {options}: not shipped ({REGENERATE})"
    caches.clear("automata")
    compiled = A.compile_skeleton(_node(fmt, **options), shipped=False)
    assert "shipped" not in compiled.dfa.stats and compiled.key == read.key
    assert np.array_equal(read.dfa.transitions, compiled.dfa.transitions) and read.dfa.start == compiled.dfa.start
    assert np.array_equal(read.dfa.accepting, compiled.dfa.accepting)
    assert np.array_equal(read.dfa.safe, compiled.dfa.safe) and read.points == compiled.points
    grammar = compile_turn(TOOLS, format=fmt, **options)  # and a whole turn is built on it
    assert grammar.skeleton.key == read.key


def test_a_configuration_not_shipped_is_compiled_silently():
    node = _node(whitespace="flexible", escape_markers=True)  # options outside the shipped matrix
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        skeleton = A.compile_skeleton(node)
    assert "shipped" not in skeleton.dfa.stats
    assert not (skeleton_store.SHIPPED_DIR / f"{skeleton.key}.npz").exists()


@pytest.mark.parametrize("damage", ["garbage", "edited", "points"])
def test_a_damaged_shipped_skeleton_is_compiled_instead_with_a_warning(tmp_path, monkeypatch, damage):
    key = A.compile_skeleton(_node(), shipped=False).key
    caches.clear("automata")
    folder = tmp_path / "skeletons"
    folder.mkdir()
    path = folder / f"{key}.npz"
    shutil.copy(skeleton_store.SHIPPED_DIR / path.name, path)
    if damage == "garbage":
        path.write_bytes(b"not an npz file" * 10)
    else:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files if not k.startswith("__")}
        if damage == "edited":  # a transition changed, the digest left as it was
            t = arrays["transitions"].copy()
            t[0, ord("a")] = 0 if t[0, ord("a")] != 0 else 1
            stamped = cache.stamped(skeleton_store.KIND, key, arrays)
            arrays = {**stamped, "transitions": t}
        else:  # consistent digest, but points that are not where the holes are
            arrays["points"] = arrays["points"] + 1
            arrays = cache.stamped(skeleton_store.KIND, key, arrays)
        with open(path, "wb") as handle:
            np.savez_compressed(handle, **arrays)
    monkeypatch.setattr(skeleton_store, "SHIPPED_DIR", folder)
    with pytest.warns(RuntimeWarning, match=path.name):
        skeleton = A.compile_skeleton(_node())
    assert "shipped" not in skeleton.dfa.stats  # compiled
    caches.clear("automata")
    reference = A.compile_skeleton(_node(), shipped=False)
    assert np.array_equal(skeleton.dfa.transitions, reference.dfa.transitions)


def test_the_shipped_files_are_package_data():
    """Installed with the package (pyproject's package-data takes data/**), next to the module."""
    assert Path(toolgrammar.__file__).parent / "data" / "skeletons" == skeleton_store.SHIPPED_DIR
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"data/**/*"' in pyproject
