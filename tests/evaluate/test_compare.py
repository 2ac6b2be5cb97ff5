"""The side-by-side mode: the full pipeline on the tiny random model, counting on scripted outputs,
resume after an interruption, and bad input refused before any generation."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolgrammar.evaluate.compare import (
    CompareConfig,
    CompareError,
    Generation,
    arguments_match,
    bundled_tasks_path,
    bundled_tools_path,
    load_tasks,
    run_compare,
    summary_rows,
)
from toolgrammar.evaluate.other_shapes import find_other_shape_calls
from toolgrammar.schema import load_tools

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tools():
    return load_tools(bundled_tools_path(), mode="strings")


# -- scripted generators: exact counting without a model ----------------------------------------------


class Scripted:
    """A generator whose turns come from ``script(task_prompt, mode, seed, turn, messages) -> text``."""

    name = "scripted"
    source = "scripted test generator"

    def __init__(self, script: Callable[..., str], *, fail_after: int | None = None):
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.fail_after = fail_after

    def render(self, messages, tools):
        return json.dumps(messages) + "\x00"  # the messages travel to generate() through the prompt

    def generate(self, prompts, *, constrained, seed, on_step=None):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append({"rows": len(prompts), "constrained": constrained, "seed": seed, "prompts": prompts})
        out = []
        for prompt in prompts:
            rendered, _, opening = prompt.partition("\x00")  # what follows: the pre-filled assistant opening
            messages = json.loads(rendered)
            user = next(m["content"] for m in messages if m["role"] == "user")
            turn = sum(m["role"] == "assistant" for m in messages)
            mode = "constrained" if constrained else "free"
            text = self.script(user, mode, seed, turn, messages)
            assert text.startswith(opening), "a script writes the whole turn, pre-filled opening included"
            text = text[len(opening) :]
            cut = text.endswith("<<cut>>")
            text = text.removesuffix("<<cut>>")
            out.append(Generation(text=text, tokens=len(text) // 4 + 1, finish="length" if cut else "stop"))
        if on_step is not None:
            on_step(1)
        return out


def _block(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


RAW_NEWLINE = (
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\ny = 2"}}\n</tool_call>'
)
TRUNCATED = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1 and 1 and 1 and<<cut>>'
FENCED = 'Sure:\n```json\n{"name": "read_file", "arguments": {"path": "README.md"}}\n```'
BARE = 'I will call {"name": "grep", "arguments": {"pattern": "TODO", "path": "."}} now.'


def seed_like_script(prompt: str, mode: str, seed: int, turn: int, messages) -> str:
    """Free: the seed's failure shapes; constrained: always a valid call (what the grammar guarantees)."""
    if mode == "constrained":
        return _block("read_file", {"path": "textkit/stats.py"}) if turn == 0 else "Done."
    if "contents of textkit/stats.py" in prompt:
        return _block("read_file", {"path": "./textkit/stats.py"}) if turn == 0 else "It defines mean and median."
    if "README" in prompt:
        return RAW_NEWLINE if turn == 0 else "Gave up."
    if "config.py" in prompt:
        return TRUNCATED
    if "string helpers" in prompt:
        return FENCED
    if "chunk()" in prompt:
        return BARE
    return "JSON is a text format for data."


SCRIPTED_TASKS = [
    {"id": "read-stats", "prompt": "Show me the contents of textkit/stats.py.", "expected_tool": "read_file",
     "expected_arguments": {"path": "textkit/stats.py"}},
    {"id": "read-readme", "prompt": "Read the README.md.", "expected_tool": "read_file",
     "expected_arguments": {"path": "README.md"}},
    {"id": "read-config", "prompt": "Explain textkit/config.py.", "expected_tool": "read_file"},
    {"id": "read-strings", "prompt": "Which string helpers are there?", "expected_tool": "read_file"},
    {"id": "read-chunks", "prompt": "What does chunk() return?", "expected_tool": "read_file"},
    {"id": "explain", "prompt": "What is JSON?"},
]  # fmt: skip


def _config(tmp_path: Path, **overrides) -> CompareConfig:
    tasks = tmp_path / "tasks.jsonl"
    if not tasks.exists():
        tmp_path.mkdir(parents=True, exist_ok=True)
        tasks.write_text("".join(json.dumps(t) + "\n" for t in SCRIPTED_TASKS))
    base = {
        "model": "scripted",
        "tasks": str(tasks),
        "out": str(tmp_path / "out"),
        "limit": 6,
        "seeds": (0, 1),
        "progress": False,
    }
    base.update(overrides)
    return CompareConfig(**base)


