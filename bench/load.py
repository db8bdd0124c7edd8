#!/usr/bin/env python3
"""Load tool for any OpenAI-compatible server (issue 27): N concurrent streaming chat
requests (/v1/chat/completions, stream: true; or /v1/completions), each with a prompt of a fixed number of
tokens and a fixed number of output tokens; one JSON report.

usage: bench/load.py --url http://127.0.0.1:8080 --streams 8 --requests 4 \
           --prompt-tokens 128 --output-tokens 256 [--duration S] [--pid PID] [-o out.json]

What it does:
  1. Checks the server (GET /v1/models: the model id unless --model; a refused connection or
     an HTTP error is a one-line error, exit 2).
  2. Builds one prompt per request, each different from its first word on (so no server
     reuses another request's cached prefix): through the server's own /tokenize and
     /detokenize (moetier serve and llama-server: {"content", "add_special"} -> {"tokens"})
     to exactly the target count, else an approximation of one token per filler word
     ("prompt_method" in the JSON). The target is the whole prompt the server evaluates
     (chat template included): the warm-up request's usage gives the template's overhead.
     --endpoint completions sends the text as a /v1/completions prompt instead (no chat
     template; llama-server still parses the reply). Random-weight models: llama-server fails
     a request whose output is not valid UTF-8 and its chat route may reject random text;
     --ban-invalid-utf8 MODEL.gguf bans the tokens that are not valid UTF-8 alone.
  3. Sends --warmup requests one after another (not measured), then --streams clients each
     sending its requests back to back (--requests each, or until --duration seconds).
     Every request asks for max_tokens = --output-tokens with "ignore_eos": true (llama-server
     and moetier serve then generate exactly that many; --no-ignore-eos leaves it out) and
     stream_options.include_usage.
  4. Times each SSE chunk on arrival. Time to first token: from sending the request to the
     first chunk carrying text. Inter-token latency: the gaps between consecutive chunks
     carrying text; a chunk carrying several tokens (a server holding text back for a stop
     string or an incomplete UTF-8 character) is one gap, not split. The time per output
     token (last text chunk - first) / (output tokens - 1) per request counts every token.
     Output tokens come from the usage chunk, else the chunks carrying text are counted
     ("output_tokens_source" per request).
  5. --long-prompt N (chunked prefill under load): --long-prompt-after seconds into the run, one
     more request with an N-token prompt and max_tokens 1 is sent while the streams decode;
     "long_prompt" in the JSON holds its prefill time and the streams' inter-token latency
     while it was being admitted (gaps that overlap its send .. first token) beside the
     latency outside that window (the server needs a free slot for it: --max-running N+1).

Exit status: 0; 1 when a request failed (HTTP error, broken stream, error event), or with
--require-exact when a request got another number of output tokens than asked, unless
--allow-failures; 2 for a bad command line or a server that cannot be reached.
Python 3.11 standard library only.
"""
import argparse
import asyncio
import json
import math
import os
import random
import shutil
import sys
import time
import urllib.parse

import gguf_vocab

VERSION = 1
WORDS = ("time light river stone garden window morning silver forest music letter winter bridge "
         "candle paper mountain village ocean harbor market friend summer island meadow thunder "
         "shadow valley castle feather mirror lantern orchard pepper copper ribbon saddle timber "
         "violet walnut yellow anchor basket cabin dragon engine falcon ginger hammer jacket kettle "
         "ladder marble needle pillow rabbit sailor tunnel velvet wagon zebra").split()


class LoadError(Exception):
    """A request that failed: the message says how."""


class Unreachable(Exception):
    """The server cannot be reached or refuses the set-up requests."""


# ---------------------------------------------------------------- HTTP/1.1 over asyncio


