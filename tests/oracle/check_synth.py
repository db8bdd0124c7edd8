#!/usr/bin/env python3
"""oracle_synth: llama.cpp loads moetier's synthetic GGUFs and returns what issue B compares.

usage: check_synth.py MOETIER LLAMA_ORACLE VOCAB_DIR WORK_DIR

For each supported architecture and several weight types (incl. the q4_k_m mix and a
qwen2 tokenizer from a vocab GGUF), `moetier synth` writes a tiny model; llama_oracle
decodes a fixed id sequence and dumps logits and routing. Checked for each file:
  * llama.cpp loads it and the oracle exits 0
  * logits: n_tokens x n_vocab float32, all finite, not constant, rows differ by position
  * routing: one line per (MoE layer, position), top-k distinct expert ids in range,
    weights finite and positive; renormalising archs sum to 1
  * router skew: a model synthesized with --router-skew 2 concentrates routing on a few
    experts (most popular expert's share well above uniform), one with skew 0 does not.
Only the python3 standard library is used.
"""
import json, math, os, struct, subprocess, sys

MOETIER, ORACLE, VOCAB_DIR, WORK = sys.argv[1:5]
os.makedirs(WORK, exist_ok=True)
failures = []


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def synth(name, args):
    path = os.path.join(WORK, name + ".gguf")
    info = json.loads(run([MOETIER, "synth", "-o", path, "--json"] + args).stdout)
    return path, info


def oracle(path, ids):
    logits_path, routing_path = path + ".logits.f32", path + ".routing.jsonl"
    run([ORACLE, "-m", path, "--ids", ",".join(map(str, ids)), "-o", logits_path, "--routing", routing_path, "-t", "2"])
    raw = open(logits_path, "rb").read()
    logits = struct.unpack(f"<{len(raw) // 4}f", raw)
    routing = [json.loads(line) for line in open(routing_path)]
    return logits, routing


def check(name, args, n_layer=2, top_k=2, n_expert=8, renorm=True, ids=None):
    path, info = synth(name, args)
    n_vocab = info["n_vocab"]
    ids = ids or [(i * 37 + 11) % min(n_vocab, 256) for i in range(12)]
    logits, routing = oracle(path, ids)
    where = f"{name} ({' '.join(args)})"
    n = len(ids)
    if len(logits) != n * n_vocab:
        failures.append(f"{where}: {len(logits)} logits, expected {n} x {n_vocab}")
        return routing
    if not all(math.isfinite(x) for x in logits):
        failures.append(f"{where}: non-finite logits")
    rows = [logits[p * n_vocab:(p + 1) * n_vocab] for p in range(n)]
    spread = max(rows[0]) - min(rows[0])
    if spread <= 1e-3:
        failures.append(f"{where}: logits of position 0 are constant")
    if rows[0] == rows[1]:
        failures.append(f"{where}: positions 0 and 1 have identical logits")
    if len(routing) != n_layer * n:
        failures.append(f"{where}: {len(routing)} routing lines, expected {n_layer} x {n}")
    for r in routing:
        e, w = r["experts"], r["weights"]
        if len(e) != top_k or len(set(e)) != top_k or not all(0 <= x < n_expert for x in e):
            failures.append(f"{where}: bad experts {e} at layer {r['layer']} pos {r['pos']}")
            break
        if not all(math.isfinite(x) and x > 0 for x in w):
            failures.append(f"{where}: bad weights {w}")
            break
        if renorm and abs(sum(w) - 1.0) > 1e-4:
            failures.append(f"{where}: weights {w} do not sum to 1")
            break
    print(f"{where}: ok-checked, n_vocab {n_vocab}, logits range [{min(logits):.3f}, {max(logits):.3f}], "
          f"{len(routing)} routing lines, {info['file_bytes']} bytes")
    return routing


# glm4moe, deepseek2: the weights are renormalised and then scaled by 2.5, so they do not sum to 1.
ARCHS = {"qwen3moe": True, "qwen2moe": False, "llama": True, "olmoe": False, "glm4moe": False, "deepseek2": False, "gpt-oss": True, "laguna": False,
         "qwen3next": True, "qwen35moe": True}
MOE_LAYERS = {"laguna": 3, "qwen3next": 4, "qwen35moe": 4}  # MoE layers of each tiny model (others: 2)
TYPES = ["q8_0", "q4_k_m", "f16", "bf16", "q4_0", "q5_1", "q3_k", "q6_k", "iq4_xs", "mxfp4"]
for arch, renorm in ARCHS.items():
    for q in TYPES:
        try:
            check(f"{arch}-{q}", ["--arch", arch, "--quant", q], n_layer=MOE_LAYERS.get(arch, 2), renorm=renorm)
        except Exception as exc:  # noqa: BLE001 - report every failing combination
            failures.append(f"{arch}/{q}: {exc}")

# A real tokenizer: Qwen2's vocabulary (151,936 tokens), with the q4_k_m mix.
try:
    check("qwen3moe-q4_k_m-qwen2vocab",
          ["--arch", "qwen3moe", "--quant", "q4_k_m", "--vocab", os.path.join(VOCAB_DIR, "ggml-vocab-qwen2.gguf")],
          ids=[9707, 11, 1879, 0, 374, 264, 1273, 13, 151643, 42, 7, 100])
except Exception as exc:  # noqa: BLE001
    failures.append(f"qwen2 vocab: {exc}")

# Router skew seen through llama.cpp's own routing.
ids = [(i * 53 + 7) % 256 for i in range(96)]
shares = {}
for skew in ("0", "2"):
    try:
        r = check(f"skew{skew}", ["--arch", "qwen3moe", "--experts", "16", "--router-skew", skew, "--quant", "f16"],
                  n_expert=16, ids=ids)
        counts = [0] * 16
        for line in r:
            for e in line["experts"]:
                counts[e] += 1
        shares[skew] = max(counts) / sum(counts)
    except Exception as exc:  # noqa: BLE001
        failures.append(f"skew {skew}: {exc}")
if len(shares) == 2:
    uniform = 1 / 16
    print(f"router skew: most popular expert share {shares['0']:.3f} at skew 0, {shares['2']:.3f} at skew 2 "
          f"(uniform {uniform:.3f})")
    if shares["2"] < 3 * uniform:
        failures.append(f"skew 2: top expert share {shares['2']:.3f} is not well above uniform {uniform:.3f}")
    if shares["0"] > 2.5 * uniform:
        failures.append(f"skew 0: top expert share {shares['0']:.3f} is far above uniform {uniform:.3f}")

if failures:
    print("oracle_synth: FAILED")
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("oracle_synth: PASSED")
