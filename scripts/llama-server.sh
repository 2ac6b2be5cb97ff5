#!/usr/bin/env bash
# Build llama.cpp's own server (llama-server) from the llama.cpp source llama-cpp-python 0.3.36 vendors: the same
# llama.cpp the processor runs in, so the side-by-side mode's third column (`--llama-server`: llama.cpp's own
# tool-call grammar, from `--jinja` and the request's tools) is that engine's, not another release's.
#
# Built once per machine and kept as $TOOLGRAMMAR_BIN/llama-server-0.3.36 (default ~/.cache/toolgrammar/bin);
# prints the binary's path. Static, no network features, no web UI, the same portable CPU flags as the wheel
# (scripts/llamacpp-wheel.sh). About 8 minutes on 2 cores.
set -euo pipefail
version=0.3.36
bin="${TOOLGRAMMAR_BIN:-$HOME/.cache/toolgrammar/bin}"
target="$bin/llama-server-$version"
if [ -x "$target" ]; then
  echo "$target"
  exit 0
fi
python="${PYTHON:-python3}"
cmake_bin=$(command -v cmake || true)
if [ -z "$cmake_bin" ]; then  # no system CMake: the PyPI one, into the same environment
  "$python" -m pip install -q "cmake>=3.21" >&2
  cmake_bin="$(dirname "$python")/cmake"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building llama-server from llama-cpp-python $version's llama.cpp (about 8 minutes; kept as $target)" >&2
"$python" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
source_dir="$work/llama_cpp_python-$version/vendor/llama.cpp"
"$cmake_bin" -S "$source_dir" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
"$cmake_bin" --build "$work/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$bin"
cp "$work/build/bin/llama-server" "$target.partial"
mv "$target.partial" "$target"
echo "$target"
