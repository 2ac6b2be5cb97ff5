"""The examples run as their docstrings say (the tiny random model: no weights needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hf_generate_example_prints_a_valid_constrained_turn():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "hf_generate.py"),
            "--tool-choice",
            "required",
            "--max-new-tokens",
            "48",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=None,
    ).stdout
    assert "--- constrained turn ---" in out and "--- strict parse ---" in out
    summary = re.search(r"(\d+) valid call\(s\), (\d+) error\(s\)", out)
    assert summary is not None, out
    assert int(summary.group(1)) >= 1 and int(summary.group(2)) == 0, out
