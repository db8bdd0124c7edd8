#!/usr/bin/env bash
# `moetier serve` against llama.cpp's llama-server on the same GGUF under the same load
# (issue 27): for each stream count, each server is started fresh with as many parallel
# slots as streams and the same context per slot, waited for (/health), driven by
# bench/load.py, and stopped; the servers take turns (moetier, llama, next stream count),
# so drift of the machine hits both. Every load.py JSON, server log and a summary table
# (summary.md, summary.json) land in the output folder.
#
# usage: bench/serve_compare.sh MODEL [options]
#   --out DIR            output folder (default .bench/serve/<model>-<date>)
#   --streams "1 8 32"   stream counts (default "1 8 32")
#   --prompt-tokens N    prompt tokens per request, chat template included (default 128)
#   --output-tokens N    output tokens per request, ignore_eos (default 256)
#   --requests N         requests per stream (default 4); or --duration S per stream count
#   --ctx N              context per slot (default prompt + output + 64)
#   --threads N          CPU threads of both servers (default: their own default)
#   --gpu                llama-server -ngl 99 -fa on; moetier --device cuda
#   --n-cpu-moe N        llama-server --n-cpu-moe N (experts of the first N layers on the CPU)
#   --expert-cache X     moetier --expert-cache X (SIZE or N%)
#   --long-prompt N      load.py --long-prompt N (one N-token prompt sent 1 s into each run while
#                        the streams decode: their latency while it is admitted); each server
#                        gets one slot more and a context of at least N + 64 per slot
#   --endpoint chat|completions  load.py's route (default chat; completions for random-weight
#                        models, whose text llama-server's chat-reply parser rejects)
#   --no-ban-invalid-utf8  by default load.py bans the vocabulary's tokens that are not valid
#                        UTF-8 alone (--ban-invalid-utf8 MODEL): llama-server fails any request
#                        whose output is invalid UTF-8, which random-weight models write
#   --engines "moetier llama"   which servers (default both)
#   --moetier BIN        default build/moetier; --llama-server BIN default
#                        .bench/llama.cpp/build/bin/llama-server (build it with
#                        tools/gpu/prepare.sh's tarball or the bundle: see docs/PERFORMANCE.md)
# env: MOETIER_ARGS, LLAMA_ARGS: more flags for one server (word-split).
# llama-server runs with --cache-ram 0 (no prompt cache in host memory: every prompt here is
# new, and its RSS then compares with moetier's) and --no-webui.
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
say() { printf 'serve_compare: %s\n' "$*" >&2; }
die() { printf 'serve_compare: error: %s\n' "$*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 MODEL [--out DIR] [--streams \"1 8 32\"] [--prompt-tokens N] [--output-tokens N] ..."
MODEL=$1; shift
LONG="" OUT="" STREAMS="1 8 32" PROMPT=128 OUTPUT=256 REQUESTS=4 DURATION="" CTX="" THREADS="" GPU=0 NCPUMOE="" ECACHE=""
ENGINES="moetier llama" ENDPOINT=chat BAN=1
MOETIER=$REPO/build/moetier
LLAMA=$REPO/.bench/llama.cpp/build/bin/llama-server
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || [ "$1" = --gpu ] || [ "$1" = --no-ban-invalid-utf8 ] || die "$1 needs a value"
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --streams) STREAMS=$2; shift 2 ;;
    --prompt-tokens) PROMPT=$2; shift 2 ;;
    --output-tokens) OUTPUT=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --ctx) CTX=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --gpu) GPU=1; shift ;;
    --n-cpu-moe) NCPUMOE=$2; shift 2 ;;
    --expert-cache) ECACHE=$2; shift 2 ;;
    --long-prompt) LONG=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --endpoint) ENDPOINT=$2; shift 2 ;;
    --no-ban-invalid-utf8) BAN=0; shift ;;
    --moetier) MOETIER=$2; shift 2 ;;
    --llama-server) LLAMA=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -f "$MODEL" ] || die "no model file $MODEL"
for n in $STREAMS $PROMPT $OUTPUT $REQUESTS ${CTX:-1} ${THREADS:-1} ${NCPUMOE:-0} ${LONG:-0}; do
  [[ $n =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done
for e in $ENGINES; do
  case $e in
    moetier) [ -x "$MOETIER" ] || die "$MOETIER not built (cmake --build build --target moetier)" ;;
    llama) [ -x "$LLAMA" ] || die "$LLAMA not built (see docs/PERFORMANCE.md, 'Serving under load')" ;;
    *) die "unknown engine $e (moetier, llama)" ;;
  esac