def test_counts_on_scripted_outputs(tmp_path):
    report = run_compare(_config(tmp_path, turns=3), generator=Scripted(seed_like_script))
    free = report.summary["modes"]["free"]
    constrained = report.summary["modes"]["constrained"]
    assert report.ok and report.constrained_errors == 0
    # per seed: read-stats valid, read-readme raw newline, read-config truncated x3 turns, fenced, bare, explain: none
    assert free["runs"] == 12 and constrained["runs"] == 12
    assert free["error_kinds"] == {"raw-newline-in-string": 2, "truncated": 6}
    assert free["blocks"] == 2 * (1 + 1 + 3) and free["valid_calls"] == 2
    assert free["runs_with_call"] == 6 and free["runs_without_call"] == 6
    assert free["other_shape_calls"] == {"fenced": 2, "bare": 2} and free["other_shape_calls_known_tool"] == 4
    assert free["runs_at_turn_limit"] == 2  # the truncated call sent again every turn, as in the seed
    assert constrained["error_kinds"] == {} and constrained["blocks"] == 12 and constrained["valid_calls"] == 12
    # the other-shape calls are intended calls that cannot run: hidden too, each counted once
    assert report.summary["hidden_by_grammar"] == {"raw-newline-in-string": 2, "truncated": 6, "other-shape": 4}
    assert free["intended_calls"] == 10 + 4 and free["intended_errors"] == 8 + 4
    assert report.summary["errors_hidden"] == 12
    assert free["intended_error_kinds"] == {"raw-newline-in-string": 2, "truncated": 6, "other-shape": 4}
    # the calls inside the other shapes, judged like blocks: both would be valid
    assert free["other_shape_valid_inside"] == 4 and free["other_shape_inner_kinds"] == {}
    assert free["runs_with_intended_call"] == 10 and constrained["runs_with_intended_call"] == 12
    # expected tool: 5 tasks name read_file; only read-stats's free call is valid (its ./ path still matches)
    assert free["expected_tool_tasks"] == 10 and free["expected_tool_hits"] == 2
    assert free["expected_arguments_tasks"] == 4 and free["expected_arguments_hits"] == 2
    assert constrained["expected_tool_hits"] == 10 and constrained["expected_arguments_hits"] == 2
    # in any shape: read-stats (block: right), read-readme and read-config (invalid blocks naming write_file:
    # wrong), read-strings (fenced read_file: right), read-chunks (bare grep: wrong)
    assert free["expected_tool_any_shape_hits"] == 2 * 2
    assert constrained["expected_tool_any_shape_hits"] == 10
    # arguments in any shape: read-stats matches; read-readme named the wrong tool
    assert free["expected_arguments_any_shape_hits"] == 2


