#!/usr/bin/env bash
# Everything the GPU machine is for, in as few device calls as possible; logs under $OUT.
#   tools/gpu/check.sh test    build with CUDA (sm_90, -Werror), run the CUDA tests
#                              (kernels vs the CPU references, CUDA vs CPU logits and
#                              routing on every architecture and weight type), and
#                              compute-sanitizer memcheck on tiny models (decode + prefill)
#   tools/gpu/check.sh bench   (after test, machine warm) synthesize the qwen3-30b-a3b
#                              timing models (q4_k_m, q4_0), moetier bench --device cuda
#                              pp512 / pp4096 / tg128, the kernel benchmarks
#                              (moetier_cuda_mmvq, moetier_cuda_tune) and hwprofile
#   tools/gpu/check.sh llama   build llama-bench with CUDA from the node-llama-cpp bundle
#                              source carried in .gpu-carry/llama-src.tar.xz and run it on
#                              the same files (-ngl 99 -fa 1 -p 512,4096 -n 128)
#   tools/gpu/check.sh prep    a bare machine: moetier and llama-bench built side by side,
#                              the timing files of SKEWS synthesized (then tier, split)
#   tools/gpu/check.sh tier    (machine warm) GPU expert tiering on the qwen3-30b-a3b q4_k_m
#                              files of SKEWS (router skews, default 0 1): moetier bench
#                              --expert-cache 25% / 10% (pp512, tg64, pp4096) with the peak
#                              device memory (nvidia-smi); then, with llama-bench built
#                              (llama mode), -ncmoe at the same or larger device memory
#   tools/gpu/check.sh hybrid  the Gated DeltaNet families: CUDA vs CPU parity (qwen3next,
#                              qwen35moe), memcheck, ornith-35b q4_k_m bench fully resident
#                              and at --expert-cache 25%, llama-bench on it when built
#   tools/gpu/check.sh unified the tiering tests, then laguna-s-geometry (20 layers) decode
#                              with exact pools vs one unified max-size pool, 8,640 MiB
#   tools/gpu/check.sh families issue 9's families: the whole CUDA test suite (parity on
#                              every architecture incl. gpt-oss, laguna, deepseek2; the
#                              chunked delta rule; latent attention), memcheck on them,
#                              ornith-35b q4_k_m resident pp512 / pp4096 / tg128
#   tools/gpu/check.sh verify  a short call after a change: only mt_cuda_tests and moetier
#                              built, the tests of FILTER (gtest filter), the parity test on
#                              the architectures of PARITY, ornith-35b q4_k_m resident bench
#                              (NO_BENCH=1: none; BUILD_TARGETS overrides what is built)
#   tools/gpu/check.sh cpuexp  the CPU's share of hybrid decode alone (moetier_hybrid_cpu)
#                              over threads x pool spin, with moetier_membw and the topology
#   tools/gpu/check.sh split   hybrid decode with and without the split of misses (VARIANTS,
#                              BUDGETS, SKEWS), after the tiering tests (NO_TESTS=1: none)
#   tools/gpu/check.sh resab   (after prep with PREP_Q40=1) the CUDA tests of FILTER, fully
#                              resident decode under the switches of RES_VARIANTS (ATTN_BENCH:
#                              moetier_cuda_attention --decode first), pp512 /
#                              pp4096, llama-bench on the same files (QUANTS, NO_LLAMA, NO_PP,
#                              LLAMA_ARGS: its tests, default -p 512,4096 -n 128 -r 3;
#                              FLOOR=1: moetier_cuda_floor, a kernel boundary's fixed cost)
#   tools/gpu/check.sh floor   (a bare machine is enough: builds in seconds) moetier_cuda_floor
#                              alone: a kernel boundary's, a grid barrier's and a hand-off's cost
#   tools/gpu/check.sh chain   a product's fixed cost: moetier_cuda_mmvq at 1-256 MiB (CHAIN_MIB),
#                              dense and routed (CHAIN_TYPES)
#   tools/gpu/check.sh kprof   (after prep) each decode kernel's time from ncu, moetier vs llama-bench
#                              (QUANTS, default q4_0; KPROF_N tokens)
#   tools/gpu/check.sh kdetail (after prep) ncu's warp states of the decode step's small kernels
#   tools/gpu/check.sh spec    issue 30 on one bare machine: the CUDA speculative tests, then
#                              on the qwen3-30b-a3b q4_k_m timing file tg128 plain and with
#                              the labelled acceptance mode (--draft-scripted 0.3 / 0.7 / 0.9,
#                              SPEC_MAX guesses, default 4), resident and at --expert-cache 25%
#                              (router skew SPEC_SKEW, default 1), 3 fresh processes each
#   tools/gpu/check.sh warm    a bare machine for issues 27 and 30: moetier (with serve) and
#                              mt_cuda_tests built beside llama-bench and llama-server, then
#                              the whole CUDA test suite (FILTER) while the qwen3-30b-a3b
#                              q4_k_m timing file with the Qwen2 vocabulary (serve.sh's and
#                              spec's file) is synthesized
#   tools/gpu/check.sh grouped (after warm) the grouped routed mmvq off / on / on past the
#                              table's limits (EXP_MAX): bench --batch BATCHES, then tune
#   tools/gpu/check.sh replay  (after warm) issue 28: tiered tg128 under --routing (ROUTING) at
#                              BUDGETS in PROCS fresh processes, hwprofile, llama-bench -ncmoe
#                              (REPLAY_MODEL=ornith-35b ROUTING=synth:preset=256: 256 experts)
#   tools/gpu/check.sh pinload (a bare machine) issue 28's load time: run -n 1 tiered with the
#                              pinning modes (MOETIER_PIN_MODE alloc / register) first and in
#                              the background, the CUDA tests (FILTER), the replay with --hw-profile
#   tools/gpu/check.sh cpu     the whole CPU test suite with this machine's compiler
#   tools/gpu/check.sh all     test, then bench
# Carry .gpu-carry (made here by tools/gpu/prepare.sh): the Debian packages of the header
# and test libraries (the machine has none and no network), test data, llama.cpp source;
# and .gpu-carry/bin (tools/gpu/carry_bin.sh): moetier built here for these sources, which
# build() copies instead of compiling.
set -uo pipefail
MODE=${1:-test}
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
SYSROOT=$PWD/.gpu-sysroot
if [ -d .gpu-carry/debs ] && [ ! -d "$SYSROOT/usr" ]; then
  mkdir -p "$SYSROOT"
  for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
