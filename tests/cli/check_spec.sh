#!/usr/bin/env bash
# spec: `run` with a drafter (runtime/speculative.h) on the demo model. At --temp 0 the text
# of --lookup, --draft-model (the demo model drafting for itself), --draft-scripted and the
# llama.cpp spellings (-md, --draft), and an early-exit draft of the model's first 3 blocks
# (`moetier slice`) equals plain decoding's, and stderr reports the drafter's
# steps, drafted and accepted tokens (the self-draft accepts everything); sampling with a
# drafter gives plain sampling's text seed for seed, another seed differs; bench tg with a drafter reports its counts
# (JSON, markdown); bad combinations are one-line errors, exit 1 (bench: with --batch):
# two drafters, a probability outside [0, 1], the scripted mode above temperature 0, a draft
# of another vocabulary, a Gated DeltaNet draft, --record-routing with a drafter; a Gated
# DeltaNet target (qwen35moe) gives its plain text with the scripted drafter and with --mtp
# (its NextN block); --mtp on a model without one is an error.
# usage: check_spec.sh MOETIER MODEL VOCAB_DIR WORK_DIR
set -uo pipefail
MOETIER=$1
MODEL=$2
VOCAB=$3
WORK=$4
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
PROMPT="And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness. And God said"
RUN=("$MOETIER" run -m "$MODEL" -t 2 -p "$PROMPT" -n 48)

"${RUN[@]}" --temp 0 >"$WORK/plain.out" 2>"$WORK/plain.err" || fail "plain: $(tail -1 "$WORK/plain.err")"
check_same() {  # name args...
  local name=$1
  shift
  "${RUN[@]}" --temp 0 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || { fail "$name: $(tail -1 "$WORK/$name.err")"; return; }
  cmp -s "$WORK/plain.out" "$WORK/$name.out" || fail "$name: the text differs from plain decoding's"
  grep -Eq "^speculative: .*: [0-9]+ steps, [0-9]+ drafted, [0-9]+ accepted \([0-9.]+%\), [0-9.]+ tokens per step(, [0-9]+ plain steps while drafting did not pay)?$" "$WORK/$name.err" \
    || fail "$name: no speculative line: $(cat "$WORK/$name.err")"
  grep -q "generation: 48 tokens" "$WORK/$name.err" || fail "$name: not 48 tokens: $(grep generation "$WORK/$name.err")"
}
check_same lookup --lookup 3
check_same lookup_fixed --lookup 2 --draft-max 5 --draft-fixed
check_same scripted --draft-scripted 0.7 --draft-max 4
check_same self --draft-model "$MODEL"
check_same self_llama -md "$MODEL" --draft 3
# An early-exit draft: the model's first 3 blocks (moetier slice), its own head.
"$MOETIER" slice -m "$MODEL" --layers 3 -o "$WORK/first3.gguf" 2>"$WORK/slice.err" || fail "slice: $(cat "$WORK/slice.err")"
"$MOETIER" inspect "$WORK/first3.gguf" >"$WORK/first3.txt" 2>&1 || fail "inspect the slice"
grep -Eq "block_count +u32 +3$" "$WORK/first3.txt" || fail "slice: block_count is not 3"
check_same sliced --draft-model "$WORK/first3.gguf" --draft-max 4
grep -q "accepted (100.0%)" "$WORK/self.err" || fail "the model drafting for itself should accept everything: $(grep speculative "$WORK/self.err")"
grep -q "prompt lookup" "$WORK/lookup.err" || fail "lookup's line names the drafter"
grep -q "LABELLED acceptance mode" "$WORK/scripted.err" || fail "the scripted mode must say it is labelled"

