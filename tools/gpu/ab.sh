#!/usr/bin/env bash
# Before and after on the GPU machine: a base revision's tree (.gpu-base/) and a new one
# (.gpu-new/, both written here by `tools/gpu/ab.sh prepare`) built side by side, the same
# timing files, every benchmark run in fresh processes that alternate between the two
# builds, so a restructuring is measured against its parent on one machine in one call.
# (The new tree is an export of a commit, not the working tree: work in progress beside
# it cannot break the build.)
#
#   tools/gpu/ab.sh prepare REV [NEW]  (here) the source of REV into .gpu-base/ and of NEW
#                                 (default HEAD; `worktree`: the working tree as it is) into
#                                 .gpu-new/, git-ignored through
#                                 .git/info/exclude; carry both with .gpu-carry/debs
#   tools/gpu/ab.sh build         (device) both builds (BUILD_TARGETS for the new tree, default
#                                 moetier mt_cuda_tests mt_unit_tests; NO_BASE=1: the new
#                                 alone), the qwen3-30b-a3b q4_k_m files of router skew 0
#                                 and 1 (SKEWS; SKEWS= none)
#   tools/gpu/ab.sh tests         (device) mt_cuda_tests --gtest_filter=$FILTER on this tree
#   tools/gpu/ab.sh all           (device) build, tests, bench in one call
#   tools/gpu/ab.sh bench         (device) resident tg128 / pp512 / pp4096 (ROUNDS rounds) and
#                                 tiered --expert-cache 25% / 10% tg64 on each skew
#                                 (TIER_ROUNDS fresh processes per build, default 3), then a table of
#                                 every repetition (tools/gpu/ab_summary.py)
set -uo pipefail
MODE=${1:-bench}
OUT=${OUT:-$PWD/out/ab}
mkdir -p "$OUT"
# Logs go to LOGS and come back packed (the device returns at most 8 files): after every
# step $OUT holds logs.tgz and summary.txt, so a call cut off by its time limit still
# returns what it measured.
LOGS=${LOGS:-/tmp/ab-logs}
mkdir -p "$LOGS"
pack() {
  python3 tools/gpu/ab_summary.py "$LOGS" >"$OUT/summary.txt" 2>&1
  tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
}

if [ "$MODE" = prepare ]; then
  REV=${2:?usage: tools/gpu/ab.sh prepare REV [NEW]}
  NEWREV=${3:-HEAD}
  rm -rf .gpu-base .gpu-new && mkdir -p .gpu-base .gpu-new
  git archive "$REV" | tar -x -C .gpu-base
  rm -rf .gpu-base/models .gpu-base/docs .gpu-base/tests  # a moetier binary is all it builds
  if [ "$NEWREV" = worktree ]; then  # the working tree as it is (tracked and untracked, not ignored)
    git ls-files -co --exclude-standard -z | grep -zv '^models/' | tar --null -T - -cf - | tar -x -C .gpu-new
  else
    git archive "$NEWREV" | tar -x -C .gpu-new
  fi
  rm -rf .gpu-new/models .gpu-new/docs  # the tests' models/ is linked to the working tree's there
  for d in /.gpu-base/ /.gpu-new/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >>.git/info/exclude; done
  git rev-parse --short "$REV" >.gpu-base/REVISION
  if [ "$NEWREV" = worktree ]; then echo "worktree on $(git rev-parse --short HEAD)"; else git rev-parse --short "$NEWREV"; fi >.gpu-new/REVISION
  du -sh .gpu-base .gpu-new
  exit 0
fi

SYSROOT=$PWD/.gpu-sysroot
if [ -d .gpu-carry/debs ] && [ ! -d "$SYSROOT/usr" ]; then
  mkdir -p "$SYSROOT"
  for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
fi
TESTDATA=$(cd .. && pwd)/shared/testdata
[ -d "$TESTDATA/models" ] || TESTDATA=$PWD/.gpu-carry/testdata
JOBS=$(nproc)
NEW=build-gpu/moetier
BASE=build-base/moetier
status=0
run() {  # name command...
  local name=$1
  shift
  echo "=== $name ($(date +%T))"
  if "$@" >"$LOGS/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; tail -25 "$LOGS/$name.log"; status=1; fi
  pack
}
qfile() {  # skew -> the timing file
  if [ "$1" = 0 ]; then echo /tmp/q30-q4_k_m.gguf; else echo "/tmp/q30-s$1-q4_k_m.gguf"; fi
}