class Server:
    def __init__(self, url, api_key, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http":
            raise SystemExit(f"load.py: error: only http:// URLs are supported, not '{url}'")
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.prefix = u.path.rstrip("/")
        self.url = url
        self.api_key = api_key
        self.timeout = timeout

    async def open(self, method, path, body=None):
        """Sends one request; returns (status, headers, body chunk iterator, writer)."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout)
        except ConnectionRefusedError:
            raise Unreachable(f"cannot connect to {self.url}: connection refused (is the server running?)")
        except (OSError, asyncio.TimeoutError) as e:
            raise Unreachable(f"cannot connect to {self.url}: {e or 'timed out'}")
        data = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close",
                "Accept: */*", f"Content-Length: {len(data)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        if self.api_key:
            head.append(f"Authorization: Bearer {self.api_key}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()
        line = await self._read(reader.readline())
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            writer.close()
            raise LoadError(f"not an HTTP response: {line[:80]!r}")
        headers = {}
        while True:
            h = await self._read(reader.readline())
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers, self._body(reader, headers), writer

    async def _read(self, coro):
        try:
            return await asyncio.wait_for(coro, self.timeout)
        except asyncio.TimeoutError:
            raise LoadError(f"no data from the server for {self.timeout:g} s")
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            raise LoadError(f"the connection broke: {e}")

    async def _body(self, reader, headers):
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await self._read(reader.readline())
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await self._read(reader.readline())) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield await self._read(reader.readexactly(size))
                await self._read(reader.readexactly(2))
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left > 0:
                piece = await self._read(reader.read(min(left, 65536)))
                if not piece:
                    raise LoadError(f"the body ended {left} bytes short")
                left -= len(piece)
                yield piece
        else:
            while piece := await self._read(reader.read(65536)):
                yield piece

    async def call(self, method, path, body=None):
        """A whole non-streaming exchange: (status, parsed JSON or None, raw text)."""
        status, _, chunks, writer = await self.open(method, path, body)
        raw = b"".join([c async for c in chunks])
        writer.close()
        try:
            return status, json.loads(raw), raw.decode("utf-8", "replace")
        except ValueError:
            return status, None, raw.decode("utf-8", "replace")


def error_text(status, parsed, raw):
    msg = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(msg, dict):
        msg = msg.get("message")
    return f"HTTP {status}: {msg or raw[:200].strip()}"


# ---------------------------------------------------------------- prompts


def filler(index, n_words):
    rng = random.Random(1000003 * index + 17)
    return f"Request {index}: tell a long story about " + " ".join(rng.choice(WORDS) for _ in range(n_words))


class PromptBuilder:
    """User messages of an exact token count (through /tokenize) or approximate."""

    def __init__(self, server):
        self.server = server
        self.exact = False

    async def probe(self):
        try:
            status, j, _ = await self.server.call("POST", "/tokenize", {"content": "hello world", "add_special": False})
        except LoadError:
            return
        self.exact = status == 200 and isinstance(j, dict) and isinstance(j.get("tokens"), list) and len(j["tokens"]) > 0

    async def count(self, text):
        status, j, raw = await self.server.call("POST", "/tokenize", {"content": text, "add_special": False})
        if status != 200 or not isinstance(j, dict):
            raise Unreachable(f"/tokenize: {error_text(status, j, raw)}")
        return [t if isinstance(t, int) else t["id"] for t in j["tokens"]]

    async def build(self, index, n_tokens):
        """(text, token count as tokenized alone)."""
        if not self.exact:
            return filler(index, max(1, n_tokens - 8)), n_tokens
        words = n_tokens + 8
        ids = await self.count(filler(index, words))
        while len(ids) < n_tokens:
            words *= 2
            ids = await self.count(filler(index, words))
        best = None
        for cut in range(n_tokens, max(0, n_tokens - 8), -1):  # a cut mid-word may re-tokenize longer
            status, j, raw = await self.server.call("POST", "/detokenize", {"tokens": ids[:cut]})
            if status != 200 or not isinstance(j, dict) or "content" not in j:
                raise Unreachable(f"/detokenize: {error_text(status, j, raw)}")
            text = j["content"]
            got = len(await self.count(text))
            if best is None or abs(got - n_tokens) < abs(best[1] - n_tokens):
                best = (text, got)
            if got == n_tokens:
                break
        return best


# ---------------------------------------------------------------- one streamed request


ROUTES = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


async def stream_chat(server, body, route):
    """Sends one streaming request; returns its measurements (raises LoadError)."""
    rec = {"chunk_times": [], "usage": None, "finish_reason": None, "text_chunks": 0}
    sent = time.perf_counter()
    try:
        status, headers, chunks, writer = await server.open("POST", route, body)
    except Unreachable as e:
        raise LoadError(str(e))
    try:
        if status != 200:
            raw = b"".join([c async for c in chunks]).decode("utf-8", "replace")
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            raise LoadError(error_text(status, parsed, raw))
        buf, done = b"", False
        async for piece in chunks:
            now = time.perf_counter()
            buf += piece.replace(b"\r\n", b"\n")
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                done = handle_event(event.decode("utf-8", "replace"), now, rec) or done
        if not done:
            raise LoadError("the stream ended without data: [DONE]")
    finally:
        writer.close()
    rec["sent"], rec["ended"] = sent, time.perf_counter()
    return rec


def handle_event(event, now, rec):
    """One SSE event; True for [DONE]."""
    data = []
    for line in event.split("\n"):
        if line.startswith("error:"):
            raise LoadError(f"error event: {line[6:].strip()[:200]}")
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
    if not data:
        return False
    payload = "\n".join(data)
    if payload == "[DONE]":
        return True
    try:
        j = json.loads(payload)
    except ValueError:
        raise LoadError(f"an SSE event is not JSON: {payload[:120]!r}")
    if "error" in j:
        e = j["error"]
        raise LoadError(f"error event: {e.get('message') if isinstance(e, dict) else e}")
    if j.get("usage"):
        rec["usage"] = j["usage"]
    has_text = False
    for c in j.get("choices") or []:
        delta = c.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls") or c.get("text"):
            has_text = True
        if c.get("finish_reason"):
            rec["finish_reason"] = c["finish_reason"]
    if has_text:
        rec["chunk_times"].append(now)
        rec["text_chunks"] += 1
    return False


# ---------------------------------------------------------------- statistics


def percentile(values, p):
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values):
    return {"p50": percentile(values, 50), "p99": percentile(values, 99),
            "mean": sum(values) / len(values) if values else None, "n": len(values)}


# ---------------------------------------------------------------- server memory


class MemorySampler:
    """Peak resident memory of a process (sampled VmRSS and the kernel's VmHWM) and, when
    nvidia-smi exists, its peak GPU memory."""

    def __init__(self, pid, interval=0.1):
        self.pid, self.interval = pid, interval
        self.peak_rss_kib, self.peak_gpu_mib = 0, None
        self.nvidia_smi = shutil.which("nvidia-smi")

    def status_kib(self, key):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    async def gpu_mib(self):
        proc = await asyncio.create_subprocess_exec(
            self.nvidia_smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        total = None
        for line in out.decode().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) == 2 and f[0] == str(self.pid) and f[1].isdigit():
                total = (total or 0) + int(f[1])
        return total

    async def run(self, stop):
        tick = 0
        while not stop.is_set():
            rss = self.status_kib("VmRSS")
            if rss:
                self.peak_rss_kib = max(self.peak_rss_kib, rss)
            if self.nvidia_smi and tick % 5 == 0:
                g = await self.gpu_mib()
                if g is not None:
                    self.peak_gpu_mib = max(self.peak_gpu_mib or 0, g)
            tick += 1
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    def report(self):
        return {"pid": self.pid, "peak_rss_kib_sampled": self.peak_rss_kib or None,
                "vmhwm_kib": self.status_kib("VmHWM"), "peak_gpu_mib_sampled": self.peak_gpu_mib}


# ---------------------------------------------------------------- the run


def request_body(args, model, content):
    body = {"model": model, "max_tokens": args.output_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": content}]
    else:
        body["prompt"] = content
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.temperature is not None:
        body["temperature"] = args.temperature
    if args.banned:
        body["logit_bias"] = args.banned
    return body


def measure(rec, stream, index, prompt_tokens_alone):
    """The per-request entry of the report from stream_chat's record."""
    times = rec["chunk_times"]
    usage = rec["usage"] or {}
    out_tokens = usage.get("completion_tokens")
    source = "usage"
    if not isinstance(out_tokens, int):
        out_tokens, source = rec["text_chunks"], "chunks"
    r = {"stream": stream, "index": index, "ok": True, "prompt_tokens": usage.get("prompt_tokens"),
         "prompt_tokens_alone": prompt_tokens_alone, "output_tokens": out_tokens, "output_tokens_source": source,
         "text_chunks": rec["text_chunks"], "finish_reason": rec["finish_reason"],
         "ttft_s": times[0] - rec["sent"] if times else None, "e2e_s": rec["ended"] - rec["sent"],
         "tpot_s": (times[-1] - times[0]) / (out_tokens - 1) if times and out_tokens > 1 else None,
         "start_s": rec["sent"], "end_s": rec["ended"]}
    r["itl_s"] = [b - a for a, b in zip(times, times[1:])]
    r["itl_spans"] = list(zip(times, times[1:]))
    return r


async def one(server, args, model, prompt, stream, index):
    text, alone = prompt
    try:
        rec = await stream_chat(server, request_body(args, model, text), ROUTES[args.endpoint])
    except LoadError as e:
        return {"stream": stream, "index": index, "ok": False, "error": str(e)}
    return measure(rec, stream, index, alone)


async def client(server, args, model, prompts, stream, deadline, results):
    i = 0
    while True:
        if deadline is None and i >= args.requests:
            return
        if deadline is not None and time.perf_counter() >= deadline:
            return
        prompt = prompts[(stream + i * args.streams) % len(prompts)]
        results.append(await one(server, args, model, prompt, stream, i))
        i += 1


async def long_prompt(server, args, model, prompt, start, box):
    """The --long-prompt request: sent --long-prompt-after seconds after start, max_tokens 1."""
    await asyncio.sleep(max(0.0, start + args.long_prompt_after - time.perf_counter()))
    body = request_body(args, model, prompt[0])
    body["max_tokens"] = 1
    try:
        rec = await stream_chat(server, body, ROUTES[args.endpoint])
    except LoadError as e:
        box["error"] = str(e)
        return
    times = rec["chunk_times"]
    box.update(sent=rec["sent"], first=times[0] if times else rec["ended"], ended=rec["ended"],
               prompt_tokens=(rec["usage"] or {}).get("prompt_tokens"), prompt_tokens_alone=prompt[1])


def long_prompt_report(args, ok, box, start):
    """The streams' inter-token gaps during the long prompt's admission vs outside it."""
    if not box or "error" in box:
        return {"tokens": args.long_prompt, "error": (box or {}).get("error", "not sent")}
    lo, hi = box["sent"], box["first"]
    during = [b - a for r in ok for a, b in r["itl_spans"] if b > lo and a < hi]
    outside = [b - a for r in ok for a, b in r["itl_spans"] if not (b > lo and a < hi)]
    d, o = summary(during), summary(outside)
    return {"tokens": args.long_prompt, "prompt_tokens": box["prompt_tokens"],
            "prompt_tokens_alone": box["prompt_tokens_alone"], "sent_after_s": lo - start,
            "admission_s": hi - lo, "itl_during_s": d, "itl_outside_s": o,
            "p99_during_over_p50_outside": d["p99"] / o["p50"] if d["p99"] and o["p50"] else None,
            "max_during_over_p50_outside": max(during) / o["p50"] if during and o["p50"] else None,
            "note": "gaps between a running stream's text chunks that overlap [long request sent, its first "
                    "token]; outside: every other gap of the measured requests"}


async def prepare(server, args):
    """(model id, prompt method, per-request prompts, template overhead, warm-up results)."""
    status, j, raw = await server.call("GET", "/v1/models")
    if status != 200:
        raise Unreachable(f"GET /v1/models: {error_text(status, j, raw)}")
    model = args.model
    if not model:
        data = (j or {}).get("data") or []
        if not data or "id" not in data[0]:
            raise Unreachable(f"GET /v1/models lists no model (give --model): {raw[:200]}")
        model = data[0]["id"]
    builder = PromptBuilder(server)
    await builder.probe()
    # The warm-up learns the chat template's overhead: its usage counts the whole prompt.
    overhead, warm = 0, []
    for w in range(args.warmup):
        prompt = await builder.build(-1 - w, max(1, args.prompt_tokens - overhead))
        r = await one(server, args, model, prompt, -1, w)
        if not r["ok"]:
            raise Unreachable(f"the warm-up request failed: {r['error']}")
        if isinstance(r["prompt_tokens"], int) and w == 0:
            overhead = r["prompt_tokens"] - prompt[1]
        warm.append(r)
    content = args.prompt_tokens - overhead
    if content < 8:
        raise Unreachable(f"--prompt-tokens {args.prompt_tokens}: the chat template alone takes {overhead} tokens")
    count = args.streams * (args.requests if args.duration is None else args.prompt_pool)
    prompts = [await builder.build(i, content) for i in range(count)]
    if args.long_prompt:
        if args.long_prompt - overhead < 8:
            raise Unreachable(f"--long-prompt {args.long_prompt}: the chat template alone takes {overhead} tokens")
        args.long_prompt_text = await builder.build(10**6, args.long_prompt - overhead)
    return model, ("tokenize" if builder.exact else "approx_words"), prompts, overhead, warm


def report(args, model, method, overhead, results, wall, memory, long_info=None):
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    short = [r for r in ok if r["output_tokens"] != args.output_tokens]
    out_tokens = sum(r["output_tokens"] for r in ok)
    itl = [g for r in ok for g in r["itl_s"]]
    per_request = [{k: v for k, v in r.items() if k not in ("itl_s", "itl_spans", "start_s", "end_s")}
                   for r in sorted(results, key=lambda r: (r["stream"], r["index"]))]
    return {
        "tool": "bench/load.py", "version": VERSION, "label": args.label, "url": args.url, "model": model,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {"streams": args.streams, "requests_per_stream": None if args.duration else args.requests,
                   "duration_s": args.duration, "prompt_tokens": args.prompt_tokens,
                   "output_tokens": args.output_tokens, "ignore_eos": args.ignore_eos, "endpoint": args.endpoint,
                   "temperature": args.temperature, "warmup": args.warmup,
                   "banned_invalid_utf8_tokens": len(args.banned)},
        "prompt_method": method, "chat_template_overhead_tokens": overhead,
        "prompt_tokens_seen": sorted({r["prompt_tokens"] for r in ok if isinstance(r["prompt_tokens"], int)}),
        "requests_completed": len(ok), "requests_failed": len(failed),
        "requests_other_length": len(short),
        "output_tokens_total": out_tokens, "wall_s": wall,
        "output_tok_s": out_tokens / wall if wall > 0 else None,
        "ttft_s": summary([r["ttft_s"] for r in ok if r["ttft_s"] is not None]),
        "itl_s": summary(itl),
        "tpot_s": summary([r["tpot_s"] for r in ok if r["tpot_s"] is not None]),
        "e2e_s": summary([r["e2e_s"] for r in ok]),
        "method_notes": {
            "ttft": "from sending the request to the first SSE chunk carrying text",
            "itl": "gaps between consecutive SSE chunks carrying text, pooled over requests; a chunk "
                   "carrying several tokens is one gap (not split)",
            "tpot": "per request (last text chunk - first) / (output tokens - 1)",
            "output_tok_s": "output tokens of completed requests / wall time from the first request "
                            "sent to the last one ended (warm-up excluded)",
            "output_tokens": "usage.completion_tokens of the stream's usage chunk, else chunks carrying text"},
        "errors": sorted({r["error"] for r in failed})[:10],
        "server_memory": memory,
        "long_prompt": long_info,
        "per_request": per_request,
    }


async def run(args):
    server = Server(args.url, args.api_key, args.timeout)
    if args.wait > 0:
        await wait_health(server, args.wait)
    model, method, prompts, overhead, _ = await prepare(server, args)
    sampler = MemorySampler(args.pid) if args.pid else None
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop)) if sampler else None
    results = []
    start = time.perf_counter()
    deadline = start + args.duration if args.duration is not None else None
    box = {}
    tasks = [client(server, args, model, prompts, s, deadline, results) for s in range(args.streams)]
    if args.long_prompt:
        tasks.append(long_prompt(server, args, model, args.long_prompt_text, start, box))
    await asyncio.gather(*tasks)
    ok = [r for r in results if r["ok"]]
    wall = (max(r["end_s"] for r in ok) - min(r["start_s"] for r in ok)) if ok else time.perf_counter() - start
    stop.set()
    if sampling:
        await sampling
    long_info = long_prompt_report(args, ok, box, start) if args.long_prompt else None
    return report(args, model, method, overhead, results, wall, sampler.report() if sampler else None, long_info)


