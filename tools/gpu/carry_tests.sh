#!/usr/bin/env bash
# Build the CUDA test binary for sm_90 on this machine (nvcc is here; in ../build-cuda, the
# folder tools/gpu/carry_bin.sh configures, with the tests on) and put it in
# .gpu-carry/tests packed with xz, so that a device call runs chosen CUDA tests without
# compiling them there (minutes of device time on a fresh machine).
#
# usage: tools/gpu/carry_tests.sh
#   then: device run with carry [..., ".gpu-carry/tests"] and the command
#   xz -dc .gpu-carry/tests/mt_cuda_tests.xz >/tmp/mct && chmod +x /tmp/mct && /tmp/mct --gtest_filter='Cuda...'
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${CARRY_BUILD:-$REPO/../build-cuda}
[ -f "$B/build.ninja" ] || cmake -S "$REPO" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_SERVER=ON >/dev/null
cmake -DMOETIER_TESTS=ON "$B" >/dev/null
cmake --build "$B" --target mt_cuda_tests -j "$(nproc)"
mkdir -p "$REPO/.gpu-carry/tests"
T=$(find "$B" -maxdepth 3 -name mt_cuda_tests -type f | head -1)
strip -o "$REPO/.gpu-carry/tests/mt_cuda_tests.strip" "$T"
xz -T0 -6 -c "$REPO/.gpu-carry/tests/mt_cuda_tests.strip" >"$REPO/.gpu-carry/tests/mt_cuda_tests.xz"
rm "$REPO/.gpu-carry/tests/mt_cuda_tests.strip"
bash "$REPO/tools/gpu/source_stamp.sh" >"$REPO/.gpu-carry/tests/STAMP"
ls -la "$REPO/.gpu-carry/tests"
