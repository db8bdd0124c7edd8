// Helpers shared by the `moetier serve` tests: a synthetic model with a real tokenizer and
// chat template, a server on a free port (--port 0, the port read from its start-up line),
// raw HTTP requests, SSE parsing, the reference token counts from `moetier run`.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { mkdirSync, existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

export function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

export function check(cond, message) {
  if (!cond) fail(message);
}

// A tiny qwen3moe with the Qwen2 vocabulary (ChatML template): fast enough for CI.
export function makeModel(moetier, vocab, work) {
  mkdirSync(work, { recursive: true });
  const model = path.join(work, 'tiny.gguf');
  if (!existsSync(model)) {
    execFileSync(moetier, ['synth', '--arch', 'qwen3moe', '--vocab', vocab, '--embd', '64', '--heads', '2',
      '--heads-kv', '1', '--head-dim', '32', '--expert-ff', '64', '-o', model], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  return model;
}

// The prompt token count `moetier run` reports (stderr "prompt: N tokens").
export function runPromptTokens(moetier, model, args) {
  const r = spawnSync(moetier, ['run', '-m', model, '-n', '0', '-t', '1', ...args], { encoding: 'utf8' });
  const m = /prompt: (\d+) tokens/.exec(r.stderr);
  check(r.status === 0 && m, `moetier run gave no prompt token count: ${r.stderr}`);
  return Number(m[1]);
}

export async function startServer(moetier, model, args = []) {
  const proc = spawn(moetier, ['serve', '-m', model, '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const limit = Number(process.env.SERVE_START_S ?? 60);  // a large model on a GPU loads for longer
    const timer = setTimeout(() => reject(new Error(`no start-up line after ${limit} s:\n${log}`)), limit * 1000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`moetier serve exited (${code}):\n${log}`)));
  });
  const server = {
    proc, port, base: `http://127.0.0.1:${port}`, pid: proc.pid,
    log: () => log,
    exited: false,
    async stop() {
      const code = await new Promise((resolve) => {
        proc.removeAllListeners('exit');
        if (proc.exitCode !== null) return resolve(proc.exitCode);
        const timer = setTimeout(() => resolve('timeout'), 15000);
        proc.on('exit', (c, sig) => { clearTimeout(timer); resolve(c ?? sig); });
        proc.kill('SIGTERM');
      });
      check(code === 0, `moetier serve did not exit cleanly on SIGTERM: ${code}\n${log}`);
    },
  };
  proc.on('exit', (code, sig) => { server.exited = true; server.exitInfo = code ?? sig; });
  const health = await request(server, 'GET', '/health');
  check(health.status === 200, `/health answered ${health.status}`);
  return server;
}

// One HTTP request on a fresh connection (with Content-Length): {status, headers, body}.
// body: string or Buffer.
export function request(server, method, route, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const length = body === undefined ? {} : { 'Content-Length': Buffer.byteLength(body) };
    const req = http.request(`${server.base}${route}`, { method, headers: { ...length, ...headers }, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export function postJson(server, route, obj, headers = {}) {
  return request(server, 'POST', route, {
    headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(obj),
  });
}

// SSE body -> the JSON of each event; the [DONE] terminator must end it, nothing after.
export function parseSse(body) {
  check(body.endsWith('data: [DONE]\n\n'), `stream does not end with data: [DONE]: ...${body.slice(-200)}`);
  const events = body.split('\n\n');
  check(events.pop() === '', 'stream does not end with a blank line');
  check(events.pop() === 'data: [DONE]', 'last event is not [DONE]');
  return events.map((e) => {
    check(e.startsWith('data: ') && !e.includes('\n'), `malformed SSE event: ${JSON.stringify(e)}`);
    try {
      return JSON.parse(e.slice(6));
    } catch {
      return fail(`SSE event is not JSON: ${e}`);
    }
  });
}

export function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

export async function metrics(server, headers = {}) {
  const r = await request(server, 'GET', '/metrics', { headers });
  check(r.status === 200, `/metrics answered ${r.status}`);
  const values = {};
  for (const line of r.body.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    values[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return values;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The server's arguments: the test's defaults, each one overridden by a flag of the same
// name in $SERVE_ARGS (whitespace-separated, e.g. "--device cuda -t 16"), which come last:
// the same test then runs against `moetier serve --device cuda` on a GPU machine.
export function serveArgs(defaults) {
  const extra = (process.env.SERVE_ARGS ?? '').split(/\s+/).filter((a) => a !== '');
  const given = new Set(extra.filter((a) => a.startsWith('-')));
  const kept = [];
  for (let i = 0; i < defaults.length; ++i) {
    const takesValue = i + 1 < defaults.length && !defaults[i + 1].startsWith('-');
    if (!given.has(defaults[i])) kept.push(...defaults.slice(i, takesValue ? i + 2 : i + 1));
    if (takesValue) ++i;
  }
  return [...kept, ...extra];
}
