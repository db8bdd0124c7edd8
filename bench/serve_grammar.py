#!/usr/bin/env python3
"""Grammar-constrained decoding's cost in `moetier serve`: tokens per second of one request
at a time, unconstrained and under response_format, side by side in one server.

usage: bench/serve_grammar.py MOETIER [MODEL] [--tokens N] [--reps R] [--threads T]

Each case generates N tokens (the schemas keep the text inside one long string, so no case
ends early) at temperature 1 with fixed seeds; the first request of a constrained case
also builds its grammar's DFA and token masks (reported apart as "cold"). Prints one line
per case: tok/s (median of R) and its ratio to the unconstrained case.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request

CASES = {
    "unconstrained": None,
    "json_schema string": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
    "json_schema maxLength": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
        "type": "object", "properties": {"text": {"type": "string", "maxLength": 4000}}, "required": ["text"]}}},
}


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["usage"]["completion_tokens"] / (time.perf_counter() - t0), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moetier")
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cmd = [a.moetier, "serve", "--port", "0", "-t", str(a.threads), "-c", "1024", "--max-running", "1"]
    if a.model:
        cmd += ["-m", a.model]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    log = ""
    while True:
        line = proc.stderr.readline()
        if not line:
            sys.exit("moetier serve exited:\n" + log)
        log += line
        m = re.search(r"listening on (http://[^\s]+)", line)
        if m:
            base = m.group(1)
            break
    try:
        for _ in range(3):  # warm-up: the model's pages in, the clocks up
            post(base, {"prompt": "And God said", "max_tokens": a.tokens, "temperature": 1.0, "seed": 1})
        results = {}
        for name, rf in CASES.items():
            speeds = []
            cold = None
            for rep in range(a.reps + 1):
                body = {"prompt": "And God said", "max_tokens": a.tokens, "temperature": 1.0, "seed": 100 + rep}
                if rf:
                    body["response_format"] = rf
                tps, out = post(base, body)
                if out["usage"]["completion_tokens"] != a.tokens:
                    print(f"  {name}: only {out['usage']['completion_tokens']} tokens", file=sys.stderr)
                if rep == 0:
                    cold = tps
                else:
                    speeds.append(tps)
            results[name] = (statistics.median(speeds), cold)
        base_tps = results["unconstrained"][0]
        for name, (tps, cold) in results.items():
            print(f"{name:24s} {tps:8.1f} tok/s  ({tps / base_tps:6.1%} of unconstrained; cold first request {cold:.1f})")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
