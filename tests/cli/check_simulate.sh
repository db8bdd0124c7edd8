#!/usr/bin/env bash
# simulate: a replay of a run's own routing record reproduces the run's expert cache
# counters exactly (every layer and the totals), for each policy and mode (auto: the
# planner's pick; an admission cap per layer-step; the split of misses); synthetic
# streams on a sparse 47-layer laguna-s geometry; issue 28's generator (--routing synth:)
# on a sparse qwen3-30b-a3b geometry: --sweep-budgets, --cache-policy auto's measured pick;
# clear errors on bad input.
# usage: check_simulate.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$WORK/skewed.gguf
"$MOETIER" synth --arch qwen3moe --router-skew 1 --quant q4_k_m -o "$M" >/dev/null || fail "synth"
echo "the profile for static-hot" >"$WORK/prompts.txt"
echo "and a second prompt line" >>"$WORK/prompts.txt"
"$MOETIER" profile -m "$M" --prompts "$WORK/prompts.txt" -o "$WORK/pop.json" 2>/dev/null || fail "profile"
case_no=0
for args in "--cache-policy lru --expert-cache 25%" "--cache-policy frequency --admit-after 2 --min-dwell 3 --expert-cache 40%" \
            "--cache-policy static-hot --popularity $WORK/pop.json --expert-cache 30%" \
            "--cache-policy lru --expert-cache 10% --moe-mode stream" "--cache-policy lru --expert-cache 100%" \
            "--cache-policy lru --expert-cache 0" "--cache-policy lru --expert-cache 25% --max-admissions 1" \
            "--cache-policy lru --expert-cache 25% --moe-mode auto" \
            "--cache-policy lru --expert-cache 25% --split-misses on --split-fraction 0.5" \
            "--cache-policy frequency --expert-cache 25% --split-misses on --split-fraction 0.6 --split-pick ids" \
            "--cache-policy lru2 --expert-cache 25%"; do
  case_no=$((case_no + 1))
  rec=$WORK/rec$case_no.jsonl
  # shellcheck disable=SC2086
  "$MOETIER" run -m "$M" -p "a prompt of several words for the batch" -n 48 --temp 0 $args \
    --record-routing "$rec" --stats-json "$WORK/run$case_no.json" >/dev/null 2>"$WORK/run$case_no.err" ||
    { fail "run $args: $(tail -1 "$WORK/run$case_no.err")"; continue; }
  # shellcheck disable=SC2086
  "$MOETIER" simulate -m "$M" --trace "$rec" $args --json >"$WORK/sim$case_no.json" 2>"$WORK/sim$case_no.err" ||
    { fail "simulate $args: $(tail -1 "$WORK/sim$case_no.err")"; continue; }
  "$PY" - "$WORK/run$case_no.json" "$WORK/sim$case_no.json" "$args" <<'PY' || fail "simulate != run for $args"
import json, sys
run, sim, args = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
for k in ("mode", "policy", "budget_bytes", "steps", "tokens", "layers", "total"):
    assert run[k] == sim[k], (k, run[k], sim[k])
t = run["total"]
assert t["hits"] + t["misses"] == t["device_experts"] + t["cpu_experts"], t
assert t["bytes_copied"] > 0 or t["admissions"] == 0, t
for m in ("cpu", "stream", "hybrid"):
    assert sim["predicted"][m]["tokens_per_s"] > 0, sim["predicted"]
if "--max-admissions 1" in args:  # at most one admission per layer-step
    assert t["admissions"] <= run["steps"] * len(run["layers"]), (t, run["steps"])
if "--split-misses" in args:  # the device took part of the misses: more device experts than hits
    assert t["device_experts"] > t["hits"], t
if "auto" in args:
    assert run["mode"] in ("stream", "hybrid"), run["mode"]
print(f"  {args}: mode {run['mode']}, {len(run['layers'])} layers, hits {t['hits']} misses {t['misses']} admissions {t['admissions']} "
      f"evictions {t['evictions']} cpu {t['cpu_experts']} staged {t['staged']}: run == simulate")
PY
done

# A 47-layer, 256-expert geometry from metadata alone: 8640 MiB over Q4_K and BF16 pools.
L=$WORK/laguna.gguf
"$MOETIER" synth --preset laguna-s --sparse -o "$L" >/dev/null || fail "synth laguna-s"
"$MOETIER" simulate -m "$L" --synthetic --tokens 64 --skew 1.2 --expert-cache 8640MiB --json >"$WORK/laguna.json" ||
  fail "simulate laguna-s"
"$PY" - "$WORK/laguna.json" <<'PY' || fail "laguna-s simulate JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["layers"]) == 47 and j["tokens"] == 64 and j["steps"] == 64, (len(j["layers"]), j["tokens"])
t = j["total"]
assert t["hits"] + t["misses"] == 64 * 47 * 10, t  # top-10, one token per step, distinct per layer-step
assert 0 < t["hit_rate"] < 1 and t["cpu_experts"] == t["misses"] - (t["device_experts"] - t["hits"]), t
print(f"  laguna-s 8640MiB {j['policy']}: hit rate {t['hit_rate']:.3f}, {t['cpu_experts_per_token']:.1f} CPU experts/token, "
      f"predicted hybrid {j['predicted']['hybrid']['tokens_per_s']:.1f} tok/s ({j['hw_profile_source']} profile)")
PY

