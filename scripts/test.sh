#!/usr/bin/env bash
# The whole default test suite, from nothing: creates .venv, installs, lints, runs pytest.
# Slow tests (real model, vLLM) are not part of it: see scripts/test-slow.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "hf,qwen,compare,test,bench,outlines,families"
.venv/bin/ruff check src tests bench examples
.venv/bin/python -m pytest -m "not slow and not vllm" -p no:cacheprovider "$@"
