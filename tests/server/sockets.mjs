// `moetier serve`'s sockets and connections (issue 31): a flag that would fail at request
// time fails at start; a second server on a port in use exits 1 with one line; /health
// answers within 100 ms while 200 idle connections are held open; a non-streaming request
// whose client goes away is counted cancelled within 1 s and the server goes on; CORS
// preflight; the API key from --api-key-file and $MOETIER_API_KEY; /tokenize and
// /detokenize; SIGTERM during a stream ends it with a finish chunk and [DONE], exit 0.
//
// usage: node sockets.mjs MOETIER VOCAB WORK_DIR OPENAI_DIR   (exit 77 = skipped: no client)
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, makeModel, metrics, parseSse, postJson, request, sleep, startServer } from './lib.mjs';

const [moetier, vocab, work, openaiDir] = process.argv.slice(2);
const clientPath = path.join(openaiDir, 'node_modules', 'openai', 'index.mjs');
if (!existsSync(clientPath)) {
  console.log(`SKIP: no OpenAI client at ${clientPath} (run tools/oracle/setup.sh)`);
  process.exit(77);
}
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);
const model = makeModel(moetier, vocab, work);
const user = [{ role: 'user', content: 'Tell me a long story.' }];

// A serve command that must fail before listening: non-zero exit, one line, no "listening".
function expectStartFailure(what, args, env = {}) {
  const port = args.includes('--port') ? [] : ['--port', '0'];
  const r = spawnSync(moetier, ['serve', '-m', model, ...port, '-t', '1', ...args],
    { encoding: 'utf8', timeout: 60000, env: { ...process.env, ...env } });
  const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
  check(r.status !== 0 && r.status !== null, `${what}: exit ${r.status}\n${r.stderr}`);
  check(lines.length === 1, `${what}: ${lines.length} lines on stderr, wanted one:\n${r.stderr}`);
  check(!/listening/.test(r.stderr), `${what}: it listened`);
  console.log(`ok ${what}: exit ${r.status}: ${lines[0]}`);
  return lines[0];
}

expectStartFailure('--kv-type q4_0', ['--kv-type', 'q4_0']);
expectStartFailure('--api-key-file missing', ['--api-key-file', path.join(work, 'no-such-key')]);

const KEY = 'sk-from-a-file';
const keyFile = path.join(work, 'api-key');
writeFileSync(keyFile, `${KEY}\n`);
const ORIGIN = 'https://app.example';
const server = await startServer(moetier, model,
  ['--alias', 'tiny', '--api-key-file', keyFile, '--cors', ORIGIN, '-c', '4096', '-t', '2']);
const auth = { Authorization: `Bearer ${KEY}` };

// A second server on the same port.
{
  const line = expectStartFailure('second server on the same port', ['--port', String(server.port)]);
  check(/in use/.test(line), `second server: ${line}`);
}

