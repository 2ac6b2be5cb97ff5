"""The code blocks of README.md and docs/: found, and run as a reader would run them.

Every fenced block whose language is ``python`` or ``bash`` (``py``, ``sh``, ``shell`` too) is run by
one of the tests in ``test_docs_examples.py``; blocks in any other language (``text``, ``json``...)
are output or illustration and are not run. An HTML comment on the line before a block tells the
runner how to run it (invisible on GitHub and in the built site)::

    <!-- test: slow cwd=repo expect="valid" append:compare="--model tiny-random --limit 1" -->

Keys (any order; values quoted as in a shell):

- ``slow``: run by the slow test (the real model, a download, or minutes of work) instead of the
  default one; ``vllm``: run by the vLLM test (needs vLLM installed); ``server``: with ``vllm``, a
  command that starts an OpenAI server: the test starts it on a free port and runs the page's other
  ``vllm`` blocks against it; ``llamacpp``: run by the llama.cpp test (needs llama-cpp-python), with
  ``{gguf}`` the path of a tiny random GGUF (the real Qwen3 tokenizer) for ``replace``.
- ``setup``: the block whose names (``model``, ``tokenizer``, ``tools``, ``messages``) every page's
  Python blocks start from (docs/getting-started.md has it).
- ``exit=N``: the exit status the block must end with (default 0).
- ``expect=TEXT``: the block's output (stdout and stderr) must contain TEXT; repeatable.
- ``match=REGEX``: the output must match REGEX (``re.search``, multiline); repeatable.
- ``append=ARGS``: ARGS added to the end of every command of the block; ``append:WORD=ARGS`` only to
  commands with a word ending in WORD (``append:compare=...``, ``append:main.sh=...``). The cheap
  variant of a long run: the command as written, with later options overriding earlier ones.
  ``{tmp}`` in ARGS is the block's own temporary folder.
- ``cwd=repo``: run in the repository root (the default is a fresh temporary folder holding links to
  the repository's ``examples/`` and ``grammars/``).
- ``replace=OLD=>NEW``: substitute text before running (``{tmp}``, ``{model}``, ``{base}`` expand);
  repeatable.

Python blocks of one page run in order in one namespace, which starts as a copy of the setup block's.
Shell blocks run one by one in ``bash -euo pipefail``, with the environment's ``bin`` folder first on
``PATH``; a block made only of ``toolgrammar`` commands and ``python SCRIPT.py`` runs them in-process,
through the same console script entry point and as ``python`` runs a script (the same code, without paying
the imports again for every command). ``pip
install`` lines are checked, not run: every ``toolgrammar[extra]`` they name must be an extra of
pyproject.toml, and every other pinned requirement must be the pin the repository's own pyproject.toml,
scripts or sources use.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
KEYS = {"slow", "vllm", "llamacpp", "server", "setup", "exit", "expect", "match", "append", "cwd", "replace"}
_MARKER = re.compile(r"^\s*<!--\s*test:(?P<body>.*?)-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def doc_files() -> list[Path]:
    """README.md and every page under docs/, relative to the repository root."""
    pages = sorted(p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md"))
    return [Path("README.md"), *pages]


@dataclass
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    """``python`` or ``shell`` for blocks that run; the info string's first word otherwise."""
    code: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in ("python", "shell")

    @property
    def suite(self) -> str:
        """Which test runs the block: ``vllm``, ``llamacpp``, ``slow`` or ``default``."""
        if self.options.get("vllm"):
            return "vllm"
        if self.options.get("llamacpp"):
            return "llamacpp"
        return "slow" if self.options.get("slow") else "default"


def parse_marker(body: str, where: str) -> dict[str, Any]:
    options: dict[str, Any] = {"expect": [], "match": [], "append": [], "replace": []}
    for word in shlex.split(body):
        key, _, value = word.partition("=")
        base, _, target = key.partition(":")
        if base not in KEYS:
            raise ValueError(f"{where}: unknown test marker key {base!r} (known: {sorted(KEYS)})")
        if base in ("slow", "vllm", "llamacpp", "server", "setup"):
            options[base] = True
        elif base == "exit":
            options["exit"] = int(value)
        elif base == "expect":
            options["expect"].append(value)
        elif base == "match":
            re.compile(value)
            options["match"].append(value)
        elif base == "append":
            options["append"].append((target, value))
        elif base == "replace":
            old, sep, new = value.partition("=>")
            if not sep:
                raise ValueError(f"{where}: replace needs OLD=>NEW, got {value!r}")
            options["replace"].append((old, new))
        elif base == "cwd":
            if value != "repo":
                raise ValueError(f"{where}: cwd must be 'repo', got {value!r}")
            options["cwd"] = value
    return options


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with the test marker on the line before each."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        word = info.split()[0].lower() if info else ""
        language = RUN_LANGUAGES.get(word, word)
        options: dict[str, Any] = {"expect": [], "match": [], "append": [], "replace": []}
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = _MARKER.match(lines[before]) if before >= 0 else None
        if marker:
            options = parse_marker(marker["body"], f"{path}:{start + 1}")
        out.append(Block(path, start + 1, language, "\n".join(body) + "\n", options))
    return out


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks_of(path)]


# -- shell ----------------------------------------------------------------------------------------------------