# Sampling with a drafter gives plain sampling's text seed for seed (each row's token is the
# plain draw; the throttle's timing-dependent choices cannot change it); another seed differs.
"${RUN[@]}" --temp 1 --seed 7 >"$WORK/s0.out" 2>/dev/null || fail "sampled plain"
"${RUN[@]}" --temp 1 --seed 7 --lookup 3 >"$WORK/s1.out" 2>/dev/null || fail "sampled 1"
"${RUN[@]}" --temp 1 --seed 7 --draft-model "$MODEL" >"$WORK/s2.out" 2>/dev/null || fail "sampled 2"
"${RUN[@]}" --temp 1 --seed 8 --lookup 3 >"$WORK/s3.out" 2>/dev/null || fail "sampled 3"
cmp -s "$WORK/s0.out" "$WORK/s1.out" || fail "seed 7 with --lookup gave other text than plain sampling"
cmp -s "$WORK/s0.out" "$WORK/s2.out" || fail "seed 7 with --draft-model gave other text than plain sampling"
cmp -s "$WORK/s1.out" "$WORK/s3.out" && fail "another seed gave the same text"

# bench: tg with a drafter decodes greedily from a prompt; the JSON has the drafter's counts.
"$MOETIER" bench -m "$MODEL" -t 2 -p 0 -n 24 -r 2 --draft-scripted 1 --draft-max 3 --draft-fixed -o json >"$WORK/bench.json" 2>"$WORK/bench.err" \
  || fail "bench: $(tail -1 "$WORK/bench.err")"
"${PYTHON3:-python3}" - "$WORK/bench.json" <<'PY' || fail "bench JSON"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1 and rows[0]["test"] == "tg24", rows
r = rows[0]
assert r["draft"].startswith("LABELLED acceptance mode"), r["draft"]
# p = 1, 3 guesses a step: every guess kept, 4 tokens a step; 24 tokens a repetition, 2 timed repetitions.
assert r["acceptance"] == 1.0 and r["draft_accepted"] == r["draft_tokens"], r
assert r["draft_steps"] == 12 and abs(r["tokens_per_step"] - 4.0) < 1e-9, r
# every step evaluated the pending token and 3 guesses, each timed
assert list(r["steps_by_rows"]) == ["4"] and r["steps_by_rows"]["4"]["steps"] == 12, r["steps_by_rows"]
assert r["steps_by_rows"]["4"]["mean_ms"] > 0 and r["draft_held_picks"] == 0, r
assert len(r["samples_ts"]) == 2 and all(v > 0 for v in r["samples_ts"]), r
# the same text without drafts, a run after each drafted one: the baseline beside it
assert len(r["undrafted_samples_ts"]) == 2 and all(v > 0 for v in r["undrafted_samples_ts"]), r
PY
"$MOETIER" bench -m "$MODEL" -t 2 -p 0 -n 16 -r 1 --lookup 2 >"$WORK/bench.md" 2>&1 || fail "bench md"
grep -q "^tg16 speculative: prompt lookup" "$WORK/bench.md" || fail "bench markdown: no speculative line: $(cat "$WORK/bench.md")"
grep -q "^tg16 the same text without drafts .* drafted / undrafted [0-9.]*x$" "$WORK/bench.md" \
  || fail "bench markdown: no undrafted baseline line: $(cat "$WORK/bench.md")"

# Errors: one line, exit 1.
"$MOETIER" synth --arch qwen3moe --vocab "$VOCAB/ggml-vocab-qwen2.gguf" --embd 64 --heads 2 --heads-kv 1 --head-dim 32 \
  --expert-ff 64 -o "$WORK/other_vocab.gguf" >/dev/null 2>&1 || fail "synth other vocab"
