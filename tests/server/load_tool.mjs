// bench/load.py against `moetier serve` on the demo model (issue 27; with
// --ban-invalid-utf8, bench/gguf_vocab.py reading the model's vocabulary): the load tool's JSON
// says 0 failures, every request got exactly the output tokens asked (ignore_eos), tok/s
// > 0 and time to first token within the run; ignore_eos itself (an EOS the sampler is
// pushed towards is never sampled); /metrics' batch-size histograms move; and streaming
// clients that leave mid-stream give their KV cache back (tokens, sequences and bytes in
// use return to 0).
//
// usage: node load_tool.mjs MOETIER MODEL WORK_DIR LOAD_PY PYTHON
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { check, metrics, parseSse, postJson, request, sleep, startServer } from './lib.mjs';

const [moetier, model, work, loadPy, python] = process.argv.slice(2);
mkdirSync(work, { recursive: true });
const STREAMS = 4, REQUESTS = 2, PROMPT = 48, OUTPUT = 16;  // the ChatML fallback takes 31 tokens of this byte-level vocabulary
const server = await startServer(moetier, model, ['--alias', 'kjv', '--max-running', '4', '-c', '256', '-t', '2']);

// ignore_eos: with the end-of-text token pushed up by logit_bias, a plain request stops at
// once; with ignore_eos it runs to max_tokens.
{
  const tok = await postJson(server, '/tokenize', { content: '<|endoftext|>', parse_special: true });
  const eos = JSON.parse(tok.body).tokens;
  check(tok.status === 200 && eos.length === 1, `/tokenize of the end-of-text token: ${tok.body}`);
  const ask = (extra) => postJson(server, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'In the beginning' }], max_tokens: 12, temperature: 0,
    logit_bias: { [eos[0]]: 100 }, ...extra,
  });
  const plain = JSON.parse((await ask({})).body);
  check(plain.choices[0].finish_reason === 'stop' && plain.usage.completion_tokens === 1,
    `without ignore_eos the biased EOS does not end the answer: ${JSON.stringify(plain)}`);
  const ignored = JSON.parse((await ask({ ignore_eos: true })).body);
  check(ignored.choices[0].finish_reason === 'length' && ignored.usage.completion_tokens === 12,
    `with ignore_eos the answer does not run to max_tokens: ${JSON.stringify(ignored)}`);
  const streamed = parseSse((await ask({ ignore_eos: true, stream: true, stream_options: { include_usage: true } })).body);
  check(streamed.at(-1).usage.completion_tokens === 12, `streamed with ignore_eos: ${JSON.stringify(streamed.at(-1))}`);
  const bad = await ask({ ignore_eos: 'yes' });
  check(bad.status === 400 && JSON.parse(bad.body).error.param === 'ignore_eos', `ignore_eos: "yes": ${bad.status} ${bad.body}`);
  console.log('ok ignore_eos: 12 of 12 tokens with the EOS pushed up (1 without); a non-boolean is a 400');
}

// The load tool: STREAMS x REQUESTS streaming requests.
const before = await metrics(server);
const beforeAt = performance.now();
{
  const out = path.join(work, 'load.json');
  const r = spawnSync(python, [loadPy, '--url', server.base, '--streams', String(STREAMS), '--requests', String(REQUESTS),
    '--prompt-tokens', String(PROMPT), '--output-tokens', String(OUTPUT), '--pid', String(server.pid),
    '--require-exact', '--label', 'ctest', '--ban-invalid-utf8', model, '-o', out], { encoding: 'utf8', timeout: 60000 });
  check(r.status === 0, `load.py exited ${r.status}: ${r.stderr}`);
  const j = JSON.parse(readFileSync(out, 'utf8'));
  check(j.requests_failed === 0 && j.requests_completed === STREAMS * REQUESTS,
    `completed ${j.requests_completed}, failed ${j.requests_failed}: ${j.errors}`);
  check(j.per_request.length === STREAMS * REQUESTS, `${j.per_request.length} per-request entries`);
  for (const q of j.per_request) {
    check(q.ok && q.output_tokens === OUTPUT && q.output_tokens_source === 'usage' && q.finish_reason === 'length',
      `request ${q.stream}/${q.index}: ${JSON.stringify(q)}`);
    check(q.ttft_s > 0 && q.ttft_s <= q.e2e_s, `request ${q.stream}/${q.index}: ttft ${q.ttft_s} > e2e ${q.e2e_s}`);
    check(Math.abs(q.prompt_tokens - PROMPT) <= 1, `request ${q.stream}/${q.index}: ${q.prompt_tokens} prompt tokens`);
  }
  check(j.prompt_method === 'tokenize', `prompt_method ${j.prompt_method}`);
  // The demo model's byte-level vocabulary: its 128 byte tokens 0x80-0xff are not UTF-8 alone.
  check(j.config.banned_invalid_utf8_tokens === 128, `banned ${j.config.banned_invalid_utf8_tokens} tokens`);
  check(j.output_tokens_total === STREAMS * REQUESTS * OUTPUT, `output tokens ${j.output_tokens_total}`);
  check(j.output_tok_s > 0 && j.wall_s > 0, `output_tok_s ${j.output_tok_s}, wall ${j.wall_s}`);
  check(j.ttft_s.p50 <= j.ttft_s.p99 && j.ttft_s.p99 <= j.wall_s, `ttft ${JSON.stringify(j.ttft_s)} vs wall ${j.wall_s}`);
  check(j.itl_s.n > 0 && j.itl_s.p50 > 0 && j.itl_s.p50 <= j.itl_s.p99, `itl ${JSON.stringify(j.itl_s)}`);
  // VmHWM and a sampled VmRSS come from the kernel's per-CPU cached page counts, read at
  // different moments: the high-water mark can trail a sample by a few pages (CI saw
  // 194416 against 194420 KiB), so 1 MiB of slack.
  check(j.server_memory.peak_rss_kib_sampled > 0 && j.server_memory.vmhwm_kib + 1024 >= j.server_memory.peak_rss_kib_sampled,
    `server memory ${JSON.stringify(j.server_memory)}`);
  console.log(`ok load.py ${STREAMS}x${REQUESTS}: ${j.output_tok_s.toFixed(1)} tok/s, ttft p50 ` +
    `${(j.ttft_s.p50 * 1000).toFixed(1)} ms, itl p50 ${(j.itl_s.p50 * 1000).toFixed(1)} ms, ` +
    `peak RSS ${(j.server_memory.peak_rss_kib_sampled / 1024).toFixed(0)} MiB`);
}

