#!/usr/bin/env bash
# tools/fuzz.sh [SECONDS=60]: fuzz the GGUF reader, then the HTTP request parser
# (server/http_parser.h, HTTP_SECONDS, default a third of SECONDS), with libFuzzer + ASan/UBSan.
#
# Configures build-fuzz/ with clang (-DMOETIER_FUZZ=ON), builds tests/fuzz/gguf_fuzz and
# the seed generator, writes the seeds (the generated corrupt cases, valid hand-built
# files, and shrunk copies of the shared vocab GGUFs and of a small `moetier synth` model
# when a moetier binary is around), then fuzzes for SECONDS. The corpus it grows is kept
# in build-fuzz/fuzz/corpus, so later runs continue where this one stopped.
#
# Seeds are shrunk (every array cut to a few elements) rather than the multi-MB vocab files
# themselves: parsing 100k token strings per input would cap a run at a few hundred
# executions a second, while the shrunk copies keep every key, type and layout. The
# 25 MB kjv-moe model is left out for the same reason (its tensor layout is what the
# synth model and the generated MoE seed already cover).
#
# Exits nonzero on any finding (crash, UB, leak, timeout, OOM); the reproducer is left
# in build-fuzz/fuzz/artifacts/. Environment: FUZZ_JOBS (parallel -fork workers, default 1),
# MOETIER (path of a moetier binary for the synth seed), MOETIER_TESTDATA_DIR.
set -euo pipefail

seconds="${1:-60}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
testdata="${MOETIER_TESTDATA_DIR:-$repo/../shared/testdata}"
build="$repo/build-fuzz"
work="$build/fuzz"
jobs="${FUZZ_JOBS:-1}"

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOETIER_FUZZ=ON -DMOETIER_CUDA=OFF -DMOETIER_TESTS=OFF \
  -DCMAKE_UNITY_BUILD="${MOETIER_UNITY:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >/dev/null  # see tools/build.sh
cmake --build "$build" --target gguf_fuzz gguf_make_corpus http_fuzz

mkdir -p "$work/corpus" "$work/artifacts"
rm -rf "$work/seeds" "$work/tmp"
mkdir -p "$work/seeds" "$work/tmp"

sources=()
if compgen -G "$testdata/vocab/*.gguf" >/dev/null; then
  sources+=("$testdata"/vocab/*.gguf)
else
  echo "fuzz.sh: no vocab GGUFs under $testdata/vocab; seeding without them" >&2
fi
moetier="${MOETIER:-}"
if [[ -z "$moetier" ]]; then
  if [[ -x "$repo/build/moetier" ]]; then moetier="$repo/build/moetier"
  elif command -v moetier >/dev/null; then moetier="$(command -v moetier)"
  fi
fi
if [[ -n "$moetier" ]]; then
  # A ~128 KB model of the tiny preset's architecture: real tensor names and expert layout.
  if "$moetier" synth --preset tiny --embd 64 --heads 2 --heads-kv 1 --head-dim 32 --experts 4 \
       --experts-used 2 --expert-ff 32 --ff 64 --vocab-size 300 --ctx 64 -o "$work/tmp/synth-tiny.gguf" >/dev/null; then
    cp "$work/tmp/synth-tiny.gguf" "$work/seeds/"
    sources+=("$work/tmp/synth-tiny.gguf")
  else
    echo "fuzz.sh: '$moetier synth' failed; seeding without a synthetic model" >&2
  fi
else
  echo "fuzz.sh: no moetier binary (build/moetier); seeding without a synthetic model" >&2
fi
# The generator runs under ASan too; leak checking is for the fuzz target.
ASAN_OPTIONS=detect_leaks=0 "$build/gguf_make_corpus" "$work/seeds" "${sources[@]}"

rm -f "$work"/artifacts/*
parallel=()
if [[ "$jobs" -gt 1 ]]; then parallel=(-fork="$jobs"); fi
set +e
# The largest seed is ~128 KB; 256 KB leaves mutations room to grow an input.
"$build/gguf_fuzz" "$work/corpus" "$work/seeds" \
  -max_total_time="$seconds" -max_len=262144 -timeout=10 -rss_limit_mb=4096 \
  "${parallel[@]}" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  2>&1 | tee "$work/last_run.log"
status=${PIPESTATUS[0]}
set -e

# The HTTP request parser: its seeds are a few requests; inputs stay small.
http_seconds="${HTTP_SECONDS:-$(( (seconds + 2) / 3 ))}"
mkdir -p "$work/http_corpus"
set +e
"$build/http_fuzz" "$work/http_corpus" "$repo/tests/fuzz/http_seeds" \
  -max_total_time="$http_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" 2>&1 | tee "$work/last_http_run.log" | tail -5
http_status=${PIPESTATUS[0]}
set -e
[[ $http_status -eq 0 ]] || status=$http_status

findings=$(find "$work/artifacts" -type f | wc -l)
echo "fuzz.sh: exit status $status, $findings finding(s), corpus $(find "$work/corpus" -type f | wc -l) files"
if [[ $status -ne 0 || $findings -ne 0 ]]; then
  echo "fuzz.sh: FAILED; reproducers in $work/artifacts/ (run: $build/gguf_fuzz FILE)" >&2
  exit 1
fi
