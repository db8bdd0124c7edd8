// `moetier serve` through the official OpenAI Node client (pinned in tools/oracle/setup.sh):
// models, chat and text completions streamed and not, usage equal to the tokenizer's count
// of the rendered prompt (`moetier run` as the reference), stop strings, seeds, and the
// client's own error classes for our error objects.
//
// usage: node e2e.mjs MOETIER VOCAB WORK_DIR OPENAI_DIR   (exit 77 = skipped: no client)
import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, fail, makeModel, runPromptTokens, startServer } from './lib.mjs';

const [moetier, vocab, work, openaiDir] = process.argv.slice(2);
const clientPath = path.join(openaiDir, 'node_modules', 'openai', 'index.mjs');
if (!existsSync(clientPath)) {
  console.log(`SKIP: no OpenAI client at ${clientPath} (run tools/oracle/setup.sh)`);
  process.exit(77);
}
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);

const model = makeModel(moetier, vocab, work);
const server = await startServer(moetier, model, ['--alias', 'tiny', '--api-key', 'sk-test', '-c', '512', '-t', '2']);
// Our own keep-alive agent, closed before the server stops (the server would close its idle
// connections itself at the stop; closing them first keeps the client quiet).
const httpAgent = new http.Agent({ keepAlive: true });
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'sk-test', maxRetries: 0, timeout: 60000, httpAgent });

const system = 'You answer in one word.';
const user = 'Name a colour of the sky.';
const messages = [{ role: 'system', content: system }, { role: 'user', content: user }];
const chatPromptTokens = runPromptTokens(moetier, model, ['--chat', '--system', system, '-p', user]);
const completionPrompt = 'The quick brown fox jumps over';
const completionPromptTokens = runPromptTokens(moetier, model, ['-p', completionPrompt]);