fi
TESTDATA=$(cd .. && pwd)/shared/testdata
[ -d "$TESTDATA/models" ] || TESTDATA=$PWD/.gpu-carry/testdata
JOBS=$(nproc)
status=0
run() {  # name command...
  local name=$1
  shift
  echo "=== $name ($(date +%T))"
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; tail -25 "$OUT/$name.log"; status=1; fi
}
# carried_moetier DIR: a moetier built on the dev machine for exactly these sources
source tools/gpu/carried.sh
build() {  # WERROR off: the device's GCC 13 warns falsely (-Warray-bounds) where GCC 12 here and in CI does not
  [ -f build-gpu/build.ninja ] || cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMOETIER_WERROR=OFF -DMOETIER_SERVER=ON -DCMAKE_PREFIX_PATH="$SYSROOT/usr" \
    -DMOETIER_TESTDATA_DIR="$TESTDATA" >"$OUT/configure.log" 2>&1
  local t
  if [ -n "${BUILD_TARGETS:-}" ]; then
    for t in $BUILD_TARGETS; do
      if [ "$t" = moetier ] && carried_moetier build-gpu; then continue; fi
      run "compile_$t" cmake --build build-gpu -j "$JOBS" --target "$t"
    done
  else
    run compile cmake --build build-gpu -j "$JOBS"
  fi
}
M=build-gpu/moetier
qfile() {  # skew: the qwen3-30b-a3b q4_k_m timing file with that router skew
  if [ "$1" = 0 ]; then echo /tmp/q30-q4_k_m.gguf; else echo "/tmp/q30-s$1-q4_k_m.gguf"; fi
}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
memcheck() {  # arch...: compute-sanitizer on a tiny q4_k_m model's logits (prefill) and run (decode)
  local a
  for a in "$@"; do
    $M synth --arch "$a" --quant q4_k_m -o "$OUT/san-$a.gguf" >/dev/null
    run "memcheck_logits_$a" "$SAN" --tool memcheck --error-exitcode 1 $M logits -m "$OUT/san-$a.gguf" --device cuda \
      --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 -o "$OUT/san.f32" --routing "$OUT/san.jsonl"
    run "memcheck_run_$a" "$SAN" --tool memcheck --error-exitcode 1 $M run -m "$OUT/san-$a.gguf" --device cuda -n 6 --temp 0
    rm -f "$OUT/san-$a.gguf"
  done
}

# llama-bench and llama-server with CUDA from the carried node-llama-cpp bundle source,
# once per machine (the server without its web UI: nothing downloaded).
llama_build() {
  local L=/tmp/llama.cpp
  [ -x $L/build/bin/llama-bench ] && [ -x $L/build/bin/llama-server ] && [ -x $L/build/bin/llama-batched-bench ] && return
  mkdir -p $L && tar -xJf .gpu-carry/llama-src.tar.xz -C $L
  run llama_configure cmake -S $L -B $L/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
  run llama_build cmake --build $L/build --target llama-bench llama-server llama-batched-bench -j "$JOBS"
}

case $MODE in
all)  # test then bench in one call (a fresh machine costs minutes)
  "$0" test
  t=$?
  "$0" bench
  b=$?
  exit $((t | b))
  ;;
test)
  build
  run info $M info
  cat "$OUT/info.log"
  run cuda_tests ./build-gpu/mt_cuda_tests
  grep -E "max rel|argmax equal|PASSED|FAILED|OK \]" "$OUT/cuda_tests.log" | tail -90
  memcheck qwen3moe qwen2moe
  ;;
bench)
  build
  for q in q4_k_m q4_0; do
    F=/tmp/q30-$q.gguf
    [ -f "$F" ] || run "synth_$q" $M synth --preset qwen3-30b-a3b --quant $q --fast -o "$F"
    run "bench_$q" $M bench -m "$F" --device cuda -p 512 -n 128 -r 3 -o json
    run "bench4096_$q" $M bench -m "$F" --device cuda -p 4096 -n 0 -r 2 -o json
  done
  # Where the time goes (cuda/kernels/stage_timer.h): a pp512 micro-batch, and decode without
  # graphs (per stage) and with (the whole step); pp4096 at a larger micro-batch.
  F=/tmp/q30-q4_k_m.gguf
  MOETIER_CUDA_PROFILE=1 run profile_pp512 $M bench -m "$F" --device cuda -p 512 -n 0 -r 2
  MOETIER_CUDA_PROFILE=1 MOETIER_CUDA_GRAPHS=0 run profile_tg_plain $M bench -m "$F" --device cuda -p 0 -n 64 -r 1
  MOETIER_CUDA_PROFILE=1 run profile_tg_graph $M bench -m "$F" --device cuda -p 0 -n 64 -r 1
  MOETIER_CUDA_UBATCH=512 run bench4096_ub512 $M bench -m "$F" --device cuda -p 4096 -n 0 -r 2
  if [ -z "${SKIP_KERNEL_BENCH:-}" ]; then  # the kernel-level benchmarks (~1 min)
    [ -x build-gpu/moetier_cuda_attention ] && run attention_bench ./build-gpu/moetier_cuda_attention
    [ -x build-gpu/moetier_cuda_mmvq ] && run mmvq_bench ./build-gpu/moetier_cuda_mmvq
    [ -x build-gpu/moetier_cuda_tune ] && run tune ./build-gpu/moetier_cuda_tune
  fi
  run hwprofile $M hwprofile -o "$OUT/hwprofile.json"
  for f in "$OUT"/bench*.log "$OUT"/profile*.log "$OUT"/attention_bench.log "$OUT"/mmvq_bench.log "$OUT"/tune.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done
  ;;
