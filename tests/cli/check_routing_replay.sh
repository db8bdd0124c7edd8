#!/usr/bin/env bash
# routing_replay: `run` and `bench` under --routing (experts/routing_replay.h) on the demo
# model. A record of run --record-routing, replayed with trace: by a run that samples
# differently, records the same experts per MoE layer in the same order (a run without
# --routing, sampling the same way, records others: the check can fail); run says once on
# stderr that the text is meaningless; synth: runs and is recorded with top-k distinct ids
# per row; tiered, its cache counters are simulate's on the run's record; bench reports the
# stream (JSON "routing"), resident and with --expert-cache;
# specs and traces the model cannot take are one-line errors, exit 1.
# usage: check_routing_replay.sh MOETIER MODEL WORK_DIR
set -uo pipefail
MOETIER=$1
MODEL=$2
WORK=$3
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
RUN=("$MOETIER" run -m "$MODEL" -t 2 -p "In the beginning God created" -n 24)

"${RUN[@]}" --temp 0 --record-routing "$WORK/a.jsonl" >/dev/null 2>"$WORK/a.err" || fail "record: $(tail -1 "$WORK/a.err")"
"${RUN[@]}" --temp 1 --seed 5 --routing "trace:$WORK/a.jsonl" --record-routing "$WORK/b.jsonl" >"$WORK/b.out" 2>"$WORK/b.err" \
  || fail "replay: $(tail -1 "$WORK/b.err")"
"${RUN[@]}" --temp 1 --seed 5 --record-routing "$WORK/c.jsonl" >/dev/null 2>"$WORK/c.err" || fail "control: $(tail -1 "$WORK/c.err")"
n=$(grep -c "routing replayed from trace $WORK/a.jsonl (.* tokens, with weights): .* the text is meaningless, the speed is real" "$WORK/b.err")
[ "$n" -eq 1 ] || fail "replay's stderr should say once that the text is meaningless: $(cat "$WORK/b.err")"
"$PY" - "$WORK/a.jsonl" "$WORK/b.jsonl" "$WORK/c.jsonl" <<'PY' || fail "replayed record"
import json, sys
def per_layer(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        out.setdefault(r["layer"], []).append(r["experts"])
    return out
a, b, c = (per_layer(p) for p in sys.argv[1:4])
assert a and sorted(a) == sorted(b), (sorted(a), sorted(b))
rows = sum(len(v) for v in a.values())
assert all(len(a[l]) == len(b[l]) for l in a), "row counts differ"
assert a == b, "the replayed run computed other experts than the record's"
assert a != c, "the control (no --routing) routed as the record: the check proves nothing"
print(f"trace replay: {len(a)} MoE layers x {len(a[min(a)])} rows, ids identical to the record; the control differs")
PY

"${RUN[@]}" --routing "synth:reuse=0.5,window=4,within=0.75,seed=9" --record-routing "$WORK/s.jsonl" >/dev/null \
  2>"$WORK/s.err" || fail "synth: $(tail -1 "$WORK/s.err")"
grep -q "routing replayed from synth:experts=.*reuse=0.5,window=4,within=0.75" "$WORK/s.err" || fail "synth's stderr: $(cat "$WORK/s.err")"
"$PY" - "$WORK/s.jsonl" "$WORK/a.jsonl" <<'PY' || fail "synth record"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])]
a = [json.loads(l) for l in open(sys.argv[2])]
k = len(a[0]["experts"])
assert len(s) == len(a) and all(len(set(r["experts"])) == k for r in s), "rows or top-k"
assert [r["experts"] for r in s] != [r["experts"] for r in a]
PY

# Tiered under a stream: the engine's cache counters are the ones `simulate` replays from
# the run's record (the cache decided on the stream's experts).
"${RUN[@]}" --routing "synth:reuse=0.5,window=4,within=0.75,seed=4" --expert-cache 40% --record-routing "$WORK/t.jsonl" \
  --stats-json "$WORK/t-run.json" >/dev/null 2>"$WORK/t.err" || fail "tiered synth: $(tail -1 "$WORK/t.err")"
"$MOETIER" simulate -m "$MODEL" --trace "$WORK/t.jsonl" --expert-cache 40% --json >"$WORK/t-sim.json" 2>"$WORK/t-sim.err" \
  || fail "simulate the tiered record: $(tail -1 "$WORK/t-sim.err")"
"$PY" - "$WORK/t-run.json" "$WORK/t-sim.json" <<'PY' || fail "tiered replay's counters != simulate's"
import json, sys
run, sim = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("policy", "budget_bytes", "steps", "tokens", "layers", "total"):
    assert run[k] == sim[k], (k, run[k], sim[k])
