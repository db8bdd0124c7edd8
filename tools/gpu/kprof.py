#!/usr/bin/env python3
"""Per-kernel time of a decode run from an ncu CSV (gpu__time_duration.sum per launch).

usage: kprof.py LABEL CSV TOKENS
Groups launches by kernel name and prints, per kernel, the launches and microseconds per
decoded token (total / TOKENS), sorted by time, then the sum: the step as the kernels
alone would take it, serialised and without launch gaps.
"""
import csv
import sys
from collections import defaultdict


def main() -> int:
    label, path, tokens = sys.argv[1], sys.argv[2], float(sys.argv[3])
    count = defaultdict(int)
    ns = defaultdict(float)
    with open(path, newline="") as f:
        # ncu prints its own lines (==PROF==) before the CSV header
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"]
        unit = row.get("Metric Unit", "ns")
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1.0, "nsecond": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, 1.0)
        count[name] += 1
        ns[name] += value * scale
    total = sum(ns.values())
    print(f"== {label}: {sum(count.values())} launches, {total / 1e3 / tokens:.1f} us of kernels per token")
    print(f"{'us/token':>9} {'launch/tok':>10} {'us/launch':>9}  kernel")
    for name in sorted(ns, key=ns.get, reverse=True):
        print(f"{ns[name] / 1e3 / tokens:9.1f} {count[name] / tokens:10.2f} {ns[name] / 1e3 / count[name]:9.2f}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
