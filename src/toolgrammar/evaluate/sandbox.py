"""The seed's five tools, run for real against a throw-away copy of a small repository.

:class:`Sandbox` copies a repository (by default the bundled ``data/example_repo``, a small Python
package with a few bugs and a unittest suite) into a fresh temporary directory and executes
``read_file``, ``list_files``, ``grep``, ``write_file`` and ``run_tests`` there: real reads, real
writes, a real regular-expression search and a real test run in a subprocess with a timeout.

Contract (the same as the seed harness's, and what ``compare --turns N`` relies on):

- **Results are strings, never exceptions.** Every outcome, a refused path or a missing file
  included, is the text that goes back to the model as that call's ``<tool_response>``; errors start
  with ``"error: "``. Only misuse of this class itself (an unknown repository directory) raises.
- **Nothing outside the sandbox is read or written by the tools.** A path is refused when it is
  absolute, contains a ``..`` component, or resolves (symlinks followed) outside the sandbox root;
  directory walks never follow a symlink and skip any that point out.
- ``run_tests`` is the one exception to isolation worth stating plainly: it runs the repository's
  tests, and the model may have written those files, so it runs code the model wrote. It runs with
  the sandbox as working directory, an isolated interpreter (``-I``), no bytecode files, ``HOME`` and
  ``TMPDIR`` inside the sandbox, and a timeout; that is hygiene, not a security boundary. Do not
  point the multi-turn mode at a model you would not let run Python on this machine.
- **Every tool is bounded in time and memory.** ``run_tests`` and ``grep`` (whose regular expression
  a model writes, and ``(a+)+$`` backtracks exponentially) run in a child process in a new process
  group with a time limit; on expiry the whole group is killed and the result says so
  (``error: grep timed out after N s``). At most ``max_output_bytes`` of a child's output are kept
  (the rest is read and dropped, with ``[... output truncated at N bytes]``), and the call returns
  as soon as the test process exits, with its output, even when a process it started still holds
  the output pipe (that process group is then killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from toolgrammar.errors import ToolgrammarError

TOOL_NAMES: tuple[str, ...] = ("read_file", "list_files", "grep", "write_file", "run_tests")
"""The five tools of the seed harness, in the order ``data/tools.json`` offers them."""

DEFAULT_MAX_RESULT_CHARS = 4000
"""Results longer than this are cut (with a note saying so): a 0.5B model's context is precious and a
whole file listing or test log rarely helps it more than its first few thousand characters."""

DEFAULT_TEST_TIMEOUT_S = 60.0
"""Wall-clock limit of one ``run_tests`` call. The bundled suite takes well under a second."""

DEFAULT_GREP_TIMEOUT_S = 10.0
"""Wall-clock limit of one ``grep`` call: a pattern with nested repetition can take exponential time."""

DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024
"""Most bytes of a child process's output (``run_tests``, ``grep``) kept in memory; the rest is dropped."""

_RAN_IN = re.compile(r"^(Ran \d+ tests?) in [\d.]+s$", re.MULTILINE)
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


class SandboxError(ToolgrammarError, ValueError):
    """The sandbox itself cannot be set up (a missing repository directory)."""


class PathRefused(Exception):
    """A path that would leave the sandbox; its message is the error string the model gets back."""


def example_repo() -> Path:
    """Directory of the bundled example repository (package data, read-only by convention)."""
    return Path(str(resources.files("toolgrammar") / "data" / "example_repo"))


