#!/usr/bin/env bash
# bench --batch: batched decode tests (B sequences' tokens per Backend::eval) on a tiny
# olmoe model: one JSON row per -p x -n x B in that order, their keys and arithmetic
# (avg_ts = B * n_gen / time, step_ms = avg_ns / n_gen / 1e6, no gb_per_s beyond B = 1),
# the markdown's step-milliseconds line, and the bad values' one-line errors.
# usage: check_bench_batch.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$WORK/olmoe.gguf
"$MOETIER" synth --arch olmoe --quant q4_k_m -o "$M" >/dev/null || fail "synth"
"$MOETIER" bench -m "$M" -p 0,6 -n 3 -t 2 -r 2 --batch 1,3 -o json >"$WORK/batch.json" || fail "bench --batch -o json"
"$PY" - "$WORK/batch.json" <<'PY' || fail "bench --batch JSON"
import json, sys
rows = json.load(open(sys.argv[1]))
want = [(0, 1), (0, 3), (6, 1), (6, 3)]
assert [(r["n_prompt"], r["n_batch"]) for r in rows] == want, [(r["n_prompt"], r["n_batch"]) for r in rows]
names = [r["test"] for r in rows]
assert names == ["tg3 x1", "tg3 x3", "tg3 x1 @ pp6", "tg3 x3 @ pp6"], names
for r in rows:
    assert r["n_gen"] == 3 and len(r["samples_ns"]) == 2, r
    tokens = r["n_batch"] * r["n_gen"]
    for ns, ts in zip(r["samples_ns"], r["samples_ts"]):
        assert abs(ts - 1e9 * tokens / ns) <= 1e-6 * ts, (ns, ts)
    assert abs(r["step_ms"] - r["avg_ns"] / r["n_gen"] / 1e6) <= 1e-3 * r["step_ms"], r
    assert ("gb_per_s" in r) == (r["n_batch"] == 1), r
print("bench --batch:", ", ".join(f"{r['test']} {r['avg_ts']:.0f} t/s {r['step_ms']:.2f} ms" for r in rows))
PY
out=$("$MOETIER" bench -m "$M" -p 0 -n 2 -t 2 -r 2 --batch 2 2>/dev/null)
echo "$out" | grep -q "^tg2 x2 t/s, every repetition: .*; step ms: [0-9.]*, [0-9.]*$" || fail "markdown step ms line: $out"
for bad in "--batch 0" "--batch 2 -n 0" "--batch 300"; do
  err=$("$MOETIER" bench -m "$M" $bad 2>&1 >/dev/null)
  rc=$?
  [ $rc -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "batch" || fail "bench $bad: rc $rc, $err"
done
[ $fails -eq 0 ] && echo "PASS bench --batch" || { echo "$fails failures"; exit 1; }
