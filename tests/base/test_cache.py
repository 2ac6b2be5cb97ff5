"""The on-disk cache: every entry verified, anything wrong rebuilt with a warning, atomic saves."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from toolgrammar import cache, caches
from toolgrammar.automata import skeleton_store as skeletons
from toolgrammar.automata.nodes import N_SYMBOLS
from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema import loading
from toolgrammar.turn.grammar import compile_turn

TOOLS = [
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
]


CAREFUL_TOOLS = [  # a bound: read by the careful normalizer, so the validated list is worth a disk entry
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
            "required": ["city"],
        },
    }
]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(tmp_path))
    return tmp_path


def _same_automaton(a, b) -> bool:
    return (
        a.dfa.start == b.dfa.start
        and np.array_equal(a.dfa.transitions, b.dfa.transitions)
        and np.array_equal(a.dfa.accepting, b.dfa.accepting)
        and np.array_equal(a.dfa.safe, b.dfa.safe)
    )


def _entry(root: Path, kind: str) -> Path:
    (path,) = (root / kind).glob("*.npz")
    return path


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00garbage, not an npz file\xff" * 10)


def _accept_all(path: Path) -> None:
    """A well-formed npz of the right shapes: one accepting state that allows every symbol."""
    with open(path, "wb") as handle:
        np.savez(
            handle,
            transitions=np.zeros((1, N_SYMBOLS), dtype=np.int32),
            accepting=np.ones(1, dtype=bool),
            safe=np.ones(1, dtype=bool),
            start=np.int64(0),
        )


def _edit_keeping_the_stored_hash(path: Path) -> None:
    """The real entry with one array edited, its version and hash copied over unchanged."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["accepting"] = np.ones_like(arrays["accepting"])
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _other_version(path: Path) -> None:
    """The real content, hashed correctly, but under another format version."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if not k.startswith("__")}
    key = path.stem
    with open(path, "wb") as handle:
        np.savez(handle, **arrays, __version__=np.int64(1), __digest__=cache.digest(skeletons.KIND, key, arrays, 1))


def _wrong_shape_with_valid_hash(path: Path) -> None:
    """A crafted entry whose hash is right but whose arrays cannot be an automaton of this grammar."""
    arrays = {
        "transitions": np.full((2, 7), 5, dtype=np.int32),
        "accepting": np.ones(3, dtype=bool),
        "safe": np.ones(2, dtype=bool),
        "start": np.int64(9),
    }
    key = path.stem
    with open(path, "wb") as handle:
        np.savez(
            handle,
            **arrays,
            __version__=np.int64(cache.FORMAT_VERSION),
            __digest__=cache.digest(skeletons.KIND, key, arrays),
        )


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "garbage": _garbage,
    "accept-all": _accept_all,
    "edited": _edit_keeping_the_stored_hash,
    "other-version": _other_version,
    "wrong-shape": _wrong_shape_with_valid_hash,
}


@pytest.fixture
def not_shipped(monkeypatch: pytest.MonkeyPatch):
    """No shipped skeletons and none in memory: a turn's skeleton comes from the disk cache or is compiled."""
    monkeypatch.setattr(skeletons, "SHIPPED_DIR", Path("/nonexistent/toolgrammar-skeletons"))
    caches.clear("automata")
    yield
    caches.clear("automata")


def _new_process_compile(tools_: list[dict] | None = None, **options):
    """``compile_turn`` as a new process runs it: this process's memory of skeletons forgotten first."""
    caches.clear("automata")
    return compile_turn(tools_ or TOOLS, **options)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_bad_skeleton_entry_is_rebuilt_with_a_warning(root: Path, not_shipped, damage: str):
    fresh = _new_process_compile(tool_choice="required", cache=False)
    first = _new_process_compile(tool_choice="required")
    assert not first.from_cache and _same_automaton(first, fresh)
    path = _entry(root, skeletons.KIND)
    DAMAGE[damage](path)

    if damage == "other-version":  # an older toolgrammar wrote it: rebuilt silently, an upgrade is not damage
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rebuilt = _new_process_compile(tool_choice="required")
    else:
        with pytest.warns(RuntimeWarning, match=path.name):
            rebuilt = _new_process_compile(tool_choice="required")
    assert not rebuilt.from_cache
    assert _same_automaton(rebuilt, fresh)
    assert not rebuilt.dfa.matches(b"anything at all")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt entry replaced the bad one
        again = _new_process_compile(tool_choice="required")
    assert again.from_cache and _same_automaton(again, fresh)


