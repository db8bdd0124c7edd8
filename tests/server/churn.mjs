// `moetier serve` under load with clients that leave (issue 27's "bad input and load"):
// STREAMS concurrent streaming chat requests (ignore_eos, max_tokens TOKENS) run while
// DROPS more connections are opened and dropped, a quarter at each stage: in the middle
// of the request head, in the middle of the body, after the whole request before reading
// any of the reply (streamed or not), and in the middle of the stream after its first
// token; half of them close with a FIN, half with a reset. Then:
//   * 0 crashes: the server is up, /health answers, a reference request sent alone gives
//     the same tokens as before the load, SIGTERM exits 0;
//   * 0 lost requests: each of the STREAMS streams ends well formed with exactly TOKENS
//     tokens (its logprob entries and usage) and finish_reason "length"; /metrics counts
//     STREAMS more finished, none failed, and every dropped request that had started
//     (the mid-stream ones at least) cancelled;
//   * every dropped request's KV cache freed: moetier_kv_cache_{tokens_used,tokens_filled,
//     sequences,bytes_used}, requests running and queued all back to 0.
// The drops must end before the last stream does (they happen under load).
// sockets.mjs holds idle connections and bad_input.mjs / load_tool.mjs drop a few streams
// on an idle server; load.mjs runs clients that all stay.
//
// usage: node churn.mjs MOETIER VOCAB WORK_DIR
// env: SERVE_MODEL (a GGUF instead of the tiny synthetic model), SERVE_ARGS (extra `serve`
//      flags, e.g. "--device cuda"), SERVE_START_S, CHURN_STREAMS (64), CHURN_DROPS (200),
//      CHURN_TOKENS (48), CHURN_WATCHDOG_S (480: the whole run's limit; ctest's is 600)
import http from 'node:http';
import net from 'node:net';
import { check, makeModel, metrics, parseSse, postJson, request, serveArgs, sleep, startServer } from './lib.mjs';

const [moetier, vocab, work] = process.argv.slice(2);
const STREAMS = Number(process.env.CHURN_STREAMS ?? 64);
const DROPS = Number(process.env.CHURN_DROPS ?? 200);
const TOKENS = Number(process.env.CHURN_TOKENS ?? 48);
const WATCHDOG_S = Number(process.env.CHURN_WATCHDOG_S ?? 480);
const model = process.env.SERVE_MODEL ?? makeModel(moetier, vocab, work);
// --prefill-pace 0: every prompt admitted at once, so all streams run together (paced chunks
// beside decoders let the first streams finish before the last start on a fast CPU).
const server = await startServer(moetier, model, serveArgs(['--max-running', '96', '-c', '512', '-t', '2', '--prefill-pace', '0']));

const chat = (content, extra) => JSON.stringify({
  messages: [{ role: 'user', content }], temperature: 0, ignore_eos: true, ...extra,
});
const head = (body) => 'POST /v1/chat/completions HTTP/1.1\r\nHost: churn\r\nContent-Type: application/json\r\n' +
  `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`;

// The reference: one request alone, its tokens (logprob entries' bytes).
async function reference() {
  const r = await postJson(server, '/v1/chat/completions', JSON.parse(chat('Count to ten.', { max_tokens: 12, logprobs: true })));
  check(r.status === 200, `reference: ${r.status} ${r.body}`);
  const choice = JSON.parse(r.body).choices[0];
  check(choice.logprobs.content.length === 12, `reference: ${choice.logprobs.content.length} tokens`);
  return JSON.stringify(choice.logprobs.content.map((e) => e.bytes));
}

// One raw connection that sends the payloads, then drops after delayMs or, given
// dropWhen, as soon as dropWhen(what it read) holds; resolves with what it read.
function connection(payloads, { delayMs = 0, reset = false, dropWhen = null } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    let seen = '';
    const drop = () => (reset ? s.resetAndDestroy() : s.destroy());
    s.on('connect', async () => {
      for (const p of payloads) s.write(p);
      if (dropWhen === null) {
        await sleep(delayMs);
        drop();
      }
    });
    s.on('data', (d) => {
      seen += d;
      if (dropWhen !== null && dropWhen(seen)) drop();
    });
    s.on('error', () => {});
    s.on('close', () => resolve(seen));
  });
}

// Drop j of the four kinds.
function dropOne(j) {  // kind j % 4; FIN or reset by j % 8; kind 2 streamed or not by j >> 3
  const reset = j % 8 >= 4;
  const body = chat(`Drop ${j}: tell me a long story.`, { max_tokens: 400, stream: (j >> 3) % 2 === 0 });
  switch (j % 4) {
    case 0: return connection([head(body).slice(0, 40 + (j % 37))], { delayMs: j % 13, reset });
    case 1: return connection([head(body), body.slice(0, body.length >> 1)], { delayMs: j % 17, reset });
    case 2: return connection([head(body) + body], { delayMs: j % 29, reset });
    default: {
      const streamed = chat(`Drop ${j}: tell me a long story.`, { max_tokens: 400, stream: true });
      return connection([head(streamed) + streamed], { reset, dropWhen: (t) => /"content":"[^"]/.test(t) });
    }
  }
}

