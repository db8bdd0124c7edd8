#!/usr/bin/env bash
# GPU serving under load (issue 27) in one device call: moetier with its server built from
# this tree (CUDA, sm_90), the qwen3-30b-a3b q4_k_m timing file with the Qwen2 vocabulary
# (random weights still write text: bench/serve_compare.sh's --ban-invalid-utf8), then
# bench/serve_compare.sh --gpu at STREAMS, resident and at each EXPERT_CACHES budget.
# Logs and load.py's JSON under $OUT (packed as serve.tgz after every step).
#
#   device: OUT=... STREAMS="1 8 32" EXPERT_CACHES="25%" ENGINES=moetier bash tools/gpu/serve.sh
#   carry: .gpu-carry/debs, .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf (and, for
#   ENGINES="moetier llama", .gpu-carry/llama-src.tar.xz: llama-server built as check.sh does)
set -uo pipefail
OUT=${OUT:-$PWD/out/serve}
mkdir -p "$OUT"
JOBS=$(nproc)
SYSROOT=$PWD/.gpu-sysroot
if [ -d .gpu-carry/debs ] && [ ! -d "$SYSROOT/usr" ]; then
  mkdir -p "$SYSROOT"
  for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
fi
pack() { tar -czf "$OUT/serve.tgz" -C "$OUT" --exclude=serve.tgz . 2>/dev/null; }
step() {  # name command...: logged to $OUT/name.log
  local name=$1
  shift
  echo "=== $name ($(date +%T))"
  if "$@" >"$OUT/$name.log" 2>&1; then echo ok; else echo "FAILED ($name.log)"; tail -20 "$OUT/$name.log"; fi
  pack
}
B=${SERVE_BUILD:-/tmp/build-serve}
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOETIER_TESTS=OFF -DCMAKE_PREFIX_PATH="$SYSROOT/usr" >"$OUT/configure.log" 2>&1
source tools/gpu/carried.sh
carried_moetier $B || step build cmake --build $B -j "$JOBS" --target moetier
LLAMA=/tmp/llama.cpp/build/bin/llama-server
if [[ "${ENGINES:-moetier}" == *llama* ]] && [ ! -x $LLAMA ]; then
  mkdir -p /tmp/llama.cpp && tar -xJf .gpu-carry/llama-src.tar.xz -C /tmp/llama.cpp
  step llama_configure cmake -S /tmp/llama.cpp -B /tmp/llama.cpp/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
  step llama_build cmake --build /tmp/llama.cpp/build --target llama-server -j "$JOBS"
fi
F=/tmp/q30v-q4_k_m.gguf
[ -f $F ] || step synth $B/moetier synth --preset qwen3-30b-a3b --quant q4_k_m --fast \
  --vocab .gpu-carry/testdata/vocab/ggml-vocab-qwen2.gguf -o $F
sync
# HWPROFILE=1: moetier hwprofile of this machine into /tmp/hw.json (a variant below can
# then give --hw-profile /tmp/hw.json)
[ -n "${HWPROFILE:-}" ] && { step hwprofile $B/moetier hwprofile -o /tmp/hw.json; cat /tmp/hw.json; }
# MOETIER_VARIANTS="flags|flags|...": the long prompt and each tiered budget served once per
# variant (its flags as MOETIER_ARGS; an empty one is the default), llama-server beside the
# first only: an A/B of moetier's flags under one load in one call.
IFS='|' read -ra VARIANTS <<<"${MOETIER_VARIANTS:-${MOETIER_ARGS:-}}"
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=("")
COMMON=(--gpu --engines "${ENGINES:-moetier}" --streams "${STREAMS:-1 8 32}" --prompt-tokens "${PROMPT:-128}"
        --output-tokens "${OUTPUT:-256}" --requests "${REQUESTS:-2}" --endpoint completions --moetier $B/moetier
        --llama-server $LLAMA)
# BATCH_BENCH="1,8,32": the batched decode step without a server: moetier bench --batch
# (every sequence's 128-token prefill untimed, then 32 timed steps) beside llama.cpp's
# llama-batched-bench on the same file (its S_TG column), and ncu's per-kernel time of a
# batch of KPROF_BATCH (8) steps (tools/gpu/kprof.py; the prefill's launches included).
if [ -n "${BATCH_BENCH:-}" ]; then
  step batch_moetier $B/moetier bench -m $F --device cuda --batch "$BATCH_BENCH" -p 128 -n 32 -r 3
  cat "$OUT/batch_moetier.log"
  # BATCH_OFF="MOETIER_CUDA_...=0 ...": the same with those switches (an A/B in one call)
  if [ -n "${BATCH_OFF:-}" ]; then
    step batch_moetier_off env $BATCH_OFF $B/moetier bench -m $F --device cuda --batch "$BATCH_BENCH" -p 128 -n 32 -r 3
    grep -E "every repetition" "$OUT/batch_moetier_off.log"
  fi
  LB=/tmp/llama.cpp/build/bin/llama-batched-bench
  if [ -x $LB ]; then
    step batch_llama $LB -m $F -ngl 99 -fa on -c 16384 -npp 128 -ntg 32 -npl "$BATCH_BENCH"
    grep -E "^\|" "$OUT/batch_llama.log"
  fi
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ] && [ -z "${NO_NCU:-}" ]; then
    step ncu_batch "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --print-kernel-base function --print-units base --csv $B/moetier bench -m $F --device cuda \
      --batch "${KPROF_BATCH:-8}" -p 1 -n 3 -r 1
    python3 tools/gpu/kprof.py "moetier batch ${KPROF_BATCH:-8}" "$OUT/ncu_batch.log" 1 | head -40
  fi
