"""The sandbox: the five seed tools run for real on a copy, and no path ever leaves it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from toolgrammar.evaluate.sandbox import TOOL_NAMES, Sandbox, SandboxError, example_repo


@pytest.fixture
def box():
    with Sandbox() as sandbox:
        yield sandbox


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret file outside any sandbox."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET\n", encoding="utf-8")
    return secret


def test_the_copy_is_a_fresh_temporary_directory(box: Sandbox):
    assert box.root != example_repo().resolve()
    assert (box.root / "textkit" / "stats.py").is_file()
    assert not list(box.root.rglob("__pycache__"))


def test_close_deletes_the_copy():
    sandbox = Sandbox()
    root = sandbox.root
    sandbox.close()
    assert not root.exists()
    sandbox.close()  # twice is fine


def test_missing_repository_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SandboxError, match="not a directory"):
        Sandbox(tmp_path / "nope")


# -- real tool behaviour ----------------------------------------------------------------------------


def test_read_file_returns_the_text(box: Sandbox):
    text = box.execute("read_file", {"path": "textkit/stats.py"})
    assert "def median(values):" in text
    assert box.execute("read_file", {"path": "./textkit/../textkit/stats.py"}).startswith("error:")  # '..' refused
    assert box.execute("read_file", {"path": "nope.py"}) == "error: no such file: nope.py"
    assert "is a directory" in box.execute("read_file", {"path": "textkit"})


def test_list_files_is_recursive_and_sorted(box: Sandbox):
    listing = box.execute("list_files", {"path": "."}).splitlines()
    assert "textkit/stats.py" in listing and "tests/test_stats.py" in listing and "README.md" in listing
    assert box.execute("list_files", {"path": "tests"}).splitlines() == sorted(
        p for p in box.execute("list_files", {"path": "tests"}).splitlines()
    )
    assert box.execute("list_files", {"path": "missing"}).startswith("error: no such directory")


def test_grep_finds_lines_with_file_and_number(box: Sandbox):
    hits = box.execute("grep", {"pattern": "TODO", "path": "."}).splitlines()
    assert any(h.startswith("textkit/stats.py:") and "TODO" in h for h in hits)
    assert any(h.startswith("textkit/strings.py:") for h in hits)
    assert box.execute("grep", {"pattern": "zzz-not-there", "path": "."}) == "(no matches)"
    assert box.execute("grep", {"pattern": "(", "path": "."}).startswith("error: invalid regular expression")
    assert box.execute("grep", {"pattern": "def", "path": "textkit/chunks.py"}).count("textkit/chunks.py:") == 2


def test_write_file_writes_inside_the_copy_only(box: Sandbox):
    result = box.execute("write_file", {"path": "notes/NOTES.md", "content": "héllo\n"})
    assert result == "wrote 7 bytes to notes/NOTES.md"
    assert (box.root / "notes" / "NOTES.md").read_text(encoding="utf-8") == "héllo\n"
    assert not (example_repo() / "notes").exists()  # the bundled original is untouched


def test_run_tests_runs_the_real_suite(box: Sandbox):
    result = box.execute("run_tests", {})
    assert (
        "Ran 18 tests" in result and "FAILED (failures=3)" in result and result.endswith("tests failed (exit code 1)")
    )
    assert 'File "tests/test_chunks.py", line 11' in result  # paths relative to the copy, not its temp dir
    assert str(box.root) not in result
    only = box.execute("run_tests", {"path": "tests/test_config.py"})
    assert "Ran 3 tests" in only and only.endswith("tests passed")


def test_a_fix_written_by_the_model_makes_its_test_pass(box: Sandbox):
    source = box.execute("read_file", {"path": "textkit/chunks.py"})
    fixed = source.replace("range(0, len(items) - size + 1, size)", "range(0, len(items), size)")
    assert fixed != source
    box.execute("write_file", {"path": "textkit/chunks.py", "content": fixed})
    assert box.execute("run_tests", {"path": "tests/test_chunks.py"}).endswith("tests passed")
    assert "failures=2" in box.execute("run_tests", {"path": "."})


def test_run_tests_has_a_timeout(box: Sandbox):
    box.test_timeout_s = 1.0
    box.execute("write_file", {"path": "tests/test_hang.py", "content": "while True:\n    pass\n"})
    assert box.execute("run_tests", {"path": "tests/test_hang.py"}) == "error: the tests did not finish within 1 s"


def test_results_are_strings_never_exceptions(box: Sandbox):
    assert box.execute("delete_everything", {}).startswith("error: unknown tool")
    assert box.execute("read_file", {}).startswith("error: bad arguments for read_file")
    assert box.execute("read_file", {"path": "x", "mode": "rb"}).startswith("error: bad arguments")
    assert box.execute("read_file", {"path": 7}).startswith("error: path must be")
    assert box.execute("write_file", {"path": "a.txt", "content": 3}) == "error: content must be a string"
    assert set(TOOL_NAMES) == {"read_file", "list_files", "grep", "write_file", "run_tests"}


def test_long_results_are_cut_with_a_note(box: Sandbox):
    box.max_result_chars = 100
    box.execute("write_file", {"path": "big.txt", "content": "x" * 250})
    result = box.execute("read_file", {"path": "big.txt"})
    assert result == "x" * 100 + "\n[... 150 more characters not shown]"


# -- escapes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("../secret.txt", id="dotdot"),
        pytest.param("textkit/../../secret.txt", id="dotdot-inside"),
        pytest.param("..", id="parent"),
        pytest.param("/etc/passwd", id="absolute"),
        pytest.param("//etc/passwd", id="absolute-double-slash"),
        pytest.param("~/.bashrc", id="home"),
        pytest.param("C:\\Windows\\win.ini", id="drive"),
        pytest.param("..\\secret.txt", id="backslash-dotdot"),
        pytest.param("", id="empty"),
        pytest.param("a\x00b", id="nul"),
    ],
)
@pytest.mark.parametrize("tool", ["read_file", "list_files", "grep", "write_file", "run_tests"])
def test_escaping_paths_are_refused_with_an_error_string(box: Sandbox, path: str, tool: str):
    arguments = {"path": path}
    if tool == "grep":
        arguments["pattern"] = "."
    if tool == "write_file":
        arguments["content"] = "pwned"
    if tool == "run_tests" and path == "":
        result = box.execute(tool, arguments)  # an empty run_tests path means every test: allowed
        assert not result.startswith("error: path"), result
        return
    result = box.execute(tool, arguments)
    assert result.startswith("error:"), result
    assert os.listdir(box.root.parent) == ["repo"]  # nothing written beside the copy


def test_absolute_path_to_a_real_outside_file_is_refused(box: Sandbox, outside: Path):
    result = box.execute("read_file", {"path": str(outside)})
    assert result.startswith("error: absolute paths are not allowed")
    assert "TOP SECRET" not in result
    rel = os.path.relpath(outside, box.root)
    assert rel.startswith("..")
    result = box.execute("read_file", {"path": rel})
    assert "leaves the repository" in result and "TOP SECRET" not in result


def test_symlinks_pointing_out_are_refused(box: Sandbox, outside: Path):
    (box.root / "link.txt").symlink_to(outside)
    (box.root / "linkdir").symlink_to(outside.parent, target_is_directory=True)
    for tool, arguments in [
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "linkdir/secret.txt"}),
        ("list_files", {"path": "linkdir"}),
        ("grep", {"pattern": "SECRET", "path": "linkdir"}),
        ("grep", {"pattern": "SECRET", "path": "link.txt"}),
        ("write_file", {"path": "link.txt", "content": "pwned"}),
        ("write_file", {"path": "linkdir/new.txt", "content": "pwned"}),
    ]:
        result = box.execute(tool, arguments)
        assert result.startswith("error:") and "symlink" in result, (tool, arguments, result)
    # walks skip them: the secret never shows up in a listing or a search of the whole copy
    listing = box.execute("list_files", {"path": "."})
    assert "link.txt" not in listing and "secret" not in listing
    assert "TOP SECRET" not in box.execute("grep", {"pattern": "SECRET", "path": "."})
    assert outside.read_text(encoding="utf-8") == "TOP SECRET\n"
    assert not (outside.parent / "new.txt").exists()


def test_symlinks_inside_the_copy_still_work(box: Sandbox):
    (box.root / "alias.py").symlink_to(box.root / "textkit" / "stats.py")
    assert "def median" in box.execute("read_file", {"path": "alias.py"})
    assert "alias.py" in box.execute("list_files", {"path": "."})


# -- bounded in time and output (issue 11) -----------------------------------------------------------


def test_a_catastrophic_grep_pattern_times_out_with_a_note():
    with Sandbox(grep_timeout_s=1.0) as box:
        box.execute("write_file", {"path": "notes.txt", "content": "a" * 40 + "!\nplain line\n"})
        result = box.execute("grep", {"pattern": "(a+)+$", "path": "notes.txt"})
        assert result.startswith("error: grep timed out after 1 s")
        nested = box.execute("grep", {"pattern": r"(\w+\s?)+\(", "path": "notes.txt"})
        assert nested.startswith("error: grep timed out after 1 s")
        # the next call is not affected, and a benign pattern still answers
        assert box.execute("grep", {"pattern": "plain", "path": "notes.txt"}) == "notes.txt:2:plain line"


def test_grep_output_is_capped_with_a_note():
    with Sandbox(max_output_bytes=2000, max_result_chars=100_000) as box:
        box.execute("write_file", {"path": "many.txt", "content": "match me\n" * 5000})
        result = box.execute("grep", {"pattern": "match", "path": "many.txt"})
        assert result.endswith("[... output truncated at 2000 bytes]")
        assert result.startswith("many.txt:1:match me\nmany.txt:2:match me")
        assert len(result) < 2100


def test_grep_results_are_unchanged_for_ordinary_patterns(box: Sandbox):
    hits = box.execute("grep", {"pattern": "def ", "path": "."}).splitlines()
    assert hits and all(h.count(":") >= 2 for h in hits)
    assert hits == sorted(hits, key=lambda h: (h.split(":")[0], int(h.split(":")[1])))


_HOLDS_STDOUT = """
import os, subprocess, sys, unittest

