#!/usr/bin/env bash
# Every test: install, build (Release with CUDA compiled when nvcc exists; Debug with
# ASan + UBSan), run the unit tests under the sanitizers, the CLI and llama.cpp oracle
# tests on the Release build, and the GGUF fuzzer for 60 s.
#
# usage: tools/test.sh            (FUZZ_SECONDS=60 by default)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
step() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }

step "setup"
bash tools/setup.sh
step "release build"
bash tools/build.sh release
step "asan/ubsan build"
bash tools/build.sh asan
step "unit tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE heavy
step "release tests: unit, CLI, llama.cpp oracle"
ctest --test-dir build --output-on-failure -j "$(nproc)"
step "fuzz the GGUF reader for ${FUZZ_SECONDS}s"
bash tools/fuzz.sh "$FUZZ_SECONDS"
step "all tests passed"
