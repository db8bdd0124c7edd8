#!/usr/bin/env bash
# analyze-routing: seed 003's granule trade curve on a routing record of a synthetic
# model shaped like its granite-3.0-1b-a400m measurement: qwen3moe, 24 layers, 32
# experts top-8, router skew 1.5, F16 experts with n_embd 256 and expert width 512, so
# one expert (gate + up + down) is 3 x 256 x 512 x 2 B = 786432 B = 0.75 MiB exactly.
#   * the curve has E = 1, 2 (the two that fit a 2 MiB granule), 4, 8, 16, 32, both
#     packings each; waste 2.67x / 1.33x / 1.33x / 1.00x...; waste >= 1, selectivity in
#     (0, 1], hotness-sorted resident <= arbitrary
#   * every row equals a Python recomputation from the definitions in experts/granule.h
#   * the reported minimum is the least resident row; -m MODEL (expert bytes from the
#     geometry) and --expert-bytes 0.75MiB give the same curve as --expert-bytes 786432
#   * --routing trace:FILE is --trace FILE; --routing synth:... (issue 28's generator) on the
#     model's geometry: the locality it reports matches the spec's reuse and within
#   * bad input is one line and exit 1
# The 586 MiB model is deleted at the end; the record and the outputs stay.
# usage: check_analyze_routing.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$WORK/granite-like.gguf
T=$WORK/routing.jsonl
"$MOETIER" synth --arch qwen3moe --quant f16 --layers 24 --embd 256 --heads 4 --heads-kv 2 --head-dim 64 \
  --experts 32 --experts-used 8 --expert-ff 512 --router-skew 1.5 --seed 3 --fast -o "$M" >/dev/null || fail "synth"
"$MOETIER" inspect --json "$M" >"$WORK/inspect.json" || fail "inspect"
"$PY" - "$WORK/inspect.json" <<'PY' || fail "expert bytes"
import json, sys
info = json.load(open(sys.argv[1]))
per_layer = {}
for t in info["tensors"]:
    if "_exps" in t["name"]:
        layer = int(t["name"].split(".")[1])
        per_layer[layer] = per_layer.get(layer, 0) + t["bytes"] // t["ne"][2]
assert sorted(per_layer) == list(range(24)), per_layer
assert set(per_layer.values()) == {786432}, per_layer
PY
"$MOETIER" run -m "$M" -p "The granule trade curve" -n 64 -t 2 --seed 1 --record-routing "$T" >/dev/null 2>"$WORK/run.err" \
  || fail "run --record-routing: $(cat "$WORK/run.err")"

A=$WORK/curve.json
"$MOETIER" analyze-routing --trace "$T" --granule 2MiB --expert-bytes 786432 --json >"$A" || fail "analyze-routing --json"
"$MOETIER" analyze-routing --trace "$T" --granule 2MiB --expert-bytes 0.75MiB --json >"$WORK/curve-mib.json" \
  || fail "analyze-routing --expert-bytes 0.75MiB"
"$MOETIER" analyze-routing --trace "$T" -m "$M" --json >"$WORK/curve-model.json" || fail "analyze-routing -m"
cmp -s "$A" "$WORK/curve-mib.json" || fail "--expert-bytes 0.75MiB differs from 786432"
cmp -s "$A" "$WORK/curve-model.json" || fail "-m (geometry) differs from --expert-bytes 786432"

"$PY" - "$A" "$T" <<'PY' || fail "curve JSON"
import json, math, sys
c = json.load(open(sys.argv[1]))
events = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
MiB, G, B, N = 1 << 20, 2 << 20, 786432, 32
assert (c["granule_bytes"], c["expert_bytes"], c["n_expert"], c["top_k"], c["n_layers"]) == (G, B, N, 8, 24), c
steps = sorted({e["step"] for e in events})
assert c["n_steps"] == len(steps) and c["layer_steps"] == 24 * len(steps), (c["n_steps"], len(steps))
assert c["n_tokens"] == len({(e["step"], e["pos"]) for e in events})
rows = c["rows"]
Es = sorted({r["experts_per_chunk"] for r in rows})
assert Es == [1, 2, 4, 8, 16, 32], Es
assert [(r["experts_per_chunk"], r["packing"]) for r in rows] == \
    [(E, p) for E in Es for p in ("arbitrary", "hotness-sorted")], rows

# Recompute every row from the definitions (experts/granule.h).
sel = {}  # (step, layer) -> set of experts
counts = {}
for e in events:
    sel.setdefault((e["step"], e["layer"]), set()).update(e["experts"])
    for x in e["experts"]:
        counts.setdefault(e["layer"], [0] * N)[x] += 1
def order(layer, packing):
    if packing == "arbitrary":
        return list(range(N))
    return sorted(range(N), key=lambda x: (-counts[layer][x], x))
