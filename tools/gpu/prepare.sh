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
du -sh "$CARRY"
