#!/usr/bin/env bash
# Install llama-cpp-python 0.3.36 into .venv from a wheel built once per machine and kept.
#
# PyPI ships llama-cpp-python as source only: pip builds llama.cpp with CMake (about 5 minutes on 2 cores; 14 with another job running).
# The build is portable (AVX2/FMA/F16C, no -march=native): a native build on these machines died with
# "Illegal instruction" on first use (a build host with AMX, or one machine built on and another run on).
# The wheel is kept in $TOOLGRAMMAR_WHEELS (default ~/.cache/toolgrammar/wheels) and reused by later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
wheels="${TOOLGRAMMAR_WHEELS:-$HOME/.cache/toolgrammar/wheels}"
mkdir -p "$wheels"
wheel=$(ls "$wheels"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python $version (llama.cpp with CMake, about 5 minutes; kept in $wheels)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
    .venv/bin/python -m pip wheel -q --no-deps -w "$wheels" "llama-cpp-python==$version"
  wheel=$(ls "$wheels"/llama_cpp_python-"$version"-*.whl | head -n 1)
fi
.venv/bin/python -m pip install -q "$wheel"