// One of the streams that stay: every event checked; resolves with its end time.
function stream(i, started) {
  const body = chat(`Client ${i} asks: why is the sky blue?`,
    { max_tokens: TOKENS, stream: true, logprobs: true, stream_options: { include_usage: true } });
  return new Promise((resolve) => {
    const req = http.request(`${server.base}/v1/chat/completions`, { method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let text = '', first = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        text += d;
        if (!first && /"content":"[^"]/.test(text)) { first = true; started(); }
      });
      res.on('error', (e) => check(false, `stream ${i}: ${e.message}`));
      res.on('end', () => {
        const at = performance.now();
        check(res.statusCode === 200, `stream ${i}: ${res.statusCode} ${text.slice(0, 200)}`);
        const events = parseSse(text);
        const finishes = events.filter((e) => e.choices.length && e.choices[0].finish_reason !== null);
        check(finishes.length === 1 && finishes[0].choices[0].finish_reason === 'length',
          `stream ${i}: finish chunks ${JSON.stringify(finishes)}`);
        const tokens = events.reduce((n, e) => n + (e.choices[0]?.logprobs?.content?.length ?? 0), 0);
        const usage = events.at(-1).usage;
        check(tokens === TOKENS && usage?.completion_tokens === TOKENS,
          `stream ${i}: ${tokens} tokens in its logprobs, usage ${JSON.stringify(usage)}; wanted ${TOKENS}`);
        ++streamsDone;
        resolve(at);
      });
    });
    req.on('error', (e) => check(false, `stream ${i}: ${e.message}`));
    req.end(body);
  });
}

// A stream or drop that never ends fails here, not at ctest's timeout.
let streamsDone = 0;
setTimeout(() => check(false, `not done after ${WATCHDOG_S} s: ${streamsDone} of ${STREAMS} streams ended\n${server.log()}`), WATCHDOG_S * 1000)
  .unref();

const outcome = (m, o) => m[`moetier_generation_requests_total{outcome="${o}"}`] ?? 0;
const ref = await reference();
const before = await metrics(server);

// The streams; once every one has its first token, the drops, all at once.
let startedCount = 0, allStarted;
const streaming = new Promise((resolve) => { allStarted = resolve; });
const t0 = performance.now();
const ends = Array.from({ length: STREAMS }, (_, i) => stream(i, () => { if (++startedCount === STREAMS) allStarted(); }));
await streaming;
const tStarted = performance.now();
const during = await metrics(server);
check(during.moetier_kv_cache_sequences >= STREAMS && during.moetier_kv_cache_tokens_used > 0 &&
  during.moetier_kv_cache_bytes_used > 0 && during.moetier_requests_running >= STREAMS,
  `KV while the ${STREAMS} streams run: ${during.moetier_kv_cache_sequences} sequences, ` +
  `${during.moetier_kv_cache_tokens_used} tokens, ${during.moetier_kv_cache_bytes_used} bytes, ` +
  `${during.moetier_requests_running} running`);
const dropped = await Promise.all(Array.from({ length: DROPS }, (_, j) => dropOne(j)));
const tDropped = performance.now();
const lastEnd = Math.max(...(await Promise.all(ends)));
check(tDropped < lastEnd, `the streams ended ${(tDropped - lastEnd).toFixed(0)} ms before the drops did: not under ` +
  'load (raise CHURN_TOKENS)');
const midStream = dropped.filter((_, j) => j % 4 === 3);
check(midStream.every((t) => /"content":"[^"]/.test(t)), 'a mid-stream drop saw no token');
console.log(`ok ${STREAMS} streams x ${TOKENS} tokens: all first tokens after ${(tStarted - t0).toFixed(0)} ms ` +
  `(KV ${during.moetier_kv_cache_sequences} sequences, ${during.moetier_kv_cache_bytes_used} bytes); ` +
  `${DROPS} connections dropped in ${(tDropped - tStarted).toFixed(0)} ms, ${(lastEnd - tDropped).toFixed(0)} ms ` +
  'before the last stream ended');

// Every dropped request's KV cache given back; nothing running or queued.
const kv = (m) => ({ used: m.moetier_kv_cache_tokens_used, filled: m.moetier_kv_cache_tokens_filled,
  sequences: m.moetier_kv_cache_sequences, bytes: m.moetier_kv_cache_bytes_used,
  running: m.moetier_requests_running, queued: m.moetier_requests_queued });
let after = await metrics(server);
for (let i = 0; i < 200 && Object.values(kv(after)).some((v) => v !== 0); ++i) {
  await sleep(50);
  after = await metrics(server);
}
check(Object.values(kv(after)).every((v) => v === 0), `after the load: ${JSON.stringify(kv(after))}`);
check(!server.exited, `the server exited: ${server.exitInfo}\n${server.log()}`);
const d = (o) => outcome(after, o) - outcome(before, o);
const sent = DROPS >> 1;  // kinds 2 and 3 sent a whole request
check(d('finished') === STREAMS, `${d('finished')} requests finished, wanted ${STREAMS}`);
check(d('failed') === 0, `${d('failed')} requests failed`);
check(d('submitted') === d('finished') + d('cancelled'),
  `${d('submitted')} submitted but ${d('finished')} finished and ${d('cancelled')} cancelled: some are lost`);
check(d('cancelled') >= midStream.length && d('cancelled') <= sent,
  `${d('cancelled')} requests cancelled: wanted ${midStream.length} to ${sent}`);
const fivexx = Object.keys(after).filter((k) => /moetier_http_requests_total\{.*code="5\d\d"\}/.test(k) && after[k] > 0);
check(fivexx.length === 0, `5xx answers: ${fivexx.join(', ')}`);
console.log(`ok KV, running and queued back to 0; ${d('submitted')} submitted: ${d('finished')} finished, ` +
  `${d('cancelled')} cancelled ` +
  `(${midStream.length} mid-stream, ${sent} sent in all), 0 failed`);

// Still serving, as before.
const health = await request(server, 'GET', '/health');
check(health.status === 200, `/health: ${health.status}`);
check(await reference() === ref, 'the reference request gives other tokens after the load');
await server.stop();
console.log('PASS');
