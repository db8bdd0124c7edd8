// `moetier serve` against bad input: each case gets its expected status and an OpenAI error
// object ({"error": {"message", "type", "param", "code"}}) with the expected type, param and
// code; /health answers after every case; a client that leaves mid-stream cancels its
// request; at the end a normal request still works and SIGTERM exits 0.
//
// usage: node bad_input.mjs MOETIER VOCAB WORK_DIR
import net from 'node:net';
import http from 'node:http';
import { check, fail, makeModel, metrics, postJson, request, sleep, startServer } from './lib.mjs';

const [moetier, vocab, work] = process.argv.slice(2);
const model = makeModel(moetier, vocab, work);
const KEY = 'sk-bad-input';
const server = await startServer(moetier, model, ['--alias', 'tiny', '--api-key', KEY, '-c', '256', '-t', '2']);
const auth = { Authorization: `Bearer ${KEY}` };
const user = [{ role: 'user', content: 'Hello' }];
const chat = (extra) => JSON.stringify({ model: 'tiny', messages: user, max_tokens: 2, ...extra });

// name, method, path, body (string/Buffer/object), expected status, type, param, code, headers
const cases = [
  ['malformed JSON', 'POST', '/v1/chat/completions', '{"messages": [', 400, 'invalid_request_error', null, null],
  ['JSON array body', 'POST', '/v1/chat/completions', '[1, 2]', 400, 'invalid_request_error', null, null],
  ['empty body', 'POST', '/v1/chat/completions', '', 400, 'invalid_request_error', null, null],
  ['number too large for JSON', 'POST', '/v1/chat/completions', '{"temperature": 1e999}', 400, 'invalid_request_error', null, null],
  ['deeply nested JSON', 'POST', '/v1/chat/completions', `{"messages": ${'['.repeat(100000)}${']'.repeat(100000)}}`,
    400, 'invalid_request_error', 'messages[0]', null],
  ['messages missing', 'POST', '/v1/chat/completions', { model: 'tiny' }, 400, 'invalid_request_error', 'messages', null],
  ['messages not a list', 'POST', '/v1/chat/completions', { messages: 'Hello' }, 400, 'invalid_request_error', 'messages', null],
  ['empty messages', 'POST', '/v1/chat/completions', { messages: [] }, 400, 'invalid_request_error', 'messages', null],
  ['message not an object', 'POST', '/v1/chat/completions', { messages: ['Hello'] }, 400, 'invalid_request_error',
    'messages[0]', null],
  ['unknown role', 'POST', '/v1/chat/completions', { messages: [{ role: 'robot', content: 'x' }] }, 400,
    'invalid_request_error', 'messages[0].role', null],
  ['role not a string', 'POST', '/v1/chat/completions', { messages: [{ role: 7, content: 'x' }] }, 400,
    'invalid_request_error', 'messages[0].role', null],
  ['content a number', 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 42 }] }, 400,
    'invalid_request_error', 'messages[0].content', null],
  ['image content part', 'POST', '/v1/chat/completions',
    { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400,
    'invalid_request_error', 'messages[0].content[0]', null],
  ['model not a string', 'POST', '/v1/chat/completions', { model: 3, messages: user }, 400, 'invalid_request_error', 'model', null],
  ['temperature a string', 'POST', '/v1/chat/completions', chat({ temperature: 'hot' }), 400, 'invalid_request_error',
    'temperature', null],
  ['temperature out of range', 'POST', '/v1/chat/completions', chat({ temperature: 5 }), 400, 'invalid_request_error',
    'temperature', null],
  ['top_p out of range', 'POST', '/v1/chat/completions', chat({ top_p: 1.5 }), 400, 'invalid_request_error', 'top_p', null],
  ['presence_penalty out of range', 'POST', '/v1/chat/completions', chat({ presence_penalty: -3 }), 400,
    'invalid_request_error', 'presence_penalty', null],
  ['max_tokens negative', 'POST', '/v1/chat/completions', chat({ max_tokens: -1 }), 400, 'invalid_request_error',
    'max_tokens', null],
  ['max_tokens zero', 'POST', '/v1/chat/completions', chat({ max_tokens: 0 }), 400, 'invalid_request_error', 'max_tokens', null],
  ['max_tokens fractional', 'POST', '/v1/chat/completions', chat({ max_tokens: 1.5 }), 400, 'invalid_request_error',
    'max_tokens', null],
  ['stream a string', 'POST', '/v1/chat/completions', chat({ stream: 'yes' }), 400, 'invalid_request_error', 'stream', null],
  ['stream_options without stream', 'POST', '/v1/chat/completions', chat({ stream_options: { include_usage: true } }), 400,
    'invalid_request_error', 'stream_options', null],
  ['stop a number', 'POST', '/v1/chat/completions', chat({ stop: 7 }), 400, 'invalid_request_error', 'stop', null],
  ['stop list with a number', 'POST', '/v1/chat/completions', chat({ stop: ['a', 7] }), 400, 'invalid_request_error',
    'stop', null],
  ['17 stop strings', 'POST', '/v1/chat/completions', chat({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), 400,
    'invalid_request_error', 'stop', null],
  ['seed a string', 'POST', '/v1/chat/completions', chat({ seed: 'abc' }), 400, 'invalid_request_error', 'seed', null],
  ['n = 17 (above 16)', 'POST', '/v1/chat/completions', chat({ n: 17 }), 400, 'invalid_request_error', 'n', null],
  ['tools without a function', 'POST', '/v1/chat/completions', chat({ tools: [{ type: 'function' }] }), 400, 'invalid_request_error',
    'tools[0].function', null],
  ['prompt longer than the context', 'POST', '/v1/chat/completions',
    { messages: [{ role: 'user', content: 'word '.repeat(400) }] }, 400, 'invalid_request_error', 'messages',
    'context_length_exceeded'],
  ['max_tokens past the context', 'POST', '/v1/chat/completions', chat({ max_tokens: 250 }), 400, 'invalid_request_error',
    'messages', 'context_length_exceeded'],
  ['unknown model', 'POST', '/v1/chat/completions', chat({ model: 'gpt-4o' }), 404, 'invalid_request_error', 'model',
    'model_not_found'],
  ['completion: prompt missing', 'POST', '/v1/completions', { max_tokens: 2 }, 400, 'invalid_request_error', 'prompt', null],
  ['completion: prompt a number', 'POST', '/v1/completions', { prompt: 5 }, 400, 'invalid_request_error', 'prompt', null],
  ['completion: two prompts', 'POST', '/v1/completions', { prompt: ['a', 'b'] }, 400, 'invalid_request_error', 'prompt', null],
  ['completion: echo', 'POST', '/v1/completions', { prompt: 'a', echo: true }, 400, 'invalid_request_error', 'echo', null],
  ['completion: prompt longer than the context', 'POST', '/v1/completions', { prompt: 'word '.repeat(400) }, 400,
    'invalid_request_error', 'prompt', 'context_length_exceeded'],
  ['body over 8 MiB', 'POST', '/v1/chat/completions', Buffer.alloc(9 << 20, 'a'), 413, 'invalid_request_error', null,
    'payload_too_large'],
  ['wrong API key', 'POST', '/v1/chat/completions', chat({}), 401, 'invalid_request_error', null, 'invalid_api_key',
    { Authorization: 'Bearer sk-wrong' }],
  ['missing API key', 'GET', '/v1/models', undefined, 401, 'invalid_request_error', null, 'invalid_api_key',
    { Authorization: '' }],
  ['unknown route', 'GET', '/v1/engines', undefined, 404, 'invalid_request_error', null, 'not_found'],
  ['unknown route, POST', 'POST', '/v2/chat', '{}', 404, 'invalid_request_error', null, 'not_found'],
  ['unknown model id', 'GET', '/v1/models/gpt-4o', undefined, 404, 'invalid_request_error', 'model', 'model_not_found'],
  ['GET on a POST route', 'GET', '/v1/chat/completions', undefined, 405, 'invalid_request_error', null, 'method_not_allowed'],
  ['POST on a GET route', 'POST', '/v1/models', '{}', 405, 'invalid_request_error', null, 'method_not_allowed'],
  ['DELETE /health', 'DELETE', '/health', undefined, 405, 'invalid_request_error', null, 'method_not_allowed'],
  ['path of 8000 bytes', 'POST', `/${'a'.repeat(8000)}`, '{}', 404, 'invalid_request_error', null, 'not_found'],
  ['path over the URI limit', 'GET', `/${'a'.repeat(9000)}`, undefined, 414, 'invalid_request_error', null, null],
];

async function expectHealthy(after) {
  check(!server.exited, `the server died after: ${after}\n${server.log()}`);
  const h = await request(server, 'GET', '/health');
  check(h.status === 200, `/health answered ${h.status} after: ${after}`);
}

function checkError(name, r, status, type, param, code) {
  check(r.status === status, `${name}: status ${r.status}, wanted ${status}: ${r.body.slice(0, 300)}`);
  check(/^application\/json/.test(r.headers['content-type'] ?? ''), `${name}: content-type ${r.headers['content-type']}`);
  let e;
  try {
    e = JSON.parse(r.body).error;
  } catch {
    fail(`${name}: the body is not JSON: ${r.body.slice(0, 300)}`);
  }
  check(e && typeof e.message === 'string' && e.message.length > 0, `${name}: no error message: ${r.body}`);
  check(e.type === type, `${name}: type ${e.type}, wanted ${type}`);
  check(e.param === param, `${name}: param ${e.param}, wanted ${param}`);
  check(e.code === code, `${name}: code ${e.code}, wanted ${code}`);
  return e;
}

for (const [name, method, route, body, status, type, param, code, headers] of cases) {
  const isObject = body !== undefined && typeof body === 'object' && !Buffer.isBuffer(body);
  const r = await request(server, method, route, {
    headers: { ...auth, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...(headers ?? {}) },
    body: isObject ? JSON.stringify(body) : body,
  });
  const e = checkError(name, r, status, type, param, code);
  if (status === 405) check(r.headers.allow, `${name}: no Allow header`);
  console.log(`ok ${status} ${name}: ${e.message.slice(0, 100)}`);
  await expectHealthy(name);
}

// A chunked body over the limit: 413 too, however it arrives, and on any path (httplib alone
// would read a chunked body of any size for a path no route serves).
for (const [route, status, code] of [['/v1/chat/completions', 413, 'payload_too_large'], ['/v2/upload', 413, 'payload_too_large']]) {
  const name = `chunked body over 8 MiB to ${route}`;
  const r = await new Promise((resolve, reject) => {
    let response = null;
    const req = http.request(`${server.base}${route}`, { method: 'POST', agent: false,
      headers: { ...auth, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' } }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => { response = { status: res.statusCode, headers: res.headers, body: b }; resolve(response); });
    });
    // The server may close while the rest of the body is still being written.
    req.on('error', (e) => setTimeout(() => (response ? resolve(response) : reject(e)), 200));
    const piece = Buffer.alloc(1 << 20, 'a');
    for (let i = 0; i < 9; ++i) req.write(piece);
    req.end();
  });
  checkError(name, r, status, 'invalid_request_error', null, code);
  console.log(`ok ${status} ${name}`);
  await expectHealthy(name);
}

// Not HTTP at all: the connection gets a 400 and the server goes on.
{
  const reply = await new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.end('\x00\x01 garbage / NOT-HTTP\r\n\r\n'));
    let b = '';
    s.on('data', (d) => { b += d; });
    s.on('close', () => resolve(b));
    s.on('error', () => resolve(b));
  });
  check(reply === '' || /^HTTP\/1\.1 400/.test(reply), `garbage request: ${reply.slice(0, 100)}`);
  console.log('ok garbage request line');
  await expectHealthy('garbage request line');
}