synth_files() {  # the timing files of SKEWS, written side by side, then their writeback
  local skew F synth=$BASE
  [ -x "$synth" ] || synth=$NEW
  for skew in ${SKEWS-0 1}; do
    F=$(qfile "$skew")
    [ -f "$F" ] || run "synth_skew$skew" $synth synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew "$skew" --fast -o "$F" &
  done
  wait
  sync  # the files' writeback done before any benchmark
}

case $MODE in
build)
  ln -sfn "$PWD/models" .gpu-new/models
  [ -f build-gpu/build.ninja ] || cmake -S .gpu-new -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_WERROR=OFF -DMOETIER_SERVER=OFF -DCMAKE_PREFIX_PATH="$SYSROOT/usr" \
    -DMOETIER_TESTDATA_DIR="$TESTDATA" >"$LOGS/configure_new.log" 2>&1
  [ -f build-base/build.ninja ] || cmake -S .gpu-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_SERVER=OFF -DMOETIER_TESTS=OFF -DCMAKE_PREFIX_PATH="$SYSROOT/usr" \
    >"$LOGS/configure_base.log" 2>&1
  [ -n "${NO_BASE:-}" ] || run compile_base cmake --build build-base -j "$JOBS" --target moetier &
  # shellcheck disable=SC2086
  run compile_new cmake --build build-gpu -j "$JOBS" --target ${BUILD_TARGETS:-moetier mt_cuda_tests mt_unit_tests} &
  wait
  [ -n "${NO_SYNTH:-}" ] || synth_files
  ls -la /tmp/*.gguf "$NEW" "$BASE" 2>/dev/null
  ;;
all)  # one call: build, the tests of FILTER while the timing files are written, the benchmarks
  NO_SYNTH=1 "$0" build
  synth_files >"$LOGS/synth.log" 2>&1 &
  "$0" tests
  wait
  cat "$LOGS/synth.log"
  "$0" bench
  ;;
tests)
  cat .gpu-base/REVISION .gpu-new/REVISION
  run tests ./build-gpu/mt_cuda_tests --gtest_filter="${FILTER:-*}"
  grep -E "max rel|argmax equal|FAILED|Failure|Expected|actual|PASSED|SKIPPED|tests ran" "$LOGS/tests.log" | tail -60
  # the AVX-512 CPU kernels (this machine has AVX-512; the one the code is written on may not)
  run cpu_kernels ./build-gpu/mt_unit_tests --gtest_filter="${CPU_FILTER:-CpuGemm*:MatmulJobs*:Repack*:Shapes/*:CpuIsa*}"
  grep -E "FAILED|PASSED|SKIPPED|tests ran" "$LOGS/cpu_kernels.log" | tail -12
  ;;
bench)
  F0=$(qfile 0)
  for r in $(seq 1 "${ROUNDS:-2}"); do
    for b in base new; do
      bin=$BASE
      [ $b = new ] && bin=$NEW
      run "res_tg_${b}_r$r" $bin bench -m "$F0" --device cuda -p 512 -n 128 -r 3 -o json
      run "res_pp4096_${b}_r$r" $bin bench -m "$F0" --device cuda -p 4096 -n 0 -r 2 -o json
    done
  done
  # round by round, so that a call cut off by its limit has every configuration once
  for r in $(seq 1 "${TIER_ROUNDS:-3}"); do
    for skew in ${SKEWS-0 1}; do
      F=$(qfile "$skew")
      for budget in 25 10; do
        for b in base new; do
          bin=$BASE
          [ $b = new ] && bin=$NEW
          run "tier_s${skew}_b${budget}_${b}_r$r" $bin bench -m "$F" --device cuda --expert-cache "$budget%" -p 0 -n 64 -r 3 -o json
        done
      done
    done
  done
  pack
  cat "$OUT/summary.txt"
  ;;
*)
  echo "usage: tools/gpu/ab.sh prepare REV | build | tests | bench" >&2
  exit 2
  ;;
esac
exit $status