function checkUsage(usage, promptTokens, maxTokens, finish, what) {
  check(usage, `${what}: no usage`);
  check(usage.prompt_tokens === promptTokens, `${what}: prompt_tokens ${usage.prompt_tokens}, tokenizer says ${promptTokens}`);
  check(usage.completion_tokens >= 1 && usage.completion_tokens <= maxTokens, `${what}: completion_tokens ${usage.completion_tokens}`);
  if (finish === 'length') check(usage.completion_tokens === maxTokens, `${what}: length but ${usage.completion_tokens} tokens`);
  check(usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

async function chat(params) {
  return client.chat.completions.create({ model: 'tiny', messages, ...params });
}

async function chatStream(params) {
  const stream = await client.chat.completions.create({
    model: 'tiny', messages, stream: true, stream_options: { include_usage: true }, ...params,
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    check(chunk.object === 'chat.completion.chunk', `chunk object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const c = chunk.choices[0];
    if (chunks === 1) check(c.delta.role === 'assistant', 'the first chunk does not carry the assistant role');
    text += c.delta.content ?? '';
    if (c.finish_reason) {
      check(finish === null, 'two finish_reason chunks');
      finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

// models
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === 'tiny', `models: ${JSON.stringify(models.data)}`);
check((await client.models.retrieve('tiny')).id === 'tiny', 'models.retrieve');

// chat, not streamed and streamed: greedy gives the same text both ways
const plain = await chat({ max_tokens: 12, temperature: 0 });
check(plain.object === 'chat.completion' && plain.model === 'tiny', `chat object ${plain.object} ${plain.model}`);
const choice = plain.choices[0];
check(choice.message.role === 'assistant' && typeof choice.message.content === 'string', 'chat message');
check(['stop', 'length'].includes(choice.finish_reason), `chat finish_reason ${choice.finish_reason}`);
checkUsage(plain.usage, chatPromptTokens, 12, choice.finish_reason, 'chat');
const streamed = await chatStream({ max_tokens: 12, temperature: 0 });
check(streamed.text === choice.message.content, `streamed text ${JSON.stringify(streamed.text)} != ${JSON.stringify(choice.message.content)}`);
check(streamed.finish === choice.finish_reason, 'streamed finish_reason');
checkUsage(streamed.usage, chatPromptTokens, 12, streamed.finish, 'chat stream');
// max_completion_tokens is the newer name of max_tokens
const newer = await chat({ max_completion_tokens: 3, temperature: 0 });
check(newer.usage.completion_tokens <= 3, 'max_completion_tokens');

// text completions
const completion = await client.completions.create({ model: 'tiny', prompt: completionPrompt, max_tokens: 10, temperature: 0 });
check(completion.object === 'text_completion' && typeof completion.choices[0].text === 'string', 'completion object');
checkUsage(completion.usage, completionPromptTokens, 10, completion.choices[0].finish_reason, 'completion');
let completionText = '';
let completionUsage = null;
for await (const chunk of await client.completions.create({
  model: 'tiny', prompt: completionPrompt, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
})) {
  if (chunk.usage) completionUsage = chunk.usage;
  if (chunk.choices.length) completionText += chunk.choices[0].text;
}
check(completionText === completion.choices[0].text, 'streamed completion text differs');
checkUsage(completionUsage, completionPromptTokens, 10, completion.choices[0].finish_reason, 'completion stream');

// stop strings: cut a longer greedy answer right before a stop taken from its middle
const long = (await chat({ max_tokens: 32, temperature: 0 })).choices[0].message.content;
const chars = Array.from(long);
let stop = null;
for (let i = Math.floor(chars.length / 2); i + 2 <= chars.length && stop === null; ++i) {
  const s = chars.slice(i, i + 2).join('');
  if (!s.includes('\uFFFD') && s.trim() === s && s.length > 0) stop = s;
}
check(stop !== null, `no usable stop string in ${JSON.stringify(long)}`);
const expected = long.slice(0, long.indexOf(stop));
const stopped = await chat({ max_tokens: 32, temperature: 0, stop: [stop, 'never-generated-xyz'] });
check(stopped.choices[0].message.content === expected,
  `stop ${JSON.stringify(stop)}: ${JSON.stringify(stopped.choices[0].message.content)} != ${JSON.stringify(expected)}`);
check(stopped.choices[0].finish_reason === 'stop', `stop finish_reason ${stopped.choices[0].finish_reason}`);
const stoppedStream = await chatStream({ max_tokens: 32, temperature: 0, stop });
check(stoppedStream.text === expected && stoppedStream.finish === 'stop', 'streamed stop string');

// seeds: the same seed at temperature > 0 gives the same text; another seed another text
const seeded = async (seed) => (await chat({ max_tokens: 16, temperature: 0.9, top_p: 0.95, seed })).choices[0].message.content;
const a = await seeded(1234);
const b = await seeded(1234);
const c = await seeded(4321);
check(a === b, `seed 1234 twice: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
check(a !== c, 'seeds 1234 and 4321 gave the same 16 tokens');
const streamedSeeded = await chatStream({ max_tokens: 16, temperature: 0.9, top_p: 0.95, seed: 1234 });
check(streamedSeeded.text === a, 'streamed seed 1234 differs');

// errors come back as the client's typed errors
async function expectError(what, promise, Klass, status, code) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof Klass, `${what}: ${e.constructor.name}, wanted ${Klass.name}: ${e.message}`);
    check(e.status === status, `${what}: status ${e.status}`);
    if (code) check(e.code === code, `${what}: code ${e.code}`);
    return;
  }
  fail(`${what}: no error`);
}
await expectError('n = 17 (above 16)', chat({ n: 17 }), OpenAI.BadRequestError, 400);
await expectError('unknown model', client.chat.completions.create({ model: 'gpt-9', messages }), OpenAI.NotFoundError, 404,
  'model_not_found');
const wrongKey = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'sk-wrong', maxRetries: 0, httpAgent });
await expectError('wrong key', wrongKey.models.list(), OpenAI.AuthenticationError, 401, 'invalid_api_key');
await expectError('context', chat({ max_tokens: 100000 }), OpenAI.BadRequestError, 400, 'context_length_exceeded');

httpAgent.destroy();
await server.stop();
console.log(`e2e: ok (chat prompt ${chatPromptTokens} tokens, completion prompt ${completionPromptTokens}, ` +
  `stop ${JSON.stringify(stop)}, seed text ${JSON.stringify(a)})`);