def test_new_tool_lists_add_no_disk_entry_where_the_skeleton_is_known(root: Path, not_shipped):
    """A server sees a new tool list on every request: the disk cache keeps one entry per skeleton (per
    format and options), not per list, and none at all where the skeleton ships or this process has it."""
    lists = [[{"name": f"tool_{i}_{j}", "parameters": TOOLS[0]["parameters"]} for j in range(3)] for i in range(6)]
    first = _new_process_compile(lists[0])
    assert not first.from_cache
    for tools_ in lists[1:]:
        assert _new_process_compile(tools_).from_cache
    assert len(list((root / skeletons.KIND).glob("*.npz"))) == 1
    assert sorted(p.name for p in root.iterdir()) == [skeletons.KIND]  # nothing per list (a bound: see engine)


def test_a_shipped_skeleton_is_not_copied_to_disk(root: Path):
    caches.clear("automata")
    assert compile_turn(TOOLS).from_cache  # hermes, default options: shipped
    assert not (root / skeletons.KIND).exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "edited"])
def test_a_bad_tools_entry_is_rebuilt_with_a_warning(root: Path, damage: str):
    loading.clear_recent()  # an earlier test may have left this tool list in memory
    first = loading.load_tools(CAREFUL_TOOLS)
    path = _entry(root, "tools")
    if damage == "edited":  # a crafted tool list (no validation would run on it): hash mismatch
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        arrays["json"] = np.frombuffer(b'[["evil", null, {"type": "object"}, {}]]', dtype=np.uint8)
        with open(path, "wb") as handle:
            np.savez(handle, **arrays)
    else:
        DAMAGE[damage](path)
    loading.clear_recent()  # force the disk read
    with pytest.warns(RuntimeWarning, match=path.name):
        again = loading.load_tools(CAREFUL_TOOLS)
    assert again.fingerprint == first.fingerprint and again.names == ("get_weather",)


