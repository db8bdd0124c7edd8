// Batch parity through the server (issue 27): at temperature 0, each of 16 different chat
// requests (24 to 48 output tokens, logprobs with the top 2) returns the same tokens when
// the 16 are decoded together in one batch as when it is sent alone, except where a near
// tie decides. Sent alone one after another (every step of that phase must hold one
// sequence), then all 16 at once (/metrics must show steps of more than 8 sequences, so a
// server that serialized them fails).
//
// The tie threshold comes from the parity bound on logits, max|d| / max|logit| <= REL per
// row (2e-2 with quantized weights; 1e-3 for F16/BF16, 1e-4 for F32 ones): each logit
// moves by at most REL * L (L: the model's logit scale, the largest |logit| `moetier
// logits` gives over the first prompt's text), so a log-probability moves by at most
// 2 * REL * L (the logit and the log-sum-exp each by REL * L) and so does the gap between
// two tokens' logits. T = 2 * REL * L:
//   * at the first token where a concurrent reply differs from its alone reply, the alone
//     reply's top-2 log-probability gap there must be < T (else: not a near tie, fail);
//   * before it, every chosen token's log-probability must agree within T.
// Prints how many replies matched exactly and how many diverged at a near tie (and where).
//
// usage: node batch_parity.mjs MOETIER MODEL WORK_DIR
// env: SERVE_MODEL (a GGUF instead of MODEL), SERVE_ARGS (extra `serve` flags, e.g.
//      "--device cuda"; they replace the defaults of the same name), SERVE_START_S,
//      PARITY_REL (the relative bound), PARITY_LOGIT_SCALE (L, skips `moetier logits`),
//      PARITY_LOGITS_ARGS (more `moetier logits` flags, e.g. "--device cuda")
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { check, fail, metrics, postJson, serveArgs, startServer } from './lib.mjs';

const [moetier, defaultModel, work] = process.argv.slice(2);
const model = process.env.SERVE_MODEL ?? defaultModel;
mkdirSync(work, { recursive: true });

const PROMPTS = [
  'And God said unto Moses', 'In the beginning', 'Blessed are the meek', 'The LORD is my shepherd',
  'Tell me of the flood.', 'Who was David?', 'What did Solomon build?', 'Sing a psalm of praise.',
  'How did the walls of Jericho fall?', 'Speak of the prophet Elijah.', 'What is wisdom?', 'Where is the garden of Eden?',
  'Who led the children of Israel?', 'Give a proverb about the sluggard.', 'What came after the famine?', 'Bless the house of Jacob.',
];
const maxTokens = (i) => 24 + Math.round((i * 24) / (PROMPTS.length - 1));  // 24..48

// REL from the weights' types (`moetier inspect --json`), unless given.
function relativeBound() {
  if (process.env.PARITY_REL) return Number(process.env.PARITY_REL);
  const r = spawnSync(moetier, ['inspect', '--json', model], { encoding: 'utf8', maxBuffer: 1 << 28 });
  check(r.status === 0, `moetier inspect ${model}: ${r.stderr}`);
  const types = Object.keys(JSON.parse(r.stdout).tensor_bytes_by_type);
  if (types.every((t) => t === 'f32')) return 1e-4;
  if (types.every((t) => ['f32', 'f16', 'bf16'].includes(t))) return 1e-3;
  return 2e-2;
}

// L: the largest |logit| over the positions of the first prompt's text, on the CPU.
function logitScale() {
  if (process.env.PARITY_LOGIT_SCALE) return Number(process.env.PARITY_LOGIT_SCALE);
  const out = path.join(work, 'logits.f32');
  const extra = (process.env.PARITY_LOGITS_ARGS ?? '').split(/\s+/).filter((x) => x !== '');
  const r = spawnSync(moetier, ['logits', '-m', model, '-p', PROMPTS[0], '-o', out, '--no-interleave', '-t', '2', ...extra],
    { encoding: 'utf8', timeout: 300000 });
  check(r.status === 0, `moetier logits: ${r.stderr}`);
  const buf = readFileSync(out);
  const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  let scale = 0;
  for (const v of logits) scale = Math.max(scale, Math.abs(v));
  check(scale > 0 && Number.isFinite(scale), `logit scale ${scale}`);
  return scale;
}

const REL = relativeBound();
const SCALE = logitScale();
const T = 2 * REL * SCALE;
console.log(`parity: bound ${REL} relative, logit scale ${SCALE.toFixed(2)}: tie threshold T = ${T.toFixed(4)} nats`);

