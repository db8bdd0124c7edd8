#!/usr/bin/env bash
# Speculative decoding on the GPU (issue 30) in one device call: moetier bench on the
# qwen3-30b-a3b q4_k_m timing file, plain greedy decode against the LABELLED measurement
# mode (--draft-scripted P: the draft is the target's own greedy continuation, each guess
# kept with probability P), resident and at each EXPERT_CACHES budget. Each configuration
# in a fresh process; every repetition is printed by bench itself. Logs under $OUT.
#
#   device: OUT=... [ACCEPT="0.7 0.3"] [EXPERT_CACHES="25%"] [DRAFT_MAX=4] [N=128] [SPEC_ARGS=--draft-fixed]
#           [BENCH_ARGS="--routing synth:preset=qwen3-30b"] (every run, plain and drafted)
#           bash tools/gpu/spec.sh
#   carry: .gpu-carry/bin (tools/gpu/carry_bin.sh), .gpu-carry/debs,
#          .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf
set -uo pipefail
OUT=${OUT:-$PWD/out/spec}
mkdir -p "$OUT"
SYSROOT=$PWD/.gpu-sysroot
if [ -d .gpu-carry/debs ] && [ ! -d "$SYSROOT/usr" ]; then
  mkdir -p "$SYSROOT"
  for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
fi
step() {  # name command...: logged to $OUT/name.log
  local name=$1
  shift
  echo "=== $name ($(date +%T))"
  if "$@" >"$OUT/$name.log" 2>&1; then echo ok; else echo "FAILED ($name.log)"; tail -20 "$OUT/$name.log"; fi
}
B=${SERVE_BUILD:-/tmp/build-serve}
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOETIER_TESTS=OFF -DCMAKE_PREFIX_PATH="$SYSROOT/usr" >"$OUT/configure.log" 2>&1
source tools/gpu/carried.sh
carried_moetier $B || step build cmake --build $B -j "$(nproc)" --target moetier
F=/tmp/q30v-q4_k_m.gguf
[ -f $F ] || step synth $B/moetier synth --preset qwen3-30b-a3b --quant q4_k_m --fast \
  --vocab .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf -o $F
N=${N:-128}
for where in resident ${EXPERT_CACHES-25%}; do
  a=(bench -m $F --device cuda -p 32 -n "$N" -r "${REPS:-3}" ${BENCH_ARGS:-})
  [ "$where" = resident ] || a+=(--expert-cache "$where")
  tag=${where%\%}
  step "plain_$tag" $B/moetier "${a[@]}"
  grep -E "tg$N|every repetition" "$OUT/plain_$tag.log"
  for p in ${ACCEPT:-0.7 0.3}; do
    step "spec_${tag}_p$p" $B/moetier "${a[@]}" --draft-scripted "$p" --draft-max "${DRAFT_MAX:-4}" ${SPEC_ARGS:-}
    grep -E "tg$N|every repetition|accept|draft" "$OUT/spec_${tag}_p$p.log"
  done
done