fi
# NODE_CHECKS=1 (carry .gpu-carry/node.xz, Debian's node packed by tools/gpu/prepare.sh): the
# server tests on the GPU server and this file: batch parity (16 requests alone vs together
# at temperature 0) and churn (64 streams + 200 dropped connections), resident and at 25%.
if [ -n "${NODE_CHECKS:-}" ] && [ -f .gpu-carry/node.xz ]; then
  [ -x /tmp/node ] || { xz -dc .gpu-carry/node.xz >/tmp/node && chmod +x /tmp/node; }
  for where in resident 25; do
    a="--device cuda -t $JOBS"
    [ "$where" = resident ] || a="$a --expert-cache $where%"
    step "parity_$where" env SERVE_MODEL=$F SERVE_ARGS="$a" PARITY_LOGITS_ARGS="--device cuda" SERVE_START_S=300 \
      /tmp/node tests/server/batch_parity.mjs $B/moetier $F /tmp/parity
    grep -E "^ok|near tie|PASS|FAIL|bound" "$OUT/parity_$where.log"
    step "churn_$where" env SERVE_MODEL=$F SERVE_ARGS="$a" SERVE_START_S=300 \
      /tmp/node tests/server/churn.mjs $B/moetier none /tmp/churn
    grep -E "^ok|PASS|FAIL" "$OUT/churn_$where.log"
  done
fi
# LONG_PROMPT=N: chunked prefill under load: LONG_STREAMS (8) streams of 512 tokens, one
# N-token prompt sent 1 s in; the streams' inter-token latency while it is admitted.
if [ -n "${LONG_PROMPT:-}" ]; then
  IFS='|' read -ra LV <<<"${LONG_VARIANTS:-${MOETIER_VARIANTS:-${MOETIER_ARGS:-}}}"  # LONG_VARIANTS: as MOETIER_VARIANTS
  [ ${#LV[@]} -gt 0 ] || LV=("")
  for i in "${!LV[@]}"; do
    d=long; [ "$i" = 0 ] || d=long_v$i
    echo "--- variant $i: ${LV[$i]:-(default)}"
    MOETIER_ARGS="${LV[$i]}" step $d bash bench/serve_compare.sh $F "${COMMON[@]}" --streams "${LONG_STREAMS:-8}" \
      --output-tokens 512 --requests 1 --long-prompt "$LONG_PROMPT" --out "$OUT/$d"
    grep -h "long prompt" "$OUT"/$d/*.log "$OUT/$d.log" 2>/dev/null
    COMMON[2]=moetier  # llama-server beside the first variant only
  done
  COMMON[2]="${ENGINES:-moetier}"
fi
[ -n "${NO_RESIDENT:-}" ] || step resident bash bench/serve_compare.sh $F "${COMMON[@]}" --out "$OUT/resident"
cat "$OUT/resident/summary.md" 2>/dev/null
# llama-server's anchor for each budget: --n-cpu-moe 35 beside 25%, 43 beside 10% (about the
# same device memory; NCPUMOE_<budget> overrides)
NCPUMOE_25=${NCPUMOE_25:-35}
NCPUMOE_10=${NCPUMOE_10:-43}
for ec in ${EXPERT_CACHES-25%}; do
  v=NCPUMOE_${ec%\%}
  for i in "${!VARIANTS[@]}"; do
    d=tier${ec%\%}; [ "$i" = 0 ] || d=tier${ec%\%}_v$i
    echo "--- variant $i: ${VARIANTS[$i]:-(default)}"
    MOETIER_ARGS="${VARIANTS[$i]}" step "$d" bash bench/serve_compare.sh $F "${COMMON[@]}" --expert-cache "$ec" \
      ${!v:+--n-cpu-moe ${!v}} --out "$OUT/$d"
    cat "$OUT/$d/summary.md" 2>/dev/null
    COMMON[2]=moetier
  done
  COMMON[2]="${ENGINES:-moetier}"
done
nvidia-smi --query-gpu=name,memory.used --format=csv >"$OUT/nvidia-smi.txt" 2>&1
pack