// The batch-size histograms moved: every step observed, some with several sequences.
{
  const m = await metrics(server);
  const steps = m.moetier_scheduler_steps_total - before.moetier_scheduler_steps_total;
  const seqCount = m.moetier_batch_sequences_per_step_count - before.moetier_batch_sequences_per_step_count;
  const seqSum = m.moetier_batch_sequences_per_step_sum - before.moetier_batch_sequences_per_step_sum;
  const tokCount = m.moetier_batch_tokens_per_step_count - before.moetier_batch_tokens_per_step_count;
  const tokSum = m.moetier_batch_tokens_per_step_sum - before.moetier_batch_tokens_per_step_sum;
  check(steps > 0 && seqCount === steps && tokCount === steps, `steps ${steps}, histogram counts ${seqCount}, ${tokCount}`);
  check(seqSum > seqCount, `no step had more than one sequence (sum ${seqSum} over ${seqCount} steps)`);
  check(tokSum >= seqSum, `tokens per step ${tokSum} < sequences per step ${seqSum}`);
  const evalS = m.moetier_scheduler_eval_seconds_total - before.moetier_scheduler_eval_seconds_total;
  const hostS = m.moetier_scheduler_host_seconds_total - before.moetier_scheduler_host_seconds_total;
  // Both parts of every step, counted once: together within the wall time between the scrapes.
  const wallS = (performance.now() - beforeAt) / 1000;
  check(evalS > 0 && hostS > 0 && evalS + hostS <= wallS + 0.05,
    `step seconds: eval ${evalS} + host ${hostS} vs ${wallS} s between the scrapes`);
  check(m['moetier_batch_sequences_per_step_bucket{le="+Inf"}'] === m.moetier_batch_sequences_per_step_count,
    'the +Inf bucket is not the count');
  console.log(`ok batch histograms: ${steps} steps, ${(seqSum / seqCount).toFixed(2)} sequences and ` +
    `${(tokSum / tokCount).toFixed(2)} tokens per step`);
}

// Clients that leave mid-stream: their KV cache is given back.
{
  const kv = (m) => [m.moetier_kv_cache_tokens_used, m.moetier_kv_cache_tokens_filled, m.moetier_kv_cache_sequences,
    m.moetier_kv_cache_bytes_used];
  const cancelled = (m) => m['moetier_generation_requests_total{outcome="cancelled"}'];
  const was = cancelled(await metrics(server));
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'And God said' }], max_tokens: 200, stream: true,
    ignore_eos: true });
  const firsts = [];
  const reqs = [];
  for (let i = 0; i < 4; ++i) {
    firsts.push(new Promise((resolve, reject) => {
      const req = http.request(`${server.base}/v1/chat/completions`, {
        method: 'POST', agent: false, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
      }, (res) => {
        let seen = '';
        res.on('data', (d) => { seen += d; if (/"content":"[^"]/.test(seen)) resolve(); });
        res.on('error', () => {});
      });
      req.on('error', () => {});
      req.on('close', () => reject(new Error('closed before its first token')));
      req.end(body);
      reqs.push(req);
    }));
  }
  await Promise.all(firsts);
  const during = await metrics(server);
  const [used, filled, seqs, bytes] = kv(during);
  check(used > 0 && filled > 0 && filled <= used && seqs >= 1 && bytes > 0,
    `KV while streaming: used ${used}, filled ${filled}, sequences ${seqs}, bytes ${bytes}`);
  for (const req of reqs) req.destroy();
  let after = during;
  for (let i = 0; i < 100 && (kv(after).some((v) => v !== 0) || after.moetier_requests_running !== 0); ++i) {
    await sleep(50);
    after = await metrics(server);
  }
  check(kv(after).every((v) => v === 0) && after.moetier_requests_running === 0,
    `KV after the clients left: ${kv(after)}, running ${after.moetier_requests_running}`);
  check(cancelled(after) === was + 4, `cancelled ${was} -> ${cancelled(after)}`);
  console.log(`ok 4 clients left mid-stream: KV ${used} tokens / ${bytes} bytes -> 0, 4 counted cancelled`);
}

const health = await request(server, 'GET', '/health');
check(health.status === 200, 'not healthy at the end');
await server.stop();
console.log('PASS');
