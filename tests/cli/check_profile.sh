#!/usr/bin/env bash
# profile: moetier profile over a three-prompt file (blank lines between) on a tiny
# synthetic qwen3moe (2 layers, 8 experts top-2, router skew 1).
#   * the JSON has every MoE layer with n_expert counts, each layer's counts summing to
#     tokens x top-k
#   * the counts equal those of `logits --prompt LINE --routing` run on each line alone,
#     and tokens is the sum of the prompts' token counts
#   * missing or empty prompts files, a prompt over --ctx, and a missing model are one
#     line and exit 1
# usage: check_profile.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$WORK/tiny.gguf
P=$WORK/prompts.txt
"$MOETIER" synth --arch qwen3moe --router-skew 1 -o "$M" >/dev/null || fail "synth"
printf '%s\n' "Hi." "" "In the beginning God created the heaven and the earth." "   " "moetier counts experts" >"$P"

"$MOETIER" profile -m "$M" --prompts "$P" -o "$WORK/profile.json" -t 2 2>"$WORK/profile.err" \
  || fail "profile: $(cat "$WORK/profile.err")"
cat "$WORK/profile.err"
grep -q '^profile: 3 prompts' "$WORK/profile.err" || fail "summary line"
[ "$(grep -c '^  layer ' "$WORK/profile.err")" -eq 2 ] || fail "per-layer summary"

i=0
while IFS= read -r line; do
  [ -n "${line// /}" ] || continue
  "$MOETIER" logits -m "$M" --prompt "$line" -t 2 -o "$WORK/logits$i.f32" --routing "$WORK/routing$i.jsonl" 2>/dev/null \
    || fail "logits prompt $i"
  i=$((i + 1))
done <"$P"
[ "$i" -eq 3 ] || fail "$i prompts"

"$PY" - "$WORK/profile.json" "$WORK"/routing?.jsonl <<'PY' || fail "profile JSON"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["version"] == 1 and p["model"] == "tiny.gguf", p
E, k = p["n_expert"], 2
assert E == 8, E
want, tokens = {}, 0
for path in sys.argv[2:]:
    lines = [json.loads(l) for l in open(path) if l.strip()]
    tokens += len({l["pos"] for l in lines})
    for l in lines:
        assert len(l["experts"]) == k
        for x in l["experts"]:
            want.setdefault(l["layer"], [0] * E)[x] += 1
assert p["tokens"] == tokens, (p["tokens"], tokens)
got = {L["layer"]: L["counts"] for L in p["layers"]}
assert sorted(got) == [0, 1], got
for layer, c in got.items():
    assert len(c) == E and sum(c) == tokens * k, (layer, c)
assert got == want, (got, want)
print(f"profile: {tokens} tokens, counts match logits --routing: {got}")
PY

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
printf '\n  \n\n' >"$WORK/empty.txt"
: >"$WORK/zero.txt"
expect_error "cannot open prompts file" -- "$MOETIER" profile -m "$M" --prompts "$WORK/missing.txt" -o "$WORK/x.json"
expect_error "has no prompts" -- "$MOETIER" profile -m "$M" --prompts "$WORK/empty.txt" -o "$WORK/x.json"
expect_error "has no prompts" -- "$MOETIER" profile -m "$M" --prompts "$WORK/zero.txt" -o "$WORK/x.json"
expect_error "prompts.txt:3: 39 tokens exceed the context of 12" -- "$MOETIER" profile -m "$M" --prompts "$P" -o "$WORK/x.json" --ctx 12
expect_error "cannot open" -- "$MOETIER" profile -m "$WORK/missing.gguf" --prompts "$P" -o "$WORK/x.json"
expect_error "cannot create" -- "$MOETIER" profile -m "$M" --prompts "$P" -o "$WORK/no/such/dir/x.json"

[ "$fails" -eq 0 ] && echo "profile: all checks passed"
exit $((fails > 0))
