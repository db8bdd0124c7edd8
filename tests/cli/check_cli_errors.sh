#!/usr/bin/env bash
# cli_errors: the command line as a new user (and a llama.cpp user) types it, on the demo
# model. Every error is exactly one line on stderr naming the problem, exit 1 or 2, never
# an abort; the warnings (-c above the training context, -t above the hardware threads,
# -fa off) say so; llama.cpp's flags that mean something here do it (-s = --seed, -f reads
# the prompt, -e escapes, --n-cpu-moe places experts, bench lists and -o csv/jsonl), the
# others are refused with a pointer; plan's old --kv/--ctx equal --kv-type/--ctx-size.
# usage: check_cli_errors.sh MOETIER MODEL WORK_DIR
set -uo pipefail
MOETIER=$1
MODEL=$2
WORK=$3
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
RUN=("$MOETIER" run -m "$MODEL" --temp 0)  # -n in each call (a flag given twice is an error)

expect_error() {  # code regex -- command...: exit code, one line on stderr matching regex
  local code=$1 re=$2
  shift 3
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code ($err)"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [ -n "$err" ] || fail "'$*' printed not one line: $err"
  grep -qE -- "$re" <<<"$err" || fail "'$*' said '$err', expected '$re'"
}
expect_warning() {  # regex -- command...: exit 0, a warning matching regex on stderr
  local re=$1
  shift 2
  local err
  err=$("$@" 2>&1 >/dev/null) || fail "'$*' failed: $err"
  grep -qE -- "moetier warning: .*$re" <<<"$err" || fail "'$*' gave no warning '$re': $err"
}
same_stdout() {  # label -- command A -- command B (each word list separated by --)
  local label=$1
  shift 2
  local a=() b=()
  while [ "$1" != "--" ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local oa ob
  oa=$("${a[@]}" 2>/dev/null) || fail "$label: '${a[*]}' failed"
  ob=$("${b[@]}" 2>/dev/null) || fail "$label: '${b[*]}' failed"
  [ -n "$oa" ] && [ "$oa" == "$ob" ] || fail "$label: '$oa' != '$ob'"
}

# --- errors: one line, exit 1 (the command failed) or 2 (bad usage) ---
HW=$(nproc)
expect_error 1 "-c 99999999: the KV cache would take .* more than the .* of memory available" -- "${RUN[@]}" -n 4 -c 99999999
expect_error 1 "-t 1000: this machine has $HW hardware threads" -- "${RUN[@]}" -n 4 -t 1000
expect_error 1 "-t -1: must be >= 0" -- "${RUN[@]}" -n 4 -t -1
expect_error 2 "Could not convert: --ctx-size = -1" -- "${RUN[@]}" -n 4 -c -1
expect_error 2 "--seed: 'abc' is not -1 \(random\) or a number" -- "${RUN[@]}" -n 4 --seed abc
expect_error 2 "^moetier: unknown command 'rn'; did you mean 'run'\?$" -- "$MOETIER" rn
expect_error 2 "unknown command 'bencj'; did you mean 'bench'\?" -- "$MOETIER" bencj -m "$MODEL"
expect_error 2 "unknown command 'frobnicate' \(commands: .*run" -- "$MOETIER" frobnicate
expect_error 2 "a command is required" -- "$MOETIER"
expect_error 2 "unknown flag '-xyz' \(moetier's long flags take two dashes" -- "${RUN[@]}" -n 4 -xyz
expect_error 2 "not expected: --bogus" -- "${RUN[@]}" -n 4 --bogus
expect_error 2 "-b \(llama.cpp\): moetier feeds the whole prompt as one batch" -- "${RUN[@]}" -n 4 -b 512
expect_error 2 "--no-mmap \(llama.cpp\): .*memory map.*--mlock" -- "${RUN[@]}" -n 4 --no-mmap
expect_error 2 "-cnv \(llama.cpp\): .*moetier serve" -- "${RUN[@]}" -n 4 -cnv
expect_error 2 "-ot \(llama.cpp\): .*--n-cpu-moe N" -- "${RUN[@]}" -n 4 -ot "exps=CPU"
expect_error 2 "-hf \(llama.cpp\): moetier downloads nothing" -- "${RUN[@]}" -n 4 -hf org/model
expect_error 2 "-ctk q8_0 and -ctv f16: K and V share one cache type" -- "${RUN[@]}" -n 4 -ctk q8_0 -ctv f16
expect_error 1 "-n must be >= 0 \(or -1: until the context is full\)" -- "${RUN[@]}" -n -2
expect_error 1 "-f: cannot read" -- "${RUN[@]}" -n 4 -f "$WORK/missing.txt"
printf 'In the beginning' >"$WORK/prompt.txt"
expect_error 1 "give the prompt with -p or -f, not both" -- "${RUN[@]}" -n 4 -p x -f "$WORK/prompt.txt"
expect_error 1 "give --n-cpu-moe N or --expert-cache SIZE, not both" -- "${RUN[@]}" -n 4 --n-cpu-moe 2 --expert-cache 50%
expect_error 1 "--pin-background pins the host banks for the GPU's copies: it needs --device cuda" -- "${RUN[@]}" -n 4 --expert-cache 50% --pin-background
expect_error 1 "--n-cpu-moe -1: must be >= 0" -- "${RUN[@]}" -n 4 --n-cpu-moe -1
expect_error 2 "--output: .*not in" -- "$MOETIER" bench -m "$MODEL" -o xml
expect_error 1 "-p and -n must be >= 0" -- "$MOETIER" bench -m "$MODEL" -p 16,-5
expect_error 1 "--kv-type: unknown KV cache type 'q4_0'" -- "$MOETIER" plan -m "$MODEL" --kv-type q4_0
expect_error 1 "-t 1000: this machine has" -- "$MOETIER" bench -m "$MODEL" -t 1000 -p 16 -n 0 -r 1

# --- warnings: the run goes on ---
expect_warning "-c 2048 is above the model's training context \(1024\)" -- "${RUN[@]}" -n 4 -c 2048
expect_warning "-t $((HW + 1)) is more than the $HW hardware threads" -- "${RUN[@]}" -n 1 -t $((HW + 1))
expect_warning "-fa off: attention is always one fused pass" -- "${RUN[@]}" -n 1 -fa off
err=$("${RUN[@]}" -n 2 -q 2>&1 >/dev/null) || fail "run -q failed"
[ -z "$err" ] || fail "run -q printed on stderr: $err"
err=$("${RUN[@]}" -n 2 --verbose --n-cpu-moe 3 2>&1 >/dev/null)
grep -q "moetier debug: --n-cpu-moe 3: .* of experts on the device" <<<"$err" || fail "--verbose: no debug line: $err"

# --- llama.cpp flags that mean something here ---
same_stdout "-s 5 = --seed 5" -- "$MOETIER" run -m "$MODEL" -n 8 -s 5 -- "$MOETIER" run -m "$MODEL" -n 8 --seed 5
same_stdout "-f FILE = -p TEXT" -- "${RUN[@]}" -n 4 -f "$WORK/prompt.txt" -- "${RUN[@]}" -n 4 -p "In the beginning"
same_stdout "-fa, -no-cnv, --jinja: no-ops" -- "${RUN[@]}" -n 4 -fa -no-cnv --jinja -- "${RUN[@]}" -n 4
same_stdout "-ctk q8_0 = --kv-type q8_0" -- "${RUN[@]}" -n 4 -ctk q8_0 -ctv q8_0 -- "${RUN[@]}" -n 4 --kv-type q8_0
same_stdout "-ngl 0 = the CPU" -- "${RUN[@]}" -n 4 -ngl 0 -- "${RUN[@]}" -n 4
out=$("${RUN[@]}" -n 1 -e -p 'In\tthe\nbeginning' 2>/dev/null)
[ "$(head -c 6 <<<"$out")" == $'In\tthe' ] || fail "-e: the escapes were not processed: '$out'"
seed=$("$MOETIER" run -m "$MODEL" -n 2 --seed -1 2>&1 >/dev/null | sed -n 's/.*seed \([0-9]*\),.*/\1/p')
[ -n "$seed" ] && [ "$seed" != 18446744073709551615 ] || fail "--seed -1: seed '$seed' is not a random one"
err=$("${RUN[@]}" -n 4 --n-cpu-moe 3 --stats 2>&1 >/dev/null) || fail "--n-cpu-moe 3 failed: $err"
grep -q "static-hot, cache .*0 evictions" <<<"$err" || fail "--n-cpu-moe 3: not a fixed placement: $err"
err=$("${RUN[@]}" -n -1 -c 16 2>&1 >/dev/null) || fail "-n -1 failed: $err"
grep -qE "^generation: ([1-9]|1[0-3]) tokens" <<<"$err" || fail "-n -1 -c 16: not until the context is full: $err"
"${RUN[@]}" -n 4 --mlock >/dev/null 2>"$WORK/mlock.err" || fail "--mlock failed: $(cat "$WORK/mlock.err")"

# bench: lists run every value (pp16, pp32, tg8: three rows), -o csv and jsonl parse.
"$MOETIER" bench -m "$MODEL" -p 16,32 -n 8 -r 1 -o csv >"$WORK/bench.csv" 2>/dev/null || fail "bench -o csv failed"
"$MOETIER" bench -m "$MODEL" -p 16 -n 4,8 -r 1 -o jsonl >"$WORK/bench.jsonl" 2>/dev/null || fail "bench -o jsonl failed"
"$PY" - "$WORK/bench.csv" "$WORK/bench.jsonl" <<'PY' || fail "bench csv/jsonl"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["test"] for r in rows] == ["pp16", "pp32", "tg8"], rows
for r in rows:
    assert float(r["avg_ts"]) > 0 and int(r["n_threads"]) > 0, r
    assert len(r["samples_ns"].split()) == 1, r
lines = [json.loads(l) for l in open(sys.argv[2])]
assert [l["test"] for l in lines] == ["pp16", "tg4", "tg8"], lines
PY

# Progress (drawn on a terminal only: script(1) gives one) counts runs, not bytes.
if command -v script >/dev/null 2>&1; then
  tty_out=$(script -qc "'$MOETIER' bench -m '$MODEL' -p 16 -n 0 -r 2" /dev/null | tr '\r' '\n')
  grep -q "bench pp16 100% (3 / 3 runs)" <<<"$tty_out" || fail "bench progress not in runs: $tty_out"
  ! grep -q " B / " <<<"$tty_out" || fail "bench progress in bytes: $tty_out"
fi

# plan: --kv-type / --ctx-size and the old --kv / --ctx say the same.
same_stdout "plan --kv-type --ctx-size = --kv --ctx" -- "$MOETIER" plan -m "$MODEL" --kv-type q8_0 --ctx-size 512 --json \
  -- "$MOETIER" plan -m "$MODEL" --kv q8_0 --ctx 512 --json

if [ "$fails" -gt 0 ]; then
  echo "cli_errors: $fails failure(s)"
  exit 1
fi
echo "cli_errors: PASSED"
