"""CanIToolCall's ``mistral`` family (47 fixtures) through
:class:`toolgrammar.evaluate.conformance.CanIToolCallAdapter`.

The replay and checks are CanIToolCall's own (:func:`canitoolcall.adapters.worker.replay`,
:func:`canitoolcall.runner.evaluate`), every strategy of :data:`toolgrammar.evaluate.conformance.ALL_STRATEGIES`,
strict pass required on every row (synthetic ``char:*`` rows included). Every fixture is replayed from
its token ids with a real vocabulary read from ``mistral-common``'s data files: tekken (v11 / v13,
37 fixtures) and the v3 sentencepiece model (Mistral-7B-Instruct-v0.3, 10 fixtures). The family is
declared by ``mistral``; it hands the v3 fixtures to ``mistral-v3`` and Magistral-Small-2506's (plain-text
``<think>``) to ``mistral-think-text``. Print the table::

    .venv/bin/python tests/evaluate/test_conformance_mistral.py
"""

from __future__ import annotations

import sys
from typing import Any

from conformance_replay import adapter_fixture, assert_strict_pass, each_fixture, family_fixtures, run_case, script_main

FIXTURES = family_fixtures("mistral")
FORMAT_BY_REPO = {
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v3",
    "mistralai/Magistral-Small-2506": "mistral-think-text",
}
adapter = adapter_fixture()


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 47
    assert sum(f.tokenizer.mode == "mistral" for f in FIXTURES) == 37


@each_fixture(FIXTURES)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    """Tekken decodes every id exactly; sentencepiece writes the first word's boundary as a space."""
    from toolgrammar.formats.mistral.vocab import sentencepiece_v3_vocabulary, tekken_vocabulary

    if fixture.tokenizer.mode == "mistral":
        assert tekken_vocabulary().decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output
    else:
        text = sentencepiece_v3_vocabulary().decode(fixture.output_token_ids).decode("utf-8")
        assert text in (fixture.raw_output, " " + fixture.raw_output)


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy(adapter: Any, fixture: Any) -> None:
    reply, case = run_case(fixture, adapter=adapter)
    assert reply["parser_config"]["format"] == FORMAT_BY_REPO.get(fixture.tokenizer.repo, "mistral")
    assert_strict_pass(case)


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES))