// Invalid UTF-8 in a message: answered (bytes are tokenized as bytes), the reply is JSON.
{
  const body = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"caf'), Buffer.from([0xc3, 0x28, 0xff]),
    Buffer.from('"}],"max_tokens":2}')]);
  const r = await request(server, 'POST', '/v1/chat/completions', { headers: { ...auth, 'Content-Type': 'application/json' }, body });
  check(r.status === 200 || r.status === 400, `invalid UTF-8: status ${r.status}`);
  JSON.parse(r.body);
  console.log(`ok ${r.status} invalid UTF-8 in a message`);
  await expectHealthy('invalid UTF-8');
}

// A streaming client that leaves after the first chunks: its request is cancelled.
{
  const before = (await metrics(server, auth))['moetier_generation_requests_total{outcome="cancelled"}'];
  await new Promise((resolve, reject) => {
    const req = http.request(`${server.base}/v1/chat/completions`, { method: 'POST', agent: false,
      headers: { ...auth, 'Content-Type': 'application/json' } }, (res) => {
      check(res.statusCode === 200, `stream: status ${res.statusCode}`);
      res.once('data', () => { req.destroy(); resolve(); });
    });
    req.on('error', (e) => (e.code === 'ECONNRESET' ? resolve() : reject(e)));
    req.end(JSON.stringify({ messages: user, max_tokens: 200, stream: true }));
  });
  let after = before;
  for (let i = 0; i < 100 && after === before; ++i) {
    await sleep(50);
    after = (await metrics(server, auth))['moetier_generation_requests_total{outcome="cancelled"}'];
  }
  check(after === before + 1, `a client gone mid-stream did not cancel its request (${before} -> ${after})`);
  console.log('ok client gone mid-stream: request cancelled');
  await expectHealthy('client gone mid-stream');
}

// Still serving.
const ok = await postJson(server, '/v1/chat/completions', { model: 'tiny', messages: user, max_tokens: 3 }, auth);
check(ok.status === 200 && JSON.parse(ok.body).choices[0].message.role === 'assistant', `final request: ${ok.status}`);
const m = await metrics(server, auth);
check(m['moetier_http_requests_total{endpoint="/v1/chat/completions",code="400"}'] >= 30, 'the 400s are not counted');
await server.stop();
console.log(`bad_input: ok (${cases.length + 6} cases)`);
