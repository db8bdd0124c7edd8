#!/usr/bin/env bash
# bench: moetier bench's JSON keys and arithmetic on a tiny olmoe model, its errors, the
# tiering counters with --expert-cache,
# --no-interleave, and moetier_membw's JSON. Speed itself is measured by bench/compare_llamacpp.sh, not here.
#   * active_bytes_per_token = non-expert tensors + one embedding row + top-k experts per
#     MoE layer, recomputed here from `inspect --json`
#   * gb_per_s = active_bytes_per_token * avg_ts / 1e9; roofline_fraction with --membw
# usage: check_bench.sh MOETIER MOETIER_MEMBW WORK_DIR
set -uo pipefail
MOETIER=$1
MEMBW=$2
WORK=$3
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$WORK/olmoe.gguf
"$MOETIER" synth --arch olmoe --quant q4_k_m -o "$M" >/dev/null || fail "synth"
"$MOETIER" inspect --json "$M" >"$WORK/inspect.json" || fail "inspect"
"$MOETIER" bench -m "$M" -p 8 -n 4 -t 2 -r 2 --membw 10 -o json >"$WORK/bench.json" || fail "bench -o json"
"$PY" - "$WORK/bench.json" "$WORK/inspect.json" <<'PY' || fail "bench JSON"
import json, sys
b, info = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [t["test"] for t in b] == ["pp8", "tg4"], b
arch = info["architecture"]
k = info["metadata"][f"{arch}.expert_used_count"]
names = {t["name"] for t in info["tensors"]}
active = 0
for t in info["tensors"]:
    if "_exps" in t["name"]:
        active += t["bytes"] * k // t["ne"][2]
    elif t["name"] == "token_embd.weight":
        active += t["bytes"] // t["ne"][1] + (0 if "output.weight" in names else t["bytes"])
    else:
        active += t["bytes"]
for t in b:
    for key in ("n_prompt", "n_gen", "n_threads", "avg_ts", "stddev_ts", "samples_ts", "model_bytes",
                "active_bytes_per_token"):
        assert key in t, key
    assert t["n_threads"] == 2 and len(t["samples_ts"]) == 2 and t["avg_ts"] > 0, t
    assert t["model_bytes"] == info["file_bytes"], t
    # the first repetition apart, the rest as the steady state, the spread as stddev / mean
    s = t["samples_ts"]
    assert t["first_ts"] == s[0] and abs(t["steady_ts"] - sum(s[1:]) / len(s[1:])) <= 1e-9 * t["steady_ts"], t
    assert abs(t["cv"] - t["stddev_ts"] / t["avg_ts"]) <= 1e-12, t
    assert t["active_bytes_per_token"] == active, (t["active_bytes_per_token"], active)
pp, tg = b
assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (8, 0, 0, 4)
assert "gb_per_s" not in pp
assert abs(tg["gb_per_s"] - active * tg["avg_ts"] / 1e9) <= 1e-9 * tg["gb_per_s"], tg
assert abs(tg["roofline_fraction"] - tg["gb_per_s"] / 10) <= 1e-9, tg
print(f"bench: active {active} B/token, pp8 {pp['avg_ts']:.1f} t/s, tg4 {tg['avg_ts']:.1f} t/s")
PY
# --expert-cache: experts through the simulated device, each test its own cache; the
# tiering counters of its warm-up and timed runs in the JSON (experts/stats.h's schema).
"$MOETIER" bench -m "$M" -p 8 -n 4 -t 2 -r 2 --expert-cache 25% -o json >"$WORK/bench_tiered.json" ||
  fail "bench --expert-cache -o json"
