#!/usr/bin/env bash
# plan: moetier plan on sparse synthetic models of seed 000's and seed 001's checkpoints.
#   * laguna-s, --expert-cache 8640MiB --vram 80GiB: a Q4_K pool of ~988 slots and a BF16
#     pool of ~202 (within 1%), at most 8640 MiB used, less than one slot of each wasted
#   * ornith-35b, --pin-budget 15GiB --ram 64GiB --vram 16GiB: >= 32 of the 40 MoE layers
#     pinned, the rest pageable, the two lists disjoint and covering every MoE layer
#   * the GPU items within device memory, the dense bytes as `inspect --json` counts them
#   * a plan that does not fit says why; bad input is one line and exit 1
# usage: check_plan.sh MOETIER WORK_DIR
set -uo pipefail
MOETIER=$1
WORK=$2
PY=${PYTHON3:-python3}
mkdir -p "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

L=$WORK/laguna-s.gguf
O=$WORK/ornith-35b.gguf
"$MOETIER" synth --preset laguna-s --sparse -o "$L" >/dev/null || fail "synth laguna-s"
"$MOETIER" synth --preset ornith-35b --sparse -o "$O" >/dev/null || fail "synth ornith-35b"
"$MOETIER" inspect --json "$L" >"$WORK/laguna-inspect.json" || fail "inspect laguna-s"

"$MOETIER" plan -m "$L" --json --expert-cache 8640MiB --vram 80GiB --ram 256GiB >"$WORK/laguna.json" || fail "plan laguna-s"
"$PY" - "$WORK/laguna.json" "$WORK/laguna-inspect.json" <<'PY' || fail "laguna-s plan"
import json, sys
p, info = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
MiB = 1 << 20
budget = 8640 * MiB
assert p["expert_cache_bytes"] == budget and not p["expert_cache_auto"], p["expert_cache_bytes"]
pools = {q["expert_bytes"]: q for q in p["pools"]}
q4k, bf16 = pools[5308416], pools[18 * MiB]  # 5.0625 MiB and 18 MiB per expert
assert abs(q4k["slots"] - 988) <= 9.88 and abs(bf16["slots"] - 202) <= 2.02, (q4k["slots"], bf16["slots"])
used = sum(q["bytes"] for q in p["pools"])
assert used == p["expert_cache_used_bytes"] and used <= budget, used
assert budget - used < q4k["expert_bytes"], budget - used  # waste under one slot of either size
assert len(q4k["layers"]) == 39 and len(bf16["layers"]) == 8, (q4k["layers"], bf16["layers"])
assert all(q["bytes"] == q["slots"] * q["expert_bytes"] for q in p["pools"])
assert p["fits"] and p["why"] == "", p["why"]
assert sum(g["bytes"] for g in p["gpu"]) == p["gpu_bytes"] <= p["device_bytes"] == 80 * 1024 * MiB, p["gpu"]
# Dense weights as inspect counts them: every tensor but routed and shared experts and the embedding.
dense = sum(t["bytes"] for t in info["tensors"] if "_exps" not in t["name"] and "_shexp" not in t["name"] and t["name"] != "token_embd.weight")
assert {"item": "dense weights", "bytes": dense} in p["gpu"], (dense, p["gpu"])
# KV: 48 layers (the dense block too) x 2 x 8 heads x 128 x f16 per token, ctx capped at 32768.
assert p["ctx"] == 32768 and p["kv_bytes"] == 32768 * 48 * 2 * 8 * 128 * 2, (p["ctx"], p["kv_bytes"])
assert p["mode"] in ("cpu", "stream", "hybrid") and p["hw_profile_source"] == "assumed"
best = max(p["predicted"][m] for m in ("cpu", "stream", "hybrid"))
assert p["predicted"][p["mode"]] == best, p["predicted"]
assert all(isinstance(p["bottleneck"][m], str) and p["bottleneck"][m] for m in ("cpu", "stream", "hybrid"))
assert "uniform" in p["hit_rate_assumption"]
print(f"laguna-s: {q4k['slots']} + {bf16['slots']} slots, {used / MiB:.2f} of 8640 MiB, "
      f"predicted cpu {p['predicted']['cpu']:.2f} / stream {p['predicted']['stream']:.2f} / "
      f"hybrid {p['predicted']['hybrid']:.2f} tok/s -> {p['mode']}")
PY

"$MOETIER" plan -m "$O" --json --pin-budget 15GiB --ram 64GiB --vram 16GiB >"$WORK/ornith.json" || fail "plan ornith-35b"
"$PY" - "$WORK/ornith.json" <<'PY' || fail "ornith-35b plan"
import json, sys
p = json.load(open(sys.argv[1]))
GiB = 1 << 30
pinned, pageable = p["pinned_layers"], p["pageable_layers"]
assert len(pinned) >= 32, pinned
assert not set(pinned) & set(pageable), (pinned, pageable)
assert sorted(pinned + pageable) == list(range(40)), (pinned, pageable)
assert p["pin_budget"] == 15 * GiB and p["pinned_bytes"] <= 15 * GiB, p["pin_budget"]
assert p["padded_sizing"]["pinned_layers"] == 30, p["padded_sizing"]  # seed 001's padded figure
assert p["fits"], p["why"]
assert p["gpu_bytes"] <= 16 * GiB, p["gpu"]
print(f"ornith-35b: {len(pinned)} pinned ({p['pinned_bytes'] / GiB:.3f} GiB) + {len(pageable)} pageable of 40 "
      f"(padded sizing would pin {p['padded_sizing']['pinned_layers']}), mode {p['mode']}")
