"""CanIToolCall's ``qwen3-xml`` family (54 fixtures) through the qwen-xml parser, every strategy.

The replay is CanIToolCall's own: :func:`canitoolcall.adapters.worker.replay` builds the
non-streaming parse and one stream per chunking strategy, :func:`canitoolcall.runner.evaluate`
runs every check and gives the case status, exactly as ``canitoolcall run`` would. The adapter
below follows the adapter contract with the real token ids and the right vocabulary per model
(Qwen3-Coder: the 151k Qwen3 vocabulary; Qwen3.5 / Qwen3.8: the 248k one), decoded incrementally
the way a server does, and the parser in ``lenient`` mode (the suite's ``malformed`` fixtures expect
the recovered call; ``tests/formats/test_parser_qwen_xml.py`` checks what strict mode reports for them).

Every strategy must pass strictly, the synthetic ``char:0`` / ``char:1`` included. Print the pass
table of ``examples/conformance-qwen3-xml.md`` with::

    .venv/bin/python tests/evaluate/test_conformance_qwen_xml.py
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Collection, Sequence
from functools import cache
from typing import Any, ClassVar

from canitoolcall.adapters.base import Adapter, ReplayInput, Support, ToolSpec
from canitoolcall.results import ParsedToolCall, ParseResult, StreamAccumulator

from conformance_replay import assert_strict_pass, each_fixture, family_fixtures, run_case, script_main
from toolgrammar.evaluate.conformance import fixture_toolset, reasoning_started
from toolgrammar.turn.parser import TurnStreamParser, parse_turn

FAMILY = "qwen3-xml"
PARSE_MODE = "lenient"


@cache
def vocabulary(repo: str) -> Any:
    """The offline vocabulary of a fixture's tokenizer pin (checked against its ids in the test)."""
    from toolgrammar.vocab import qwen3_vocabulary, qwen35_vocabulary

    return qwen3_vocabulary() if repo.startswith("Qwen/Qwen3-Coder") else qwen35_vocabulary()


def decode_stream(vocab: Any, chunks: Sequence[Sequence[int]]) -> list[str]:
    """Text deltas of token-id chunks: UTF-8 decoded incrementally (an incomplete character waits)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    deltas = [decoder.decode(vocab.decode(chunk)) for chunk in chunks]
    tail = decoder.decode(b"", final=True)
    if tail:
        deltas.append(tail)
    return deltas


class QwenXmlReplayAdapter(Adapter):
    """toolgrammar's qwen-xml parser as a CanIToolCall engine (lenient mode, both vocabularies)."""

    name: ClassVar[str] = "toolgrammar-qwen-xml"
    pinned_version: ClassVar[str] = "0.1.0"
    supports_text_deltas: ClassVar[bool] = True
    tokens_per_step: ClassVar[Any] = "many"

    def version(self) -> str:
        return self.pinned_version

    def supports(self, family: str, model: str) -> Support:
        return Support(family == FAMILY, None if family == FAMILY else "qwen-xml only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {"format": "qwen-xml", "parse_mode": PARSE_MODE, "reasoning_started": self._started(raw)}

    def units(self, raw: ReplayInput) -> list[int]:
        assert raw.token_ids is not None, f"{raw.fixture_id} has no output_token_ids"
        return list(raw.token_ids)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        # Every added token (``<tool_call>``, ``<think>``... and the control tokens) is its own delta:
        # a stricter split than the control tokens alone, which these outputs never contain.
        vocab = self._vocab(raw)
        return vocab.added_ids | vocab.special_ids

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        text = self._vocab(raw).decode(self.units(raw)).decode("utf-8")
        turn = parse_turn(
            text,
            fixture_toolset(tools)[0],
            format="qwen-xml",
            mode=PARSE_MODE,  # type: ignore[arg-type]
            reasoning_started=self._started(raw),
        )
        return ParseResult(
            content=turn.content,
            reasoning_content=turn.reasoning_content,
            tool_calls=tuple(ParsedToolCall(c.name, c.arguments_json()) for c in turn.tool_calls),
        )

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        return self.parse_stream_text(raw, decode_stream(self._vocab(raw), chunks), tools)

    def parse_stream_text(self, raw: ReplayInput, deltas: Sequence[str], tools: Sequence[ToolSpec]) -> ParseResult:
        stream = TurnStreamParser(
            fixture_toolset(tools)[0],
            format="qwen-xml",
            mode=PARSE_MODE,  # type: ignore[arg-type]
            reasoning_started=self._started(raw),
        )
        acc = StreamAccumulator()
        for delta in deltas:
            for d in stream.feed(delta):
                acc.add_openai_delta(d.to_openai())
        for d in stream.end():
            acc.add_openai_delta(d.to_openai())
        return acc.result()

    @staticmethod
    def _started(raw: ReplayInput) -> bool:
        return reasoning_started(raw.generation_prompt)

    @staticmethod
    def _vocab(raw: ReplayInput) -> Any:
        assert raw.tokenizer is not None, f"{raw.fixture_id} has no tokenizer pin"
        return vocabulary(raw.tokenizer.repo)


FIXTURES = family_fixtures(FAMILY)


def test_the_family_is_complete() -> None:
    assert len(FIXTURES) == 54


@each_fixture(FIXTURES)
def test_token_ids_decode_to_the_raw_output(fixture: Any) -> None:
    assert fixture.tokenizer is not None
    vocab = vocabulary(fixture.tokenizer.repo)
    assert vocab.decode(fixture.output_token_ids).decode("utf-8") == fixture.raw_output


@each_fixture(FIXTURES)
def test_strict_pass_on_every_strategy(fixture: Any) -> None:
    assert_strict_pass(run_case(fixture, adapter=QwenXmlReplayAdapter())[1])


if __name__ == "__main__":
    sys.exit(script_main(FIXTURES, adapter=QwenXmlReplayAdapter()))
