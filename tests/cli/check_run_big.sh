#!/usr/bin/env bash
# run_big: `moetier run` on the qwen3-30b-a3b geometry scaled down to 8 layers (3.2 GiB,
# q4_k_m, --fast weights): it loads, streams tokens and prints timings.
# The tokenizer is Qwen2's real vocabulary (151,936 tokens, as the checkpoint has).
# usage: check_run_big.sh MOETIER QWEN2_VOCAB_GGUF WORK_DIR
set -euo pipefail
MOETIER=$1
VOCAB=$2
WORK=$3
mkdir -p "$WORK"
MODEL=$WORK/qwen3-30b-a3b-8l.gguf
"$MOETIER" synth --preset qwen3-30b-a3b --layers 8 --quant q4_k_m --fast --vocab "$VOCAB" -o "$MODEL"
"$MOETIER" run -m "$MODEL" -p "The experts of a mixture" -n 6 --seed 1 -t 2 >"$WORK/out.txt" 2>"$WORK/err.txt"
cat "$WORK/out.txt" "$WORK/err.txt"
grep -q "^The experts of a mixture" "$WORK/out.txt"
[ "$(wc -c <"$WORK/out.txt")" -gt 26 ]   # the prompt and some generated text
grep -q "^generation: 6 tokens in .* tok/s" "$WORK/err.txt"
grep -q "^experts: 64.0 computed per token (8 MoE layers x top-8)" "$WORK/err.txt"
rm -f "$MODEL"
echo "run_big: PASSED"
