#!/usr/bin/env bash
# cli: the command line's promises, end to end through the moetier binary.
#   * synth --sparse + inspect --json give the seeds' exact bank bytes (laguna-s, ornith-35b)
#   * inspect's documented JSON keys are present with the right types
#   * bad input gets a clear one-line error and exit code 1 (bad usage: 2), never a crash
# usage: check_cli.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

expect_bytes() {  # preset compact padded
  local f="$WORK/$1.gguf"
  "$MOETIER" synth --preset "$1" --sparse -o "$f" >/dev/null || { fail "synth $1"; return; }
  "$MOETIER" inspect --json "$f" >"$f.json" || { fail "inspect $1"; return; }
  "$PY" - "$f.json" "$2" "$3" "$1" <<'PY' || fail "bank bytes of $1"
import json, sys
j = json.load(open(sys.argv[1]))
compact, padded, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
got = (j["expert_bank_bytes_compact"], j["expert_bank_bytes_padded"])
print(f"{name}: compact {got[0]} ({got[0] / 2**30} GiB), padded {got[1]} ({got[1] / 2**30} GiB)")
assert got == (compact, padded), f"expected {(compact, padded)}"
assert j["experts"]["expert_bank_bytes_compact"] == compact
for key, typ in [("file", str), ("file_bytes", int), ("gguf_version", int), ("alignment", int),
                 ("data_offset", int), ("architecture", str), ("n_tensors", int), ("n_params", int),
                 ("tensor_bytes", int), ("tensor_bytes_by_type", dict), ("metadata", dict), ("tensors", list),
                 ("experts", dict)]:
    assert isinstance(j[key], typ), key
t = j["tensors"][0]
assert set(t) == {"name", "type", "ne", "offset", "bytes"}, t
e = j["experts"]
for key in ("n_expert", "n_moe_layers", "layers", "groups", "max_gate_bytes", "max_up_bytes", "max_down_bytes"):
    assert key in e, key
l = e["layers"][0]
assert set(l) >= {"layer", "gate", "up", "down", "bytes_per_expert", "bank_bytes"}, l
assert set(l["down"]) >= {"type", "bytes_per_expert"}, l["down"]
assert sum(g["bytes_per_expert"] * len(g["layers"]) for g in e["groups"]) * e["n_expert"] == compact
tokens = j["metadata"]["tokenizer.ggml.tokens"]
assert tokens["array_type"] == "string" and tokens["count"] > 0 and len(tokens["head"]) <= 8, tokens
PY
}

expect_bytes laguna-s 91653931008 227096395776
expect_bytes ornith-35b 19503513600 20887633920

# Errors: exit code and a message naming the problem.
expect_error() {  # code substring -- command...
  local code=$1 sub=$2
  shift 3
  local out
  out=$("$@" 2>&1 >/dev/null)
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code ($out)"
  grep -qE -- "$sub" <<<"$out" || fail "'$*' said '$out', expected it to mention '$sub'"
}
printf 'GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00' >"$WORK/huge.gguf"
head -c 20000 "$WORK/ornith-35b.gguf" >"$WORK/truncated.gguf"
printf 'not a gguf at all' >"$WORK/text.gguf"
expect_error 1 "cannot open" -- "$MOETIER" inspect "$WORK/missing.gguf"
expect_error 1 "tensor_count" -- "$MOETIER" inspect "$WORK/huge.gguf"
expect_error 1 "file ends|exceeds|cannot fit" -- "$MOETIER" inspect "$WORK/truncated.gguf"
expect_error 1 "magic" -- "$MOETIER" inspect "$WORK/text.gguf"
expect_error 1 "unknown preset" -- "$MOETIER" synth --preset gpt-5 -o "$WORK/x.gguf"
expect_error 1 "unknown architecture" -- "$MOETIER" synth --arch bert -o "$WORK/x.gguf"
expect_error 1 "unknown quant type" -- "$MOETIER" synth --quant q9_k -o "$WORK/x.gguf"
expect_error 1 "multiple of head_count_kv" -- "$MOETIER" synth --heads 5 -o "$WORK/x.gguf"
expect_error 1 "cannot open" -- "$MOETIER" synth --vocab "$WORK/missing.gguf" -o "$WORK/x.gguf"
expect_error 1 "cannot create" -- "$MOETIER" synth -o "$WORK/no/such/dir/x.gguf"
expect_error 2 "required" -- "$MOETIER" synth
expect_error 2 "" -- "$MOETIER" frobnicate
# tune without a GPU (CI): one line naming why; a bad policy is refused first.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_error 1 "no CUDA device|no CUDA backend" -- "$MOETIER" tune
fi
expect_error 1 "dense-mmq must be" -- "$MOETIER" tune --dense-mmq sometimes

# The text output names the geometry groups.
"$MOETIER" inspect "$WORK/laguna-s.gguf" | grep -q "bf16/bf16/bf16.*18.00 MiB per expert, 8 layers" ||
  fail "inspect text output lacks the BF16 geometry group"

if [ "$fails" -gt 0 ]; then
  echo "cli: $fails failure(s)"
  exit 1
fi
echo "cli: PASSED"