prep)  # a bare machine: moetier (moetier, mt_cuda_tests) and llama-bench built side by side,
  # then the qwen3-30b-a3b q4_k_m timing files of SKEWS synthesized side by side
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier} build &
  [ -n "${NO_LLAMA:-}" ] || (OUT=$OUT/llama && mkdir -p "$OUT" && llama_build) &
  wait
  for skew in ${SKEWS:-0}; do
    F=$(qfile "$skew")
    [ -f "$F" ] || run "synth_skew$skew" $M synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew "$skew" --fast -o "$F" &
  done
  # PREP_Q40=1: the resident q4_0 file too (issue 6's second type)
  [ -n "${PREP_Q40:-}" ] && [ ! -f /tmp/q30-q4_0.gguf ] &&
    run synth_q4_0 $M synth --preset qwen3-30b-a3b --quant q4_0 --fast -o /tmp/q30-q4_0.gguf &
  wait
  sync  # the files' writeback done before any bench
  ls -la /tmp/*.gguf /tmp/llama.cpp/build/bin/llama-bench "$M"
  ;;
llama)
  L=/tmp/llama.cpp
  llama_build
  for q in q4_k_m q4_0; do
    F=/tmp/q30-$q.gguf
    [ -f "$F" ] && run "llama_bench_$q" $L/build/bin/llama-bench -m "$F" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -o json
    [ -f "$OUT/llama_bench_$q.log" ] && grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/llama_bench_$q.log"
  done
  ;;
tier)
  build
  # Peak device memory of a command (nvidia-smi sampled every 100 ms), appended to its log.
  peak() {  # name command...
    local name=$1
    shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/$name.mem" 2>/dev/null &
    local smi=$!
    run "$name" "$@"
    kill $smi 2>/dev/null
    wait $smi 2>/dev/null
    echo "peak device memory: $(sort -n "$OUT/$name.mem" | tail -1) MiB" | tee -a "$OUT/$name.log"
  }
  for skew in ${SKEWS:-0 1}; do
    F=$(qfile "$skew")
    # (sync: a bench right after the synth otherwise competes with its writeback)
    [ -f "$F" ] || { run "synth_skew$skew" $M synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew $skew --fast -o "$F"; sync; }
    for b in 25 10; do
      peak "tier_s${skew}_b${b}" $M bench -m "$F" --device cuda --expert-cache $b% -p 512 -n 64 -r 2 -o json
      peak "tier4096_s${skew}_b${b}" $M bench -m "$F" --device cuda --expert-cache $b% -p 4096 -n 0 -r 1 -o json
      grep -E '"(n_prompt|n_gen|avg_ts)"|tiering|hit_rate|h2d|top_quarter' "$OUT/tier_s${skew}_b${b}.log" | grep -v '"hit_rate": 0' | tail -12
      grep -E '"(n_prompt|avg_ts)"' "$OUT/tier4096_s${skew}_b${b}.log"
      tail -1 "$OUT/tier_s${skew}_b${b}.log"
    done
    L=/tmp/llama.cpp/build/bin/llama-bench
    if [ -x $L ]; then
      for n in ${NCMOE:-35 43}; do
        peak "llama_ncmoe${n}_s$skew" $L -m "$F" -ngl 99 -fa 1 -t "$JOBS" -ncmoe $n -p 512,4096 -n 64 -r 2 -o json
        grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/llama_ncmoe${n}_s$skew.log"
        tail -1 "$OUT/llama_ncmoe${n}_s$skew.log"
      done
    fi
  done
  ;;
quick)  # one fresh-machine call: the tiering and fused-kernel tests, resident decode, and
  # the tiered decode figures (tg only) on both router skews
  build
  run tier_tests ./build-gpu/mt_cuda_tests --gtest_filter='CudaTiering*:CudaFused*:CudaExpertCache*'
  grep -E "OK \]|FAILED|hit rate" "$OUT/tier_tests.log" | tail -40
  F=/tmp/q30-q4_k_m.gguf
  [ -f "$F" ] || run synth_q4_k_m $M synth --preset qwen3-30b-a3b --quant q4_k_m --fast -o "$F"
  run tg_resident $M bench -m "$F" --device cuda -p 0 -n 128 -r 3
  tail -1 "$OUT/tg_resident.log"
  for skew in 0 1; do
    F=$(qfile "$skew")
    # (sync: a bench right after the synth otherwise competes with its writeback)
    [ -f "$F" ] || { run "synth_skew$skew" $M synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew $skew --fast -o "$F"; sync; }
    for b in 25 10; do
      run "tiertg_s${skew}_b${b}" $M bench -m "$F" --device cuda --expert-cache $b% -p 0 -n 64 -r 2
      tail -2 "$OUT/tiertg_s${skew}_b${b}.log"
    done
  done
  ;;
hybrid)  # the Gated DeltaNet families (issue 9): parity, memcheck, ornith-35b decode and
  # prefill fully resident and at a 25% expert budget; llama.cpp on the same file when its
  # llama-bench was built by an earlier `llama` call on this (warm) machine
  build
  MT_CUDA_PARITY_ARCH=qwen3next run parity_qwen3next ./build-gpu/mt_cuda_tests --gtest_filter='CudaModel.Logits*'
  MT_CUDA_PARITY_ARCH=qwen35moe run parity_qwen35moe ./build-gpu/mt_cuda_tests --gtest_filter='CudaModel.Logits*'
  MT_CUDA_PARITY_ARCH=glm4moe run parity_glm4moe ./build-gpu/mt_cuda_tests --gtest_filter='CudaModel.Logits*'
  grep -hE "max rel|argmax equal|OK \]|FAILED|Failure|rel " "$OUT"/parity_*.log | tail -30
  memcheck qwen3next qwen35moe glm4moe
  F=/tmp/ornith-q4_k_m.gguf
  [ -f "$F" ] || run synth_ornith $M synth --preset ornith-35b --quant q4_k_m --fast -o "$F"
  run ornith_resident $M bench -m "$F" --device cuda -p 512 -n 128 -r 3 -o json
  grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/ornith_resident.log"
  run ornith_b25 $M bench -m "$F" --device cuda --expert-cache 25% -p 512 -n 64 -r 2 -o json
  grep -E '"(n_prompt|n_gen|avg_ts)"|hit_rate' "$OUT/ornith_b25.log" | head -12
  L=/tmp/llama.cpp/build/bin/llama-bench
  if [ -x $L ]; then
    run llama_ornith $L -m "$F" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json
    grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/llama_ornith.log"
    for n in ${NCMOE:-30}; do
      run "llama_ornith_ncmoe$n" $L -m "$F" -ngl 99 -fa 1 -t "$JOBS" -ncmoe $n -p 512 -n 64 -r 2 -o json
      grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/llama_ornith_ncmoe$n.log"
    done
  fi
  ;;
unified)  # issue 7: exact-geometry pools vs one unified max-size pool on the laguna-s
  # geometry (20 of its 47 expert layers, 4 BF16 + 16 Q4_K, to fit the 64 GiB disk), seed
  # 000's 8,640 MiB budget; the tiering tests (unified slots, the hybrid family) first
  build
  run tier_tests ./build-gpu/mt_cuda_tests --gtest_filter='CudaTiering*'
  grep -E "OK \]|FAILED|Failure|first different" "$OUT/tier_tests.log" | tail -20
  F=/tmp/laguna20.gguf
  [ -f "$F" ] || run synth_laguna20 $M synth --preset laguna-s-geometry --layers 20 --fast -o "$F"
  for layout in pools unified; do
    run "laguna20_$layout" $M bench -m "$F" --device cuda --expert-cache 8640MiB --cache-layout $layout -p 0 -n 64 -r 3 -o json
    grep -E '"(avg_ts|stddev_ts|hit_rate|cpu_experts_per_token|h2d_bytes_per_token)"' "$OUT/laguna20_$layout.log" | grep -v '"hit_rate": 0' | tail -6
    head -1 "$OUT/laguna20_$layout.log"
  done
  ;;
verify)
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier} build
  run verify_tests ./build-gpu/mt_cuda_tests --gtest_filter="${FILTER:-*}"
  grep -E "OK \]|FAILED|Failure|Expected|actual" "$OUT/verify_tests.log" | tail -60
  for a in ${PARITY:-}; do
    MT_CUDA_PARITY_ARCH=$a run "parity_$a" ./build-gpu/mt_cuda_tests --gtest_filter='CudaModel.Logits*'
    grep -hE "max rel|argmax equal|OK \]|FAILED|Failure" "$OUT/parity_$a.log"
  done
  [ -n "${NO_BENCH:-}" ] && exit $status
  F=/tmp/ornith-q4_k_m.gguf
  [ -f "$F" ] || run synth_ornith $M synth --preset ornith-35b --quant q4_k_m --fast -o "$F"
  run ornith_resident $M bench -m "$F" --device cuda -p 512 -n 128 -r 3 -o json
  grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/ornith_resident.log"
  ;;
families)
  build
  run cuda_tests ./build-gpu/mt_cuda_tests
  grep -E "max rel|argmax equal|OK \]|FAILED|Failure" "$OUT/cuda_tests.log" | tail -120
  memcheck gpt-oss laguna deepseek2 qwen35moe
  F=/tmp/ornith-q4_k_m.gguf
  [ -f "$F" ] || run synth_ornith $M synth --preset ornith-35b --quant q4_k_m --fast -o "$F"
  run ornith_resident $M bench -m "$F" --device cuda -p 512 -n 128 -r 3 -o json
  grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/ornith_resident.log"
  run ornith_4096 $M bench -m "$F" --device cuda -p 4096 -n 0 -r 2 -o json
  grep -E '"(n_prompt|n_gen|avg_ts)"' "$OUT/ornith_4096.log"
  ;;
cpuexp)  # the CPU's share of hybrid decode alone (bench/hybrid_cpu.cpp) on this host: a
  # 12-layer qwen3-30b-a3b q4_k_m file, threads x pool spin x the device gap, against
  # moetier_membw; the host's topology. FILTER: CUDA tests to run first (after a change).
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier moetier_hybrid_cpu moetier_membw} build
  if [ -n "${FILTER:-}" ]; then
    run verify_tests ./build-gpu/mt_cuda_tests --gtest_filter="$FILTER"
    grep -E "OK \]|FAILED|Failure|Expected|actual|max rel" "$OUT/verify_tests.log" | tail -60
  fi
  for a in ${PARITY:-}; do
    MT_CUDA_PARITY_ARCH=$a run "parity_$a" ./build-gpu/mt_cuda_tests --gtest_filter='CudaModel.Logits*'
    grep -hE "max rel|argmax equal|OK \]|FAILED|Failure" "$OUT/parity_$a.log"
  done
  (lscpu; numactl -H 2>/dev/null; cat /sys/fs/cgroup/cpu.max 2>/dev/null) >"$OUT/topology.log" 2>&1
  grep -E "Model name|^CPU\(s\)|NUMA|L3|Thread|Socket" "$OUT/topology.log"
  F=/tmp/q30l12.gguf
  [ -f "$F" ] || run synth_l12 $M synth --preset qwen3-30b-a3b --quant q4_k_m --fast --layers 12 -o "$F"
  for t in ${THREADS_LIST:-16 8}; do run "membw_t$t" ./build-gpu/moetier_membw -t $t; tail -1 "$OUT/membw_t$t.log"; done
  for t in ${THREADS_LIST:-16 8}; do
    for sp in ${SPINS:-50 1000}; do
      for g in ${GAPS:-60}; do
        run "hcpu_t${t}_s${sp}_g$g" ./build-gpu/moetier_hybrid_cpu -m "$F" -t $t --spin-us $sp --gap-us $g -n 24 ${HCPU_ARGS:-}
        tail -1 "$OUT/hcpu_t${t}_s${sp}_g$g.log"
      done
    done
  done
  ;;
split)  # issue 7: hybrid decode with the split of misses (part of each layer-step's CPU misses
  # copied to the device on the critical path) vs without, qwen3-30b-a3b q4_k_m, uniform
  # router (SKEWS), at BUDGETS; VARIANTS: off, auto (the default: split by the assumed
  # profile), hw (split by this machine's `moetier hwprofile`), fF (--split-fraction F),
  # hot / hotoff (static-hot from `moetier profile`, with / without the split), freq
  # (--cache-policy frequency), lru (--cache-policy lru; the default on cuda is frequency), ids (--split-pick ids: the device's share of the misses by
  # ascending ids, not the most selected first). (ahead and graphs, measured no faster, went
  # with their switches in issue 26: docs/PERFORMANCE.md.) MEMBW=1: moetier_membw -t 16 at the end.
  # The tiering tests first unless NO_TESTS=1.
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier} build
  if [ -z "${NO_TESTS:-}" ]; then
    run tier_tests ./build-gpu/mt_cuda_tests --gtest_filter="${FILTER:-CudaTiering*}"
    grep -E "OK \]|FAILED|Failure|first different|hit rate" "$OUT/tier_tests.log" | tail -40
  fi
  [ -n "${NO_BENCH:-}" ] && exit $status
  for skew in ${SKEWS:-0}; do
    F=$(qfile "$skew")
    # (sync: a bench right after the synth otherwise competes with its writeback)
    [ -f "$F" ] || { run "synth_skew$skew" $M synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew $skew --fast -o "$F"; sync; }
    for b in ${BUDGETS:-25}; do
      for v in ${VARIANTS:-off auto}; do
        envs=""
        case $v in
          off) args="--split-misses off" ;;
          auto) args="" ;;
          hw) [ -f /tmp/hw.json ] || run hwprofile $M hwprofile -o /tmp/hw.json
              args="--hw-profile /tmp/hw.json" ;;
          freq) args="--cache-policy frequency" ;;
          lru) args="--cache-policy lru" ;;
          ids) args="--split-pick ids" ;;
          f*) args="--split-fraction ${v#f}" ;;
          hot*)  # static-hot from a popularity profile of this file (moetier profile on the CPU
            # over 48 lines of the docs); hot: with the split, hotoff: without
            if [ ! -f "/tmp/pop-s$skew.json" ]; then
              grep -v '^\s*$' docs/ARCHITECTURE.md | head -48 >/tmp/prompts.txt
              run "profile_s$skew" $M profile -m "$F" --prompts /tmp/prompts.txt -o "/tmp/pop-s$skew.json"
              cp "/tmp/pop-s$skew.json" "$OUT/"
            fi
            args="--cache-policy static-hot --popularity /tmp/pop-s$skew.json"
            [ $v = hotoff ] && args="$args --split-misses off" ;;
        esac
        # shellcheck disable=SC2086
        run "split_s${skew}_b${b}_$v" env $envs $M bench -m "$F" --device cuda --expert-cache $b% $args -p 0 -n 64 -r 2 -o json
        lg="$OUT/split_s${skew}_b${b}_$v.log"
        echo "skew $skew budget $b% $v: $(for k in avg_ts stddev_ts hit_rate top_quarter_share cpu_experts_per_token h2d_bytes_per_token staged cpu_ms device_ms; do
          grep "\"$k\"" "$lg" | tail -1; done | tr -d ' \n')"
      done
    done
  done
  [ -n "${MEMBW:-}" ] && [ -x build-gpu/moetier_membw ] && { run membw ./build-gpu/moetier_membw -t "$JOBS"; tail -2 "$OUT/membw.log"; }
  ;;
resab)  # issue 6 (machine warm after prep): the CUDA tests of FILTER, then fully resident
  # decode with the switches of RES_VARIANTS (below) against the defaults, pp512 / pp4096,
  # the per-stage profile, and llama-bench on the same files when built
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier} build
  run res_tests ./build-gpu/mt_cuda_tests --gtest_filter="${FILTER:-Mmvq*:CudaFused*:CudaModel*}"
  grep -E "OK \]|FAILED|Failure|max rel|argmax" "$OUT/res_tests.log" | tail -50
  # ATTN_BENCH=1 (with moetier_cuda_attention in BUILD_TARGETS): the decode attention kernels
  if [ -n "${ATTN_BENCH:-}" ]; then
    run attn_decode ./build-gpu/moetier_cuda_attention --decode --reps 10
    grep '^| [0-9]' "$OUT/attn_decode.log"
  fi
  # FLOOR=1 (with moetier_cuda_floor in BUILD_TARGETS): a kernel boundary's and a grid
  # barrier's fixed cost (graphs of empty / norm-shaped kernels, cooperative barriers)
  if [ -n "${FLOOR:-}" ]; then
    run floor ./build-gpu/moetier_cuda_floor --reps 20
    cat "$OUT/floor.log"
  fi
  # MEMCHECK_ARCHS="a b": compute-sanitizer memcheck over those tiny models' prefill and decode
  if [ -n "${MEMCHECK_ARCHS:-}" ]; then
    # shellcheck disable=SC2086
    memcheck $MEMCHECK_ARCHS
    grep -h "ERROR SUMMARY" "$OUT"/memcheck_*.log
  fi
  for q in ${QUANTS:-q4_k_m q4_0}; do
    F=/tmp/q30-$q.gguf
    [ -f "$F" ] || continue
    # RES_VARIANTS (each run twice, alternating): base (the defaults), wide16
    # (MOETIER_CUDA_MMVQ_WIDE16=1, the default), narrow (=0), grouped
    # (MOETIER_CUDA_ATTN_WARP_MAX=0), warp256 (=256), split2 / split4 / nosplit
    # (MOETIER_CUDA_MMVQ_SPLIT=2 / 4 / 0), noqk (MOETIER_CUDA_STACK_QK=0). (The experiments
    # measured slower and removed in issue 26 are in docs/PERFORMANCE.md.)
    for round in 1 2; do
      for v in ${RES_VARIANTS:-base}; do
        case $v in
          base) envs="" ;;
          wide16) envs="MOETIER_CUDA_MMVQ_WIDE16=1" ;;  # the default since 2026-12-03
          narrow) envs="MOETIER_CUDA_MMVQ_WIDE16=0" ;;
          grouped) envs="MOETIER_CUDA_ATTN_WARP_MAX=0" ;;      # the decode attention before the warps kernel
          warp256) envs="MOETIER_CUDA_ATTN_WARP_MAX=256" ;;    # the warps kernel only in one chunk
          split2) envs="MOETIER_CUDA_MMVQ_SPLIT=2" ;;          # long one-token rows over 2 warps
          split4) envs="MOETIER_CUDA_MMVQ_SPLIT=4" ;;          # ... over up to 4 warps (the default)
          nosplit) envs="MOETIER_CUDA_MMVQ_SPLIT=0" ;;          # one warp per MMVQ row group
          noqk) envs="MOETIER_CUDA_STACK_QK=0" ;;               # Q, K, V three products where V's type differs (before)
          *) echo "unknown variant $v"; envs="UNKNOWN_VARIANT=1" ;;
        esac
        # shellcheck disable=SC2086
        run "tg_${q}_${v}_$round" env $envs $M bench -m "$F" --device cuda -p 0 -n 128 -r 3
        echo "$q $v round $round: $(tail -1 "$OUT/tg_${q}_${v}_$round.log")"
      done
    done
    if [ -z "${NO_PP:-}" ]; then
      for pp in 512 4096; do run "pp${pp}_$q" $M bench -m "$F" --device cuda -p $pp -n 0 -r 2; tail -1 "$OUT/pp${pp}_$q.log"; done
    fi
    L=/tmp/llama.cpp/build/bin/llama-bench
    # shellcheck disable=SC2086
    [ -x $L ] && [ -z "${NO_LLAMA:-}" ] && { run "llama_$q" $L -m "$F" -ngl 99 -fa 1 ${LLAMA_ARGS:--p 512,4096 -n 128 -r 3}; tail -5 "$OUT/llama_$q.log"; }
  done
  F=/tmp/q30-q4_k_m.gguf
  [ -n "${PROFILE:-}" ] && { MOETIER_CUDA_PROFILE=1 run profile_tg_graph $M bench -m "$F" --device cuda -p 0 -n 64 -r 1; tail -30 "$OUT/profile_tg_graph.log"; }
  ;;
floor)  # moetier_cuda_floor alone (it links no library of ours): launches, barriers,
  # the hand-offs a persistent step would wait on
  BUILD_TARGETS=moetier_cuda_floor build
  run floor timeout 120 ./build-gpu/moetier_cuda_floor --reps "${FLOOR_REPS:-20}"
  cat "$OUT/floor.log"
  ;;
chain)  # a product's fixed cost: moetier_cuda_mmvq over small matrices (the decode step's
  # products are 1-16 MiB), dense and routed
  BUILD_TARGETS=${BUILD_TARGETS:-moetier_cuda_mmvq} build
  for mib in ${CHAIN_MIB:-1 2 4 8 16 64 256}; do
    run "chain_$mib" ./build-gpu/moetier_cuda_mmvq --mib "$mib" --types "${CHAIN_TYPES:-q4_K,q4_0}"
    echo "$mib MiB: $(grep '^| q' "$OUT/chain_$mib.log" | tr -s ' ' | tr '\n' ' ')"
  done
  # routed: K = 8 experts of 2048 -> 768 per call (the decode shape) from a 256 MiB pool
  run chain_exp ./build-gpu/moetier_cuda_mmvq --experts --types "${CHAIN_TYPES:-q4_K,q4_0}"
  echo "routed: $(grep '^| q' "$OUT/chain_exp.log" | tr -s ' ' | tr '\n' ' ')"
  ;;
kprof)  # (machine warm after prep) each decode kernel's time, moetier vs llama-bench, from
  # ncu (gpu__time_duration, clocks and caches left alone) over KPROF_N decoded tokens of QUANTS
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  N=${KPROF_N:-6}
  ncu_csv() {  # name command...: one row per launch
    local name=$1
    shift
    run "ncu_$name" "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --print-kernel-base function --print-units base --csv "$@"
  }
  for q in ${QUANTS:-q4_0}; do
    F=/tmp/q30-$q.gguf
    [ -f "$F" ] || continue
    # warm-up + N timed tokens each: moetier bench decodes 1 + N, llama-bench 1 + N too
    ncu_csv "moetier_$q" $M bench -m "$F" --device cuda -p 0 -n "$N" -r 1
    python3 tools/gpu/kprof.py "moetier $q" "$OUT/ncu_moetier_$q.log" $((N + 1)) | tee "$OUT/kprof_moetier_$q.txt" | head -40
    L=/tmp/llama.cpp/build/bin/llama-bench
    [ -x $L ] || continue
    ncu_csv "llama_$q" $L -m "$F" -ngl 99 -fa 1 -p 0 -n "$N" -r 1
    python3 tools/gpu/kprof.py "llama.cpp $q" "$OUT/ncu_llama_$q.log" $((N + 1)) | tee "$OUT/kprof_llama_$q.txt" | head -40
  done
  ;;
kdetail)  # (machine warm after prep) ncu's warp-state sections of the decode step's small
  # kernels (KDETAIL_KERNELS, a regex), KDETAIL_N launches each, on the q4_k_m file
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  run kdetail "$NCU" --clock-control none --cache-control none --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -k "regex:${KDETAIL_KERNELS:-add_rms_norm_quant|router_topk|attn_prep|swiglu_pairs_quant|attn_decode_warps}" \
    -c "${KDETAIL_N:-10}" $M bench -m /tmp/q30-q4_k_m.gguf --device cuda -p 0 -n 2 -r 1
  grep -E "^  [a-z_]+.*\(|Duration|Stall|Warp Cycles Per|Issued Warp|Active Warps|Achieved Occ|Registers|Block Size|Grid Size|Memory Throughput|DRAM Through|L2 Hit" "$OUT/kdetail.log" | head -400
  ;;
spec)  # issue 30: speculative decoding on the GPU (one call from a bare machine)
  BUILD_TARGETS="mt_cuda_tests moetier" build
  [ -n "${NO_TESTS:-}" ] || run cuda_spec_tests ./build-gpu/mt_cuda_tests --gtest_filter='CudaSpeculative.*:CudaSequenceFork*'
  grep -E "OK \]|FAILED|near tie|Failure" "$OUT/cuda_spec_tests.log" | tail -20
  F=${SPEC_FILE:-$(qfile "${SPEC_SKEW:-1}")}
  [ -f "$F" ] || { run spec_synth $M synth --preset qwen3-30b-a3b --quant q4_k_m --router-skew "${SPEC_SKEW:-1}" --fast -o "$F"; sync; }
  for where in resident 25; do
    tier=()
    [ "$where" = resident ] || tier=(--expert-cache "$where%")
    for proc in 1 2 3; do
      for p in none 0.3 0.7 0.9; do
        draft=()
        [ "$p" = none ] || draft=(--draft-scripted "$p" --draft-max "${SPEC_MAX:-4}")
        name="spec_${where}_p${p}_$proc"
        run "$name" $M bench -m "$F" --device cuda "${tier[@]}" -p 0 -n 128 -r 3 "${draft[@]}"
        grep -E "^tg128" "$OUT/$name.log" | sed "s/^/$name: /"
      done
    done
  done
  ;;
warm)
  BUILD_TARGETS=${BUILD_TARGETS:-mt_cuda_tests moetier} build &
  [ -n "${NO_LLAMA:-}" ] || (OUT=$OUT/llama && mkdir -p "$OUT" && llama_build) &
  wait
  F=/tmp/q30v-q4_k_m.gguf
  [ -f "$F" ] || (run synth_q30v $M synth --preset qwen3-30b-a3b --quant q4_k_m --fast \
    --vocab .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf -o "$F"; sync) &
  run cuda_tests ./build-gpu/mt_cuda_tests ${FILTER:+--gtest_filter=$FILTER}
  grep -E "FAILED|OK \]" "$OUT/cuda_tests.log" | tail -80
  wait
  ls -la /tmp/*.gguf /tmp/llama.cpp/build/bin/llama-server "$M"
  ;;
grouped)  # (after warm) the grouped routed mmvq: bench --batch (BATCHES) in fresh processes
  # with it off (MOETIER_CUDA_MMVQ_GROUPED=0), on (the table's mmvq limits), on with mmvq
  # up to EXP_MAX tokens for every type; then moetier tune (the new crossovers)
  F=/tmp/q30v-q4_k_m.gguf
  # VARIANTS: ';'-separated environment settings, one fresh process each ("-": the defaults)
  IFS=';' read -r -a variants <<<"${VARIANTS:-MOETIER_CUDA_MMVQ_GROUPED=0;MOETIER_CUDA_MMVQ_GROUPED=2;MOETIER_CUDA_EXPERTS_MMVQ_MAX=${EXP_MAX:-64};MOETIER_CUDA_MMVQ_GROUPED=0 MOETIER_CUDA_EXPERTS_MMVQ_MAX=${EXP_MAX:-64}}"
  for v in "${variants[@]}"; do
    [ "$v" = - ] && v="MOETIER_DEFAULTS=1"
    name=batch_$(echo "$v" | tr ' =' '__')
    run "$name" env $v $M bench -m "$F" --device cuda --batch "${BATCHES:-1,8,16,32,64}" -p 128 -n 32 -r 3
    echo "$v"; grep -E "every repetition|step" "$OUT/$name.log" | head -12
  done
  [ -n "${NO_TUNE:-}" ] || { run tune $M tune; grep -E "^\{|->" "$OUT/tune.log"; }
  ;;
replay)  # (after warm) issue 28: tiered decode under --routing ROUTING (default the qwen3-30b
  # preset) at BUDGETS (10 25), PROCS (3) fresh processes each, budgets interleaved; tg128 x5
  # repetitions (every one, first apart, cv), the tiering counters, the peak device memory;
  # hwprofile (host read and pinned link bandwidth, for the roofline); llama-bench -ncmoe
  # 43 / 35 tg128 on the same file when built (it cannot replay routing: its own routing)
  # REPLAY_MODEL=ornith-35b: the 256-expert case (qwen35moe, 256 experts top-8) under
  # ROUTING synth:preset=256, no target; no load times, no llama.cpp
  F=/tmp/q30v-q4_k_m.gguf
  if [ -n "${REPLAY_MODEL:-}" ]; then
    F=/tmp/$REPLAY_MODEL-q4_k_m.gguf
    [ -f "$F" ] || { run "synth_$REPLAY_MODEL" $M synth --preset "$REPLAY_MODEL" --quant q4_k_m --fast -o "$F"; sync; }
    NO_LOAD=1 NO_LLAMA=1
  fi
  [ -n "${NO_HW:-}" ] || run hwprofile $M hwprofile -o "$OUT/hw.json"
  [ -n "${NO_HW:-}" ] || python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print({k: v for k, v in j.items() if not isinstance(v, (list, dict))})" "$OUT/hw.json" 2>/dev/null | cut -c1-600
  for proc in $(seq 1 "${PROCS:-3}"); do
    for b in ${BUDGETS:-10 25}; do
      name="replay${REPLAY_MODEL:+_$REPLAY_MODEL}_b${b}_$proc"
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/$name.mem" 2>/dev/null &
      smi=$!
      run "$name" $M bench -m "$F" --device cuda --expert-cache "$b%" --routing "${ROUTING:-synth:preset=qwen3-30b}" \
        -p 0 -n 128 -r 5 ${REPLAY_ARGS:-}
      kill $smi 2>/dev/null; wait $smi 2>/dev/null
      echo "$name: peak $(sort -n "$OUT/$name.mem" | tail -1) MiB"
      grep -E "policy auto|every repetition|tiering:" "$OUT/$name.log" | cut -c1-400
    done
  done
  # Load time to the first token (issue 28: <= 5 s): run -n 1, pinning first vs in the
  # background, 2 fresh processes each, the wall time of the whole command
  for proc in $([ -n "${NO_LOAD:-}" ] || echo 1 2); do
    for a in "" "--pin-background"; do
      name="load$(echo "$a" | tr -d ' -')_$proc"
      s0=$(date +%s.%N)
      run "$name" $M run -m "$F" --device cuda --expert-cache 25% -p "hello" -n 1 $a
      echo "$name: $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$(date +%s.%N)" "$s0") s to exit; $(grep -E 'pinned|first token' "$OUT/$name.log" | head -3 | tr '\n' ' ' | cut -c1-300)"
    done
  done
  L=/tmp/llama.cpp/build/bin/llama-bench
  if [ -x $L ] && [ -z "${NO_LLAMA:-}" ]; then
    for n in 43 35; do
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/llama$n.mem" 2>/dev/null &
      smi=$!
      run "llama_ncmoe$n" $L -m "$F" -ngl 99 -fa 1 -t "$JOBS" -ncmoe $n -p 0 -n 128 -r 3
      kill $smi 2>/dev/null; wait $smi 2>/dev/null
      echo "llama -ncmoe $n: peak $(sort -n "$OUT/llama$n.mem" | tail -1) MiB"
      grep -E "tg128" "$OUT/llama_ncmoe$n.log"
    done
  fi
  ;;
pinload)  # a bare machine, issue 28's load time: moetier built, the q30v timing file, then
  # run -n 1 at --expert-cache 25% with MOETIER_PIN_MODE alloc (cudaHostAlloc) and register
  # (filled by the copy threads, then cudaHostRegister), pinning first and in the
  # background, 2 fresh processes each (load, first token, exit); then mt_cuda_tests
  # (FILTER) and the replay at BUDGETS with the measured profile (--hw-profile)
  # QUICK=1 (little device time): no mt_cuda_tests; the tiered greedy text with register
  # pinning against the resident one instead (the CUDA tiering tests' check, through the CLI)
  BUILD_TARGETS=moetier build  # a carried moetier when its stamp matches
  F=/tmp/q30v-q4_k_m.gguf
  [ -f "$F" ] || (run synth_q30v $M synth --preset qwen3-30b-a3b --quant q4_k_m --fast \
    --vocab .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf -o "$F"; sync) &
  [ -n "${QUICK:-}" ] || BUILD_TARGETS=mt_cuda_tests build  # before the timed runs: no compile beside them
  wait
  run hwprofile $M hwprofile -o "$OUT/hw.json"
  for proc in $(seq 1 "${PIN_PROCS:-2}"); do
    for mode in alloc register; do
      for a in "" "--pin-background"; do
        name="pin_${mode}$(echo "$a" | tr -d ' -')_$proc"
        s0=$(date +%s.%N)
        run "$name" env MOETIER_PIN_MODE=$mode $M run -m "$F" --device cuda --expert-cache 25% -p "hello" -n 1 $a
        echo "$name: $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$(date +%s.%N)" "$s0") s to exit; $(grep -E 'pinned|^model:|^prompt:|first token' "$OUT/$name.log" | sed 's/.*experts tiered, //' | tr '\n' ' ' | cut -c1-400)"
      done
    done
  done
  if [ -n "${QUICK:-}" ]; then
    for a in "" "--expert-cache 25%" "--expert-cache 25% --pin-background"; do
      name="greedy$(echo "$a" | tr -dc 'a-z0-9')"
      run "$name" sh -c "MOETIER_PIN_MODE=register $M run -m $F --device cuda -p 'The quick brown fox' -n 48 --temp 0 $a 2>$OUT/$name.err >$OUT/$name.text"
    done
    for t in "$OUT"/greedyexpertcache25*.text; do
      if cmp -s "$OUT/greedy.text" "$t"; then echo "$(basename "$t"): same text as resident"; else echo "$(basename "$t"): DIFFERS"; cat "$OUT/greedy.text" "$t"; fi
    done
  else
    run cuda_tests timeout 150 ./build-gpu/mt_cuda_tests ${FILTER:+--gtest_filter=$FILTER}
    grep -E "FAILED|OK \]" "$OUT/cuda_tests.log" | tail -40
  fi
  for b in ${HW_BUDGETS-10 25}; do
    name="replay_hw_b$b"
    run "$name" $M bench -m "$F" --device cuda --expert-cache "$b%" --routing synth:preset=qwen3-30b -p 0 -n 128 -r 5 \
      --hw-profile "$OUT/hw.json"
    grep -E "policy auto|every repetition|tiering:|roofline|split of misses" "$OUT/$name.log" | cut -c1-400
  done
  ;;
cpu)
  build
  run unit ctest --test-dir build-gpu --output-on-failure -j "$JOBS" -LE "kjv|cuda"
  ;;
*)
  echo "usage: tools/gpu/check.sh test|bench|all|prep|llama|tier|quick|hybrid|unified|families|verify|cpuexp|split|resab|chain|kprof|kdetail|cpu"
  exit 2
  ;;
esac
nvidia-smi >"$OUT/nvidia-smi.log" 2>&1 || true
# The device tool brings back only a few files: every log in one archive.
if [ "$MODE" != all ]; then
  (cd "$OUT" && tar -czf "logs-$MODE.tgz" --exclude='*.tgz' --exclude='*.gguf' --exclude='*.f32' -- * 2>/dev/null &&
    find . -maxdepth 1 -type f ! -name '*.tgz' -delete)
fi
exit $status
