// `moetier serve` under load: CLIENTS concurrent streaming clients x REQUESTS requests each
// (raw HTTP, so every byte of every stream is checked: data: events of valid JSON, one id
// per stream, the role first, exactly one finish_reason, the usage chunk, [DONE] last),
// zero errors, and the server's RSS back near its idle level afterwards. Run twice: with
// batching (--max-running CLIENTS) and one request at a time (--max-running 1); prints
// the throughput of both for docs/PERFORMANCE.md.
//
// usage: node load.mjs MOETIER VOCAB WORK_DIR
// env: LOAD_CLIENTS (32), LOAD_REQUESTS (4), LOAD_MAX_TOKENS (16), LOAD_THREADS (2),
//      LOAD_MODEL (a GGUF instead of the tiny synthetic model)
import http from 'node:http';
import { check, makeModel, metrics, parseSse, rssKiB, sleep, startServer } from './lib.mjs';

const [moetier, vocab, work] = process.argv.slice(2);
const CLIENTS = Number(process.env.LOAD_CLIENTS ?? 32);
const REQUESTS = Number(process.env.LOAD_REQUESTS ?? 4);
const MAX_TOKENS = Number(process.env.LOAD_MAX_TOKENS ?? 16);
const THREADS = process.env.LOAD_THREADS ?? '2';
const model = process.env.LOAD_MODEL ?? makeModel(moetier, vocab, work);

// One streamed chat request on the client's keep-alive connection; checks the stream.
function streamChat(server, agent, client, i) {
  const body = JSON.stringify({
    model: 'tiny', max_tokens: MAX_TOKENS, temperature: 0.8, seed: client * 100 + i + 1, stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `Client ${client} asks question ${i}: why?` }],
  });
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.base}/v1/chat/completions`, {
      method: 'POST', agent, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        const what = `client ${client} request ${i}`;
        check(res.statusCode === 200, `${what}: status ${res.statusCode}: ${text.slice(0, 200)}`);
        check(res.headers['content-type'] === 'text/event-stream', `${what}: content-type ${res.headers['content-type']}`);
        const events = parseSse(text);
        check(events.length >= 3, `${what}: ${events.length} events`);
        check(events.every((e) => e.id === events[0].id && e.object === 'chat.completion.chunk'), `${what}: ids/objects differ`);
        check(events[0].choices[0].delta.role === 'assistant', `${what}: the role does not come first`);
        const finishes = events.filter((e) => e.choices.length && e.choices[0].finish_reason !== null);
        check(finishes.length === 1 && ['stop', 'length'].includes(finishes[0].choices[0].finish_reason),
          `${what}: finish chunks ${JSON.stringify(finishes)}`);
        const usage = events[events.length - 1].usage;
        check(usage && events[events.length - 1].choices.length === 0, `${what}: no usage chunk last`);
        check(usage.completion_tokens >= 1 && usage.completion_tokens <= MAX_TOKENS, `${what}: usage ${JSON.stringify(usage)}`);
        resolve(usage.completion_tokens);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

// Idle: nothing running or queued, and (given) the chat completions answered counted: the
// server counts a response in its HTTP logger, which runs after the last byte was sent, so
// a client can see a stream end before its count moves (more so on a loaded machine).
async function waitIdle(server, chatAnswered) {
  const key = 'moetier_http_requests_total{endpoint="/v1/chat/completions",code="200"}';
  for (let i = 0; i < 200; ++i) {
    const m = await metrics(server);
    if (m.moetier_requests_running === 0 && m.moetier_requests_queued === 0 &&
        (chatAnswered === undefined || m[key] >= chatAnswered)) return m;
    await sleep(50);
  }
  return check(false, 'the server did not become idle');
}

async function run(maxRunning) {
  const server = await startServer(moetier, model, ['--alias', 'tiny', '--max-running', String(maxRunning), '-c', '256',
    '-t', THREADS]);
  // Warm up (first allocations, thread pools), then take the idle RSS.
  const warm = new http.Agent({ keepAlive: false });
  await streamChat(server, warm, 0, 0);
  await waitIdle(server);
  const idle = rssKiB(server.pid);

  let peak = idle;
  const sampler = setInterval(() => { peak = Math.max(peak, rssKiB(server.pid)); }, 20);
  const t0 = process.hrtime.bigint();
  const perClient = await Promise.all(Array.from({ length: CLIENTS }, async (_, client) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    let tokens = 0;
    for (let i = 0; i < REQUESTS; ++i) tokens += await streamChat(server, agent, client + 1, i);
    agent.destroy();
    return tokens;
  }));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  clearInterval(sampler);
  const tokens = perClient.reduce((a, b) => a + b, 0);

  const requests = CLIENTS * REQUESTS;
  const m = await waitIdle(server, requests + 1);
  check(m['moetier_generation_requests_total{outcome="finished"}'] === requests + 1, 'not every request finished');
  check(m['moetier_generation_requests_total{outcome="failed"}'] === 0, 'failed requests');
  check(m['moetier_http_requests_total{endpoint="/v1/chat/completions",code="200"}'] === requests + 1, 'HTTP errors');
  let after = rssKiB(server.pid);
  for (let i = 0; i < 40 && after > idle + Math.max(32768, idle / 4); ++i) {
    await sleep(50);
    after = rssKiB(server.pid);
  }
  console.log(`load: --max-running ${maxRunning}: ${requests} streams, ${tokens} tokens in ${seconds.toFixed(2)} s = ` +
    `${(tokens / seconds).toFixed(1)} tok/s; RSS idle ${(idle / 1024).toFixed(1)} MiB, peak ${(peak / 1024).toFixed(1)} MiB, ` +
    `after ${(after / 1024).toFixed(1)} MiB`);
  check(after <= idle + Math.max(32768, idle / 4),
    `RSS did not come back: idle ${idle} KiB, after ${after} KiB (peak ${peak} KiB)`);
  await server.stop();
  return tokens / seconds;
}

const batched = await run(CLIENTS);
const serial = await run(1);
console.log(`load: ok: ${CLIENTS} clients x ${REQUESTS} streaming requests x ${MAX_TOKENS} tokens, ${THREADS} threads: ` +
  `batched ${batched.toFixed(1)} tok/s, one at a time ${serial.toFixed(1)} tok/s, ratio ${(batched / serial).toFixed(2)}x`);