def committed(m):
    return -(-m * B // G) * G
for r in rows:
    E, p = r["experts_per_chunk"], r["packing"]
    sizes = [min(E, N - f) for f in range(0, N, E)]
    waste = sum(committed(m) for m in sizes) / (N * B)
    res = tr = need = 0
    for (step, layer), s in sel.items():
        slot = {x: i for i, x in enumerate(order(layer, p))}
        chunks = {slot[x] // E for x in s}
        res += sum(committed(sizes[ch]) for ch in chunks)
        tr += sum(sizes[ch] * B for ch in chunks)
        need += len(s) * B
    n = len(sel)
    want = {"waste": waste, "resident_mib": res / n / MiB, "transfer_mib": tr / n / MiB,
            "needed_mib": need / n / MiB, "selectivity": need / tr, "overfetch": tr / need}
    for k, v in want.items():
        assert math.isclose(r[k], v, rel_tol=1e-12), (E, p, k, r[k], v)
    assert r["waste"] >= 1 and 0 < r["selectivity"] <= 1, r
expected_waste = {1: 8 / 3, 2: 4 / 3, 4: 4 / 3, 8: 1.0, 16: 1.0, 32: 1.0}
for r in rows:
    assert math.isclose(r["waste"], expected_waste[r["experts_per_chunk"]]), r
by = {(r["experts_per_chunk"], r["packing"]): r for r in rows}
for E in Es:
    assert by[(E, "hotness-sorted")]["resident_mib"] <= by[(E, "arbitrary")]["resident_mib"] + 1e-12, E
assert by[(1, "arbitrary")]["selectivity"] == 1.0
assert math.isclose(by[(32, "arbitrary")]["resident_mib"], 24.0), by[(32, "arbitrary")]

m = c["minimum"]
least = min(r["resident_mib"] for r in rows)
assert m["resident_mib"] == least, (m, least)
mr = rows[m["row"]]
assert (mr["experts_per_chunk"], mr["packing"], mr["resident_mib"]) == (m["experts_per_chunk"], m["packing"], least)
assert rows.index(next(r for r in rows if r["resident_mib"] == least)) == m["row"]
print(f"analyze-routing: {len(rows)} rows match the definitions; minimum E={m['experts_per_chunk']} "
      f"{m['packing']} {least:.2f} MiB per layer-step")
PY

# The table, for the log.
"$MOETIER" analyze-routing --trace "$T" --granule 2MiB --expert-bytes 786432 | tee "$WORK/curve.txt" || fail "table"
grep -q '^minimum resident: E=' "$WORK/curve.txt" || fail "the table names no minimum"
[ "$(grep -c 'hotness-sorted' "$WORK/curve.txt")" -ge 6 ] || fail "table rows"

expect_error() {  # substring -- command...
  local sub=$1
  shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 1 ] || fail "'$*' exited $rc, expected 1 ($out)"
  grep -qF -- "$sub" <<<"$out" || fail "'$*' said '$out', expected '$sub'"
  [ "$(wc -l <<<"$out")" -eq 1 ] || fail "'$*' printed more than one line: $out"
}
printf '%s\n' '{"layer": 0, "pos": 0, "step": 0, "experts": [1, 2]}' '{"layer": 0, "pos": 1, "step": 1, "experts": [1]}' \
  >"$WORK/bad.jsonl"
expect_error "cannot open routing trace" -- "$MOETIER" analyze-routing --trace "$WORK/missing.jsonl" --expert-bytes 786432
expect_error "bad.jsonl:2: 1 experts, but line 1 has 2" -- "$MOETIER" analyze-routing --trace "$WORK/bad.jsonl" --expert-bytes 1MiB
expect_error "exactly one of --expert-bytes and -m" -- "$MOETIER" analyze-routing --trace "$T"
expect_error "exactly one of --expert-bytes and -m" -- "$MOETIER" analyze-routing --trace "$T" -m "$M" --expert-bytes 1MiB
expect_error "--granule: '2XB' is not a size" -- "$MOETIER" analyze-routing --trace "$T" --granule 2XB --expert-bytes 1MiB
expect_error "--expert-bytes must be positive" -- "$MOETIER" analyze-routing --trace "$T" --expert-bytes 0
expect_error "experts per chunk 64 outside [1, 32]" -- "$MOETIER" analyze-routing --trace "$T" --expert-bytes 1MiB -E 1,64
expect_error "cannot open" -- "$MOETIER" analyze-routing --trace "$T" -m "$WORK/missing.gguf"

# --routing: the same record, and a generated stream on the model's geometry (32 experts top-8).
"$MOETIER" analyze-routing --routing "trace:$T" -m "$M" --json >"$WORK/curve-routing.json" || fail "--routing trace:"
cmp -s "$WORK/curve-model.json" "$WORK/curve-routing.json" || fail "--routing trace:FILE differs from --trace FILE"
# 32 experts top-8: a window of 2 tokens leaves room for picks outside it.
"$MOETIER" analyze-routing --routing "synth:reuse=0.4,window=2,within=0.55,skew=1,tokens=3000" -m "$M" --json \
  >"$WORK/curve-synth.json" || fail "--routing synth:"
"$PY" - "$WORK/curve-synth.json" <<'PY' || fail "--routing synth: locality"
import json, sys
c = json.load(open(sys.argv[1]))
loc = c["locality"]
assert (c["n_expert"], c["top_k"], c["n_layers"], c["n_steps"]) == (32, 8, 24, 3000), c
assert loc["window"] == 2 and abs(loc["reuse"] - 0.4) < 0.02 and abs(loc["within"] - 0.55) < 0.02, loc
print(f"  synth reuse 0.4 within 0.55 of 2 tokens: measured {loc['reuse']:.3f} / {loc['within']:.3f}, "
      f"median reuse distance {loc['median_reuse_distance']}")
PY
expect_error "synth: unknown key 'reus'" -- "$MOETIER" analyze-routing --routing synth:reus=0.4 -m "$M"
expect_error "the stream is for 128 experts top-8, the model has 32 top-8" -- \
  "$MOETIER" analyze-routing --routing synth:preset=qwen3-30b -m "$M"
expect_error "exactly one of --trace FILE and --routing" -- "$MOETIER" analyze-routing --expert-bytes 1MiB

rm -f "$M"
[ "$fails" -eq 0 ] && echo "analyze_routing: all checks passed"
exit $((fails > 0))
