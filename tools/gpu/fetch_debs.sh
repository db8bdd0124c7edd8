#!/usr/bin/env bash
# The GPU machine has nvcc, CMake and ninja but none of our header/test libraries and no
# network: download their Debian packages here into .gpu-debs/ (git-ignored) so a device
# call can carry them; tools/gpu/check.sh unpacks them into a private prefix.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$REPO/.gpu-debs"
cd "$REPO/.gpu-debs"
apt-get download libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev >/dev/null
ls -1 "$REPO/.gpu-debs"
