#!/usr/bin/env bash
# moetier bench against llama-bench on the same file, threads and settings, in one run.
#
# usage: bench/compare_llamacpp.sh MODEL [THREADS] [REPS]        (defaults: 2 threads, 5 reps)
# env:   P=512 N=128        prompt tokens (pp test) and generated tokens (tg test); 0 skips one
#        ROUNDS=2           alternations: llama, moetier, llama, moetier, ...
#        MOETIER, MEMBW     binaries (default build/moetier, build/moetier_membw)
#
# 1. llama-bench is built once from the llama.cpp source bundled in node-llama-cpp (the
#    oracle's, tools/oracle/setup.sh) into .bench/llama.cpp (git-ignored); skipped when
#    .bench/llama.cpp/build/bin/llama-bench exists. ~5 minutes on 2 cores.
# 2. moetier_membw measures host memory read bandwidth with THREADS threads.
# 3. The engines run alternately (ROUNDS rounds), so drift of the machine hits both.
# 4. A table: per test the mean t/s of each engine over all rounds' samples, moetier /
#    llama.cpp, and for tg the fraction of the memory roofline each reaches (moetier's
#    active bytes per token x t/s over the measured bandwidth).
# Raw JSON of every run is kept in .bench/results/<model>-<date>/.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
say() { printf 'compare: %s\n' "$*" >&2; }
die() { printf 'compare: error: %s\n' "$*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 3 ] || die "usage: $0 MODEL [THREADS] [REPS]"
MODEL=$1
THREADS=${2:-2}
REPS=${3:-5}
P=${P:-512}
N=${N:-128}
ROUNDS=${ROUNDS:-2}
MOETIER=${MOETIER:-$REPO_ROOT/build/moetier}
MEMBW=${MEMBW:-$REPO_ROOT/build/moetier_membw}
[ -f "$MODEL" ] || die "no model file $MODEL"
[ -x "$MOETIER" ] || die "$MOETIER not built (cmake --build build)"
[ -x "$MEMBW" ] || die "$MEMBW not built (cmake --build build --target moetier_membw)"
command -v python3 >/dev/null 2>&1 || die "python3 not found"

# 1. llama-bench from the bundle
LLAMA_DIR=$REPO_ROOT/.bench/llama.cpp
LLAMA_BENCH=$LLAMA_DIR/build/bin/llama-bench
if [ -x "$LLAMA_BENCH" ]; then
  say "llama-bench already built (skip): $LLAMA_BENCH"
else
  BUNDLE=$REPO_ROOT/.oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle
  [ -f "$BUNDLE" ] || bash "$REPO_ROOT/tools/oracle/setup.sh" >&2
  [ -f "$BUNDLE" ] || die "git bundle $BUNDLE not found"
  if [ ! -d "$LLAMA_DIR/.git" ]; then
    say "cloning $BUNDLE into $LLAMA_DIR"
    git clone -q "$BUNDLE" "$LLAMA_DIR" || die "git clone of the bundle failed"
  fi
  say "building llama-bench (~5 minutes on 2 cores)"
  cmake -S "$LLAMA_DIR" -B "$LLAMA_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_OPENSSL=OFF >&2 || die "cmake configure of llama.cpp failed"
  cmake --build "$LLAMA_DIR/build" --target llama-bench -j "$(nproc)" >&2 || die "building llama-bench failed"
  [ -x "$LLAMA_BENCH" ] || die "build finished but $LLAMA_BENCH is missing"
fi

OUT=$REPO_ROOT/.bench/results/$(basename "$MODEL" .gguf)-t$THREADS-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"

# 2. memory bandwidth
say "memory read bandwidth, $THREADS threads"
"$MEMBW" -t "$THREADS" -o json > "$OUT/membw.json" || die "moetier_membw failed"
MEMBW_GBPS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_gb_per_s"])' "$OUT/membw.json")
say "membw $MEMBW_GBPS GB/s"

# 3. alternate the engines
for round in $(seq 1 "$ROUNDS"); do
  say "round $round/$ROUNDS: llama-bench -m $MODEL -p $P -n $N -t $THREADS -r $REPS"
  "$LLAMA_BENCH" -m "$MODEL" -p "$P" -n "$N" -t "$THREADS" -r "$REPS" -o json \
      > "$OUT/llama-$round.json" 2> "$OUT/llama-$round.log" || die "llama-bench failed (see $OUT/llama-$round.log)"
  say "round $round/$ROUNDS: moetier bench -m $MODEL -p $P -n $N -t $THREADS -r $REPS"
  "$MOETIER" bench -m "$MODEL" -p "$P" -n "$N" -t "$THREADS" -r "$REPS" --membw "$MEMBW_GBPS" -o json \
      > "$OUT/moetier-$round.json" || die "moetier bench failed"
done

# 4. the table
python3 - "$OUT" "$ROUNDS" "$MEMBW_GBPS" <<'EOF'
import json, statistics, sys
out, rounds, membw = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def load(engine):
    samples, meta = {}, {}
    for r in range(1, rounds + 1):
        for t in json.load(open(f"{out}/{engine}-{r}.json")):
            key = (t["n_prompt"], t["n_gen"])
            samples.setdefault(key, []).extend(t["samples_ts"])
            meta[key] = t
    return samples, meta

llama, _ = load("llama")
ours, ours_meta = load("moetier")
active = next(iter(ours_meta.values()))["active_bytes_per_token"]

def fmt(v):
    return f"{statistics.mean(v):.2f} ± {statistics.stdev(v) if len(v) > 1 else 0:.2f}"

print(f"memory read bandwidth {membw:.2f} GB/s; moetier active bytes per token {active / 1e6:.1f} MB; "
      f"{rounds} rounds, samples of both rounds pooled")
print("| test | llama.cpp t/s | moetier t/s | moetier / llama.cpp | llama.cpp roofline | moetier roofline |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for key in sorted(set(llama) | set(ours), key=lambda k: (k[1], k[0])):
    p, n = key
    name = f"pp{p}" if n == 0 else f"tg{n}"
    a, b = llama.get(key), ours.get(key)
    ratio = f"{statistics.mean(b) / statistics.mean(a):.3g}" if a and b else "-"
    def roof(v):
        return f"{100 * active * statistics.mean(v) / 1e9 / membw:.1f}%" if v and n > 0 else "-"
    print(f"| {name} | {fmt(a) if a else '-'} | {fmt(b) if b else '-'} | {ratio} | {roof(a)} | {roof(b)} |")
EOF
say "raw results in $OUT"
