#!/usr/bin/env bash
# The llama.cpp peer for bench/llama_cpp.py, built from the llama-cpp-python sdist on PyPI (the
# only place this machine can get llama.cpp from): its vendored llama.cpp is compiled once, for
# this CPU (GGML_NATIVE), into shared libraries plus `llama-server`; the sdist's Python bindings
# load those libraries (LLAMA_CPP_LIB_PATH) instead of compiling llama.cpp a second time.
# Everything lands in ~/.cache/llmop/peers (outside the repo); a second run reuses it.
#
#     make peers            # or: bench/llama_cpp_build.sh [VENV_PYTHON]
set -euo pipefail

VERSION=0.3.36
PEERS=${LLMOP_PEERS:-$HOME/.cache/llmop/peers}
PY=${1:-.venv/bin/python}
SRC=$PEERS/llama_cpp_python-$VERSION
BUILD=$PEERS/build

for tool in cmake ninja; do
  command -v "$tool" > /dev/null || { echo "llama_cpp_build.sh needs $tool (apt-get install cmake ninja-build)" >&2; exit 1; }
done
mkdir -p "$PEERS"
if [ ! -d "$SRC" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$PEERS"
  tar -xzf "$PEERS/llama_cpp_python-$VERSION.tar.gz" -C "$PEERS"
fi
if [ ! -x "$BUILD/bin/llama-server" ]; then
  cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
  cmake --build "$BUILD" -j"$(nproc)" --target llama-server llama
fi
# The bindings' one dependency the project lacks (numpy and jinja2 it has), beside them, not in the venv.
[ -d "$PEERS/site/diskcache" ] || "$PY" -m pip install -q --target "$PEERS/site" "diskcache>=5.6.1"
echo "llama.cpp peer ready: PYTHONPATH=$SRC:$PEERS/site LLAMA_CPP_LIB_PATH=$BUILD/bin, server $BUILD/bin/llama-server"
