#!/usr/bin/env bash
# run: `moetier run` end to end.
#   * the embedded demo model, greedy: the streamed text equals the transformers greedy
#     continuation of the kjv-moe reference prompts (tokenize -> generate with the KV
#     cache -> streaming detokenize), and timings plus the expert usage are printed
#   * the first 64 tokens' rate, the rest's and the time to the first token agree with the
#     run's own timings
#   * bad models (truncated, unsupported architecture, unsupported tensor type) exit 1
#     with a one-line reason
# usage: check_run.sh MOETIER KJV_DIR WORK_DIR
set -uo pipefail
MOETIER=$1
KJV=$2
WORK=$3
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Greedy continuations of the reference prompts (48 tokens each).
for i in 0 1 2; do
  prompt=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['prompts'][$i]['text'], end='')" "$KJV/refs/refs.json")
  "$MOETIER" run -p "$prompt" -n 48 --temp 0 -t 2 >"$WORK/run$i.out" 2>"$WORK/run$i.err" || fail "run $i exited $?: $(tail -1 "$WORK/run$i.err")"
  "$PY" - "$KJV/refs/refs.json" "$i" "$WORK/run$i.out" <<'PY' || fail "prompt $i: greedy text differs from the reference"
import json, sys
p = json.load(open(sys.argv[1]))["prompts"][int(sys.argv[2])]
got = open(sys.argv[3], encoding="utf-8").read()
want = p["text"] + p["greedy_text"] + "\n"
if got != want:
    print("got:  " + repr(got[:200]))
    print("want: " + repr(want[:200]))
    sys.exit(1)
PY
  grep -q "^prompt: [0-9]* tokens in .* tok/s" "$WORK/run$i.err" || fail "run $i printed no prompt timing"
  grep -q "^generation: 48 tokens in .* tok/s" "$WORK/run$i.err" || fail "run $i printed no generation timing"
  grep -q "^experts: 24.0 computed per token (6 MoE layers x top-4)" "$WORK/run$i.err" || fail "run $i printed no expert usage"
done

# The first 64 generated tokens apart from the rest, and the time to the first token: the
# two parts' rates give back the whole generation time, and the first token comes after the
# load and the prompt.
"$MOETIER" run -p "And God said" -n 100 --temp 0 -t 2 >"$WORK/head.out" 2>"$WORK/head.err" || fail "run -n 100 exited $?"
"$PY" - "$WORK/head.err" <<'PY' || fail "the first-64 / first-token figures disagree with the run's timings"
import re, sys
t = open(sys.argv[1]).read()
gen = re.search(r"^generation: 100 tokens in ([0-9.]+) s \([0-9.]+ tok/s\); first token ([0-9.]+) s after the load began$", t, re.M)
head = re.search(r"^generation: the first 64 tokens ([0-9.]+) tok/s, the other 36 ([0-9.]+) tok/s \(first / other ([0-9.]+)\)$", t, re.M)
load = re.search(r"load ([0-9.]+) s,", t)
prompt = re.search(r"^prompt: \d+ tokens in ([0-9.]+) s", t, re.M)
if not (gen and head and load and prompt):
    print(t); sys.exit(1)
gen_s, first_tok = float(gen.group(1)), float(gen.group(2))
r64, rest, ratio = float(head.group(1)), float(head.group(2)), float(head.group(3))
whole = 64 / r64 + 36 / rest
if abs(whole - gen_s) > 0.02 * gen_s + 0.002:
    print(f"64/{r64} + 36/{rest} = {whole:.4f} s against {gen_s} s"); sys.exit(1)
if abs(ratio - r64 / rest) > 0.01 + 0.01 * ratio:
    print(f"ratio {ratio} against {r64 / rest:.3f}"); sys.exit(1)
if first_tok + 0.011 < float(load.group(1)) + float(prompt.group(1)):
    print(f"first token at {first_tok} s before load + prompt"); sys.exit(1)
PY

# --chat: the model's template (Qwen2's vocab carries a chatml one) wraps the prompt, and
# its special tokens are parsed as single tokens (spelled out, the prompt would be ~45).
"$MOETIER" synth --arch qwen3moe --vocab "$KJV/../../vocab/ggml-vocab-qwen2.gguf" -o "$WORK/chat.gguf" >/dev/null ||
  fail "synth chat model"