const server = await startServer(moetier, model, serveArgs(['--max-running', '16', '-c', '256', '-t', '2']));

// One request: its tokens (bytes, as a string key) and each token's logprob entry.
async function ask(i) {
  const r = await postJson(server, '/v1/chat/completions', {
    messages: [{ role: 'user', content: PROMPTS[i] }], max_tokens: maxTokens(i), temperature: 0,
    logprobs: true, top_logprobs: 2,
  });
  check(r.status === 200, `request ${i}: ${r.status} ${r.body}`);
  const choice = JSON.parse(r.body).choices[0];
  const entries = choice.logprobs?.content ?? [];
  for (const e of entries) {
    check(Array.isArray(e.bytes) && e.top_logprobs.length >= 1, `request ${i}: logprob entry ${JSON.stringify(e)}`);
  }
  return { entries, keys: entries.map((e) => JSON.stringify(e.bytes)), finish: choice.finish_reason,
    text: choice.message.content };
}

const stepStats = (a, b) => {
  const d = (k) => b[k] - a[k];
  const count = d('moetier_batch_sequences_per_step_count');
  return { count, sum: d('moetier_batch_sequences_per_step_sum'),
    above8: count - d('moetier_batch_sequences_per_step_bucket{le="8"}') };
};

await ask(0);  // warm-up
const m0 = await metrics(server);
const alone = [];
for (let i = 0; i < PROMPTS.length; ++i) alone.push(await ask(i));
const m1 = await metrics(server);
const together = await Promise.all(PROMPTS.map((_, i) => ask(i)));
const m2 = await metrics(server);

const s1 = stepStats(m0, m1), s2 = stepStats(m1, m2);
check(s1.count > 0 && s1.sum === s1.count, `alone phase: ${s1.sum} sequences over ${s1.count} steps (want 1 per step)`);
check(s2.above8 > 0, `together phase: no step had more than 8 sequences (${s2.sum} over ${s2.count} steps): serialized?`);
console.log(`ok steps: alone ${s1.count} of 1 sequence; together ${s2.count}, ${(s2.sum / s2.count).toFixed(2)} ` +
  `sequences per step, ${s2.above8} with more than 8`);

// The gap between the top two alternatives of one entry (the chosen one first at temperature 0).
const gap = (e) => (e.top_logprobs.length >= 2 ? e.top_logprobs[0].logprob - e.top_logprobs[1].logprob : Infinity);

let exact = 0, drift = 0;
const ties = [];
for (let i = 0; i < PROMPTS.length; ++i) {
  const a = alone[i], c = together[i];
  check(a.entries.length >= 1, `request ${i}: no tokens`);
  let k = 0;
  while (k < a.keys.length && k < c.keys.length && a.keys[k] === c.keys[k]) ++k;
  for (let j = 0; j < k; ++j) drift = Math.max(drift, Math.abs(a.entries[j].logprob - c.entries[j].logprob));
  if (k === a.keys.length && k === c.keys.length) {
    check(a.finish === c.finish, `request ${i}: same tokens, finish ${a.finish} alone, ${c.finish} together`);
    ++exact;
    continue;
  }
  // The first difference: a different token, or one side ended (EOS: no entry) where the
  // other went on; the gap of the side that has an entry there.
  const at = a.entries[k] ?? c.entries[k];
  const g = gap(at);
  const where = `request ${i} (${JSON.stringify(PROMPTS[i])}) token ${k} of ${a.keys.length}: alone ` +
    `${a.entries[k]?.token === undefined ? '(end)' : JSON.stringify(a.entries[k].token)}, together ` +
    `${c.entries[k]?.token === undefined ? '(end)' : JSON.stringify(c.entries[k].token)}, top-2 gap ${g.toFixed(4)}`;
  if (!(g < T)) {
    fail(`not a near tie: ${where} >= T ${T.toFixed(4)}\n  alone:    ${JSON.stringify(a.text)}\n` +
      `  together: ${JSON.stringify(c.text)}`);
  }
  ties.push(where);
}
check(drift < T, `a shared token's log-probability moved by ${drift.toFixed(5)} >= T ${T.toFixed(4)} between alone and together`);
for (const w of ties) console.log(`  near tie: ${w}`);
console.log(`ok parity: ${exact} of ${PROMPTS.length} identical, ${ties.length} diverged at a near tie ` +
  `(T ${T.toFixed(4)}); largest log-probability drift on shared tokens ${drift.toExponential(2)}`);
console.log(`  e.g. ${JSON.stringify(alone[0].text.slice(0, 80))}`);
await server.stop();
console.log('PASS');
