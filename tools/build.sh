#!/usr/bin/env bash
# Configure and build one of the standard build folders.
#
# usage: tools/build.sh release|asan|fuzz
#   release  build/       Release, warnings as errors, CUDA compiled when nvcc exists, oracle
#   asan     build-asan/  Debug with AddressSanitizer + UndefinedBehaviorSanitizer, no CUDA
#   fuzz     build-fuzz/  clang, libFuzzer targets (see tools/fuzz.sh)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JOBS=$(nproc)

# Unity builds (each target's .cpp files compiled in batches of 16): the headers (CLI11,
# gtest, nlohmann/json) are parsed and their inline code generated once per batch instead
# of once per file, which halves the CI machine's compile time. The ISA files of cpu/ have
# their own flags and stay apart (CMake leaves files with COMPILE_OPTIONS out of batches).
UNITY="-DCMAKE_UNITY_BUILD=${MOETIER_UNITY:-ON} -DCMAKE_UNITY_BUILD_BATCH_SIZE=16"

cuda_flag() {
  if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
    echo "-DMOETIER_CUDA=ON"
  else
    echo "-DMOETIER_CUDA=OFF"
  fi
}

case "${1:-release}" in
  release)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_WERROR=ON "$(cuda_flag)" $UNITY \
      -DMOETIER_ORACLE_DIR="$REPO/.oracle" >/dev/null
    cmake --build build -j "$JOBS"
    ;;
  asan)
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOETIER_WERROR=ON -DMOETIER_SANITIZE=ON \
      -DMOETIER_CUDA=OFF $UNITY >/dev/null
    cmake --build build-asan -j "$JOBS"
    ;;
  fuzz)
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DMOETIER_FUZZ=ON -DMOETIER_TESTS=OFF -DMOETIER_CUDA=OFF $UNITY >/dev/null
    cmake --build build-fuzz -j "$JOBS"
    ;;
  *)
    echo "usage: tools/build.sh release|asan|fuzz" >&2
    exit 2
    ;;
esac