class T(unittest.TestCase):
    def test_leaves_a_child_behind(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open("child.pid", "w") as f:
            f.write(str(child.pid))
        print("hello from the test", flush=True)
"""


def _gone_or_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def test_a_child_left_holding_stdout_neither_hangs_the_call_nor_loses_its_output():
    # The limit is far longer than a unittest run and far shorter than the child's 600 s: the call
    # must come back with the test's output (before the fix it waited out the limit and lost it).
    with Sandbox(test_timeout_s=30.0, max_result_chars=100_000) as box:
        box.execute("write_file", {"path": "tests/test_child.py", "content": _HOLDS_STDOUT})
        result = box.execute("run_tests", {"path": "tests/test_child.py"})
        assert "hello from the test" in result
        assert result.endswith("tests passed")
        pid = int((box.root / "child.pid").read_text())
        for _ in range(200):  # SIGKILL is asynchronous; the orphan is reaped by init
            if _gone_or_zombie(pid):
                break
            time.sleep(0.05)
        assert _gone_or_zombie(pid), "the process group was not killed"


def test_a_flood_of_test_output_is_capped_with_a_note():
    flood = (
        "import sys, unittest\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_prints(self):\n"
        "        for _ in range(40):\n"
        "            sys.stdout.write('x' * 1_000_000)\n"
    )
    with Sandbox(max_output_bytes=10_000, max_result_chars=100_000) as box:
        box.execute("write_file", {"path": "tests/test_flood.py", "content": flood})
        result = box.execute("run_tests", {"path": "tests/test_flood.py"})
        assert "[... output truncated at 10000 bytes]" in result
        assert "Ran 1 test" in result and result.endswith("tests passed")  # stderr's summary is kept
        assert len(result) < 25_000


def test_a_timeout_keeps_the_output_written_before_it():
    hang = "import sys\nprint('started', flush=True)\nwhile True:\n    pass\n"
    with Sandbox(test_timeout_s=2.0) as box:
        box.execute("write_file", {"path": "tests/test_hang.py", "content": hang})
        result = box.execute("run_tests", {"path": "tests/test_hang.py"})
        assert result.startswith("error: the tests did not finish within 2 s")
        assert "started" in result
