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
B=/tmp/build-serve
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOETIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOETIER_TESTS=OFF -DCMAKE_PREFIX_PATH="$SYSROOT/usr" >"$OUT/configure.log" 2>&1
step build cmake --build $B -j "$JOBS" --target moetier
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
COMMON=(--gpu --engines "${ENGINES:-moetier}" --streams "${STREAMS:-1 8 32}" --prompt-tokens "${PROMPT:-128}"
        --output-tokens "${OUTPUT:-256}" --requests "${REQUESTS:-2}" --endpoint completions --moetier $B/moetier
        --llama-server $LLAMA)
step resident bash bench/serve_compare.sh $F "${COMMON[@]}" --out "$OUT/resident"
cat "$OUT/resident/summary.md" 2>/dev/null
for ec in ${EXPERT_CACHES-25%}; do
  step "tier${ec%\%}" bash bench/serve_compare.sh $F "${COMMON[@]}" --expert-cache "$ec" --out "$OUT/tier${ec%\%}"
  cat "$OUT/tier${ec%\%}/summary.md" 2>/dev/null
done
nvidia-smi --query-gpu=name,memory.used --format=csv >"$OUT/nvidia-smi.txt" 2>&1
pack
