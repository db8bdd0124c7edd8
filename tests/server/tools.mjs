// Tool calls through the official OpenAI client: for the Qwen3 and gpt-oss templates (given
// with --chat-template-file) on the demo model and on a random-weight synthetic model,
// tool_choice "required" and a named function return a tool_calls entry whose arguments
// validate against the function's parameter schema, streamed (deltas assembled by index)
// and not ("required" among several tools too, on Qwen3's syntax); a tool turn is accepted. And one chat renderer: `run --chat` and `serve` count
// the same prompt tokens for the phi-3.5 template and for the ChatML fallback.
//
// usage: node tools.mjs MOETIER VOCAB DEMO_MODEL TEMPLATES_DIR WORK_DIR OPENAI_DIR
//        (exit 77 = skipped: no client)
import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, makeModel, postJson, runPromptTokens, startServer } from './lib.mjs';

const [moetier, vocab, demo, templates, work, openaiDir] = process.argv.slice(2);
const clientPath = path.join(openaiDir, 'node_modules', 'openai', 'index.mjs');
if (!existsSync(clientPath)) {
  console.log(`SKIP: no OpenAI client at ${clientPath} (run tools/oracle/setup.sh)`);
  process.exit(77);
}
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);

// Bounded values (an enum, an integer, a short string), so that even a model that knows
// nothing of tools finishes its arguments well within max_tokens.
const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather forecast of a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
        days: { type: 'integer' },
        note: { type: 'string', maxLength: 8 },
      },
      required: ['city', 'days'],
    },
  },
};
const clock = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'The time in a time zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 6 } }, required: ['zone'] },
  },
};