def test_validated_tools_go_to_disk_only_when_the_careful_normalizer_read_them(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain list is validated again faster than its entry is written and read back: no entry. A list
    the careful normalizer read is written, and a new process (memory cleared) reads it back unchanged."""
    loading.clear_recent()
    plain = loading.load_tools(TOOLS)
    assert not (root / "tools").exists() or not list((root / "tools").glob("*.npz"))
    careful = loading.load_tools(CAREFUL_TOOLS)
    path = _entry(root, "tools")
    loading.clear_recent()

    def no_validation(*args, **kwargs):
        raise AssertionError("validated again: the disk entry was not read")

    with monkeypatch.context() as patched, warnings.catch_warnings():
        patched.setattr(loading, "_load_entries", no_validation)
        warnings.simplefilter("error")
        again = loading.load_tools(CAREFUL_TOOLS)
    assert again is not careful and again == careful and again.fingerprint == careful.fingerprint
    assert path.exists() and loading.load_tools(TOOLS) == plain


def test_a_save_that_fails_midway_leaves_no_temporary_file(root: Path, monkeypatch: pytest.MonkeyPatch):
    def failing_savez(handle, **arrays):
        handle.write(b"PK\x03\x04 half an entry")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.np, "savez", failing_savez)
    cache.save("grammars", "k" * 64, {"a": np.arange(3)})
    assert [p.name for p in (root / "grammars").iterdir()] == []
    assert cache.load("grammars", "k" * 64) is None


def test_an_interrupted_save_leaves_no_temporary_file(root: Path, monkeypatch: pytest.MonkeyPatch):
    def interrupted_savez(handle, **arrays):
        handle.write(b"PK\x03\x04")
        raise KeyboardInterrupt

    monkeypatch.setattr(cache.np, "savez", interrupted_savez)
    with pytest.raises(KeyboardInterrupt):
        cache.save("grammars", "k" * 64, {"a": np.arange(3)})
    assert [p.name for p in (root / "grammars").iterdir()] == []


def test_entries_round_trip_and_are_bound_to_their_key(root: Path):
    arrays = {"a": np.arange(5, dtype=np.int32), "b": np.array([True, False])}
    cache.save("things", "one", arrays)
    loaded = cache.load("things", "one")
    assert loaded is not None and set(loaded) == {"a", "b"}
    assert np.array_equal(loaded["a"], arrays["a"]) and np.array_equal(loaded["b"], arrays["b"])
    (root / "things" / "one.npz").rename(root / "things" / "two.npz")  # an entry moved to another key
    with pytest.warns(RuntimeWarning, match="two.npz"):
        assert cache.load("things", "two") is None


def test_a_missing_entry_is_a_silent_miss(root: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load("grammars", "absent") is None


def test_the_cache_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_shipped):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", "off")
    assert cache.cache_root() is None
    cache.save("grammars", "k", {"a": np.arange(3)})
    assert cache.load("grammars", "k") is None
    assert not _new_process_compile().from_cache
    assert not _new_process_compile().from_cache  # nothing was written to read back
    assert list(tmp_path.iterdir()) == []


def _renumbered(dfa):
    """``dfa`` with its states in another order (the start kept first): the same automaton, numbered otherwise."""
    n = dfa.n_states
    order = np.array([dfa.start] + [s for s in range(n - 1, -1, -1) if s != dfa.start])  # new -> old
    new_of = np.empty(n, dtype=np.int32)
    new_of[order] = np.arange(n, dtype=np.int32)
    rows = dfa.transitions[order]
    table = np.where(rows >= 0, new_of[np.maximum(rows, 0)], -1).astype(np.int32)
    return type(dfa)(table, 0, dfa.accepting[order], dfa.safe[order])


def test_the_cached_bound_is_keyed_by_the_numbering_of_the_tails_built_up_front(
    root: Path, monkeypatch: pytest.MonkeyPatch, qwen3_vocab
):
    """A named tool's tail is built with the grammar and its states are in the per-state bound that goes to
    disk. A compiler that numbers that tail otherwise (an upgrade) must not read the old table: a stale
    bound under-counts what a state needs and the budget guarantee breaks (a turn cut inside a block)."""
    from toolgrammar.automata import lazy
    from toolgrammar.runtime import token_grammar as engine

    monkeypatch.setattr(engine, "DIST_ON_DISK_FROM", 0)  # this small turn's bound goes to disk too
    tools_ = [{"type": "function", "function": TOOLS[0]}]
    options = {"tool_choice": "get_weather", "parallel_tool_calls": False}
    first = engine.TokenGrammar(compile_turn(tools_, **options), qwen3_vocab)
    assert first.auto.expanded, "the named tool's tail is built up front"
    caches.clear("runtime.token_grammars")
    lazy.clear_tail_cache()
    real = lazy.compile_dfa
    monkeypatch.setattr(lazy, "compile_dfa", lambda node, **kw: _renumbered(real(node, **kw)))
    again = engine.TokenGrammar(compile_turn(tools_, **options), qwen3_vocab)
    assert not np.array_equal(again.transitions, first.transitions), "the tail is numbered otherwise"
    assert again.key != first.key
    assert np.array_equal(again.dist, again._distances())


def test_a_careful_tool_back_in_a_new_list_still_sends_the_list_to_disk(root: Path) -> None:
    """A tool remembered from an earlier list keeps what the careful normalizer's reading means: a new list
    holding it is written to disk (for the next process), and a list of plain tools is not."""
    loading.clear_recent()
    loading.load_tools(CAREFUL_TOOLS)
    other = {"name": "other", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    before = set((root / "tools").glob("*.npz"))
    loading.load_tools([other, *CAREFUL_TOOLS])  # the careful tool comes from memory
    assert len(set((root / "tools").glob("*.npz")) - before) == 1
    before = set((root / "tools").glob("*.npz"))
    loading.load_tools([other, *TOOLS])
    assert set((root / "tools").glob("*.npz")) == before


def test_a_list_on_disk_is_not_served_for_data_that_only_has_its_text(root: Path) -> None:
    """A list read back from disk is keyed by its JSON text; an entry with the same text but data loading refuses
    (a tuple where the list had a list) gets its error, not the stored list."""
    loading.clear_recent()
    loading.load_tools(CAREFUL_TOOLS)
    assert list((root / "tools").glob("*.npz"))
    loading.clear_recent()  # the next load finds the list on disk only
    unlike = copy.deepcopy(CAREFUL_TOOLS)
    unlike[0]["parameters"]["required"] = tuple(unlike[0]["parameters"]["required"])
    with pytest.raises(ToolSchemaError, match="a tuple is not JSON data"):
        loading.load_tools(unlike)
    assert loading.load_tools(CAREFUL_TOOLS).tools[0].source == CAREFUL_TOOLS[0]


def test_each_kind_keeps_at_most_max_entries_the_least_recently_used_go(root: Path, monkeypatch: pytest.MonkeyPatch):
    """A server's cache folder does not grow with every request: past ``MAX_ENTRIES`` a save removes the
    entries of its kind used longest ago, and reading an entry counts as a use."""
    import os
    import time

    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    for k in range(3):
        cache.save("things", f"k{k}", {"a": np.arange(k + 1)})
        cache.save("others", f"k{k}", {"a": np.arange(k + 1)})
    past = time.time() - 100
    for k in range(3):  # saved in this order, long ago (file times can be coarser than these calls)
        os.utime(root / "things" / f"k{k}.npz", (past + k, past + k))
    assert cache.load("things", "k0") is not None  # used now
    cache.save("things", "k3", {"a": np.arange(4)})
    assert sorted(p.stem for p in (root / "things").glob("*.npz")) == ["k0", "k2", "k3"]
    assert cache.load("things", "k1") is None
    assert len(list((root / "others").glob("*.npz"))) == 3  # another kind's entries are its own
