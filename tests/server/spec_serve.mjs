// serve --lookup (speculative decoding by prompt lookup, issue 30): at temperature 0 the
// lookup server returns the text of a plain server for each request sent alone (except
// where a near tie of the plain logits decides), its /metrics count guesses evaluated and
// kept (the plain server's stay 0), and 4 concurrent streams of 2 sampled choices each end
// well formed with their token counts. serve --mtp on a synthetic glm4moe with a NextN
// block: the plain server's text, guesses counted.
//
// The tie threshold: the demo model is F16 (parity bound 1e-3 relative) with logits of
// magnitude ~20, so a top-2 log-probability gap under T = 2 * 1e-3 * 25 = 0.05 nats can
// flip between a one-token step and a verification row.
//
// usage: node spec_serve.mjs MOETIER MODEL WORK_DIR
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { check, fail, metrics, parseSse, postJson, startServer } from './lib.mjs';

const [moetier, model, work] = process.argv.slice(2);
mkdirSync(work, { recursive: true });
const T = 0.05;
const PROMPTS = [
  'And God said, Let there be light: and there was light. And God said, Let there be',
  'In the beginning God created the heaven and the earth. In the beginning God',
  'Blessed are the meek: for they shall inherit the earth. Blessed are the',
  'The LORD is my shepherd; I shall not want. The LORD is my',
  'And the children of Israel went up out of Egypt, and the children of Israel',
  'Who was David, the son of Jesse?',
];

const plain = await startServer(moetier, model, ['-t', '1', '--max-running', '8', '-c', '256']);
const spec = await startServer(moetier, model, ['-t', '1', '--max-running', '8', '-c', '256', '--lookup', '3', '--draft-max', '6']);
check(spec.log().includes('speculative decoding by prompt lookup (n-grams 3 down to 1, up to 6 guesses a step)'),
  `the lookup server's banner: ${spec.log()}`);

async function ask(server, prompt) {
  const r = await postJson(server, '/v1/completions', { prompt, max_tokens: 40, temperature: 0, logprobs: 2 });
  check(r.status === 200, `${r.status} ${r.body}`);
  const c = JSON.parse(r.body).choices[0];
  return { text: c.text, tokens: c.logprobs.tokens, top: c.logprobs.top_logprobs, finish: c.finish_reason };
}

// Each prompt alone to both servers: equal tokens, or a first difference at a near tie.
async function compare(plainServer, specServer, prompts, what) {
  let same = 0;
  const tied = [];
  for (const prompt of prompts) {
    const a = await ask(plainServer, prompt);
    const b = await ask(specServer, prompt);
    let k = 0;
    while (k < a.tokens.length && k < b.tokens.length && a.tokens[k] === b.tokens[k]) ++k;
    if (k === a.tokens.length && k === b.tokens.length) {
      check(a.finish === b.finish, `${JSON.stringify(prompt)}: same tokens, finish ${a.finish} vs ${b.finish}`);
      ++same;
      continue;
    }
    const alts = Object.values(a.top[k] ?? b.top[k] ?? {}).sort((x, y) => y - x);
    const gap = alts.length >= 2 ? alts[0] - alts[1] : Infinity;
    const where = `${JSON.stringify(prompt)} token ${k}: plain ${JSON.stringify(a.tokens[k])}, ${what} ` +
      `${JSON.stringify(b.tokens[k])}, top-2 gap ${gap.toFixed(4)}`;
    if (!(gap < T)) fail(`not a near tie: ${where}\n  plain:  ${JSON.stringify(a.text)}\n  ${what}: ${JSON.stringify(b.text)}`);
    tied.push(where);
  }
  return { same, tied };
}
const { same: exact, tied: ties } = await compare(plain, spec, PROMPTS, 'lookup');

const ms = await metrics(spec), mp = await metrics(plain);
const drafted = ms.moetier_speculative_draft_tokens_total, kept = ms.moetier_speculative_accepted_tokens_total;
check(drafted > 0 && kept > 0 && kept <= drafted, `lookup server: ${drafted} guesses, ${kept} kept`);
check(mp.moetier_speculative_draft_tokens_total === 0, 'the plain server evaluated guesses');

// Sampled choices, streamed, concurrently: every stream ends well formed with its count.
const streams = await Promise.all([0, 1, 2, 3].map(async (i) => {
  const r = await postJson(spec, '/v1/chat/completions', {
    messages: [{ role: 'user', content: PROMPTS[i] }], max_tokens: 24, temperature: 0.9, seed: 5 + i, n: 2,
    stream: true, stream_options: { include_usage: true },
  });
  check(r.status === 200, `stream ${i}: ${r.status} ${r.body}`);
  const events = parseSse(r.body);
  const usage = events.find((e) => e.usage)?.usage;
  const finished = events.flatMap((e) => e.choices ?? []).filter((c) => c.finish_reason).map((c) => c.index).sort();
  check(JSON.stringify(finished) === '[0,1]', `stream ${i}: choices finished ${JSON.stringify(finished)}`);
  check(usage && usage.completion_tokens >= 2 && usage.completion_tokens <= 48, `stream ${i}: usage ${JSON.stringify(usage)}`);
  return usage.completion_tokens;
}));
const mEnd = await metrics(spec);
check(mEnd.moetier_requests_running === 0, `requests still running: ${mEnd.moetier_requests_running}`);
await plain.stop();
await spec.stop();

// serve --mtp: a glm4moe model with its NextN block (F32, random weights: few guesses are
// right); the text is the plain server's, the guesses are counted.
const glm = path.join(work, 'glm-nextn.gguf');
const made = spawnSync(moetier, ['synth', '--arch', 'glm4moe', '--quant', 'f32', '-o', glm], { encoding: 'utf8' });
check(made.status === 0, `synth glm4moe: ${made.stderr}`);
const glmPlain = await startServer(moetier, glm, ['-t', '1', '-c', '256']);
const glmMtp = await startServer(moetier, glm, ['-t', '1', '-c', '256', '--mtp', '--draft-max', '3']);
check(glmMtp.log().includes("speculative decoding by the model's NextN (MTP) block (up to 3 guesses a step)"),
  `the --mtp server's banner: ${glmMtp.log()}`);
const mtp = await compare(glmPlain, glmMtp, PROMPTS.slice(0, 3), 'mtp');
const mm = await metrics(glmMtp);
check(mm.moetier_speculative_draft_tokens_total > 0, `--mtp server: ${mm.moetier_speculative_draft_tokens_total} guesses`);
await glmPlain.stop();
await glmMtp.stop();
console.log(`ok --mtp: ${mtp.same} of 3 replies equal the plain server's, ${mtp.tied.length} at a near tie; ` +
  `${mm.moetier_speculative_draft_tokens_total} guesses, ${mm.moetier_speculative_accepted_tokens_total} kept`);
console.log(`ok ${exact} of ${PROMPTS.length} replies equal the plain server's, ${ties.length} at a near tie; ` +
  `${kept} of ${drafted} guesses kept (${(100 * kept / drafted).toFixed(1)}%); sampled streams ${streams.join(', ')} tokens`);
for (const w of ties) console.log(`  near tie: ${w}`);
