"""Shared pytest set-up. Keep it minimal; add fixtures below."""

from __future__ import annotations

import sys
from pathlib import Path

# Tests import the working tree's package even when it is not installed into the environment.
_SRC = str(Path(__file__).resolve().parents[1] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