def commands(code: str) -> list[str]:
    """The block's logical lines: continuations joined, blank and comment-only lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in code.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return out


def words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def with_appends(block: Block, command: str, tmp: Path, values: dict[str, str] | None = None) -> str:
    extra: list[str] = []
    for target, value in block.options["append"]:
        if not target or any(w == target or w.endswith(target) for w in words(command)):
            for key, known in {"tmp": str(tmp), **(values or {})}.items():
                value = value.replace("{" + key + "}", known)
            extra.append(value)
    if not extra:
        return command
    code, _, _comment = command.partition(" #")
    return f"{code.rstrip()} {' '.join(extra)}"


_SHELL_SYNTAX = re.compile(r"[|;&<>$`()]")


def in_process(lines: list[str]) -> bool:
    """Whether every command is a plain ``toolgrammar ...`` or ``python SCRIPT.py ...`` call (no shell syntax)."""

    def plain(command: str) -> bool:
        w = words(command)
        if not w or _SHELL_SYNTAX.search(command.split(" #")[0]):
            return False
        return w[0] == "toolgrammar" or (w[0] == "python" and len(w) > 1 and w[1].endswith(".py"))

    return bool(lines) and all(plain(c) for c in lines)


def toolgrammar_main() -> Any:
    """The ``toolgrammar`` console script, loaded from the installed entry point."""
    from importlib.metadata import entry_points

    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "toolgrammar"]
    return script.load()


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run_toolgrammar(args: list[str], cwd: Path) -> tuple[int, str]:
    main = toolgrammar_main()
    out = io.StringIO()
    with working_directory(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(args)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return int(code or 0), out.getvalue()


def run_script(script: str, args: list[str], cwd: Path) -> tuple[int, str]:
    """``python SCRIPT ARGS`` as Python runs it (``__main__``, its folder first on ``sys.path``), in-process."""
    import runpy

    out = io.StringIO()
    path = (cwd / script).resolve()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv, sys.path[:0] = [str(path), *args], [str(path.parent)]
    try:
        with working_directory(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                runpy.run_path(str(path), run_name="__main__")
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return int(code or 0), out.getvalue()


def pip_check(command: str) -> str:
    """A ``pip install`` line, checked against pyproject.toml and the scripts instead of run."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project.get("optional-dependencies", {}))
    sources = [ROOT / "pyproject.toml", *sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / "src").rglob("*.py"))]
    known = "".join(p.read_text(encoding="utf-8") for p in sources)
    checked = []
    for word in words(command)[2:]:
        if word.startswith("-"):
            continue
        match = re.fullmatch(r"toolgrammar(?:\[(?P<extras>[^\]]*)\])?", word)
        if match:
            named = {e.strip() for e in (match["extras"] or "").split(",") if e.strip()}
            missing = named - extras
            if missing:
                raise AssertionError(f"{command!r}: no such extra in pyproject.toml: {sorted(missing)}")
            checked.append(word)
        elif word in (".", "-e") or word.startswith("./"):
            checked.append(word)
        else:
            if "==" not in word and not re.search(r"[<>]=?", word):
                raise AssertionError(f"{command!r}: {word!r} is not pinned")
            if word not in known:
                raise AssertionError(f"{command!r}: {word!r} is not a pin pyproject.toml, scripts/ or src/ use")
            checked.append(word)
    return f"checked: pip install {' '.join(checked)}\n"


def shell_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def expand(block: Block, text: str, values: dict[str, str]) -> str:
    for old, new in block.options["replace"]:
        for key, value in values.items():
            new = new.replace("{" + key + "}", value)
        text = text.replace(old, new)
    return text


def run_shell(block: Block, workdir: Path, tmp: Path, values: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a shell block; returns its exit status and its output (stdout and stderr together)."""
    values = {"tmp": str(tmp), **(values or {})}
    cwd = ROOT if block.options.get("cwd") == "repo" else workdir
    lines = [with_appends(block, expand(block, c, values), tmp, values) for c in commands(block.code)]
    pips = [c for c in lines if words(c)[:2] == ["pip", "install"]]
    lines = [c for c in lines if c not in pips]
    output = "".join(pip_check(c) for c in pips)
    if not lines:
        return 0, output
    if in_process(lines):
        for command in lines:
            w = words(command)
            code, text = run_toolgrammar(w[1:], cwd) if w[0] == "toolgrammar" else run_script(w[1], w[2:], cwd)
            output += f"$ {command}\n{text}"
            if code:
                return code, output
        return 0, output
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=shell_env(), capture_output=True, text=True, check=False)
    return done.returncode, output + done.stdout + done.stderr


# -- python ---------------------------------------------------------------------------------------------------


def run_python(block: Block, namespace: dict[str, Any], workdir: Path, values: dict[str, str] | None = None) -> str:
    """Run a Python block in ``namespace``; returns what it printed. Raises AssertionError naming the block."""
    code = expand(block, block.code, {"tmp": str(workdir), **(values or {})})
    out = io.StringIO()
    try:
        compiled = compile(code, f"{block.path}:{block.line}", "exec")
        with working_directory(workdir), contextlib.redirect_stdout(out):
            exec(compiled, namespace)
    except Exception as error:  # the block's own failure, reported with its location and output
        raise AssertionError(
            f"{block.id} failed:\n{traceback.format_exc()}\n--- output ---\n{out.getvalue()}"
        ) from error
    return out.getvalue()


def check_output(block: Block, code: int, output: str) -> None:
    expected = block.options.get("exit", 0)
    assert code == expected, f"{block.id}: exit status {code}, expected {expected}\n{output[-6000:]}"
    for text in block.options["expect"]:
        assert text in output, f"{block.id}: output lacks {text!r}\n{output[-6000:]}"
    for pattern in block.options["match"]:
        found = re.search(pattern, output, re.MULTILINE)
        assert found, f"{block.id}: output does not match {pattern!r}\n{output[-6000:]}"


def make_workdir(path: Path) -> Path:
    """A folder that looks like the repository to a reader's commands: examples/ and grammars/ linked."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("examples", "grammars"):
        link = path / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)
    return path