"$MOETIER" synth --arch qwen35moe -o "$WORK/hybrid.gguf" >/dev/null 2>&1 || fail "synth hybrid"
expect_error() {  # pattern args...
  local pattern=$1
  shift
  "$@" >/dev/null 2>"$WORK/err.txt"
  local rc=$?
  [ "$rc" -eq 1 ] || fail "$* exited $rc, wanted 1"
  grep -q -- "$pattern" "$WORK/err.txt" || fail "$*: wanted '$pattern', got: $(cat "$WORK/err.txt")"
  [ "$(wc -l <"$WORK/err.txt")" -eq 1 ] || fail "$*: the error should be one line: $(cat "$WORK/err.txt")"
}
expect_error "give one" "$MOETIER" bench -m "$MODEL" -t 2 -p 0 -n 8 --batch 2 --lookup 2
expect_error "--layers must be in \[1, 6)" "$MOETIER" slice -m "$MODEL" --layers 6 -o "$WORK/x.gguf"
expect_error "--layers must be in \[1, 6)" "$MOETIER" slice -m "$MODEL" --layers 0 -o "$WORK/x.gguf"
expect_error "give one drafter" "${RUN[@]}" --temp 0 --lookup 3 --draft-scripted 0.5
expect_error "probability in \[0, 1\]" "${RUN[@]}" --temp 0 --draft-scripted 1.5
expect_error "give --temp 0" "${RUN[@]}" --temp 0.8 --draft-scripted 0.5
expect_error "draft-max must be in" "${RUN[@]}" --temp 0 --lookup 3 --draft-max 0
expect_error "same vocabulary" "${RUN[@]}" --temp 0 --draft-model "$WORK/other_vocab.gguf"
expect_error "Gated DeltaNet draft" "${RUN[@]}" --temp 0 --draft-model "$WORK/hybrid.gguf"
# A Gated DeltaNet target: its verification runs are cut short through the recurrent states.
HYB=("$MOETIER" run -m "$WORK/hybrid.gguf" -t 2 -p "hello hello hello world hello hello" -n 32 --temp 0)
"${HYB[@]}" >"$WORK/hyb_plain.out" 2>/dev/null || fail "hybrid plain"
"${HYB[@]}" --draft-scripted 0.6 >"$WORK/hyb_spec.out" 2>"$WORK/hyb_spec.err" || fail "hybrid scripted: $(tail -1 "$WORK/hyb_spec.err")"
cmp -s "$WORK/hyb_plain.out" "$WORK/hyb_spec.out" || fail "hybrid: the scripted run's text differs from plain decoding's"
grep -q "^speculative: " "$WORK/hyb_spec.err" || fail "hybrid: no speculative line"
expect_error "not with a drafter" "${RUN[@]}" --temp 0 --lookup 3 --record-routing "$WORK/r.jsonl"
# --mtp: the hybrid's own NextN block drafts (its text is plain decoding's); the demo model
# (qwen3moe) has none: one line naming it.
"${HYB[@]}" --mtp --draft-max 3 >"$WORK/hyb_mtp.out" 2>"$WORK/hyb_mtp.err" || fail "hybrid --mtp: $(tail -1 "$WORK/hyb_mtp.err")"
cmp -s "$WORK/hyb_plain.out" "$WORK/hyb_mtp.out" || fail "hybrid --mtp: the text differs from plain decoding's"
grep -q "^speculative: NextN (MTP) block: " "$WORK/hyb_mtp.err" || fail "--mtp: no speculative line: $(cat "$WORK/hyb_mtp.err")"
expect_error "no NextN (MTP) block" "${RUN[@]}" --temp 0 --mtp
expect_error "give one drafter" "${RUN[@]}" --temp 0 --mtp --lookup 2
"$MOETIER" bench -m "$WORK/hybrid.gguf" -t 2 -p 0 -n 16 -r 1 --mtp >"$WORK/bench_mtp.md" 2>&1 || fail "bench --mtp"
grep -q "^tg16 speculative: NextN (MTP) block" "$WORK/bench_mtp.md" || fail "bench --mtp: no speculative line: $(cat "$WORK/bench_mtp.md")"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "ok: run with --lookup, --draft-model, --draft-scripted, --mtp: the plain text at --temp 0 and plain sampling's text seed for seed; errors"