class Sandbox:
    """A temporary copy of a repository plus the five tools, executed inside it.

    Use it as a context manager (the copy is deleted on exit) or call :meth:`close`.

    Parameters
    ----------
    repo : str | Path | None, default: None
        Repository to copy; ``None`` is the bundled example repository. The original is never touched.
    max_result_chars : int, default: DEFAULT_MAX_RESULT_CHARS
        Longer results are cut, with a note saying how much was left out.
    test_timeout_s : float, default: DEFAULT_TEST_TIMEOUT_S
        Wall-clock limit of a ``run_tests`` call; on expiry the result says so.
    grep_timeout_s : float, default: DEFAULT_GREP_TIMEOUT_S
        Wall-clock limit of a ``grep`` call; on expiry the result says so.
    max_output_bytes : int, default: DEFAULT_MAX_OUTPUT_BYTES
        Most bytes kept of each output stream of a ``run_tests`` or ``grep`` child; the rest is dropped,
        with a note.
    """

    def __init__(
        self,
        repo: str | Path | None = None,
        *,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
        grep_timeout_s: float = DEFAULT_GREP_TIMEOUT_S,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        source = Path(repo) if repo is not None else example_repo()
        if not source.is_dir():
            raise SandboxError(f"repository {str(source)!r} is not a directory; pass an existing directory")
        self._tmp = tempfile.TemporaryDirectory(prefix="toolgrammar-sandbox-")
        self.root = Path(self._tmp.name).resolve() / "repo"
        shutil.copytree(source, self.root, symlinks=True, ignore=_IGNORED)
        self.max_result_chars = max_result_chars
        self.test_timeout_s = test_timeout_s
        self.grep_timeout_s = grep_timeout_s
        self.max_output_bytes = max_output_bytes
        self._tools: dict[str, Callable[..., str]] = {
            "read_file": self.read_file,
            "list_files": self.list_files,
            "grep": self.grep,
            "write_file": self.write_file,
            "run_tests": self.run_tests,
        }

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Delete the copy. Safe to call twice."""
        self._tmp.cleanup()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dispatch ----------------------------------------------------------------------------------

    def execute(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one call and return its result string (``"error: ..."`` on any failure; never raises).

        The arguments are expected to have passed the strict parser already; anything else is still
        answered with an error string rather than an exception.
        """
        tool = self._tools.get(name)
        if tool is None:
            return f"error: unknown tool {name!r}; known: {', '.join(TOOL_NAMES)}"
        if not isinstance(arguments, Mapping):
            return "error: arguments must be a JSON object"
        try:
            return self._cut(tool(**dict(arguments)))
        except PathRefused as refused:
            return str(refused)
        except TypeError as error:  # unexpected or missing keyword arguments
            return f"error: bad arguments for {name}: {error}"
        except Exception as error:  # a tool must never end the agent loop
            return f"error: {name} failed: {type(error).__name__}: {error}"

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result_chars:
            return text
        left = len(text) - self.max_result_chars
        return text[: self.max_result_chars] + f"\n[... {left} more characters not shown]"

    # -- paths -------------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The sandbox path for a model-supplied relative ``path``, or :class:`PathRefused`.

        Refused: non-strings, empty strings, NUL bytes, absolute paths (``/x``, ``C:\\x``, ``~``),
        any ``..`` component, and paths whose resolution (symlinks followed) leaves the root.
        """
        if not isinstance(path, str) or not path.strip():
            raise PathRefused("error: path must be a non-empty string relative to the repository root")
        if "\x00" in path:
            raise PathRefused("error: path contains a NUL character")
        text = path.strip().replace("\\", "/")
        if text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", text):
            raise PathRefused(
                f"error: absolute paths are not allowed ({path!r}); use a path relative to the repository root"
            )
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise PathRefused(f"error: path {path!r} leaves the repository ('..' is not allowed)")
        candidate = self.root.joinpath(*parts)
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise PathRefused(f"error: path {path!r} resolves outside the repository (a symlink pointing out)")
        return candidate

    def _inside(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return real == self.root or self.root in real.parents

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _walk_files(self, top: Path) -> list[Path]:
        """Regular files under ``top``, sorted; symlinks are followed only when they stay inside."""
        if top.is_file():
            return [top]
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git", ".pytest_cache"))
            base = Path(dirpath)
            for name in sorted(filenames):
                file = base / name
                if file.is_symlink() and not self._inside(file):
                    continue
                found.append(file)
        return found

    # -- the five tools ----------------------------------------------------------------------------

    def read_file(self, path: str) -> str:
        """The file's text (UTF-8, undecodable bytes replaced)."""
        target = self.resolve(path)
        if not target.exists():
            return f"error: no such file: {path}"
        if target.is_dir():
            return f"error: {path} is a directory; use list_files"
        return target.read_text(encoding="utf-8", errors="replace")

    def list_files(self, path: str = ".") -> str:
        """Every file under the directory, one relative path per line."""
        target = self.resolve(path)
        if not target.exists():
            return f"error: no such directory: {path}"
        if target.is_file():
            return self._rel(target)
        files = self._walk_files(target)
        return "\n".join(self._rel(f) for f in files) if files else "(no files)"

    def grep(self, pattern: str, path: str = ".") -> str:
        """``file:line:text`` for every line matching the regular expression ``pattern``.

        The search runs in a child process with a time limit (``grep_timeout_s``): Python's regular
        expressions backtrack, and a pattern such as ``(a+)+$`` takes exponential time on a long line.
        The paths are resolved and checked here; the child only reads the files it is given.
        """
        if not isinstance(pattern, str):
            return "error: pattern must be a string"
        try:
            re.compile(pattern)
        except re.error as error:
            return f"error: invalid regular expression {pattern!r}: {error}"
        except (RecursionError, OverflowError) as error:
            return f"error: regular expression {pattern!r} is too large: {error}"
        target = self.resolve(path)
        if not target.exists():
            return f"error: no such file or directory: {path}"
        files = [[str(file), self._rel(file)] for file in self._walk_files(target)]
        # The request goes in a file beside the copy (not in it: the model must not see it).
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=self.root.parent, suffix=".json") as request:
            json.dump({"pattern": pattern, "files": files}, request)
            request.flush()
            done = run_bounded(
                [sys.executable, "-I", "-B", "-c", _GREP_CHILD, request.name],
                cwd=self.root,
                env=self._child_env(),
                timeout_s=self.grep_timeout_s,
                max_bytes=self.max_output_bytes,
            )
        matches = done.stdout.rstrip("\n")
        if done.truncated:
            matches += f"\n[... output truncated at {self.max_output_bytes} bytes]"
        if done.timed_out:
            note = (
                f"error: grep timed out after {self.grep_timeout_s:g} s (nested repetition such as (a+)+ "
                "can take exponential time: simplify the pattern)"
            )
            return note + (f"; matches found before the limit:\n{matches}" if matches else "")
        if done.returncode != 0:
            return f"error: grep failed: {(done.stderr or matches).strip()[-500:]}"
        return matches if matches else "(no matches)"

    def write_file(self, path: str, content: str) -> str:
        """Write (create or replace) a file; parent directories are created inside the sandbox."""
        if not isinstance(content, str):
            return "error: content must be a string"
        target = self.resolve(path)
        if target.is_dir():
            return f"error: {path} is a directory"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self._inside(target.parent):  # a symlinked directory created between checks
            raise PathRefused(f"error: path {path!r} resolves outside the repository")
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content.encode('utf-8'))} bytes to {self._rel(target)}"

    def run_tests(self, path: str = "") -> str:
        """Run unittest (which also runs pytest-style ``TestCase`` files) and return its output.

        ``path`` may be empty or ``"."`` (every test), a directory (discovered) or one test file.
        unittest rather than pytest: it is always there, so the tool behaves the same whatever the
        user installed.
        """
        command = [sys.executable, "-I", "-B", "-m", "unittest", "discover", "-t", "."]
        text = (path or "").strip()
        if text in ("", "."):
            start = "tests" if (self.root / "tests").is_dir() else "."
            command += ["-s", start]
        else:
            target = self.resolve(text)
            if not target.exists():
                return f"error: no such test file or directory: {path}"
            if target.is_dir():
                command += ["-s", self._rel(target)]
            elif target.suffix == ".py":
                command += ["-s", self._rel(target.parent) if target.parent != self.root else ".", "-p", target.name]
            else:
                return f"error: {path} is not a Python test file"
        done = run_bounded(
            command,
            cwd=self.root,
            env=self._child_env(),
            timeout_s=self.test_timeout_s,
            max_bytes=self.max_output_bytes,
        )
        # Results must not depend on the temporary directory's random name or on timing, so that both
        # modes (and a resumed run) see the same text: tracebacks get relative paths, and unittest's
        # "Ran 18 tests in 0.003s" loses its duration.
        output = (done.stdout + done.stderr).strip().replace(f"{self.root}{os.sep}", "").replace(str(self.root), ".")
        output = _RAN_IN.sub(r"\1", output)
        if done.truncated:
            output += f"\n[... output truncated at {self.max_output_bytes} bytes]"
        if done.timed_out:
            note = f"error: the tests did not finish within {self.test_timeout_s:g} s"
            return f"{note}\n\n{output}" if output else note
        status = "passed" if done.returncode == 0 else f"failed (exit code {done.returncode})"
        return f"{output}\n\ntests {status}"

    def _child_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "TMPDIR": str(self.root),
            "PYTHONIOENCODING": "utf-8",
        }


