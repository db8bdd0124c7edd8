#!/usr/bin/env bash
# Prepare what a GPU device call carries (git-ignored .gpu-carry/): the Debian packages of
# our header/test libraries (the GPU machine has nvcc, CMake and ninja but not these, and
# no network) and the small part of ../shared/testdata the unit tests read (quant golden
# vectors, vocab GGUFs, chat templates); the 25 MB kjv model and its refs stay behind (the
# tree limit is 64 MiB), so tests that need them are skipped there.
# tools/gpu/check.sh unpacks the packages into a private prefix.
#
# usage: tools/gpu/prepare.sh     then: device run with carry [".gpu-carry"]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=$REPO/.gpu-carry
mkdir -p "$CARRY/debs" "$CARRY/testdata"
(cd "$CARRY/debs" && apt-get download libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev 2>/dev/null)
cp -r "$REPO/../shared/testdata/quant_golden" "$REPO/../shared/testdata/vocab" "$REPO/../shared/testdata/chat_templates" "$CARRY/testdata/"
# llama.cpp's source from the node-llama-cpp@3.21.1 bundle (the comparison anchor), the
# parts llama-bench and llama-server need, without the other GPU backends: ~6 MB.
# llama-server (issue 27's anchor, bench/serve_compare.sh) needs scripts/ui-assets.cmake and
# tools/ui's embed.cpp; configure it offline with -DLLAMA_BUILD_SERVER=ON
# -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF (an empty web UI; the
# web UI's sources and the server's Python tests stay behind).
LLAMA_DIR=${LLAMA_DIR:-$REPO/.bench/llama.cpp}
BUNDLE=$REPO/.oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -d "$LLAMA_DIR/.git" ] || git clone -q "$BUNDLE" "$LLAMA_DIR"
tar -C "$LLAMA_DIR" --exclude='ggml/src/ggml-vulkan' --exclude='ggml/src/ggml-sycl' --exclude='ggml/src/ggml-metal' \
  --exclude='ggml/src/ggml-opencl' --exclude='ggml/src/ggml-cann' --exclude='ggml/src/ggml-musa' \
  --exclude='ggml/src/ggml-webgpu' --exclude='ggml/src/ggml-hip' --exclude='ggml/src/ggml-zdnn' --exclude='build' \
  --exclude='tools/ui/src' --exclude='tools/ui/tests' --exclude='tools/ui/static' --exclude='tools/server/tests' \
  -cJf "$CARRY/llama-src.tar.xz" CMakeLists.txt app cmake common ggml include src tools vendor licenses LICENSE \
  scripts/ui-assets.cmake
# Debian's node (one static-enough binary: libstdc++ and libc only), xz-packed (~24 MB), for
# the server tests against the GPU server (tools/gpu/serve.sh NODE_CHECKS=1).
[ -f "$CARRY/node.xz" ] || xz -T2 -6 -c "$(command -v node)" >"$CARRY/node.xz"
du -sh "$CARRY"
