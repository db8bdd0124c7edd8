#!/usr/bin/env bash
# One device call: build with CUDA for sm_90, show the devices, run the test suite, and
# keep the logs under $OUT. (CUDA kernels, their parity tests, compute-sanitizer and the
# GPU benchmarks join this script as they land.)
#
# usage (on the GPU machine, from the repo root): OUT=/some/dir bash tools/gpu/check.sh
# Carry .gpu-carry (made here by tools/gpu/prepare.sh): the machine lacks CLI11,
# nlohmann-json and GoogleTest, so they are unpacked into a private prefix, and the
# shared test data is not there, so the small part of it travels along.
set -uo pipefail
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
SYSROOT=$PWD/.gpu-sysroot
if [ -d .gpu-carry/debs ]; then
  mkdir -p "$SYSROOT"
  for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
fi
TESTDATA=$(cd .. && pwd)/shared/testdata
SKIP=""
if [ ! -d "$TESTDATA/models" ]; then
  TESTDATA=$PWD/.gpu-carry/testdata   # quant golden + vocab only
  SKIP="-E kjv|Kjv|oracle -LE kjv"   # the kjv-moe refs (and tests labelled kjv) need models/
fi
status=0
run() {  # name command...
  local name=$1
  shift
  echo "=== $name"
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; tail -20 "$OUT/$name.log"; status=1; fi
}
run build cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_WERROR=ON -DCMAKE_PREFIX_PATH="$SYSROOT/usr" \
  -DMOETIER_TESTDATA_DIR="$TESTDATA"
run compile cmake --build build-gpu -j "$(nproc)"
run info ./build-gpu/moetier info
cat "$OUT/info.log"
run unit ctest --test-dir build-gpu --output-on-failure -j "$(nproc)" $SKIP
nvidia-smi >"$OUT/nvidia-smi.log" 2>&1 || true
exit $status
