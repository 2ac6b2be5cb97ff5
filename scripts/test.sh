#!/usr/bin/env bash
# The whole default test suite, from nothing: creates .venv, installs, lints, runs pytest.
# Slow tests (real model, vLLM) are not part of it: see scripts/test-slow.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "hf,qwen,compare,test,bench,outlines,families,docs"
.venv/bin/ruff check src tests bench examples
.venv/bin/lint-imports  # the layers, written once in pyproject.toml (docs/architecture.md)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d /tmp/toolgrammar-site  # the docs site: a broken link or API reference fails
.venv/bin/python -m pytest -m "not slow and not vllm and not llamacpp" -p no:cacheprovider "$@"
