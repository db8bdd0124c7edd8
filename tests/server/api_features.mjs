// `moetier serve`'s sampling-related API features through the official OpenAI Node client,
// on the demo model (models/kjv-moe-f16.gguf) and on a random-weight synthetic model:
//   n            two choices, not streamed and streamed (each choice its own index and
//                finish), usage counting every choice's tokens
//   logprobs     top_logprobs equal the log-softmax of `moetier logits` on the same prompt
//                (<= 1e-3), chat's content[] and completions' legacy shape
//   logit_bias   -100 on the greedy token changes the greedy token
//   json_schema  20 of 20 answers parse and validate against the schema (a small validator
//                below), on both models; json_object gives an object
//   bad input    each bad field is a 400 naming it
//
// usage: node api_features.mjs MOETIER DEMO_MODEL WORK_DIR OPENAI_DIR   (exit 77: no client)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, fail, startServer } from './lib.mjs';

const [moetier, demoModel, work, openaiDir] = process.argv.slice(2);
const clientPath = path.join(openaiDir, 'node_modules', 'openai', 'index.mjs');
if (!existsSync(clientPath)) {
  console.log(`SKIP: no OpenAI client at ${clientPath} (run tools/oracle/setup.sh)`);
  process.exit(77);
}
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);
mkdirSync(work, { recursive: true });

// The subset of JSON schema the test's schema uses.
function validate(v, s, where = '$') {
  const err = (m) => `${where}: ${m} (${JSON.stringify(v)})`;
  if (s.enum) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)) ? null : err('not in enum');
  switch (s.type) {
    case 'object': {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) return err('not an object');
      for (const r of s.required ?? []) if (!(r in v)) return err(`missing ${r}`);
      for (const [k, x] of Object.entries(v)) {
        if (!(k in s.properties)) return err(`extra property ${k}`);
        const e = validate(x, s.properties[k], `${where}.${k}`);
        if (e) return e;
      }
      return null;
    }
    case 'array':
      if (!Array.isArray(v)) return err('not an array');
      if (v.length < (s.minItems ?? 0) || v.length > (s.maxItems ?? Infinity)) return err('item count');
      for (let i = 0; i < v.length; ++i) {
        const e = validate(v[i], s.items, `${where}[${i}]`);
        if (e) return e;
      }
      return null;
    case 'string':
      if (typeof v !== 'string') return err('not a string');
      return [...v].length <= (s.maxLength ?? Infinity) && [...v].length >= (s.minLength ?? 0) ? null : err('length');
    case 'integer': return Number.isInteger(v) ? null : err('not an integer');
    case 'number': return typeof v === 'number' ? null : err('not a number');
    case 'boolean': return typeof v === 'boolean' ? null : err('not a boolean');
    default: return fail(`validator: type ${s.type}`);
  }
}

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 16 },
    age: { type: 'integer' },
    member: { type: 'boolean' },
    tribe: { enum: ['Judah', 'Levi', 'Benjamin'] },
    score: { type: 'number' },
    sons: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 },
  },
  required: ['name', 'age', 'member', 'tribe', 'sons'],
  additionalProperties: false,
};
const responseFormat = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };

async function withServer(model, fn) {
  const server = await startServer(moetier, model, ['-c', '1024', '-t', '2']);
  const httpAgent = new http.Agent({ keepAlive: true });
  const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000, httpAgent });
  try {
    await fn(client);
  } finally {
    httpAgent.destroy();
    await server.stop();
  }
}

async function schemaRuns(client, label) {
  const runs = await Promise.all(Array.from({ length: 20 }, (_, i) => client.chat.completions.create({
    messages: [{ role: 'user', content: 'Describe a man of Israel as JSON.' }], max_tokens: 300, seed: i + 1,
    temperature: 1, response_format: responseFormat,
  })));
  let valid = 0;
  for (const r of runs) {
    const c = r.choices[0];
    let value;
    try {
      value = JSON.parse(c.message.content);
    } catch {
      fail(`${label}: not JSON (${c.finish_reason}): ${c.message.content}`);
    }
    const e = validate(value, schema);
    check(e === null, `${label}: ${e}`);
    check(c.finish_reason === 'stop', `${label}: finish_reason ${c.finish_reason}`);
    ++valid;
  }
  check(valid === 20, `${label}: ${valid} of 20 valid`);
  console.log(`ok ${label}: 20 of 20 json_schema answers validate, e.g. ${runs[0].choices[0].message.content}`);
}

// The model's log-softmax at the last position of `prompt`, from `moetier logits`.
function referenceLogprobs(model, prompt) {
  const out = path.join(work, 'logits.f32');
  execFileSync(moetier, ['logits', '-m', model, '--prompt', prompt, '-o', out, '-t', '2'], { stdio: 'ignore' });
  const buf = readFileSync(out);
  const all = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const vocab = 4096;
  const row = all.subarray(all.length - vocab);
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  const lp = Array.from(row, (x) => x - lse);
  const order = lp.map((v, i) => i).sort((a, b) => lp[b] - lp[a] || a - b);
  return { lp, order };
}

