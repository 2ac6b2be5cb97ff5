"""``toolgrammar parse``: output and exit codes (0 all valid, 1 a block has an error, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgrammar.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "examples" / "tools" / "seed_tools.json"
TURNS = ROOT / "examples" / "turns"


def run_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["parse", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.parametrize(
    ("turn", "code", "kinds", "n_calls"),
    [
        ("valid_call", 0, [None], 1),
        ("raw_newline_write_file", 1, ["raw-newline-in-string"], 0),
        ("truncated_write_file", 1, ["truncated"], 0),
        ("final_answer", 0, [], 0),
    ],
)
@pytest.mark.parametrize("mode", ["schema", "strings"])
def test_example_turns_json(capsys, turn, code, kinds, n_calls, mode):
    got, report = run_json(capsys, str(TURNS / f"{turn}.txt"), "--tools", str(TOOLS), "--mode", mode)
    assert got == code
    assert [b["error"]["kind"] if b["error"] else None for b in report["blocks"]] == kinds
    assert len(report["tool_calls"]) == n_calls
    assert report["ok"] is (code == 0)
    assert report["tool_mode"] == mode and report["parse_mode"] == "strict" and report["format"] == "hermes"


def test_json_report_of_a_valid_call(capsys):
    code, report = run_json(capsys, str(TURNS / "valid_call.txt"), "--tools", str(TOOLS))
    assert code == 0
    assert report["reasoning_content"] == "The bug report mentions is_even, so I should read that file first."
    assert report["content"] is None
    assert report["tool_calls"] == [{"name": "read_file", "arguments": {"path": "src/numbers.py"}}]
    assert report["errors_by_kind"] == {} and report["final_answer"] is False


def test_json_report_of_an_error(capsys):
    code, report = run_json(capsys, str(TURNS / "raw_newline_write_file.txt"), "--tools", str(TOOLS))
    assert code == 1
    assert report["errors_by_kind"] == {"raw-newline-in-string": 1}
    (block,) = report["blocks"]
    assert block["closed"] is True and block["call"] is None
    assert block["error"]["message"].startswith("error: tool call is not valid JSON: Invalid control character")


def test_human_output(capsys):
    assert main(["parse", str(TURNS / "truncated_write_file.txt"), "--tools", str(TOOLS)]) == 1
    out = capsys.readouterr().out
    assert "truncated" in out and "(unclosed)" in out and "error: tool call is truncated" in out
    assert "1 block(s): 0 valid, 1 error(s) (truncated 1)" in out

    assert main(["parse", str(TURNS / "valid_call.txt"), "--tools", str(TOOLS)]) == 0
    out = capsys.readouterr().out
    assert 'read_file({"path": "src/numbers.py"})' in out and "valid" in out
    assert "The bug report mentions is_even" in out

    assert main(["parse", str(TURNS / "final_answer.txt"), "--tools", str(TOOLS)]) == 0
    out = capsys.readouterr().out
    assert "no tool-call block: a final answer" in out


def test_seed_parse_mode_and_reasoning_started(tmp_path, capsys):
    turn = tmp_path / "turn.txt"
    turn.write_text(
        'Plan.\n</think>\n\n<tool_call>\n{"name": "grep", "arguments": {"pattern": "</tool_call>", "path": "."}}'
        "\n</tool_call>",
        encoding="utf-8",
    )
    code, report = run_json(capsys, str(turn), "--tools", str(TOOLS), "--reasoning-started")
    assert code == 0 and report["reasoning_content"] == "Plan."
    assert report["tool_calls"] == [{"name": "grep", "arguments": {"pattern": "</tool_call>", "path": "."}}]
    code, report = run_json(capsys, str(turn), "--tools", str(TOOLS), "--parse-mode", "seed")
    assert code == 1 and report["errors_by_kind"] == {"invalid-json": 1}


def test_missing_turn_file_is_bad_input(capsys, tmp_path):
    assert main(["parse", str(tmp_path / "nope.txt"), "--tools", str(TOOLS)]) == 2
    assert "turn file" in capsys.readouterr().err


def test_bad_tools_print_the_tool_schema_error(capsys, tmp_path):
    assert main(["parse", str(TURNS / "valid_call.txt"), "--tools", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolgrammar parse: tool file") and "does not exist" in err
    bad = tmp_path / "tools.json"
    bad.write_text(json.dumps([{"name": "a b", "parameters": {"type": "object"}}]), encoding="utf-8")
    assert main(["parse", str(TURNS / "valid_call.txt"), "--tools", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolgrammar parse: ") and "'a b'" in err


def test_bad_options_are_bad_input(capsys):
    args = ["parse", str(TURNS / "valid_call.txt"), "--tools", str(TOOLS)]
    assert main([*args, "--mode", "lenient"]) == 2
    assert "--mode 'lenient' is not one of: schema, strings" in capsys.readouterr().err
    assert main([*args, "--parse-mode", "loose"]) == 2
    assert "--parse-mode 'loose' is not one of: strict, seed, lenient" in capsys.readouterr().err
    assert main([*args, "--format", "nope"]) == 2
    assert "unknown format 'nope'" in capsys.readouterr().err


def test_help_lists_parse(capsys):
    assert main(["--help"]) == 0
    assert "parse" in capsys.readouterr().out


BARE_FUNCTION = "I'll read it.\n<function=read_file>\n<parameter=path>\nsrc/numbers.py\n</parameter>\n</function>"
MISSING_CLOSE_PARAMETER = (
    "<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/numbers.py\n</function>\n</tool_call>"
)


@pytest.mark.parametrize(
    ("text", "kind", "content"),
    [(BARE_FUNCTION, "bare-function", "I'll read it."), (MISSING_CLOSE_PARAMETER, "missing-close-parameter", None)],
)
def test_lenient_parse_mode_recovers_what_strict_reports(tmp_path, capsys, text, kind, content):
    turn = tmp_path / "turn.txt"
    turn.write_text(text, encoding="utf-8")
    args = [str(turn), "--tools", str(TOOLS), "--format", "qwen-xml"]
    code, report = run_json(capsys, *args)
    assert code == 1 and report["parse_mode"] == "strict"
    assert report["errors_by_kind"] == {kind: 1} and report["tool_calls"] == []
    code, report = run_json(capsys, *args, "--parse-mode", "lenient")
    assert code == 0 and report["parse_mode"] == "lenient" and report["format"] == "qwen-xml"
    assert report["tool_calls"] == [{"name": "read_file", "arguments": {"path": "src/numbers.py"}}]
    assert report["errors_by_kind"] == {} and report["content"] == content


def test_lenient_human_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short file name keeps the header on one line
    Path("turn.txt").write_text(BARE_FUNCTION, encoding="utf-8")
    assert main(["parse", "turn.txt", "--tools", str(TOOLS), "--format", "qwen-xml", "--parse-mode", "lenient"]) == 0
    out = capsys.readouterr().out
    assert "(format qwen-xml, parse mode lenient, argument mode schema)" in out
    assert 'read_file({"path": "src/numbers.py"})' in out and "1 block(s): 1 valid, 0 error(s)" in out


@pytest.mark.parametrize(
    ("format", "parse_mode", "has"),
    [("hermes", "lenient", "strict, seed"), ("qwen-xml", "seed", "strict, lenient")],
)
def test_a_parse_mode_the_format_lacks_is_bad_input(tmp_path, capsys, format, parse_mode, has):
    turn = tmp_path / "turn.txt"
    turn.write_text(BARE_FUNCTION, encoding="utf-8")
    args = ["parse", str(turn), "--tools", str(TOOLS), "--format", format, "--parse-mode", parse_mode]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"toolgrammar parse: --parse-mode {parse_mode!r} does not exist for --format {format}; {format} has: {has}"
    )
    assert main([*args, "--json"]) == 2  # checked before anything is parsed or printed
    assert capsys.readouterr().out == ""


def test_parse_help_describes_the_parse_modes(capsys):
    assert main(["parse", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # rich wraps the help in a box
    assert "'lenient' (qwen-xml only" in out and "'seed' (hermes only" in out


def test_version_and_module_entry_point(capsys):
    import subprocess
    import sys

    import toolgrammar

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"toolgrammar {toolgrammar.__version__}"
    command = [sys.executable, "-m", "toolgrammar", "--version"]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.strip() == f"toolgrammar {toolgrammar.__version__}", run.stderr
