"""Checks shared by the per-format grammar tests (``tests/test_format_*.py``, ``tests/turn/test_grammar_qwen_xml.py``).

- Soundness (DESIGN.md invariant 1): :func:`check_walks` (or :func:`walk_texts` + :func:`assert_sound`) runs
  random walks through a token grammar (a uniformly random "model" over the allowed tokens, fixed seeds),
  parses each walk's text with the strict parser and validates every call's arguments with ``jsonschema``;
  :func:`random_block` walks one block's byte automaton.
- Completeness (invariant 2): :func:`assert_never_masked` / :func:`assert_masked` / :func:`assert_cut_in_block`
  replay token ids through a token grammar.
- Streaming: :func:`assert_every_split_reads_the_same`.
- :func:`random_trees`: a hypothesis strategy of grammar trees (compose and C-core tests).
- :func:`byte_vocabulary` / :func:`byte_encode`: a toy byte-level vocabulary with a format's markers as whole
  added tokens, for the families whose tokenizer does not ship on PyPI.

Imported as ``grammar_checks`` (pytest puts ``tests/`` on ``sys.path``, as for ``toolsets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jsonschema
import numpy as np
from hypothesis import strategies as st

from toolgrammar import automata as A
from toolgrammar.automata.dfa import DFA
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.testing import Replay, Walk, random_walk, replay
from toolgrammar.turn.parser import TurnStreamParser, parse_turn
from toolgrammar.vocab import Vocabulary


def function_tool(name: str, properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    """An OpenAI-style function tool whose parameters are an object of ``properties``."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = list(required)
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