"$MOETIER" run -m "$WORK/chat.gguf" --chat --system "Be brief." -p "Hello" -n 2 --temp 0 -t 2 >/dev/null 2>"$WORK/chat.err" ||
  fail "run --chat: $(tail -1 "$WORK/chat.err")"
grep -q "^prompt: 17 tokens" "$WORK/chat.err" || fail "run --chat: $(grep '^prompt' "$WORK/chat.err"), expected 17 tokens"
# A model without a template falls back to ChatML, as serve does (runtime/chat_prompt.h):
# the demo model's "Hello" is 3 tokens plain and 34 wrapped.
nochat=$("$MOETIER" run --chat -p "Hello" -n 2 --temp 0 2>&1 >/dev/null) || fail "run --chat without a template: $nochat"
grep -q "^prompt: 34 tokens" <<<"$nochat" || fail "run --chat without a template: $(grep '^prompt' <<<"$nochat"), expected 34 tokens"

# Bad models: one line on stderr, exit code 1.
"$MOETIER" synth --preset tiny -o "$WORK/tiny.gguf" >/dev/null || fail "synth tiny"

# --record-routing: one JSON line per (MoE layer, fed position), positions 0.. contiguous,
# top-k distinct experts with their weights each; its selections are what run reports.
"$MOETIER" run -m "$WORK/tiny.gguf" -p "hello world" -n 6 --temp 0 -t 2 --record-routing "$WORK/rec.jsonl" \
  >/dev/null 2>"$WORK/rec.err" || fail "run --record-routing exited $?: $(tail -1 "$WORK/rec.err")"
"$MOETIER" inspect --json "$WORK/tiny.gguf" >"$WORK/tiny.json" || fail "inspect tiny"
"$PY" - "$WORK/rec.jsonl" "$WORK/tiny.json" <<'PY' || fail "--record-routing record"
import json, sys
info = json.load(open(sys.argv[2]))
arch = info["architecture"]
k = info["metadata"][f"{arch}.expert_used_count"]
n_exp = info["metadata"][f"{arch}.expert_count"]
rows = [json.loads(line) for line in open(sys.argv[1])]
assert rows, "empty record"
layers = sorted({r["layer"] for r in rows})
positions = sorted({r["pos"] for r in rows})
assert positions == list(range(len(positions))), positions
assert len(rows) == len(layers) * len(positions), (len(rows), layers, positions)
for r in rows:
    assert len(r["experts"]) == k == len(r["weights"]) and len(set(r["experts"])) == k, r
    assert all(0 <= e < n_exp for e in r["experts"]) and all(w > 0 for w in r["weights"]), r
print(f"run --record-routing: {len(rows)} lines, {len(layers)} MoE layers x {len(positions)} positions, top-{k}")
PY
head -c 5000 "$WORK/tiny.gguf" >"$WORK/truncated.gguf"
"$PY" - "$WORK/tiny.gguf" "$WORK" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
arch = data.replace(b"qwen3moe", b"qwen9moe")       # every key and value: an unknown architecture
open(sys.argv[2] + "/arch.gguf", "wb").write(arch)
name = b"blk.1.ffn_up_exps.weight"
at = data.find(name) + len(name)                     # then n_dims (u32), 3 dims (u64), type (u32)
n_dims = struct.unpack_from("<I", data, at)[0]
struct.pack_into("<I", data, at + 4 + 8 * n_dims, 16)  # q8_0 -> iq2_xxs (smaller: still in bounds)
open(sys.argv[2] + "/iq2.gguf", "wb").write(data)
PY
expect_error() {  # file substring
  local out rc
  out=$("$MOETIER" run -m "$1" -n 4 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 1 ] || fail "run -m $1 exited $rc, expected 1"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "run -m $1 printed more than one line: $out"
  grep -q -- "$2" <<<"$out" || fail "run -m $1 said '$out', expected '$2'"
  echo "run -m $(basename "$1"): $out"
}
expect_error "$WORK/truncated.gguf" "malformed data"
expect_error "$WORK/arch.gguf" "architecture 'qwen9moe' is not supported"
expect_error "$WORK/iq2.gguf" "has type iq2_xxs, which moetier cannot compute yet"
expect_error "$WORK/missing.gguf" "cannot open"

if [ "$fails" -gt 0 ]; then
  echo "run: $fails failure(s)"
  exit 1
fi
echo "run: PASSED"
