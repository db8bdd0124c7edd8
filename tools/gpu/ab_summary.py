#!/usr/bin/env python3
"""The table of tools/gpu/ab.sh bench: every repetition of every process, per configuration
and build, the first repetition apart, and new / base of the medians of the rest."""
import json
import pathlib
import re
import statistics
import sys

out = pathlib.Path(sys.argv[1])
rows = {}  # (config, test) -> build -> [(round, samples)]
for log in sorted(out.glob("*.log")):
    m = re.match(r"(res_tg|res_pp4096|res_pp|tier_s\d+_b\d+)_(base|new)_r(\d+)$", log.stem)
    if not m:
        continue
    text = log.read_text()
    found = re.search(r"^\[", text, re.M)  # the JSON array opens a line (log lines come before it)
    if not found:
        continue
    start = found.start()
    try:
        results = json.loads(text[start:])
    except json.JSONDecodeError:
        continue
    for res in results:
        config = "resident" if m.group(1).startswith("res") else m.group(1)
        rows.setdefault((config, res["test"]), {}).setdefault(m.group(2), []).append(
            (int(m.group(3)), res["samples_ts"]))

print(f"{'config':<14} {'test':<8} {'build':<5} {'t/s per process (each repetition)':<58} median")
for (config, test), builds in sorted(rows.items()):
    med = {}
    for build in ("base", "new"):
        runs = sorted(builds.get(build, []))
        flat = [s for _, samples in runs for s in samples]
        med[build] = statistics.median(flat) if flat else float("nan")
        shown = "; ".join(" ".join(f"{s:.2f}" for s in samples) for _, samples in runs)
        print(f"{config:<14} {test:<8} {build:<5} {shown:<58} {med[build]:.2f}")
    if med["base"] == med["base"] and med["base"] > 0:
        print(f"{'':<14} {test:<8} new/base {med['new'] / med['base']:.3f}")