assert run["total"]["hits"] > 0, run["total"]
PY

# --cache-policy auto (the default) beside --routing picks by the stream's first 128 tokens,
# as simulate does on the same stream: the same policy and the same hit rates.
"$PY" - "$WORK/t.err" "$MOETIER" "$MODEL" <<'PY' || fail "run's policy auto != simulate's on the same stream"
import json, re, subprocess, sys
err = open(sys.argv[1]).read()
m = re.search(r"policy auto: (\S+) \(hit rates over the first 128 steps: (.*)\)", err)
assert m, "run printed no 'policy auto' line: " + err
rates = dict(zip(m.group(2).split()[0::2], map(float, m.group(2).split()[1::2])))
sim = json.loads(subprocess.run([sys.argv[2], "simulate", "-m", sys.argv[3], "--routing",
                                 "synth:reuse=0.5,window=4,within=0.75,seed=4,tokens=200", "--expert-cache", "40%",
                                 "--json"], check=True, capture_output=True, text=True).stdout)["policy_auto"]
assert m.group(1) == sim["picked"], (m.group(1), sim)
assert sorted(rates) == sorted(sim["warmup_hit_rate"]) == ["frequency", "lru", "lru2"], rates
for p, r in rates.items():
    assert abs(r - sim["warmup_hit_rate"][p]) < 6e-4, (p, r, sim["warmup_hit_rate"][p])
assert len(set(rates.values())) > 1, "every policy rated alike: the check proves nothing"
print("policy auto:", m.group(1), rates)
PY

for cache in "" "--expert-cache 50%"; do
  # shellcheck disable=SC2086
  "$MOETIER" bench -m "$MODEL" -t 2 -p 8 -n 4 -r 1 -o json --routing "synth:seed=2" $cache >"$WORK/bench.json" \
    2>"$WORK/bench.err" || fail "bench --routing $cache: $(tail -1 "$WORK/bench.err")"
  "$PY" - "$WORK/bench.json" "$cache" <<'PY' || fail "bench --routing $cache JSON"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["routing"] for r in rows] == ["synth:seed=2"] * 2, rows
assert all(r["avg_ts"] > 0 for r in rows)
if sys.argv[2]:
    assert all(r["tiering"]["total"]["hits"] + r["tiering"]["total"]["misses"] > 0 for r in rows)
PY
done
"$MOETIER" bench -m "$MODEL" -t 2 -p 0 -n 4 -r 1 --routing "trace:$WORK/a.jsonl" >"$WORK/bench.md" 2>/dev/null \
  || fail "bench --routing trace"
grep -q "^routing: replayed from trace $WORK/a.jsonl" "$WORK/bench.md" || fail "bench's markdown names the stream: $(cat "$WORK/bench.md")"

expect_error() {  # regex -- command...: exit 1, one line on stderr matching regex
  local re=$1
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 1 ] || fail "'$*' exited $rc, expected 1 ($err)"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [ -n "$err" ] || fail "'$*' printed not one line: $err"
  grep -qE -- "$re" <<<"$err" || fail "'$*' said '$err', expected '$re'"
}
"$MOETIER" synth --preset tiny -o "$WORK/tiny.gguf" >/dev/null || fail "synth tiny"
expect_error "--routing synth: unknown key 'colour'" -- "${RUN[@]}" --routing synth:colour=red
expect_error "--routing synth: reuse=1.5(0*)? is not in \[0, 1\]" -- "$MOETIER" bench -m "$MODEL" -p 0 -n 2 --routing synth:reuse=1.5
expect_error "--routing synth:preset=qwen3-30b,.*: 128 experts top-8, the model has" -- "${RUN[@]}" --routing synth:preset=qwen3-30b
expect_error "--routing: .*nonexistent.jsonl" -- "${RUN[@]}" --routing trace:"$WORK/nonexistent.jsonl"
expect_error "--routing: give synth:KEY=VALUE,... or trace:FILE" -- "${RUN[@]}" --routing trace:
expect_error "--routing trace:$WORK/a.jsonl: the trace (selects .* experts per token|names expert|routes layers)" \
  -- "$MOETIER" run -m "$WORK/tiny.gguf" -n 2 --routing "trace:$WORK/a.jsonl"

if [ $fails -ne 0 ]; then
  echo "routing_replay: $fails failure(s)"
  exit 1
fi
echo "routing_replay: all passed"
