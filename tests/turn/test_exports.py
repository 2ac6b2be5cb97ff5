"""The exports for other engines (:mod:`toolgrammar.turn.exports`): golden files, and each export fed to its engine.

- the golden files under ``grammars/`` are what the code writes now (else: run the command to regenerate);
- GBNF is read by xgrammar's EBNF parser (``xgrammar.Grammar.from_ebnf``, which reads llama.cpp's GBNF
  dialect) and matched on text with a tokenizer-free matcher (an empty ``TokenizerInfo``:
  ``GrammarMatcher.accept_string``, as ``xgrammar.testing._is_grammar_accept_string`` does);
  llama-cpp-python is not installed here (it builds llama.cpp from source);
- lark is read by llguidance (``LLMatcher.grammar_from_lark``) and matched byte by byte with a
  byte-level tokenizer (256 one-byte tokens and an end-of-sequence token);
- the structural tag (where the format has one) by ``xgrammar.Grammar.from_structural_tag``.

Every verdict is compared with toolgrammar's own automaton (:func:`toolgrammar.testing.accepts`) on the
canonical calls, prose-only and reasoning turns, malformed turns, random mutations of them and random
walks of the automaton; the canonical calls must be accepted and the malformed ones rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from toolgrammar.errors import GrammarError
from toolgrammar.evaluate.compare import bundled_tools_path
from toolgrammar.testing import accepts
from toolgrammar.turn.exports import (
    EXPORTS,
    POLICIES,
    check_golden,
    golden_files,
    regex_expr,
    to_gbnf,
    to_lark,
    to_structural_tag,
)
from toolgrammar.turn.grammar import compile_turn

from export_cases import CASES, case_id, export_texts, mutations, turn_of, walks

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"
COMMAND = "python -m toolgrammar.exports write grammars/"

Matcher = Callable[[str], bool]


# ------------------------------------------------------------------------------------------------
# Golden files
# ------------------------------------------------------------------------------------------------


@cache
def _golden(formats: tuple[str, ...]) -> dict[str, str]:
    return golden_files(formats)


def _golden_formats() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in GRAMMARS.iterdir() if p.is_dir()))


def test_golden_files_are_up_to_date() -> None:
    assert (GRAMMARS / "hermes").is_dir() and (GRAMMARS / "qwen-xml").is_dir(), f"no golden files: run {COMMAND}"
    formats = _golden_formats()
    problems = check_golden(GRAMMARS, formats, expected=_golden(formats))
    assert not problems, (
        "the golden grammars differ from what the code writes; run `" + COMMAND + "`:\n  " + ("\n  ".join(problems))
    )


def test_golden_files_cover_every_policy_and_export() -> None:
    everything = _golden(_golden_formats())
    files = {k: v for k, v in everything.items() if k.startswith("hermes/")}
    assert sorted(files) == sorted(
        f"hermes/{name}{suffix}" for name in POLICIES for suffix in (".gbnf", ".lark", ".structural-tag.json")
    )
    assert all(text.endswith("\n") and text.isascii() for text in files.values())
    qwen = [k for k in everything if k.startswith("qwen-xml/")]  # a structural tag cannot say its free text
    assert sorted(qwen) == sorted(f"qwen-xml/{name}{suffix}" for name in POLICIES for suffix in (".gbnf", ".lark"))


def test_readme_names_the_command() -> None:
    text = (GRAMMARS / "README.md").read_text(encoding="utf-8")
    assert COMMAND in text
    for kind in EXPORTS:
        assert kind in text


def test_cli_exports_match_the_library(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolgrammar.cli.app import app
    from toolgrammar.cli.grammar import EXPORT_CHOICES
    from toolgrammar.cli.grammar import EXPORTS as CLI_EXPORTS

    assert CLI_EXPORTS == EXPORTS
    runner = CliRunner()
    turn = turn_of("hermes", ())
    tools = str(bundled_tools_path())
    for kind, expected in (
        ("gbnf", to_gbnf(turn)),
        ("lark", to_lark(turn)),
        ("structural-tag", to_structural_tag(turn)),
    ):
        result = runner.invoke(app, ["grammar", "--tools", tools, "--export", kind])
        assert result.exit_code == 0, result.output
        assert result.output == expected
    result = runner.invoke(app, ["grammar", "--tools", tools, "--export", "nope"])
    assert result.exit_code == 2
    assert all(choice in result.output for choice in EXPORT_CHOICES)
    result = runner.invoke(app, ["grammar", "--tools", tools, "--format", "qwen-xml", "--export", "structural-tag"])
    assert result.exit_code == 2 and "cannot carry" in result.output


def test_write_and_check_round_trip(tmp_path: Path) -> None:
    from toolgrammar.turn.exports import main

    assert main(["write", str(tmp_path), "hermes"]) == 0
    assert main(["check", str(tmp_path)]) == 0
    (tmp_path / "hermes" / "default.gbnf").write_text('root ::= "x"\n', encoding="utf-8")
    (tmp_path / "hermes" / "old.lark").write_text('start: "x"\n', encoding="utf-8")
    assert check_golden(tmp_path) == ["out of date: hermes/default.gbnf", "stale: hermes/old.lark"]
    assert main(["check", str(tmp_path)]) == 1
    main(["write", str(tmp_path), "hermes"])
    assert check_golden(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# The regex reader
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [
        r"ab|a(?:c|d)*",
        r"[^<]*<?",
        r"\\u[0-9a-fA-F]{4}",
        r"x{2,}",
        r"x{3}",
        r"(?:a|)b",
        r"[\s\S]",
        r"a$|b",
        "é[\x00-\x1f]",
    ],
)
def test_regex_expr_reads_what_portable_regexes_hold(pattern: str) -> None:
    from toolgrammar.turn.exports import RuleGrammar, print_gbnf, print_lark

    grammar = RuleGrammar(root=regex_expr(pattern), rules={})
    xgr = pytest.importorskip("xgrammar")
    xgr.Grammar.from_ebnf(print_gbnf(grammar))
    _lark_matcher(print_lark(grammar))


def test_regex_expr_refuses_what_it_cannot_say() -> None:
    for pattern in (r"(?=a)b", r"(?i)a", r"^a", r"\bx"):
        with pytest.raises(GrammarError):
            regex_expr(pattern)


# ------------------------------------------------------------------------------------------------
# The engines
# ------------------------------------------------------------------------------------------------


class _ByteTokenizer:
    """256 one-byte tokens and an end-of-sequence token: llguidance then matches text byte by byte."""

    eos_token_id = 256
    bos_token_id = None
    tokens: ClassVar[list[bytes]] = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids: ClassVar[list[int]] = [256]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


@cache
def _llg_tokenizer() -> Any:
    llg = pytest.importorskip("llguidance")
    return llg.LLTokenizer(llg.TokenizerWrapper(_ByteTokenizer()))


def _lark_matcher(lark: str) -> Matcher:
    llg = pytest.importorskip("llguidance")
    tokenizer = _llg_tokenizer()
    grammar = llg.grammar_from("lark", lark)
    error = llg.LLMatcher.validate_grammar(grammar, tokenizer)
    assert not error, error
    fresh = llg.LLMatcher(tokenizer, grammar, log_level=0)
    assert not fresh.is_error(), fresh.get_error()

    def matches(text: str) -> bool:
        m = fresh.deep_copy()
        return bool(m.consume_tokens(list(text.encode("utf-8")))) and not m.is_error() and m.is_accepting()

    return matches


def _xgrammar_matcher(grammar: Any) -> Matcher:
    xgr = pytest.importorskip("xgrammar")
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    compiled = compiler.compile_grammar(grammar)

    def matches(text: str) -> bool:
        m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return bool(m.accept_string(text)) and m.is_terminated()

    return matches


@cache
def _matchers(fmt: str, options: tuple[tuple[str, Any], ...]) -> dict[str, Matcher]:
    xgr = pytest.importorskip("xgrammar")
    turn = turn_of(fmt, options)
    out = {
        "gbnf (xgrammar)": _xgrammar_matcher(xgr.Grammar.from_ebnf(to_gbnf(turn))),
        "lark (llguidance)": _lark_matcher(to_lark(turn)),
    }
    try:
        tag = to_structural_tag(turn)
    except GrammarError:
        pass
    else:
        out["structural tag (xgrammar)"] = _xgrammar_matcher(xgr.Grammar.from_structural_tag(tag))
    return out


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_each_export_judges_turns_as_the_automaton_does(case: tuple[str, dict[str, Any]]) -> None:
    fmt, options = case
    key = tuple(sorted(options.items()))
    turn = turn_of(fmt, key)
    matchers = _matchers(fmt, key)
    canonical, malformed = export_texts(turn)
    rng = np.random.default_rng(sum(map(ord, case_id(case))))
    texts = canonical + malformed + mutations(canonical + malformed, rng, 60) + walks(turn, canonical, rng, 20)
    wrong = []
    for text in dict.fromkeys(texts):
        expected = accepts(turn, text)
        for name, matches in matchers.items():
            if matches(text) != expected:
                wrong.append(f"{name}: {'rejects' if expected else 'accepts'} {text!r}")
    assert not wrong, f"{len(wrong)} verdict(s) differ from the automaton's:\n  " + "\n  ".join(wrong)
    # Not vacuous: the policy's calls are accepted, the malformed turns rejected.
    assert not any(accepts(turn, text) for text in malformed)
    if options.get("tool_choice", "auto") != "none":
        assert any(accepts(turn, text) for text in canonical[:6])


def _other_formats() -> list[str]:
    from toolgrammar.formats import FORMATS
    from toolgrammar.turn.exports import without_grammar

    return [f for f in FORMATS if f not in ("hermes", "qwen-xml") and without_grammar(f) is None]


@pytest.mark.parametrize("fmt", _other_formats())
def test_every_family_exports_what_its_automaton_accepts(fmt: str) -> None:
    """The other families' exports (default policy): same verdicts as the automaton on canonical calls,
    prose, malformed turns, mutations and walks; the canonical calls are accepted."""
    turn = turn_of(fmt, ())
    matchers = _matchers(fmt, ())
    canonical, malformed = export_texts(turn)
    rng = np.random.default_rng(sum(map(ord, fmt)))
    texts = canonical + malformed + mutations(canonical + malformed, rng, 40) + walks(turn, canonical, rng, 15)
    wrong = [
        f"{name}: {'rejects' if accepts(turn, text) else 'accepts'} {text!r}"
        for text in dict.fromkeys(texts)
        for name, matches in matchers.items()
        if matches(text) != accepts(turn, text)
    ]
    assert not wrong, f"{len(wrong)} verdict(s) differ from the automaton's:\n  " + "\n  ".join(wrong[:20])
    assert all(accepts(turn, text) for text in canonical[:6]), "a canonical call of the bundled tools is refused"


def test_every_format_with_a_grammar_has_golden_exports() -> None:
    from toolgrammar.formats import FORMATS
    from toolgrammar.turn.exports import without_grammar

    expected = {f for f in FORMATS if without_grammar(f) is None}
    assert set(_golden_formats()) == expected, f"run {COMMAND}"


def test_canonical_calls_and_prose_under_the_default_policy() -> None:
    """The default hermes policy, spelled out: what each engine must accept and reject."""
    turn = turn_of("hermes", ())
    canonical, malformed = export_texts(turn)
    must_accept = canonical[:-1]
    must_reject = [canonical[-1], *malformed]  # text after the last call: after_calls="end"
    for name, matches in _matchers("hermes", ()).items():
        assert [t for t in must_accept if not matches(t)] == [], name
        assert [t for t in must_reject if matches(t)] == [], name


# ------------------------------------------------------------------------------------------------
# Shape of the output
# ------------------------------------------------------------------------------------------------


def test_gbnf_uses_only_the_llama_cpp_constructs() -> None:
    turn = turn_of("qwen-xml", ())
    text = to_gbnf(turn)
    assert text.isascii()
    rule = re.compile(r"^[a-z][a-z0-9-]* ::= ")
    for line in text.splitlines():
        assert line.startswith("# ") or rule.match(line), line[:80]
    names = {line.split(" ::= ")[0] for line in text.splitlines() if " ::= " in line}
    assert "root" in names
    # every escape is one llama.cpp's parse_char knows
    for escape in re.findall(r"\\(.)", text.replace("\\\\", "")):
        assert escape in 'xuUtrn"[]', escape


def test_lark_is_one_terminal_of_named_terminals() -> None:
    text = to_lark(turn_of("hermes", ()))
    lines = [line for line in text.splitlines() if not line.startswith("//")]
    assert lines[0] == "start: TURN"
    assert all(re.match(r"^[A-Z][A-Z0-9_]*: ", line) for line in lines[1:])


def test_exports_are_deterministic_and_linear() -> None:
    turn = turn_of("hermes", ())
    again = compile_turn(str(bundled_tools_path()), format="hermes", cache=False)
    assert to_gbnf(turn) == to_gbnf(again)
    assert to_lark(turn) == to_lark(again)
    # Each leaf is written once (the whole-turn regex repeats the blocks in every branch where they may come).
    block = len(turn_of("qwen-xml", ()).block_regex(lookahead=False))  # ~41 kB; the whole turn's regex is ~340 kB
    assert len(_golden(_golden_formats())["qwen-xml/default.gbnf"]) < 2 * block


def test_structural_tag_export_is_the_structural_tag() -> None:
    from toolgrammar.turn.structural_tag import turn_structural_tag

    turn = turn_of("hermes", ())
    assert json.loads(to_structural_tag(turn)) == turn_structural_tag(turn)