await withServer(demoModel, async (client) => {
  // n = 2, not streamed: two choices, usage over both
  const two = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'In the beginning' }], n: 2, max_tokens: 8, temperature: 1, seed: 11,
  });
  check(two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1, 'n=2: two choices');
  const tokens = two.usage.completion_tokens;
  check(tokens === 16 || (tokens > 1 && two.choices.some((c) => c.finish_reason === 'stop')), `n=2: usage ${tokens}`);
  console.log(`ok n=2: ${JSON.stringify(two.choices.map((c) => c.message.content))}`);

  // n = 2 streamed: each chunk names its choice, each choice finishes once
  const stream = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'In the beginning' }], n: 2, max_tokens: 8, temperature: 1, seed: 11,
    stream: true, stream_options: { include_usage: true },
  });
  const texts = ['', ''];
  const finishes = [0, 0];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] += c.delta.content ?? '';
      if (c.finish_reason) ++finishes[c.index];
    }
  }
  check(finishes[0] === 1 && finishes[1] === 1, `n=2 streamed: finishes ${finishes}`);
  check(texts[0] === two.choices[0].message.content && texts[1] === two.choices[1].message.content,
    `n=2 streamed differs from not streamed: ${JSON.stringify(texts)}`);
  check(usage && usage.completion_tokens === tokens, 'n=2 streamed: usage');
  console.log('ok n=2 streamed: the same two choices');

  // logprobs against `moetier logits`
  const prompt = 'And God said, Let there be light';
  const ref = referenceLogprobs(demoModel, prompt);
  const greedy = await client.completions.create({ prompt, max_tokens: 1, temperature: 0, logprobs: 5 });
  const lp = greedy.choices[0].logprobs;
  check(lp && lp.token_logprobs.length === 1 && lp.tokens.length === 1 && lp.text_offset[0] === 0, 'completion logprobs shape');
  check(Math.abs(lp.token_logprobs[0] - ref.lp[ref.order[0]]) <= 1e-3,
    `greedy logprob ${lp.token_logprobs[0]} vs moetier logits ${ref.lp[ref.order[0]]}`);
  const top = Object.values(lp.top_logprobs[0]).sort((a, b) => b - a);
  check(top.length === 5, `top_logprobs: ${JSON.stringify(lp.top_logprobs[0])}`);
  for (let k = 0; k < 5; ++k) {
    check(Math.abs(top[k] - ref.lp[ref.order[k]]) <= 1e-3, `top_logprobs[${k}] ${top[k]} vs ${ref.lp[ref.order[k]]}`);
  }
  const chat = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Let there be light' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = chat.choices[0].logprobs.content;
  check(content.length >= 1 && content.every((t) => t.top_logprobs.length === 3 && Array.isArray(t.bytes)),
    'chat logprobs shape');
  check(content[0].logprob === content[0].top_logprobs[0].logprob && content[0].token === content[0].top_logprobs[0].token,
    'chat greedy: the chosen token is the most likely');
  check(content.map((t) => Buffer.from(t.bytes).toString()).join('') === chat.choices[0].message.content,
    'chat logprobs: the bytes spell the text');
  console.log(`ok logprobs: top 5 within 1e-3 of moetier logits (greedy ${lp.tokens[0]} ${lp.token_logprobs[0]})`);

  // logit_bias: banning the greedy token changes it to the second most likely
  const banned = await client.completions.create({
    prompt, max_tokens: 1, temperature: 0, logprobs: 1, logit_bias: { [ref.order[0]]: -100 },
  });
  const b = banned.choices[0].logprobs;
  check(banned.choices[0].text !== greedy.choices[0].text, `logit_bias did not change the greedy token ${banned.choices[0].text}`);
  check(Math.abs(b.token_logprobs[0] - ref.lp[ref.order[1]]) <= 1e-3, 'logit_bias: the second most likely token');
  console.log(`ok logit_bias: ${JSON.stringify(greedy.choices[0].text)} -> ${JSON.stringify(banned.choices[0].text)}`);

  await schemaRuns(client, 'demo model');
  const obj = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'x' }], max_tokens: 60, seed: 3, response_format: { type: 'json_object' },
  });
  const text = obj.choices[0].message.content;
  check(text.startsWith('{'), `json_object: ${text}`);
  if (obj.choices[0].finish_reason === 'stop') check(typeof JSON.parse(text) === 'object', 'json_object: an object');

  // bad input: 400 naming the field
  const bad = [
    [{ logit_bias: { abc: 1 } }, 'logit_bias'],
    [{ logit_bias: { 5: 300 } }, 'logit_bias'],
    [{ top_logprobs: 3 }, 'top_logprobs'],
    [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    [{ n: 0 }, 'n'],
    [{ response_format: { type: 'yaml' } }, 'response_format.type'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } },
      'response_format.json_schema.schema', 'pattern'],
  ];
  for (const [fields, param, word] of bad) {
    try {
      await client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 2, ...fields });
      fail(`${JSON.stringify(fields)}: no error`);
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError, `${JSON.stringify(fields)}: ${e}`);
      check(e.param === param, `${JSON.stringify(fields)}: param ${e.param}, wanted ${param}`);
      if (word) check(e.message.includes(word), `${JSON.stringify(fields)}: message ${e.message}`);
    }
  }
  try {
    await client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], logit_bias: { 999999: -100 } });
    fail('logit_bias out of the vocabulary: no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.message.includes('logit_bias'), `logit_bias out of vocab: ${e}`);
  }
  console.log('ok bad input: each a 400 naming its field');
});

// A random-weight synthetic model: the grammar alone keeps the output valid.
const synth = path.join(work, 'synth-tiny-q8_0.gguf');
if (!existsSync(synth)) {
  execFileSync(moetier, ['synth', '--preset', 'tiny', '--quant', 'q8_0', '-o', synth], { stdio: ['ignore', 'ignore', 'inherit'] });
}
await withServer(synth, (client) => schemaRuns(client, 'random synthetic model'));
console.log('PASS');