// 200 idle connections: 100 that never sent a byte, 100 keep-alive ones after one request.
{
  const sockets = [];
  const closed = { n: 0 };
  const open = () => new Promise((resolve, reject) => {
    const s = net.connect(server.port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
    s.on('close', () => { closed.n += 1; });
    sockets.push(s);
  });
  for (let i = 0; i < 100; ++i) await open();
  for (let i = 0; i < 100; ++i) {
    const s = await open();
    await new Promise((resolve) => {
      s.once('data', resolve);
      s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    });
  }
  let worst = 0;
  for (let i = 0; i < 5; ++i) {
    const t0 = performance.now();
    const h = await request(server, 'GET', '/health');
    worst = Math.max(worst, performance.now() - t0);
    check(h.status === 200, `/health with 200 idle connections: ${h.status}`);
  }
  check(worst < 100, `/health took ${worst.toFixed(1)} ms with 200 idle connections held`);
  check(closed.n === 0, `${closed.n} idle connections were closed by the server`);
  for (const s of sockets) s.destroy();
  console.log(`ok /health in ${worst.toFixed(1)} ms (worst of 5) with 200 idle connections held`);
}

// A non-streaming request whose client leaves after 300 ms: cancelled within 1 s.
{
  const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: KEY, maxRetries: 0 });
  const outcome = (m, o) => m[`moetier_generation_requests_total{outcome="${o}"}`];
  const before = await metrics(server, auth);
  const abort = new AbortController();
  const call = client.chat.completions.create({ model: 'tiny', messages: user, max_tokens: 4000, temperature: 0 },
    { signal: abort.signal }).then(() => 'answered', () => 'aborted');
  await sleep(300);
  const running = (await metrics(server, auth)).moetier_requests_running;
  check(running === 1, `the request is not running after 300 ms (running ${running})`);
  abort.abort();
  const left = performance.now();
  check(await call === 'aborted', 'the request was answered before the client left (the model is too fast)');
  let after = before;
  while (outcome(after, 'cancelled') === outcome(before, 'cancelled') && performance.now() - left < 1000) {
    await sleep(20);
    after = await metrics(server, auth);
  }
  const took = performance.now() - left;
  check(outcome(after, 'cancelled') === outcome(before, 'cancelled') + 1,
    `not counted cancelled within 1 s of the client leaving (${outcome(before, 'cancelled')} -> ${outcome(after, 'cancelled')})`);
  check(outcome(after, 'finished') === outcome(before, 'finished'), 'the abandoned request was counted finished');
  const ok = await client.chat.completions.create({ model: 'tiny', messages: user, max_tokens: 3 });
  check(ok.choices[0].message.role === 'assistant', 'no answer after the cancelled request');
  console.log(`ok non-streaming client gone: cancelled after ${took.toFixed(0)} ms; still serving`);
}

// CORS: the preflight, and the origin on answers and errors.
{
  const pre = await request(server, 'OPTIONS', '/v1/chat/completions', { headers: {
    Origin: ORIGIN, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type',
  } });
  check(pre.status === 204, `preflight: status ${pre.status}: ${pre.body}`);
  check(pre.headers['access-control-allow-origin'] === ORIGIN, `preflight origin: ${pre.headers['access-control-allow-origin']}`);
  check(/POST/.test(pre.headers['access-control-allow-methods'] ?? ''), 'preflight: POST not allowed');
  check(/authorization/i.test(pre.headers['access-control-allow-headers'] ?? ''), 'preflight: Authorization not allowed');
  check(Number(pre.headers['access-control-max-age']) > 0, 'preflight: no max age');
  const models = await request(server, 'GET', '/v1/models', { headers: { ...auth, Origin: ORIGIN } });
  check(models.status === 200 && models.headers['access-control-allow-origin'] === ORIGIN, 'no CORS origin on /v1/models');
  const denied = await request(server, 'GET', '/v1/models', { headers: { Origin: ORIGIN } });
  check(denied.status === 401 && denied.headers['access-control-allow-origin'] === ORIGIN, 'no CORS origin on a 401');
  console.log('ok CORS preflight and origin headers');
}

// The key from --api-key-file, through the client.
async function checkKey(base, key, what) {
  const good = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
  check((await good.models.list()).data[0].id === 'tiny', `${what}: models.list`);
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
  try {
    await bad.models.list();
    check(false, `${what}: a wrong key was accepted`);
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, `${what}: ${e.constructor.name} ${e.status}`);
  }
  const none = await request({ base }, 'GET', '/v1/models');
  check(none.status === 401, `${what}: no key gave ${none.status}`);
  console.log(`ok API key from ${what}: 401 without, 200 with`);
}
await checkKey(server.base, KEY, '--api-key-file');