done
command -v python3 >/dev/null || die "python3 not found"
CTX=${CTX:-$((PROMPT + OUTPUT + 64))}
[ -n "$LONG" ] && [ "$CTX" -lt $((LONG + 64)) ] && CTX=$((LONG + 64))
OUT=${OUT:-$REPO/.bench/serve/$(basename "$MODEL" .gguf)-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
LOAD_ARGS=(--prompt-tokens "$PROMPT" --output-tokens "$OUTPUT" --endpoint "$ENDPOINT" --wait 600 --timeout 600)
[ "$BAN" = 1 ] && LOAD_ARGS+=(--ban-invalid-utf8 "$MODEL")
[ -n "$LONG" ] && LOAD_ARGS+=(--long-prompt "$LONG")
if [ -n "$DURATION" ]; then LOAD_ARGS+=(--duration "$DURATION"); else LOAD_ARGS+=(--requests "$REQUESTS"); fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT

# start ENGINE STREAMS PORT LOG: the server in the background (SERVER_PID).
start_server() {
  local engine=$1 n=$2 port=$3 log=$4 cmd
  [ -n "$LONG" ] && n=$((n + 1))
  if [ "$engine" = moetier ]; then
    cmd=("$MOETIER" serve -m "$MODEL" --host 127.0.0.1 --port "$port" -c "$CTX" --max-running "$n")
    [ -n "$THREADS" ] && cmd+=(-t "$THREADS")
    [ "$GPU" = 1 ] && cmd+=(--device cuda)
    [ -n "$ECACHE" ] && cmd+=(--expert-cache "$ECACHE")
    # shellcheck disable=SC2206
    cmd+=(${MOETIER_ARGS:-})
  else
    cmd=("$LLAMA" -m "$MODEL" --host 127.0.0.1 --port "$port" -c "$((CTX * n))" -np "$n" --cache-ram 0 --no-webui)
    [ -n "$THREADS" ] && cmd+=(-t "$THREADS")
    [ "$GPU" = 1 ] && cmd+=(-ngl 99 -fa on)
    [ -n "$NCPUMOE" ] && cmd+=(--n-cpu-moe "$NCPUMOE")
    # shellcheck disable=SC2206
    cmd+=(${LLAMA_ARGS:-})
  fi
  printf '%q ' "${cmd[@]}" > "$log.cmd"
  "${cmd[@]}" > "$log" 2>&1 &
  SERVER_PID=$!
}

for n in $STREAMS; do
  for engine in $ENGINES; do
    port=$(free_port)
    name=$engine-s$n
    say "$name: starting on port $port ($(date -u +%T))"
    start_server "$engine" "$n" "$port" "$OUT/$name.log"
    rc=0
    python3 "$SCRIPT_DIR/load.py" --url "http://127.0.0.1:$port" --streams "$n" "${LOAD_ARGS[@]}" \
        --pid "$SERVER_PID" --label "$name" --allow-failures -o "$OUT/$name.json" || rc=$?
    # moetier's own split of a step (forward pass vs sampling and the rest), for summary.md
    [ "$engine" = moetier ] && python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
        "http://127.0.0.1:$port/metrics" > "$OUT/$name.metrics" 2>/dev/null || true
    stop_server
    [ "$rc" = 0 ] || die "load.py failed on $name (exit $rc; server log $OUT/$name.log)"
  done
done

python3 - "$OUT" "$MODEL" <<'EOF'
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
rows = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json") and "-s" in f and f != "summary.json":
        j = json.load(open(os.path.join(out, f)))
        engine, n = f[:-5].rsplit("-s", 1)
        rows[(engine, int(n))] = j
ms = lambda v: "-" if v is None else f"{v * 1000:.1f}"
mib = lambda v: "-" if not v else f"{v / 1024:.0f}"
lines = [f"model `{os.path.basename(model)}`", "",
         "| engine | streams | ok/failed | out tok/s | ttft p50 / p99 ms | itl p50 / p99 ms | tpot p50 ms | peak RSS MiB | peak GPU MiB |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
summary = []
def scraped(path):  # counter name -> value from a /metrics text
    vals = {}
    for line in open(path):
        if line and not line.startswith("#") and " " in line:
            k, v = line.rsplit(" ", 1)
            try:
                vals[k] = float(v)
            except ValueError:
                pass
    return vals
split = []
pacer = []
tier = []
for (engine, n) in sorted(rows, key=lambda k: k[1]):
    path = os.path.join(out, f"{engine}-s{n}.metrics")
    if engine != "moetier" or not os.path.exists(path):
        continue
    v = scraped(path)
    steps = v.get("moetier_scheduler_steps_total", 0)
    if steps:
        ev, ho = v.get("moetier_scheduler_eval_seconds_total", 0), v.get("moetier_scheduler_host_seconds_total", 0)
        split.append(f"{n} streams {1000 * ev / steps:.2f} / {1000 * ho / steps:.2f}")
        rows[(engine, n)]["step_split_ms"] = {"eval": 1000 * ev / steps, "host": 1000 * ho / steps, "steps": steps}
    # tiering: the hit rate, the CPU's share of the experts and the split's CPU speed
    hits = sum(x for k, x in v.items() if k.startswith("moetier_expert_cache_hits_total"))
    miss = sum(x for k, x in v.items() if k.startswith("moetier_expert_cache_misses_total"))
    cpu = sum(x for k, x in v.items() if k.startswith("moetier_expert_cpu_computed_total"))
    if hits + miss:
        sp = v.get("moetier_expert_split_cpu_bytes_per_second", 0)
        tier.append(f"{n} streams: hit rate {hits / (hits + miss):.3f}, CPU experts {cpu / (hits + miss):.3f} of lookups"
                    + (f", split's CPU speed {sp / 1e9:.1f} GB/s + {1e6 * v.get('moetier_expert_split_cpu_fixed_seconds', 0):.0f} us"
                       f" ({'learned' if v.get('moetier_expert_split_cpu_learned') else 'profile'})" if sp else "")
                    + (f", device {v['moetier_expert_split_device_bytes_per_second'] / 1e9:.1f} GB/s + "
                       f"{1e6 * v.get('moetier_expert_split_device_fixed_seconds', 0):.0f} us (learned)"
                       if v.get("moetier_expert_split_device_bytes_per_second") else ""))
    # the prefill pacer's last measurements: a plain step and each chunk size's extra time
    chunks = {int(k.split('"')[1]): x for k, x in v.items() if k.startswith("moetier_prefill_pacer_chunk_extra_seconds{")}
    if chunks:
        d = v.get("moetier_prefill_pacer_decode_step_seconds", 0)
        pacer.append(f"{n} streams: plain step {1000 * d:.2f} ms; chunk extra " +
                     ", ".join(f"{t}: {1000 * x:.2f}" for t, x in sorted(chunks.items()) if x > 0))
for (engine, n), j in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "moetier")):
    mem = j.get("server_memory") or {}
    lines.append(f"| {engine} | {n} | {j['requests_completed']}/{j['requests_failed']} | {j['output_tok_s'] or 0:.2f} | "
                 f"{ms(j['ttft_s']['p50'])} / {ms(j['ttft_s']['p99'])} | {ms(j['itl_s']['p50'])} / {ms(j['itl_s']['p99'])} | "
                 f"{ms(j['tpot_s']['p50'])} | {mib(mem.get('vmhwm_kib'))} | {mem.get('peak_gpu_mib_sampled') or '-'} |")
    summary.append({"engine": engine, "streams": n, "output_tok_s": j["output_tok_s"], "ttft_s": j["ttft_s"],
                    "itl_s": j["itl_s"], "tpot_s": j["tpot_s"], "requests_completed": j["requests_completed"],
                    "requests_failed": j["requests_failed"], "requests_other_length": j["requests_other_length"],
                    "server_memory": mem, "config": j["config"], "step_split_ms": j.get("step_split_ms")})
if split:
    lines += ["", "moetier step, forward pass / the rest (sampling, text) ms per step: " + ", ".join(split)]
if tier:
    lines += ["", "moetier tiering: " + "; ".join(tier)]
if pacer:
    lines += ["", "moetier prefill pacer (ms; chunk sizes measured beside decoders): " + "; ".join(pacer)]
ratios = []
for n in sorted({n for _, n in rows}):
    a, b = rows.get(("moetier", n)), rows.get(("llama", n))
    if a and b and a["output_tok_s"] and b["output_tok_s"]:
        ratios.append(f"{n} streams {a['output_tok_s'] / b['output_tok_s']:.2f}x")
if ratios:
    lines += ["", "moetier / llama-server output tok/s: " + ", ".join(ratios)]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(text)
EOF
say "results in $OUT"