// The schemas above, checked by hand: required members, no others, each of its type.
function validate(args, fn, what) {
  let v;
  try {
    v = JSON.parse(args);
  } catch {
    check(false, `${what}: arguments are not JSON: ${args}`);
  }
  check(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: arguments are not an object: ${args}`);
  const { properties, required } = fn.parameters;
  for (const r of required) check(r in v, `${what}: '${r}' missing in ${args}`);
  for (const [k, val] of Object.entries(v)) {
    const p = properties[k];
    check(p, `${what}: unknown member '${k}' in ${args}`);
    if (p.type === 'integer') check(Number.isInteger(val), `${what}: '${k}' is not an integer in ${args}`);
    if (p.type === 'string') check(typeof val === 'string', `${what}: '${k}' is not a string in ${args}`);
    if (p.enum) check(p.enum.includes(val), `${what}: '${k}' not in its enum in ${args}`);
    if (p.maxLength) check([...val].length <= p.maxLength, `${what}: '${k}' longer than ${p.maxLength} in ${args}`);
  }
}

function checkCall(calls, fn, what) {
  check(Array.isArray(calls) && calls.length >= 1, `${what}: no tool_calls`);
  const c = calls[0];
  check(c.type === 'function' && typeof c.id === 'string' && c.id.length > 0, `${what}: bad call ${JSON.stringify(c)}`);
  check(c.function.name === fn.name, `${what}: called ${c.function.name}, not ${fn.name}`);
  validate(c.function.arguments, fn, what);
}

async function callOnce(client, body, fn, what) {
  const r = await client.chat.completions.create(body);
  const choice = r.choices[0];
  check(choice.finish_reason === 'tool_calls', `${what}: finish_reason ${choice.finish_reason}: ${JSON.stringify(choice.message)}`);
  checkCall(choice.message.tool_calls, fn, what);
  return choice.message.tool_calls[0];
}

async function callStreamed(client, body, fn, what) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    for (const d of choice.delta.tool_calls ?? []) {
      const c = (calls[d.index] ??= { id: '', type: '', function: { name: '', arguments: '' } });
      c.id += d.id ?? '';
      c.type = d.type ?? c.type;
      c.function.name += d.function?.name ?? '';
      c.function.arguments += d.function?.arguments ?? '';
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  check(finish === 'tool_calls', `${what}: finish_reason ${finish}`);
  checkCall(calls, fn, what);
}

async function toolsOn(model, template, label) {
  const server = await startServer(moetier, model, ['--chat-template-file', path.join(templates, template), '--alias', 'm', '-c', '1024', '-t', '2']);
  const httpAgent = new http.Agent({ keepAlive: true });
  const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000, httpAgent });
  const messages = [{ role: 'user', content: 'What is the weather in Paris for two days?' }];
  const base = { model: 'm', messages, max_tokens: 96, temperature: 0.8 };
  for (let seed = 1; seed <= 3; ++seed) {
    const required = { ...base, seed, tools: [weather], tool_choice: 'required' };
    const what = `${label} ${template} required seed ${seed}`;
    const call = await callOnce(client, required, weather.function, what);
    await callStreamed(client, required, weather.function, `${what} (streamed)`);
    const named = { ...base, seed, tools: [weather, clock], tool_choice: { type: 'function', function: { name: 'get_time' } } };
    await callOnce(client, named, clock.function, `${label} ${template} named seed ${seed}`);
    await callStreamed(client, named, clock.function, `${label} ${template} named seed ${seed} (streamed)`);
    if (template.startsWith('Qwen')) {  // the name is inside the call's JSON: "required" picks among several
      const both = { ...base, seed, tools: [weather, clock], tool_choice: 'required' };
      const r = await client.chat.completions.create(both);
      const c = r.choices[0].message.tool_calls?.[0];
      check(c, `${label} ${template} required of two seed ${seed}: no call: ${JSON.stringify(r.choices[0])}`);
      const fn = c.function.name === 'get_time' ? clock.function : weather.function;
      checkCall(r.choices[0].message.tool_calls, fn, `${label} ${template} required of two seed ${seed}`);
    }
    // The call and its result go back into the conversation.
    const followUp = [...messages, { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"sky": "clear"}' }];
    const r = await client.chat.completions.create({ ...base, seed, messages: followUp, tools: [weather], max_tokens: 4 });
    check(r.choices.length === 1 && r.usage.prompt_tokens > 0, `${what}: the tool turn was not answered`);
  }
  // tool_choice naming a function that is not in tools: 400.
  const bad = await postJson(server, '/v1/chat/completions',
    { messages, tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } });
  check(bad.status === 400 && JSON.parse(bad.body).error.param === 'tool_choice', `${label}: unknown tool_choice answered ${bad.status}`);
  httpAgent.destroy();
  await server.stop();
}

// run --chat and serve: the same renderer, so the same prompt tokens.
async function sameRenderer(model, templateArgs, label) {
  const promptTokens = runPromptTokens(moetier, model, ['--chat', ...templateArgs, '--system', 'Be brief.', '-p', 'Hello there']);
  const server = await startServer(moetier, model, [...templateArgs, '-c', '512', '-t', '2']);
  const r = await postJson(server, '/v1/chat/completions', {
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }], max_tokens: 1,
  });
  check(r.status === 200, `${label}: serve answered ${r.status}: ${r.body}`);
  const served = JSON.parse(r.body).usage.prompt_tokens;
  check(served === promptTokens, `${label}: run --chat renders ${promptTokens} prompt tokens, serve ${served}`);
  await server.stop();
}

const synthetic = makeModel(moetier, vocab, work);
await sameRenderer(synthetic, ['--chat-template-file', path.join(templates, 'microsoft-Phi-3.5-mini-instruct.jinja')], 'phi-3.5');
const models = [['synthetic', synthetic]];
if (existsSync(demo)) {
  await sameRenderer(demo, [], 'demo (ChatML fallback)');
  models.push(['demo', demo]);
}
for (const [label, model] of models) {
  for (const template of ['Qwen-Qwen3-0.6B.jinja', 'openai-gpt-oss-120b.jinja']) await toolsOn(model, template, label);
}
console.log(`PASS: tools (${models.map((m) => m[0]).join(', ')}; qwen3, gpt-oss), run --chat = serve`);
