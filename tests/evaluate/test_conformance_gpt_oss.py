"""CanIToolCall's ``gpt-oss`` family (51 fixtures) through the product's adapter, every strategy.

The replay is CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`, then
:func:`canitoolcall.runner.evaluate`), with :class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`: the
gpt-oss format locates the o200k_harmony vocabulary (``quicktok-v1``'s data files), so the token
strategies run on the fixtures' real ids. Every strategy must pass strictly. Print the pass table with::

    .venv/bin/python tests/evaluate/test_conformance_gpt_oss.py
"""

from __future__ import annotations

import sys
from typing import Any

from conformance_replay import assert_strict_pass, each_fixture, family_fixtures, run_case, script_main
from toolgrammar.formats.gpt_oss import harmony_vocabulary

FIXTURES = family_fixtures("gpt-oss")


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 51


def test_the_vocabulary_is_o200k_harmony() -> None:
    vocab = harmony_vocabulary()
    assert vocab.n_tokens == 201_088
    ids = {text: vocab.token_id(text) for text in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")}
    assert ids == {"<|start|>": 200006, "<|channel|>": 200005, "<|message|>": 200008, "<|end|>": 200007}
    assert vocab.eos_ids == {200002, 200012, 199999}  # <|return|>, <|call|>, <|endoftext|>
    assert {200005, 200006, 200007, 200008, 200003}.isdisjoint(vocab.special_ids)  # markup is text


@each_fixture(FIXTURES)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    assert fixture.tokenizer is not None and fixture.tokenizer.repo.startswith("openai/gpt-oss-")
    assert harmony_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy(fixture: Any) -> None:
    assert_strict_pass(run_case(fixture)[1])


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES))