# Issue 28's generator on Qwen3-30B-A3B's geometry (128 experts top-8, 48 layers).
Q=$WORK/qwen3-30b.gguf
"$MOETIER" synth --preset qwen3-30b-a3b --sparse -o "$Q" >/dev/null || fail "synth qwen3-30b-a3b"
"$MOETIER" simulate -m "$Q" --routing synth:preset=qwen3-30b,tokens=200 --sweep-budgets 10%,40%,100% --json \
  >"$WORK/sweep.json" || fail "simulate --sweep-budgets"
"$MOETIER" simulate -m "$Q" --routing synth:preset=qwen3-30b,tokens=200 --expert-cache 25% --json \
  >"$WORK/auto.json" || fail "simulate --routing synth: auto"
"$PY" - "$WORK/sweep.json" "$WORK/auto.json" <<'PY' || fail "sweep / auto JSON"
import json, sys
sw, auto = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert sw["routing"].startswith("synth:preset=qwen3-30b") and sw["steps"] == 200, sw["routing"]
rows = sw["sweep"]
assert [r["budget"] for r in rows] == ["10%", "40%", "100%"], rows
for r in rows:
    assert set(r["hit_rate"]) == {"lru", "frequency", "lru2"}, r
    assert all(0 < v <= 1 for v in r["hit_rate"].values()), r
for p in ("lru", "frequency", "lru2"):
    assert rows[0]["hit_rate"][p] < rows[1]["hit_rate"][p] <= rows[2]["hit_rate"][p], (p, rows)
assert rows[2]["slots_per_layer"] == 128, rows[2]
# Everything fits: only the first use of each expert misses (at most 128 per layer).
assert rows[2]["hit_rate"]["lru"] >= 1 - 128 / (200 * 8), rows[2]
pick = auto["policy_auto"]
assert auto["policy"] == pick["picked"] and pick["warmup_steps"] == 128, pick
rates = pick["warmup_hit_rate"]
assert set(rates) == {"lru", "frequency", "lru2"} and rates[pick["picked"]] == max(rates.values()), pick
assert auto["trace"]["source"].startswith("synth:preset=qwen3-30b"), auto["trace"]
print(f"  qwen3-30b preset: lru {rows[0]['hit_rate']['lru']:.3f} at 10%, {rows[1]['hit_rate']['lru']:.3f} at 40%; "
      f"auto picked {pick['picked']} ({rates})")
PY

# Errors: one line, exit 1.
expect_error() {
  local what=$1
  shift
  if "$MOETIER" "$@" >/dev/null 2>"$WORK/err.txt"; then fail "$what: succeeded"; return; fi
  [ "$(wc -l <"$WORK/err.txt")" -eq 1 ] || fail "$what: not one line: $(cat "$WORK/err.txt")"
}
expect_error "no trace" simulate -m "$M" --expert-cache 10%
expect_error "no budget" simulate -m "$M" --synthetic
expect_error "missing trace" simulate -m "$M" --trace "$WORK/none.jsonl" --expert-cache 10%
echo '{"layer": 0, "pos": 0, "experts": [999]}' >"$WORK/bad.jsonl"
expect_error "expert out of range" simulate -m "$M" --trace "$WORK/bad.jsonl" --expert-cache 10%
echo '{"layer": 0, "pos": 0, "exp' >"$WORK/broken.jsonl"
expect_error "broken JSON" simulate -m "$M" --trace "$WORK/broken.jsonl" --expert-cache 10%
expect_error "bad policy" simulate -m "$M" --synthetic --expert-cache 10% --cache-policy mru
expect_error "static-hot without profile" simulate -m "$M" --synthetic --expert-cache 10% --cache-policy static-hot
expect_error "bad size" simulate -m "$M" --synthetic --expert-cache 12XB
expect_error "percent > 100" simulate -m "$M" --synthetic --expert-cache 140%
expect_error "stats without cache" run -m "$M" -n 1 --stats
expect_error "admit-after with lru" simulate -m "$M" --synthetic --expert-cache 10% --cache-policy lru --admit-after 3
expect_error "routing for another geometry" simulate -m "$Q" --routing synth:preset=512 --expert-cache 10%
expect_error "bad routing spec" simulate -m "$Q" --routing synth:window=0 --expert-cache 10%
expect_error "two routings" simulate -m "$Q" --routing synth:preset=qwen3-30b --synthetic --expert-cache 10%
expect_error "sweep and budget" simulate -m "$Q" --routing synth: --sweep-budgets 10% --expert-cache 10%
expect_error "min-dwell with the CPU's auto (lru)" simulate -m "$M" --synthetic --expert-cache 10% --min-dwell 2
# Values outside a flag's set: CLI11's error (and its --help hint) naming the flag.
expect_flag_error() {
  local flag=$1
  shift
  if "$MOETIER" "$@" >/dev/null 2>"$WORK/err.txt"; then fail "$flag: succeeded"; return; fi
  grep -q -- "$flag" "$WORK/err.txt" || fail "$flag: the error does not name it: $(cat "$WORK/err.txt")"
}
expect_flag_error --split-pick simulate -m "$M" --synthetic --expert-cache 10% --split-misses on --split-pick random
expect_flag_error --device simulate -m "$M" --synthetic --expert-cache 10% --device tpu
# On cuda's defaults auto is the frequency policy: its flags are accepted.
"$MOETIER" simulate -m "$M" --synthetic --tokens 8 --expert-cache 10% --device cuda --min-dwell 2 --json >"$WORK/cuda.json" ||
  fail "simulate --device cuda --min-dwell"
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["policy"] == "frequency", j["policy"]' "$WORK/cuda.json" ||
  fail "simulate --device cuda: the policy is not frequency"

[ "$fails" -eq 0 ] && echo "simulate: all checks passed"
exit "$fails"