async def wait_health(server, seconds):
    end = time.perf_counter() + seconds
    last = ""
    while time.perf_counter() < end:
        try:
            status, _, raw = await server.call("GET", "/health")
            if status == 200:
                return
            last = f"HTTP {status}: {raw[:100]}"
        except (Unreachable, LoadError) as e:
            last = str(e)
        await asyncio.sleep(0.25)
    raise Unreachable(f"{server.url}/health not ready after {seconds:g} s ({last})")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the server's base URL (default %(default)s)")
    ap.add_argument("--model", help="the model id to send (default: the first of GET /v1/models)")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""), help="Bearer key ($OPENAI_API_KEY)")
    ap.add_argument("--streams", type=int, default=1, help="concurrent streams (default 1)")
    ap.add_argument("--requests", type=int, default=4, help="requests per stream (default 4)")
    ap.add_argument("--duration", type=float, help="instead of --requests: each stream sends until S seconds passed")
    ap.add_argument("--prompt-pool", type=int, default=8, help="with --duration: prompts per stream, reused in turn")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="prompt tokens (chat template included)")
    ap.add_argument("--output-tokens", type=int, default=128, help="max_tokens of each request")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="do not send ignore_eos: true (the output may end early at EOS)")
    ap.add_argument("--endpoint", choices=("chat", "completions"), default="chat",
                    help="chat: /v1/chat/completions (default); completions: /v1/completions with the text as the "
                         "prompt (no chat template, no reply parsing: llama-server's chat parser rejects the "
                         "random text of random-weight models)")
    ap.add_argument("--ban-invalid-utf8", metavar="GGUF",
                    help="ban (logit_bias -100) the tokens of GGUF's vocabulary that are not valid UTF-8 alone, so "
                         "a random-weight model writes valid text (llama-server fails a request whose output is not)")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the server's)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up requests before the measurement (default 1; 0: --prompt-tokens counts the message alone)")
    ap.add_argument("--pid", type=int, help="the server's process id: report its peak RSS (and GPU memory)")
    ap.add_argument("--wait", type=float, default=0, help="wait up to S seconds for GET /health to answer 200")
    ap.add_argument("--timeout", type=float, default=300, help="seconds without data before a request fails")
    ap.add_argument("--long-prompt", type=int, default=0, metavar="N",
                    help="also send one N-token prompt (max_tokens 1) while the streams decode (chunked prefill)")
    ap.add_argument("--long-prompt-after", type=float, default=1.0, metavar="S",
                    help="seconds after the start that the --long-prompt request is sent (default %(default)s)")
    ap.add_argument("--label", default="", help="free text copied into the JSON")
    ap.add_argument("-o", "--out", help="write the JSON here (default: stdout)")
    ap.add_argument("--require-exact", action="store_true",
                    help="a request with another number of output tokens than asked counts as failed")
    ap.add_argument("--allow-failures", action="store_true", help="exit 0 even when requests failed")
    args = ap.parse_args(argv)
    for name in ("streams", "requests", "prompt_tokens", "output_tokens", "prompt_pool"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0 or (args.duration is not None and args.duration <= 0) or args.timeout <= 0:
        ap.error("--warmup must be >= 0, --duration and --timeout > 0")
    if args.long_prompt and (args.long_prompt < 16 or args.long_prompt_after < 0):
        ap.error("--long-prompt must be at least 16 and --long-prompt-after >= 0")
    if args.prompt_tokens < 16:
        ap.error("--prompt-tokens must be at least 16 (the chat template takes some)")
    if args.pid is not None and not os.path.exists(f"/proc/{args.pid}"):
        ap.error(f"--pid {args.pid}: no such process")
    args.banned = {}
    if args.ban_invalid_utf8:
        try:
            args.banned = {str(i): -100 for i in gguf_vocab.invalid_utf8_tokens(args.ban_invalid_utf8)}
        except (OSError, gguf_vocab.GgufError) as e:
            ap.error(f"--ban-invalid-utf8: {e}")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        rep = asyncio.run(run(args))
    except Unreachable as e:
        print(f"load.py: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(rep, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    bad = rep["requests_failed"] + (rep["requests_other_length"] if args.require_exact else 0)
    t, i = rep["ttft_s"], rep["itl_s"]
    fmt = lambda v: "-" if v is None else f"{v * 1000:.1f}"
    print(f"load.py: {args.streams} streams: {rep['requests_completed']} completed, {rep['requests_failed']} failed, "
          f"{rep['requests_other_length']} of another length; {rep['output_tok_s'] or 0:.2f} output tok/s; "
          f"ttft p50 {fmt(t['p50'])} p99 {fmt(t['p99'])} ms; itl p50 {fmt(i['p50'])} p99 {fmt(i['p99'])} ms",
          file=sys.stderr)
    lp = rep.get("long_prompt")
    if lp and "error" not in lp:
        d, o = lp["itl_during_s"], lp["itl_outside_s"]
        print(f"load.py: long prompt {lp['prompt_tokens']} tokens admitted in {lp['admission_s'] * 1000:.0f} ms; "
              f"streams' itl during it p50 {fmt(d['p50'])} p99 {fmt(d['p99'])} ms (n {d['n']}), outside p50 "
              f"{fmt(o['p50'])} ms: p99 during / p50 outside {lp['p99_during_over_p50_outside'] or 0:.2f}", file=sys.stderr)
    elif lp:
        print(f"load.py: long prompt failed: {lp['error']}", file=sys.stderr)
        bad = bad + 1
    for e in rep["errors"]:
        print(f"load.py: request error: {e}", file=sys.stderr)
    return 1 if bad and not args.allow_failures else 0


if __name__ == "__main__":
    sys.exit(main())