# The grep child: reads {"pattern", "files": [[path, shown], ...]} from the file named by argv[1] and
# prints file:line:text for every matching line.
_GREP_CHILD = """
import json, re, sys
with open(sys.argv[1], encoding="utf-8") as request_file:
    request = json.load(request_file)
regex = re.compile(request["pattern"])
out = sys.stdout
for path, shown in request["files"]:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (UnicodeDecodeError, OSError):
        continue  # binary or unreadable: skipped, as grep -I would
    for n, line in enumerate(lines, 1):
        if regex.search(line):
            out.write(f"{shown}:{n}:{line}\\n")
"""


@dataclass(frozen=True)
class Bounded:
    """What :func:`run_bounded` collected from a child process."""

    stdout: str
    stderr: str
    returncode: int | None
    """``None`` when the child was killed at the time limit."""
    timed_out: bool
    truncated: bool
    """Whether output beyond ``max_bytes`` was dropped."""


def run_bounded(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    max_bytes: int,
) -> Bounded:
    """Run ``command`` in a new process group, bounded in time and in the output kept.

    Stdout and stderr are drained as they come (so a chatty child never blocks on a full pipe), and at
    most ``max_bytes`` of each are kept (a flood on stdout cannot push out unittest's summary). The
    call ends when the child exits (what is already in the pipes then is taken; a process it started
    that still holds them is not waited for) or when ``timeout_s`` passes; either way the whole process
    group is killed, so nothing it started lingers. Stdin is empty: a test that reads input gets
    end-of-file, not a hang.
    """
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
    )
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    truncated, timed_out, exited = False, False, False
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        for stream in kept:
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ)
        drains = 0
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = not exited
                break
            # Once the child has exited, take only what is already in the pipes (and not forever:
            # a grandchild may keep writing).
            events = selector.select(timeout=0 if exited else min(left, 0.05))
            if exited:
                drains += 1
                if not events or drains > 64:
                    break
            if not events:
                exited = proc.poll() is not None
                continue
            for key, _ in events:
                chunk = key.fileobj.read(65536)  # type: ignore[union-attr]
                if not chunk:  # end of file: every writer closed it
                    selector.unregister(key.fileobj)
                    continue
                buffer = kept[key.fileobj]  # type: ignore[index]
                room = max(0, max_bytes - len(buffer))
                buffer.extend(chunk[:room])
                truncated = truncated or len(chunk) > room
    if not timed_out:  # both pipes closed: the child is exiting (or closed them and carries on)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    _kill_group(proc)
    for stream in kept:
        stream.close()
    out, err = (bytes(kept[s]).decode("utf-8", errors="replace") for s in (proc.stdout, proc.stderr))
    return Bounded(out, err, None if timed_out else proc.returncode, timed_out, truncated)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group may be gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