GET_WEATHER = function_tool(
    "get_weather", {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"]
)
"""One tool of two arguments (a free string and an enum), as several families' tests use it."""


def schemas_of(tools: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Each tool's name -> its original parameters schema (OpenAI-wrapped or bare tools; none: any object)."""
    out = {}
    for t in tools:
        fn = t.get("function", t)
        out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


# --------------------------------------------------------------------------- toy vocabularies


def byte_vocabulary(
    name: str, markers: Sequence[str], *, eos: Sequence[str], control: Sequence[str] = ()
) -> Vocabulary:
    """The 256 single bytes (ids 0-255), then ``markers`` as whole added tokens (ids 256...), as a real
    tokenizer keeps its markers whole. ``eos``: the markers that end the turn; ``control``: those that are
    control tokens (not text)."""
    ids = {m: 256 + i for i, m in enumerate(markers)}
    return Vocabulary(
        name,
        tuple(bytes([b]) for b in range(256)) + tuple(m.encode() for m in markers),
        frozenset(ids[m] for m in control),
        frozenset(ids[m] for m in eos),
        frozenset(ids.values()),
    )


def byte_encode(vocab: Vocabulary, text: str) -> list[int]:
    """Greedy over a :func:`byte_vocabulary`: a marker as its one token, every other byte as itself."""
    markers = vocab.token_bytes[256:]
    out, i, data = [], 0, text.encode()
    while i < len(data):
        hit = next((k for k, m in enumerate(markers) if data.startswith(m, i)), None)
        if hit is None:
            out.append(data[i])
            i += 1
        else:
            out.append(256 + hit)
            i += len(markers[hit])
    return out


# --------------------------------------------------------------------------- soundness: random walks


def walk_text(vocab: Vocabulary, tokens: Iterable[int]) -> str:
    """A walk's text: its tokens' bytes, the end of turn left out (free text may cut a character)."""
    return b"".join(vocab.token_bytes[t] for t in tokens if t not in vocab.eos_ids).decode("utf-8", "replace")


def walk_texts(
    tg: TokenGrammar, rng: np.random.Generator, n_walks: int, *, budget: int | tuple[int, int], **walk_options: Any
) -> Iterator[tuple[int, str, Walk]]:
    """``n_walks`` random walks (:func:`toolgrammar.testing.random_walk` with ``walk_options``), each with its
    index and text. ``budget``: the token budget, or a range drawn from per walk (never below the shortest
    turn). Asserts that each walk kept to its budget and that the budget closed every started block."""
    for i in range(n_walks):
        shortest = int(tg.dist[tg.start])
        max_tokens = budget if isinstance(budget, int) else max(int(rng.integers(*budget)), shortest)
        walk = random_walk(tg, rng, max_tokens=max_tokens, **walk_options)
        assert len(walk.tokens) <= max_tokens and not walk.in_block_at_end, f"walk {i} ended inside a block"
        yield i, walk_text(tg.vocab, walk.tokens), walk


def assert_sound(
    turn: Any, text: str, schemas: dict[str, Any], *, mode: str = "schema", walk: int | None = None
) -> None:
    """Zero parse errors, and every call's arguments valid (``mode="strings"``: every value a string)."""
    assert turn.errors == (), f"walk {walk}: {text!r} -> {[e.message for e in turn.errors]}"
    for call in turn.tool_calls:
        if mode == "strings":
            assert all(isinstance(v, str) for v in call.arguments.values()), (text, call)
        else:
            jsonschema.validate(call.arguments, schemas[call.name])


def check_walks(
    tg: TokenGrammar,
    tools: Sequence[dict[str, Any]],
    fmt: str,
    *,
    seed: int = 20261201,
    n_walks: int = 60,
    budget: int | tuple[int, int] = (16, 120),
    require_call: bool = False,
    min_calls: int = 0,
    **walk_options: Any,
) -> list[tuple[str, Any]]:
    """Soundness: ``n_walks`` walks (:func:`walk_texts`, ``np.random.default_rng(seed)``, by default 60 walks of
    16 to 120 tokens) parse with zero errors
    under ``fmt``'s strict parser and their calls validate against ``tools``' schemas; with ``require_call``,
    every walk holds a call; all of them hold at least ``min_calls``. Returns each walk's text and turn."""
    rng = np.random.default_rng(seed)
    schemas = schemas_of(tools)
    out = []
    for i, text, _ in walk_texts(tg, rng, n_walks, budget=budget, **walk_options):
        turn = parse_turn(text, tools, format=fmt)
        assert_sound(turn, text, schemas, walk=i)
        if require_call:
            assert turn.tool_calls, f"walk {i}: a call is required: {text!r}"
        out.append((text, turn))
    n_calls = sum(len(turn.tool_calls) for _, turn in out)
    assert n_calls >= min_calls, f"only {n_calls} calls in {n_walks} walks"
    return out


def byte_distances(dfa: DFA) -> np.ndarray:
    """Fewest bytes from each state of a byte automaton to an accepting one."""
    n = dfa.n_states
    byte_t = dfa.transitions[:, :256]
    dist = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    dist[dfa.accepting] = 0
    preds: dict[int, list[int]] = {}
    src, sym = np.nonzero(byte_t >= 0)
    for s, d in zip(src.tolist(), byte_t[src, sym].tolist(), strict=True):
        preds.setdefault(d, []).append(s)
    frontier, level = list(np.flatnonzero(dfa.accepting)), 0
    while frontier:
        level += 1
        nxt = []
        for d in frontier:
            for s in preds.get(int(d), ()):
                if dist[s] > level:
                    dist[s] = level
                    nxt.append(s)
        frontier = nxt
    return dist


def random_block(dfa: DFA, dist: np.ndarray, rng: np.random.Generator, *, greed: float, max_len: int) -> bytes:
    """A random walk over the bytes the block allows, drifting towards the end as it grows.

    Structural choices (few bytes allowed: which parameter next, which literal) are uniform; inside free
    values the walk heads for the end with probability ``greed``, always past ``max_len``.
    ``dist``: :func:`byte_distances` of ``dfa``.
    """
    state, out = dfa.start, bytearray()
    while not dfa.accepting[state]:
        row = dfa.transitions[state, :256]
        allowed = np.flatnonzero(row >= 0)
        if len(out) > max_len or (len(allowed) > 4 and rng.random() < greed):
            allowed = allowed[dist[row[allowed]] < dist[state]]
        b = int(allowed[rng.integers(len(allowed))])
        out.append(b)
        state = int(row[b])
    return bytes(out)


# --------------------------------------------------------------------------- completeness: replays


def _tokens(ids: Iterable[int], end: int | None) -> list[int]:
    return [*ids] if end is None else [*ids, end]


def assert_never_masked(tg: TokenGrammar, ids: Iterable[int], end: int | None = None) -> Replay:
    """Every token of ``ids`` (then ``end``, the stop token, if given) is allowed in turn."""
    tokens = _tokens(ids, end)
    result = replay(tg, tokens)
    at = result.first_masked
    assert at is None, (
        f"token {at} masked: {tg.vocab.token_bytes[tokens[at]]!r} after {tg.vocab.decode(tokens[:at])[-60:]!r}"
    )
    return result


def assert_masked(
    tg: TokenGrammar, ids: Iterable[int], end: int | None = None, *, max_tokens: int | None = None, why: str = ""
) -> int:
    """Some token of ``ids`` (then ``end``) is masked (with a budget of ``max_tokens``); returns where."""
    result = replay(tg, _tokens(ids, end), max_tokens=max_tokens)
    assert result.first_masked is not None, f"never masked ({why})" if why else "never masked"
    return result.first_masked


def assert_cut_in_block(tg: TokenGrammar, ids: Sequence[int], eos: int) -> None:
    """A turn cut inside a block: every token allowed, the turn left in the block, the end of turn masked."""
    result = replay(tg, list(ids))
    assert result.first_masked is None and result.cursor.in_block
    assert replay(tg, [*ids, eos]).first_masked == len(ids)


# --------------------------------------------------------------------------- streaming


def assert_every_split_reads_the_same(text: str, tools: Any, fmt: str, whole: Any, **parser_options: Any) -> None:
    """The text fed to the stream parser in two pieces, cut anywhere, gives ``whole`` (the one-shot parse)."""
    for cut in range(len(text) + 1):
        stream = TurnStreamParser(tools, format=fmt, **parser_options)
        stream.feed(text[:cut])
        stream.feed(text[cut:])
        assert stream.finish() == whole, cut


def random_trees() -> st.SearchStrategy[A.Node]:
    """Random grammar trees over a three-letter alphabet, every node kind among them: joins that overlap
    (and fall back to subset construction) are the rule, not the exception."""
    leaves = st.one_of(
        st.text(alphabet="ab", min_size=0, max_size=2).map(A.lit),
        st.sampled_from(["ab", "bc", "abc", "a"]).map(A.chars),
    )

    def extend(children: st.SearchStrategy[A.Node]) -> st.SearchStrategy[A.Node]:
        return st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda xs: A.seq(*xs)),
            st.lists(children, min_size=1, max_size=3).map(lambda xs: A.alt(*xs)),
            st.tuples(children, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 3))).map(
                lambda t: A.repeat(t[0], t[1], None if t[2] is None else max(t[1], t[2]))
            ),
            st.tuples(children, st.booleans()).map(lambda t: A.group(t[0], safe=t[1])),
            children.map(A.shared),
            children.map(lambda c: A.avoiding(c, "ab")),
            children.map(lambda c: A.not_prefixed(c, "a")),
            st.tuples(st.lists(st.tuples(children, st.booleans()), min_size=1, max_size=4), children).map(
                lambda t: A.Members(tuple(t[0]), t[1])
            ),
        )

    return st.recursive(leaves, extend, max_leaves=12)