PY
"$MOETIER" plan -m "$O" --pin-budget 15GiB --ram 64GiB --vram 16GiB >"$WORK/ornith.txt" || fail "plan ornith-35b text"
grep -q "pinned   33 layers" "$WORK/ornith.txt" || fail "text plan: $(cat "$WORK/ornith.txt")"

# The full trained context at f16 on a 6 GiB card does not fit the GPU modes: said why.
# (ornith-35b is a qwen35moe: only its 10 full-attention layers keep KV rows, 5.0 GiB at
# this context, and its 30 Gated DeltaNet layers a fixed 63 MiB of state.)
"$MOETIER" plan -m "$O" --json --ctx 262144 --vram 6GiB --ram 64GiB --moe-mode hybrid >"$WORK/big.json" || fail "plan big ctx"
"$PY" - "$WORK/big.json" <<'PY' || fail "big ctx plan"
import json, sys
p = json.load(open(sys.argv[1]))
assert not p["fits"] and p["mode"] == "hybrid", p
assert "KV cache for ctx 262144 at f16 needs 5.06 GiB" in p["why"] and "--kv-type q8_0" in p["why"], p["why"]
print(f"ornith-35b at ctx 262144: {p['why']}")
PY

# A skewed popularity profile (every layer: expert e counted 256 - e times) raises the
# expected hit rate above the uniform one, to its coverage of each layer's slots.
"$PY" - "$WORK/pop.json" <<'PY'
import json, sys
json.dump({"version": 1, "model": "ornith-35b", "n_expert": 256, "tokens": 1000,
           "layers": [{"layer": l, "counts": [256 - e for e in range(256)]} for l in range(40)]}, open(sys.argv[1], "w"))
PY
"$MOETIER" plan -m "$O" --json --ram 64GiB --vram 16GiB --popularity "$WORK/pop.json" >"$WORK/pop-plan.json" || fail "plan --popularity"
"$PY" - "$WORK/ornith.json" "$WORK/pop-plan.json" <<'PY' || fail "popularity plan"
import json, sys
u, p = (json.load(open(f)) for f in sys.argv[1:3])
assert "uniform" in u["hit_rate_assumption"] and "popularity" in p["hit_rate_assumption"], p["hit_rate_assumption"]
q = p["pools"][0]
s = min(q["slots_per_layer"])
assert p["hit_rate"] > u["hit_rate"] and p["hit_rate"] >= sum(range(256 - s + 1, 257)) / sum(range(1, 257)) - 1e-9, (p["hit_rate"], u["hit_rate"])
print(f"ornith-35b hit rate: uniform {u['hit_rate']:.3f}, with the skewed profile {p['hit_rate']:.3f}")
PY

# No GPU: cpu only, nothing pinned.
"$MOETIER" plan -m "$O" --json --ram 64GiB >"$WORK/cpu.json" || fail "plan without a GPU"
"$PY" -c 'import json, sys; p = json.load(open(sys.argv[1])); assert p["mode"] == "cpu" and p["fits"] and p["gpu"] == [] and p["pinned_layers"] == [] and p["predicted"]["hybrid"] is None, p' \
  "$WORK/cpu.json" || fail "no-GPU plan"

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
printf 'not a gguf file at all\n' >"$WORK/text.gguf"
# A valid GGUF without tensors: no routed experts (synth writes MoE models only).
"$PY" -c 'import struct, sys; open(sys.argv[1], "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))' "$WORK/empty.gguf"
expect_error 1 "cannot open" -- "$MOETIER" plan -m "$WORK/missing.gguf"
expect_error 1 "magic" -- "$MOETIER" plan -m "$WORK/text.gguf"
expect_error 1 "no routed expert" -- "$MOETIER" plan -m "$WORK/empty.gguf"
expect_error 1 "--vram: '12XB' is not a size" -- "$MOETIER" plan -m "$O" --vram 12XB
expect_error 1 "--pin-budget: 'lots' is not a size" -- "$MOETIER" plan -m "$O" --pin-budget lots
expect_error 1 "--expert-cache" -- "$MOETIER" plan -m "$O" --expert-cache -3GiB
expect_error 1 "unknown KV cache type 'q4_0'" -- "$MOETIER" plan -m "$O" --kv q4_0
expect_error 1 "unknown mode 'gpu'" -- "$MOETIER" plan -m "$O" --moe-mode gpu
expect_error 1 "cannot open|not found|No such" -- "$MOETIER" plan -m "$O" --hw-profile "$WORK/missing.json"
expect_error 1 "cannot open popularity" -- "$MOETIER" plan -m "$O" --popularity "$WORK/missing.json"
expect_error 2 "required" -- "$MOETIER" plan

[ "$fails" -eq 0 ] && echo "plan: all checks passed"
exit $((fails > 0))
