#!/usr/bin/env bash
# One device call: build with CUDA for sm_90, show the devices, run the test suite, and
# keep the logs under $OUT. (CUDA kernels, their parity tests, compute-sanitizer and the
# GPU benchmarks join this script as they land.)
#
# usage (on the GPU machine, from the repo root): OUT=/some/dir bash tools/gpu/check.sh
set -uo pipefail
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
status=0
run() {  # name command...
  local name=$1
  shift
  echo "=== $name"
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; tail -20 "$OUT/$name.log"; status=1; fi
}
run build cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_WERROR=ON
run compile cmake --build build-gpu -j "$(nproc)"
run info ./build-gpu/moetier info
cat "$OUT/info.log"
run unit ctest --test-dir build-gpu --output-on-failure -j "$(nproc)"
nvidia-smi >"$OUT/nvidia-smi.log" 2>&1 || true
exit $status