def test_bad_call_error_string_goes_back_as_the_result(tmp_path):
    seen: list[list[dict]] = []

    def script(prompt, mode, seed, turn, messages):
        seen.append(messages)
        return RAW_NEWLINE if turn == 0 else "ok"

    run_compare(_config(tmp_path, limit=1, seeds=(0,), turns=2), generator=Scripted(script))
    second_turn = [m for m in seen if any(x["role"] == "tool" for x in m)]
    assert second_turn
    tool_messages = [m for m in second_turn[0] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and tool_messages[0]["content"].startswith("error: ")
    assert "JSON" in tool_messages[0]["content"]
    assistant = [m for m in second_turn[0] if m["role"] == "assistant"]
    assert assistant[0]["content"] == RAW_NEWLINE  # the model's own text goes back verbatim


def test_valid_calls_run_in_the_sandbox_and_results_go_back(tmp_path):
    seen: list[list[dict]] = []

    def script(prompt, mode, seed, turn, messages):
        seen.append(messages)
        if turn == 0:
            return _block("run_tests", {}) + "\n" + _block("grep", {"pattern": "FIXME", "path": "."})
        return "Three tests fail."

    report = run_compare(_config(tmp_path, limit=1, seeds=(0,), turns=4), generator=Scripted(script))
    tool_messages = [m["content"] for m in seen[-1] if m["role"] == "tool"]
    assert "FAILED (failures=3)" in tool_messages[0]
    assert "textkit/stats.py:17:    # FIXME" in tool_messages[1]
    for mode in ("free", "constrained"):
        run = report.runs[0][mode]
        assert run["stop"] == "no-call" and run["n_turns"] == 2
        assert run["turns"][0]["tool_results"] == tool_messages  # the same in both modes: no temp paths
    assert "toolgrammar-sandbox-" not in tool_messages[0]


class ClosingScripted(Scripted):
    """Reports one stop-decided close for each constrained row that wrote a block, as the processor would."""

    def generate(self, prompts, *, constrained, seed, on_step=None):
        out = super().generate(prompts, constrained=constrained, seed=seed, on_step=on_step)
        if not constrained:
            return out
        return [dataclasses.replace(g, stop_closes=g.text.count("</tool_call>")) for g in out]


def test_blocks_closed_where_the_model_stopped_are_counted_per_run_and_reported(tmp_path):
    report = run_compare(_config(tmp_path, turns=2), generator=ClosingScripted(seed_like_script))
    per_run = [r["constrained"]["stop_closes"] for r in report.runs]
    blocks = [r["constrained"]["blocks"] for r in report.runs]
    assert per_run == blocks and sum(blocks) > 0
    assert [r["free"]["stop_closes"] for r in report.runs] == [0] * len(report.runs)
    assert report.summary["modes"]["constrained"]["stop_closes"] == sum(blocks)
    assert report.summary["modes"]["free"]["stop_closes"] == 0
    row = next(
        line
        for line in (tmp_path / "out" / "report.md").read_text().splitlines()
        if "closed where the model stopped" in line
    )
    assert row.replace(" ", "").endswith(f"|0|{sum(blocks)}|"), row


def test_a_leak_in_the_constrained_run_is_reported_loudly(tmp_path):
    def leaky(prompt, mode, seed, turn, messages):
        return RAW_NEWLINE  # even under the "grammar": a toolgrammar bug

    report = run_compare(_config(tmp_path, limit=2, seeds=(0,)), generator=Scripted(leaky))
    assert not report.ok and report.constrained_errors == 2
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "BUG: the constrained run made 2 invalid block(s)" in markdown
    assert "## Constrained errors (bugs)" in markdown and "read-readme" in markdown
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["summary"]["modes"]["constrained"]["error_kinds"] == {"raw-newline-in-string": 2}


def test_cli_exit_code_1_on_constrained_errors(tmp_path, monkeypatch, capsys):
    import toolgrammar.evaluate.compare as compare_module
    from toolgrammar.cli import main

    real = compare_module.run_compare

    def fake(config):
        return real(config, generator=Scripted(lambda *a: TRUNCATED))

    monkeypatch.setattr(compare_module, "run_compare", fake)
    code = main(["compare", "--limit", "1", "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 1
    assert "BUG" in capsys.readouterr().out


def test_seeding_scheme_is_the_same_in_both_modes(tmp_path):
    generator = Scripted(seed_like_script)
    run_compare(_config(tmp_path, limit=4, seeds=(3, 5), batch_size=2, turns=1), generator=generator)
    free = [(c["seed"], c["rows"]) for c in generator.calls if not c["constrained"]]
    constrained = [(c["seed"], c["rows"]) for c in generator.calls if c["constrained"]]
    assert free == constrained == [(3_000_000, 2), (3_001_000, 2), (5_000_000, 2), (5_001_000, 2)]


def test_resume_after_an_interruption_equals_an_uninterrupted_run(tmp_path):
    def script(prompt, mode, seed, turn, messages):  # depends on the seed, like sampling does
        return FENCED if (seed // 1000 + len(prompt)) % 2 else _block("list_files", {"path": "."})

    full = run_compare(_config(tmp_path / "a", limit=5, seeds=(0, 1), batch_size=2), generator=Scripted(script))

    # interrupted in the middle of a batch: after 3 finished runs the next batch's write is cut
    config = _config(tmp_path / "b", limit=5, seeds=(0, 1), batch_size=2)
    with pytest.raises(KeyboardInterrupt):
        run_compare(config, generator=Scripted(script, fail_after=5))  # 2 batches x 2 modes, then stop
    lines = (tmp_path / "b" / "out" / "runs.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["type"] == "run" for line in lines) == 4
    with open(tmp_path / "b" / "out" / "runs.jsonl", "a") as handle:  # a half-written line, as a kill leaves
        handle.write('{"type": "run", "seed": 0, "batch": 2, "task_id": "x", "fr')
    config.resume = True
    resumed_generator = Scripted(script)
    resumed = run_compare(config, generator=resumed_generator)
    assert len(resumed_generator.calls) == 2 * 6 - 4  # only the unfinished batches ran
    assert [(r["seed"], r["task_id"]) for r in resumed.runs] == [(r["seed"], r["task_id"]) for r in full.runs]
    strip = lambda runs: [(r["free"]["turns"][0]["text"], r["constrained"]["turns"][0]["text"]) for r in runs]  # noqa: E731
    assert strip(resumed.runs) == strip(full.runs)
    assert resumed.summary["modes"]["free"]["runs"] == 10


def test_resume_never_rewrites_finished_results_in_place(tmp_path, monkeypatch):
    """A kill while --resume rewrites runs.jsonl leaves the old file whole, and no temporary file."""
    import toolgrammar.evaluate.compare.running as compare_module

    config = _config(tmp_path, limit=4, seeds=(0,), batch_size=2)
    with pytest.raises(KeyboardInterrupt):
        run_compare(config, generator=Scripted(seed_like_script, fail_after=2))  # one batch, both modes
    runs_file = tmp_path / "out" / "runs.jsonl"
    before = runs_file.read_text()
    assert sum(json.loads(line)["type"] == "run" for line in before.splitlines()) == 2

    real_dumps = json.dumps
    written = []

    def dying_dumps(record, *args, **kwargs):  # the process dies after writing two of the records
        if isinstance(record, dict) and record.get("type") in ("run", "batch"):
            written.append(record)
            if len(written) == 3:
                raise KeyboardInterrupt("killed during the rewrite")
        return real_dumps(record, *args, **kwargs)

    monkeypatch.setattr(compare_module.json, "dumps", dying_dumps)
    config.resume = True
    with pytest.raises(KeyboardInterrupt):
        run_compare(config, generator=Scripted(seed_like_script))
    monkeypatch.setattr(compare_module.json, "dumps", real_dumps)
    assert runs_file.read_text() == before  # whole: the rewrite went to another file
    assert [p.name for p in runs_file.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_resume_refuses_another_configuration(tmp_path):
    config = _config(tmp_path, limit=2, seeds=(0,))
    run_compare(config, generator=Scripted(seed_like_script))
    other = _config(tmp_path, limit=2, seeds=(0,), max_new_tokens=99, resume=True)
    with pytest.raises(CompareError, match="differs in: max_new_tokens"):
        run_compare(other, generator=Scripted(seed_like_script))


# -- the tiny random model through the real pipeline --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("tiny") / "out"
    config = CompareConfig(
        model="tiny-random",
        limit=2,
        seeds=(0,),
        max_new_tokens=24,
        temperature=1.0,
        turns=2,
        tool_choice="required",  # so that the random model's constrained turns hold blocks
        out=str(out),
        progress=False,
    )
    return run_compare(config)


def test_tiny_model_full_pipeline_writes_every_file(tiny_report):
    out = tiny_report.out
    for name in ("report.json", "report.md", "chart.png", "runs.jsonl", "config.json"):
        assert (out / name).is_file(), name
    assert (out / "chart.png").read_bytes().startswith(b"\x89PNG")
    saved = json.loads((out / "report.json").read_text())
    assert len(saved["runs"]) == 2
    run = saved["runs"][0]
    assert {"prompt", "free", "constrained", "seed", "task_id"} <= set(run)
    turn = run["free"]["turns"][0]
    assert {"text", "parse", "error_kinds", "tokens", "finish", "batch_seconds"} <= set(turn)
    assert "<tool_call>" in saved["environment"]["prompt_example"]  # the tool list reached the prompt


def test_tiny_model_constrained_run_is_error_free(tiny_report):
    constrained = tiny_report.summary["modes"]["constrained"]
    assert tiny_report.ok, tiny_report.summary
    assert constrained["blocks"] >= 2 and constrained["valid_calls"] == constrained["blocks"]
    assert constrained["tokens_per_second"] and tiny_report.summary["modes"]["free"]["tokens_per_second"]
    for run in tiny_report.runs:
        for turn in run["constrained"]["turns"]:
            assert turn["parse"]["blocks"] and all(b["call"] for b in turn["parse"]["blocks"])
            assert turn["processor_error"] is None


def test_prefix_cache_changes_nothing_but_speed(tools):
    pytest.importorskip("torch")
    from toolgrammar.evaluate.compare import HFGenerator, initial_messages, prepare
    from toolgrammar.evaluate.models import load_model

    loaded = load_model("tiny-random")
    base = {"model": "tiny-random", "limit": 3, "max_new_tokens": 8, "temperature": 1.0}
    with_cache = CompareConfig(**base)
    without = CompareConfig(**base, prefix_cache=False)
    _, tasks = prepare(with_cache)
    a, b = HFGenerator(loaded, tools, with_cache), HFGenerator(loaded, tools, without)
    prompts = [a.render(initial_messages(t, with_cache), tools.to_openai()) for t in tasks]
    for constrained in (False, True):
        left = a.generate(prompts, constrained=constrained, seed=11)
        right = b.generate(prompts, constrained=constrained, seed=11)
        assert [g.text for g in left] == [g.text for g in right]


# -- inputs ----------------------------------------------------------------------------------------------


def test_bundled_tasks_and_tools(tools):
    tasks = load_tasks(bundled_tasks_path(), tools)
    assert len(tasks) >= 40
    assert tools.names == ("read_file", "list_files", "grep", "write_file", "run_tests")
    assert sum(t.expected_tool is not None for t in tasks) >= 35
    assert {t.expected_tool for t in tasks} >= set(tools.names)
    assert all(p["type"] == "string" for t in tools for p in t.parameters["properties"].values())
    mirror = REPO / "examples" / "tasks.jsonl"
    if mirror.exists():
        assert mirror.read_text() == bundled_tasks_path().read_text()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param("{not json", r"tasks.jsonl:2: malformed JSON line", id="malformed"),
        pytest.param('["a"]', r"tasks.jsonl:2: expected a JSON object", id="not-object"),
        pytest.param('{"prompt": ""}', r"tasks.jsonl:2: 'prompt' must be a non-empty string", id="empty-prompt"),
        pytest.param('{"prompt": "x", "expected_tool": "rm_rf"}', r"tasks.jsonl:2: unknown tool 'rm_rf'", id="tool"),
        pytest.param('{"prompt": "x", "expectedtool": "grep"}', r"unknown keys \['expectedtool'\]", id="typo"),
        pytest.param('{"prompt": "x", "expected_arguments": {"path": "."}}', "needs expected_tool", id="args-alone"),
        pytest.param(
            '{"prompt": "x", "expected_tool": "grep", "expected_arguments": {"file": "."}}',
            r"\['file'\] are not arguments of 'grep'",
            id="bad-argument",
        ),
        pytest.param('{"id": "a", "prompt": "y"}', r"duplicate id 'a' \(first on line 1\)", id="duplicate"),
    ],
)
def test_bad_task_lines_name_the_line(tmp_path, tools, line, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "List the files."}\n' + line + "\n")
    with pytest.raises(CompareError, match=message):
        load_tasks(path, tools)


def _shapes(text, tools):
    return [(c.shape, c.name, c.error.kind if c.error else None) for c in find_other_shape_calls(text, tools)]


def test_other_shape_calls_are_judged_like_blocks(tools):
    assert _shapes(FENCED, tools) == [("fenced", "read_file", None)]
    (call,) = find_other_shape_calls(FENCED, tools)
    assert call.call is not None and call.call.arguments == {"path": "README.md"}
    assert FENCED[call.start :].startswith('{"name": "read_file"') and call.raw.endswith("}}")
    assert _shapes(BARE, tools) == [("bare", "grep", None)]
    raw = '```\n{"name": "write_file", "arguments": {"path": "a", "content": "x\ny"}}\n```'
    assert _shapes(raw, tools) == [("fenced", "write_file", "raw-newline-in-string")]
    listed = '```json\n[{"name": "find_todos", "parameters": {}}, {"name": "grep", "arguments": {}}]\n```'
    assert _shapes(listed, tools) == [("fenced", "find_todos", "unknown-tool"), ("fenced", "grep", "missing-argument")]
    invented = '{"name": "read_file", "arguments": {"path": "a", "lines": "1-5"}}'
    assert _shapes(invented, tools) == [("bare", "read_file", "unknown-argument")]
    typed = '```json\n{"name": "read_file", "arguments": {"path": 3}}\n```'
    assert _shapes(typed, tools) == [("fenced", "read_file", "wrong-type")]
    extra_key = '{"name": "read_file", "arguments": {"path": "a"}, "id": 1}'
    assert _shapes(extra_key, tools) == [("bare", "read_file", "wrong-keys")]
    cut = '```json\n{"name": "write_file", "arguments": {"path": "a.py", "content": "def f():\n    return'
    assert _shapes(cut, tools) == [("fenced", "write_file", "truncated")]
    broken = 'Try {"name": "grep", "arguments": {"pattern": "x"},, } then stop.'
    assert _shapes(broken, tools) == [("bare", "grep", "invalid-json")]
    assert _shapes('{"name": "x"} and {"a": 1}', tools) == []
    assert _shapes('```python\nprint({"a": 1})\n```', tools) == []
    assert find_other_shape_calls(None, tools) == [] and find_other_shape_calls("no json { here", tools) == []


def test_arguments_match():
    assert arguments_match({"path": "textkit"}, {"path": "./textkit/"})
    assert arguments_match({}, {"path": "x"})
    assert not arguments_match({"path": "a"}, {"path": "b"})
    assert not arguments_match({"pattern": "TODO"}, {"path": "."})


# -- the CLI: bad input exits 2 before any generation -------------------------------------------------


@pytest.fixture
def no_generation(monkeypatch):
    """Fail the test if anything reaches generation or model loading."""
    import toolgrammar.evaluate.compare as compare_module
    import toolgrammar.evaluate.models as models_module

    def boom(*args, **kwargs):
        raise AssertionError("generation started despite bad input")

    monkeypatch.setattr(compare_module.HFGenerator, "generate", boom)
    monkeypatch.setattr(models_module, "provision_qwen25_coder", boom)


def _cli(args: list[str]) -> int:
    from toolgrammar.cli import main

    return main(["compare", "--no-progress", *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--tasks", "missing.jsonl"], "tasks file 'missing.jsonl' does not exist", id="no-tasks"),
        pytest.param(["--tools", "missing.json"], "tools file 'missing.json' does not exist", id="no-tools"),
        pytest.param(["--seeds", "0,x"], "'x' is not a seed", id="bad-seed"),
        pytest.param(["--turns", "0"], "--turns must be at least 1", id="turns"),
        pytest.param(["--mode", "loose"], "--mode must be 'schema' or 'strings'", id="mode"),
        pytest.param(["--tool-choice", "rm_rf"], "--tool-choice 'rm_rf' is not one of the tools", id="tool-choice"),
        pytest.param(["--model", "./no/such/dir"], "does not exist", id="model-dir"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, monkeypatch, capsys, no_generation, args, message):
    monkeypatch.chdir(tmp_path)
    assert _cli([*args, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_cli_malformed_tasks_line_exits_2_with_line_number(tmp_path, capsys, no_generation):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"prompt": "a"}\n\n{"prompt": "b",}\n')
    assert _cli(["--tasks", str(tasks), "--out", str(tmp_path / "o")]) == 2
    assert f"{tasks}:3: malformed JSON line" in capsys.readouterr().err


def test_cli_unknown_tool_in_tasks_exits_2(tmp_path, capsys, no_generation):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"prompt": "a", "expected_tool": "shell"}\n')
    assert _cli(["--tasks", str(tasks), "--out", str(tmp_path / "o")]) == 2
    assert "unknown tool 'shell'" in capsys.readouterr().err


def test_cli_model_without_chat_template_exits_2(tmp_path, capsys, no_generation):
    pytest.importorskip("transformers")
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    model_dir = tmp_path / "model"
    load_qwen3_tokenizer().save_pretrained(model_dir)
    (model_dir / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    assert _cli(["--model", str(model_dir), "--out", str(tmp_path / "o")]) == 2
    assert "no chat template" in capsys.readouterr().err


def test_cli_tiny_model_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    options = ["--limit", "1", "--max-new-tokens", "24", "--tool-choice", "required", "--temperature", "1.0"]
    code = _cli(["--model", "tiny-random", *options, "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "free vs constrained" in out and "report.md" in out


# -- policies: the fair free side under required --------------------------------------------------------


def test_required_prefills_the_opener_on_both_sides(tmp_path):
    """Under call-first `required` both sides get the same prompt, ending in the block opener; the free
    side's own errors inside the block are counted, the constrained side (scripted valid) hides them."""

    def script(prompt, mode, seed, turn, messages):
        if mode == "constrained":
            return _block("read_file", {"path": "README.md"})
        return '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md", "lines": "all"}}\n</tool_call>'

    generator = Scripted(script)
    report = run_compare(_config(tmp_path, limit=2, seeds=(0,), tool_choice="required"), generator=generator)
    free_prompts = [c["prompts"] for c in generator.calls if not c["constrained"]]
    constrained_prompts = [c["prompts"] for c in generator.calls if c["constrained"]]
    assert free_prompts == constrained_prompts  # the same prompt on both sides
    assert all(p.endswith('\x00<tool_call>\n{"name": "') for batch in free_prompts for p in batch)
    turn = report.runs[0]["free"]["turns"][0]
    assert turn["opening"] == '<tool_call>\n{"name": "' and turn["text"].startswith('<tool_call>\n{"name": "read_file"')
    free, constrained = report.summary["modes"]["free"], report.summary["modes"]["constrained"]
    assert free["error_kinds"] == {"unknown-argument": 2} and constrained["valid_calls"] == 2
    assert report.summary["hidden_by_grammar"] == {"unknown-argument": 2}
    assert "both sides find the block opener pre-filled" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    ("overrides", "opening"),
    [
        # what the grammar forces: the block's opening up to where the names diverge
        pytest.param({"tool_choice": "required"}, '<tool_call>\n{"name": "', id="required"),
        pytest.param({"tool_choice": "grep"}, '<tool_call>\n{"name": "grep", "arguments": {"pattern": "', id="named"),
        pytest.param({"tool_choice": "required", "format": "qwen-xml"}, "<tool_call>\n<function=", id="qwen-xml"),
        pytest.param({"tool_choice": "required", "prose_first": True}, "", id="prose-first"),
        pytest.param({"tool_choice": "required", "reasoning": "enabled"}, "", id="reasoning-first"),
        pytest.param({"tool_choice": "auto"}, "", id="auto"),
        pytest.param({"tool_choice": "none"}, "", id="none"),
    ],
)
def test_assistant_opening_per_policy(tools, overrides, opening):
    from toolgrammar.evaluate.compare import assistant_opening

    assert assistant_opening(CompareConfig(**overrides), tools) == opening


def test_prose_first_needs_required(tmp_path):
    with pytest.raises(CompareError, match="--prose-first applies to --tool-choice required only"):
        run_compare(_config(tmp_path, prose_first=True), generator=Scripted(seed_like_script))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backend": "vllm"}, r"--backend must be one of transformers, llama\.cpp, got 'vllm'"),
        ({"backend": "llama.cpp", "steer_gate": "pmi"}, r"with --backend llama\.cpp the gate is 'name' \(or none\)"),
    ],
)
def test_bad_backends_are_refused_before_anything_runs(tmp_path, overrides, message):
    with pytest.raises(CompareError, match=message):
        run_compare(_config(tmp_path, **overrides), generator=Scripted(seed_like_script))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"llama_server": True}, r"--llama-server runs llama\.cpp's own grammar: it needs --backend llama\.cpp"),
        ({"llama_server": True, "backend": "llama.cpp", "turns": 2}, r"judges one assistant turn \(--turns 1, got 2\)"),
        (
            {"llama_server": True, "backend": "llama.cpp", "tool_choice": "required", "prose_first": True},
            r"llama\.cpp's own grammar has no --prose-first",
        ),
    ],
)
def test_bad_llama_server_options_are_refused_before_anything_runs(tmp_path, overrides, message):
    with pytest.raises(CompareError, match=message):
        run_compare(_config(tmp_path, **overrides), generator=Scripted(seed_like_script))


class ScriptedServerSide:
    """llama-server's side, scripted: it gets the conversations themselves (never a rendered prompt)."""

    def __init__(self, script: Callable[..., str]):
        self.script = script
        self.requests: list[dict[str, Any]] = []

    def generate(self, conversations, tools, config, *, seed, on_step=None):
        self.requests.append({"conversations": conversations, "tools": tools, "seed": seed})
        out = []
        for messages in conversations:
            user = next(m["content"] for m in messages if m["role"] == "user")
            text = self.script(user, "llama-server", seed, 0, messages)
            out.append(Generation(text=text, tokens=len(text) // 4 + 1, finish="stop"))
        return out


class ScriptedWithServer(Scripted):
    def __init__(self, script: Callable[..., str]):
        super().__init__(script)
        self.server_side = ScriptedServerSide(script)
        self.closed = False

    def llama_server_side(self):
        return self.server_side

    def close(self):
        self.closed = True


def three_sided_script(prompt: str, mode: str, seed: int, turn: int, messages) -> str:
    """llama-server's side: a valid call with the wrong path on one task, another shape on another."""
    if mode != "llama-server":
        return seed_like_script(prompt, mode, seed, turn, messages)
    if "README" in prompt:
        return _block("read_file", {"path": "docs/README.md"})
    if "string helpers" in prompt:
        return FENCED
    return _block("read_file", {"path": "textkit/stats.py"})


def test_the_llama_server_side_is_a_third_column_judged_by_the_same_parser(tmp_path, capsys):
    from toolgrammar.cli.compare import print_report

    generator = ScriptedWithServer(three_sided_script)
    config = _config(tmp_path, backend="llama.cpp", llama_server=True, seeds=(0,))
    report = run_compare(config, generator=generator)
    assert generator.closed  # the server the generator started is stopped when the run ends
    # it got the conversations as messages, with the offered tools, and nothing pre-filled
    request = generator.server_side.requests[0]
    assert [m["role"] for m in request["conversations"][0]] == ["user"]
    assert sorted(t["function"]["name"] for t in request["tools"]) == sorted(load_tools(bundled_tools_path()).names)
    server = report.summary["modes"]["llama-server"]
    assert server["runs"] == 6 and server["blocks"] == 5 and server["valid_calls"] == 5
    assert server["other_shape_calls"] == {"fenced": 1, "bare": 0}
    # read-stats right; read-readme the right tool with the wrong path
    assert (server["expected_arguments_tasks"], server["expected_arguments_hits"]) == (2, 1)
    rows = summary_rows(report.summary)
    assert all(len(row) == 4 for row in rows)
    by_metric = {row[0].strip(): row[1:] for row in rows}
    assert by_metric["valid calls (valid blocks)"] == ("1", "6", "5")
    markdown = (report.out / "report.md").read_text()
    assert "| metric | free | toolgrammar | llama.cpp's own |" in markdown
    assert "llama-server `--jinja`" in markdown
    runs = [json.loads(line) for line in (report.out / "runs.jsonl").read_text().splitlines()]
    assert all("llama-server" in r for r in runs if r["type"] == "run")
    print_report(report)
    assert "llama.cpp's own" in capsys.readouterr().out


def test_request_body_states_policy_budget_and_neutral_samplers():
    from toolgrammar.evaluate.compare.llama_server import request_body

    greedy = request_body([{"role": "user", "content": "hi"}], [], CompareConfig(temperature=0), seed=7)
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"], greedy["min_p"]) == (0.0, 0, 1.0, 0.0)
    assert greedy["return_tokens"] and greedy["tool_choice"] == "auto" and greedy["seed"] == 7
    assert greedy["chat_template_kwargs"] == {"enable_thinking": False}
    named = request_body([], [], CompareConfig(tool_choice="grep", max_new_tokens=33), seed=0)
    assert named["tool_choice"] == {"type": "function", "function": {"name": "grep"}}
    assert (named["max_tokens"], named["temperature"], named["top_k"], named["top_p"]) == (33, 0.7, 20, 0.8)


def test_a_missing_llama_server_names_the_build_script(tmp_path, monkeypatch):
    from toolgrammar.evaluate.compare.llama_server import llama_server_binary

    monkeypatch.delenv("TOOLGRAMMAR_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("TOOLGRAMMAR_BIN", str(tmp_path))
    with pytest.raises(CompareError, match=r"bash scripts/llama-server\.sh"):
        llama_server_binary()
    monkeypatch.setenv("TOOLGRAMMAR_LLAMA_SERVER", str(tmp_path / "nothing"))
    with pytest.raises(CompareError, match="is not an executable file"):
        llama_server_binary()


def test_the_llama_cpp_backend_names_what_it_needs(tmp_path, monkeypatch):
    """Without llama-cpp-python, --backend llama.cpp fails in one line naming the package and the extra."""
    from toolgrammar.evaluate.compare import missing_requirements
    from toolgrammar.evaluate.extras import LLAMA_CPP, missing_message

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    needed, _ = missing_requirements(CompareConfig(backend="llama.cpp", model="tiny-random"))
    assert LLAMA_CPP in needed
    assert "pip install 'toolgrammar[llamacpp]'" in missing_message(needed, what="--backend llama.cpp")
    with pytest.raises(CompareError, match=r"is not a \.gguf file"):
        from toolgrammar.evaluate.compare.llamacpp_generation import gguf_of

        gguf_of(str(tmp_path))


def test_without_matplotlib_the_report_is_written_without_a_chart(tmp_path, monkeypatch):
    monkeypatch.setattr("toolgrammar.evaluate.compare.running.has_matplotlib", lambda: False)
    monkeypatch.setattr("toolgrammar.evaluate.compare.report.has_matplotlib", lambda: False)
    report = run_compare(_config(tmp_path, limit=2, seeds=(0,)), generator=Scripted(seed_like_script))
    assert (report.out / "report.json").is_file() and not (report.out / "chart.png").exists()
    assert "No chart: matplotlib is not installed" in (report.out / "report.md").read_text()


def test_the_call_inside_a_truncated_block_is_judged_too(tmp_path):
    """The model ends its turn before </tool_call>: the block is truncated, and its call is judged as well."""
    inside = {
        "read-stats": '{"name": "textkit", "arguments": {}}',  # an unknown tool
        "read-readme": '{"name": "read_file", "arguments": {"path": "README.md"}}',  # would be valid
    }

    def script(prompt, mode, seed, turn, messages):
        if mode == "constrained":
            return _block("read_file", {"path": "README.md"})
        task = "read-stats" if "stats" in prompt else "read-readme"
        return '<tool_call>\n{"name": "' + inside[task][len('{"name": "') :]

    report = run_compare(_config(tmp_path, limit=2, seeds=(0,), tool_choice="required"), generator=Scripted(script))
    free = report.summary["modes"]["free"]
    assert free["error_kinds"] == {"truncated": 2}
    assert free["unclosed_inner_kinds"] == {"unknown-tool": 1} and free["unclosed_valid_inside"] == 1
    # read-readme's truncated call named the expected tool with the expected arguments
    assert free["expected_tool_any_shape_hits"] == 1 and free["expected_arguments_any_shape_hits"] == 1
    rows = {metric.strip(): (a, b) for metric, a, b in summary_rows(report.summary)}
    assert rows["truncated blocks, inside: unknown-tool"] == ("1", "0")


def _spy_processors(monkeypatch: pytest.MonkeyPatch, option: str) -> list[Any]:
    """The value of ``option`` on every constrained-side processor built from now on, in order."""
    pytest.importorskip("torch")
    from toolgrammar.evaluate.compare import generation

    built: list[Any] = []
    real = generation.HFGenerator.processor.fget

    def spy(self):
        processor = real(self)
        built.append(getattr(processor, option))
        return processor

    monkeypatch.setattr(generation.HFGenerator, "processor", property(spy))
    return built


def test_prefix_true_is_off_by_default_and_skip_holds_out_the_first_tasks(tmp_path, monkeypatch):
    """``--prefix-true`` reaches the constrained side's processor and the report; ``--skip`` leaves out the first
    tasks; a directory written with the defaults has neither in its config (so it resumes as before)."""
    built = _spy_processors(monkeypatch, "prefix_true")
    options = ["--model", "tiny-random", "--limit", "1", "--max-new-tokens", "8", "--temperature", "1.0"]
    for flag, out in (([], "off"), (["--prefix-true", "--skip", "2"], "on")):
        assert _cli([*options, *flag, "--out", str(tmp_path / out)]) in (0, 1)
    assert built and set(built[: len(built) // 2]) == {False} and set(built[len(built) // 2 :]) == {True}
    assert "--prefix-true" in (tmp_path / "on" / "report.md").read_text()
    assert "prefix-true" not in (tmp_path / "off" / "report.md").read_text()
    config = json.loads((tmp_path / "off" / "config.json").read_text())["config"]
    assert "prefix_true" not in config and "skip" not in config
    config = json.loads((tmp_path / "on" / "config.json").read_text())["config"]
    assert config["prefix_true"] is True and config["skip"] == 2
    first, third = (
        {r["task_id"] for r in map(json.loads, (tmp_path / out / "runs.jsonl").read_text().splitlines()) if "task" in r}
        for out in ("off", "on")
    )
    tasks = [t.id for t in load_tasks(bundled_tasks_path(), load_tools(bundled_tools_path(), mode="strings"))]
    assert first == {tasks[0]} and third == {tasks[2]}
    assert _cli([*options, "--skip", "-1", "--out", str(tmp_path / "bad")]) != 0


def test_close_on_stop_is_on_by_default_and_the_flag_turns_it_off(tmp_path, monkeypatch):
    """``--no-close-on-stop`` reaches the constrained side's processor; the report says which; a directory
    written without the option (the default) resumes, one written with it off does not resume with it on."""
    built = _spy_processors(monkeypatch, "close_on_stop")
    options = ["--model", "tiny-random", "--limit", "1", "--max-new-tokens", "8", "--temperature", "1.0"]
    for flag, out in (([], "on"), (["--no-close-on-stop"], "off")):
        assert _cli([*options, *flag, "--out", str(tmp_path / out)]) in (0, 1)
    assert built and set(built[: len(built) // 2]) == {True} and set(built[len(built) // 2 :]) == {False}
    assert "goes to its close" in (tmp_path / "on" / "report.md").read_text()
    assert "--no-close-on-stop" in (tmp_path / "off" / "report.md").read_text()
    assert "close_on_stop" not in json.loads((tmp_path / "on" / "config.json").read_text())["config"]
    assert json.loads((tmp_path / "off" / "config.json").read_text())["config"]["close_on_stop"] is False
    config = _config(tmp_path / "resume", limit=2, seeds=(0,), close_on_stop=False)
    run_compare(config, generator=Scripted(seed_like_script))
    again = _config(tmp_path / "resume", limit=2, seeds=(0,), resume=True)
    with pytest.raises(CompareError, match="differs in: close_on_stop"):
        run_compare(again, generator=Scripted(seed_like_script))
