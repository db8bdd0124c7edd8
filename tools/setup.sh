#!/usr/bin/env bash
# Install what moetier needs on Debian 12 (as root): the build toolchain and libraries from
# Debian's packages, then the pinned llama.cpp oracle from npm (tools/oracle/setup.sh).
# Only what is missing is installed; a second run takes a second.
#
# usage: tools/setup.sh
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'setup: %s\n' "$*"; }

# What the build and the tests use, nothing more: CMake finds CLI11, nlohmann-json and
# GoogleTest (its CMake config names gmock's targets too); python3 runs the test scripts.
PACKAGES=(
  build-essential cmake ninja-build git python3
  clang libclang-rt-14-dev            # libFuzzer and sanitizer runtimes for the fuzz target
  libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev
)
# Node.js and npm for the oracle, unless a node/npm is already installed some other way.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

bash "$REPO/tools/oracle/setup.sh" "$REPO/.oracle"

if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  say "CUDA toolkit found: the CUDA backend will be compiled"
else
  say "no CUDA toolkit (nvcc): building without the CUDA backend"
fi