"$PY" - "$WORK/bench_tiered.json" "$WORK/bench.json" <<'PY' || fail "bench tiering JSON"
import json, sys
b, plain = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert all("tiering" not in t for t in plain), "tiering without --expert-cache"
pp, tg = b
# tokens: the warm-up (pp: the prompt, tg: one token) plus two timed runs
assert pp["tiering"]["tokens"] == 8 + 2 * 8, pp["tiering"]["tokens"]
assert tg["tiering"]["tokens"] == 1 + 2 * 4, tg["tiering"]["tokens"]
for t in b:
    tier = t["tiering"]
    assert tier["mode"] == "hybrid" and tier["policy"] == "lru" and tier["budget_bytes"] > 0, tier
    tot = tier["total"]
    for key in ("hits", "misses", "admissions", "evictions", "bytes_copied", "device_experts", "cpu_experts"):
        assert tot[key] == sum(l[key] for l in tier["layers"]), key
    assert tot["hits"] + tot["misses"] > 0 and tot["device_experts"] + tot["cpu_experts"] == tot["hits"] + tot["misses"], tot
    # copy and compute time per layer: the layers of the counters, sums in the total
    tm = tier["timing"]
    assert [l["layer"] for l in tm["layers"]] == [l["layer"] for l in tier["layers"]], tm
    for key in ("copy_ms", "device_ms", "cpu_ms"):
        assert all(l[key] >= 0 for l in tm["layers"]), key
        assert abs(tm["total"][key] - sum(l[key] for l in tm["layers"])) <= 1e-6 * max(1.0, tm["total"][key]), key
    if tot["cpu_experts"] > 0:
        assert tm["total"]["cpu_ms"] > 0, tm["total"]
    if tot["bytes_copied"] > 0:
        assert tm["total"]["copy_ms"] > 0, tm["total"]
print(f"bench tiering: pp hit rate {pp['tiering']['total']['hit_rate']:.3f}, tg {tg['tiering']['total']['hit_rate']:.3f}")
PY
"$MOETIER" bench -m "$M" -p 4 -n 2 -r 1 --expert-cache 25% | grep -q "^tg2 tiering: experts (hybrid, lru" ||
  fail "bench markdown lacks the tiering line"
"$MOETIER" bench -m "$M" -p 4 -n 0 -r 1 --expert-cache lots >/dev/null 2>&1 && fail "bench accepted --expert-cache lots"

out=$("$MOETIER" bench -m "$M" -p 4 -n 2 -r 1)
grep -q '| tg2 |' <<<"$out" && grep -q '| pp4 |' <<<"$out" || fail "markdown table: $out"

expect_error() {  # code substring -- command...
  local code=$1 sub=$2
  shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code ($out)"
  grep -qE -- "$sub" <<<"$out" || fail "'$*' said '$out', expected '$sub'"
  [ "$code" -ne 1 ] || [ "$(wc -l <<<"$out")" -eq 1 ] || fail "'$*' printed more than one line: $out"
}
expect_error 1 "cannot open" -- "$MOETIER" bench -m "$WORK/missing.gguf"
expect_error 1 "-r must be" -- "$MOETIER" bench -m "$M" -r 0
expect_error 1 "both 0" -- "$MOETIER" bench -m "$M" -p 0 -n 0
expect_error 2 "" -- "$MOETIER" bench -m "$M" -o xml

# --no-interleave keeps the weights in the map: same logits up to summation order (and the
# rare activation rounding flip that follows from it), and bench still runs.
"$MOETIER" logits -m "$M" --ids 1,5,9,13,17,21,25,29 -t 2 -o "$WORK/x8.f32" || fail "logits"
"$MOETIER" logits -m "$M" --ids 1,5,9,13,17,21,25,29 -t 2 --no-interleave -o "$WORK/map.f32" || fail "logits --no-interleave"
"$PY" - "$WORK/x8.f32" "$WORK/map.f32" <<'PY' || fail "--no-interleave logits"
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
x, y = struct.unpack(f"<{len(a) // 4}f", a), struct.unpack(f"<{len(b) // 4}f", b)
rel = max(abs(p - q) for p, q in zip(x, y)) / max(abs(q) for q in y)
assert rel <= 2e-2, rel
print(f"bench: interleaved vs mapped weights, logits max rel diff {rel:.2e}")
PY
"$MOETIER" bench -m "$M" -p 4 -n 2 -r 1 --no-interleave | grep -q '| tg2 |' || fail "bench --no-interleave"

"$MEMBW" -t 1 --size-mib 64 -r 2 -o json >"$WORK/membw.json" 2>/dev/null || fail "moetier_membw"
"$PY" -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["best_gb_per_s"] > 0 and j["threads"] == 1, j' \
  "$WORK/membw.json" || fail "membw JSON"

[ "$fails" -eq 0 ] && echo "bench: all checks passed"
exit $((fails > 0))
