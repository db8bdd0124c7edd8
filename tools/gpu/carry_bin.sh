#!/usr/bin/env bash
# Build moetier for sm_90 on this machine (nvcc is here; 2 cores: ~15 min from scratch,
# seconds when incremental) and put it in .gpu-carry/bin with a stamp of the sources, so
# that a device call runs it instead of compiling it there (3-4 minutes of device time on
# a fresh machine). tools/gpu/check.sh uses a carried binary only when its stamp matches
# the sources it was sent with (tools/gpu/source_stamp.sh), else it builds as before.
#
# usage: tools/gpu/carry_bin.sh      then: device run with carry [..., ".gpu-carry/bin"]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${CARRY_BUILD:-$REPO/../build-cuda}
[ -f "$B/build.ninja" ] || cmake -S "$REPO" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_SERVER=ON -DMOETIER_TESTS=OFF >/dev/null
cmake --build "$B" --target moetier -j "$(nproc)"
mkdir -p "$REPO/.gpu-carry/bin"
rm -f "$REPO/.gpu-carry/bin/moetier"
strip -o "$REPO/.gpu-carry/bin/moetier.strip" "$B/moetier"
xz -T0 -6 -c "$REPO/.gpu-carry/bin/moetier.strip" >"$REPO/.gpu-carry/bin/moetier.xz"  # a call carries 64 MiB at most
rm "$REPO/.gpu-carry/bin/moetier.strip"
bash "$REPO/tools/gpu/source_stamp.sh" >"$REPO/.gpu-carry/bin/STAMP"
ls -la "$REPO/.gpu-carry/bin"
