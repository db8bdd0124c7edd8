#!/usr/bin/env bash
# hwprofile: `moetier hwprofile --quick` writes a profile with every field of
# experts/hw_profile.h's JSON, positive figures, thread points ascending and source
# "measured"; stdout without -o is the same JSON; a bad -o path fails with exit 1 and
# one line. The figures themselves are not checked (--quick measures too little).
# usage: check_hwprofile.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

rm -f "$WORK/f.json"
"$MOETIER" hwprofile --quick -t 2 -o "$WORK/f.json" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt" || fail "hwprofile -o"
[ -s "$WORK/stdout.txt" ] && fail "hwprofile -o printed to stdout"
grep -q "host read" "$WORK/stderr.txt" || fail "no summary on stderr: $(cat "$WORK/stderr.txt")"
"$MOETIER" hwprofile --quick -t 1 >"$WORK/stdout.json" 2>/dev/null || fail "hwprofile to stdout"
"$PY" - "$WORK/f.json" "$WORK/stdout.json" <<'PY' || fail "profile JSON"
import json, sys

def check(path, threads):
    p = json.load(open(path))
    for key in ("version", "source", "date", "cpu", "threads", "host_read_gbps", "cpu_expert", "gpu"):
        assert key in p, (path, key)
    assert p["version"] == 1 and p["source"] == "measured", p
    assert isinstance(p["date"], str) and p["date"].endswith("Z") and "T" in p["date"], p["date"]
    assert isinstance(p["cpu"], str) and p["cpu"], p["cpu"]
    assert p["threads"] == threads, p["threads"]
    t = [r["threads"] for r in p["host_read_gbps"]]
    assert t and t[0] == 1 and t[-1] == threads and t == sorted(set(t)), t
    assert all(r["gbps"] > 0 for r in p["host_read_gbps"]), p["host_read_gbps"]
    types = [e["type"] for e in p["cpu_expert"]]
    assert "q4_K" in types and len(types) == len(set(types)), types
    for e in p["cpu_expert"]:
        assert e["decode_gbps"] > 0 and e["prefill_gflops"] > 0, e
    g = p["gpu"]
    if g is not None:
        assert g["device_gbps"] > 0 and g["h2d"], g
        b = [c["bytes"] for c in g["h2d"]]
        assert b == sorted(set(b)) and all(c["pinned_gbps"] > 0 and c["pageable_gbps"] > 0 for c in g["h2d"]), g
    return p

p = check(sys.argv[1], 2)
check(sys.argv[2], 1)
print(f"hwprofile: {p['cpu']}, read {[r['gbps'] for r in p['host_read_gbps']]} GB/s, "
      f"{len(p['cpu_expert'])} expert types, gpu {'yes' if p['gpu'] else 'no'}")
PY

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
expect_error 1 "cannot create" -- "$MOETIER" hwprofile --quick -o "$WORK/no/such/dir/f.json"
expect_error 1 "-t must be in 0..1024" -- "$MOETIER" hwprofile --quick -t -1
expect_error 1 "-t must be in 0..1024" -- "$MOETIER" hwprofile --quick -t 5000
expect_error 2 "" -- "$MOETIER" hwprofile --bogus

[ "$fails" -eq 0 ] && echo "hwprofile: all checks passed"
exit $((fails > 0))