// /tokenize and /detokenize.
{
  const text = 'Hello world, this is moetier.';
  const tok = await postJson(server, '/tokenize', { content: text }, auth);
  check(tok.status === 200, `/tokenize: ${tok.status} ${tok.body}`);
  const { tokens } = JSON.parse(tok.body);
  check(Array.isArray(tokens) && tokens.length > 3 && tokens.every(Number.isInteger), `/tokenize: ${tok.body}`);
  const detok = await postJson(server, '/detokenize', { tokens }, auth);
  check(detok.status === 200 && JSON.parse(detok.body).content === text, `/detokenize: ${detok.body}`);
  const special = await postJson(server, '/tokenize', { content: '<|im_start|>user' }, auth);
  const plain = await postJson(server, '/tokenize', { content: '<|im_start|>user', parse_special: false }, auth);
  check(JSON.parse(special.body).tokens.length < JSON.parse(plain.body).tokens.length, 'parse_special changes nothing');
  const pieces = JSON.parse((await postJson(server, '/tokenize', { content: text, with_pieces: true }, auth)).body).tokens;
  check(pieces.map((p) => p.piece).join('') === text && pieces.map((p) => p.id).join() === tokens.join(), 'with_pieces');
  const bad = [
    ['/tokenize', { content: 5 }, 'content'], ['/tokenize', {}, 'content'], ['/tokenize', { content: 'a', add_special: 1 }, 'add_special'],
    ['/detokenize', { tokens: 'abc' }, 'tokens'], ['/detokenize', { tokens: [1, -1] }, 'tokens[1]'],
    ['/detokenize', { tokens: [1e12] }, 'tokens[0]'], ['/detokenize', { tokens: [1.5] }, 'tokens[0]'],
  ];
  for (const [route, body, param] of bad) {
    const r = await postJson(server, route, body, auth);
    const e = JSON.parse(r.body).error;
    check(r.status === 400 && e.type === 'invalid_request_error' && e.param === param,
      `${route} ${JSON.stringify(body)}: ${r.status} ${r.body}`);
  }
  const notJson = await request(server, 'POST', '/tokenize', { headers: auth, body: '{"content":' });
  check(notJson.status === 400 && JSON.parse(notJson.body).error, `/tokenize with bad JSON: ${notJson.status}`);
  check((await postJson(server, '/tokenize', { content: 'x' })).status === 401, '/tokenize without the key');
  console.log(`ok /tokenize and /detokenize round trip (${tokens.length} tokens) and ${bad.length + 2} bad inputs`);
}
await server.stop();

// $MOETIER_API_KEY, then SIGTERM during a stream.
{
  process.env.MOETIER_API_KEY = 'sk-from-env';
  const s = await startServer(moetier, model, ['--alias', 'tiny', '-c', '4096', '-t', '2', '--shutdown-timeout', '0.5']);
  delete process.env.MOETIER_API_KEY;
  await checkKey(s.base, 'sk-from-env', '$MOETIER_API_KEY');
  const exited = new Promise((resolve) => s.proc.on('exit', (code, sig) => resolve(code ?? sig)));
  const body = await new Promise((resolve, reject) => {
    const req = http.request(`${s.base}/v1/chat/completions`, { method: 'POST', agent: false,
      headers: { Authorization: 'Bearer sk-from-env', 'Content-Type': 'application/json' } }, (res) => {
      check(res.statusCode === 200, `stream: ${res.statusCode}`);
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (text === '') s.proc.kill('SIGTERM');
        text += d;
      });
      res.on('end', () => resolve(text));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(JSON.stringify({ model: 'tiny', messages: user, max_tokens: 4000, temperature: 0, stream: true }));
  });
  const events = parseSse(body);
  const finish = events.filter((e) => e.choices.length && e.choices[0].finish_reason !== null);
  check(finish.length === 1 && finish[0].choices[0].finish_reason === 'length',
    `the cut stream has no finish chunk: ${JSON.stringify(finish)}`);
  const code = await Promise.race([exited, sleep(15000).then(() => 'timeout')]);
  check(code === 0, `exit after SIGTERM: ${code}\n${s.log()}`);
  console.log(`ok SIGTERM during a stream: ${events.length} events, finish chunk, [DONE], exit 0`);
}
console.log('sockets: ok');
