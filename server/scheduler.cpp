#include "server/scheduler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/check.h"
#include "core/log.h"
#include "experts/scheduler.h"
#include "runtime/grammar_tokens.h"
#include "runtime/speculative.h"
#include "server/parallel_sampling.h"
#include "server/prefill_pacer.h"
#include "server/scheduler_state.h"
#include "tokenizer/stream_decoder.h"

namespace mt {

using sched::Choice;
using sched::Clock;
using sched::keep_last;
using sched::Queued;
using sched::Running;
using sched::seconds;
using sched::StepPart;

struct Scheduler::Impl {
  Backend& backend;
  const Tokenizer& tokenizer;
  ServingOptions o;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Queued> queue;
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> flags;  // queued + running
  std::vector<std::unique_ptr<Running>> running;                          // loop thread only
  SchedulerMetrics m;
  uint64_t next_id = 1;
  bool stop = false;
  Batch batch;                  // the step's tokens (loop thread only, reused)
  std::vector<StepPart> parts;  // whose they are, in batch order
  std::vector<float> logits;    // the step's asked rows
  std::vector<float> masked;    // one row with a grammar's mask applied
  std::shared_ptr<const TokenVocab> vocab;  // token bytes, built at the first grammar
  std::unordered_map<std::string, std::shared_ptr<TokenGrammar>> grammars;  // by grammar_key
  std::vector<TokenLogprob> top;  // scratch
  std::unique_ptr<LookupDrafter> lookup;  // with o.lookup_ngram > 0
  std::vector<int32_t> rows;              // scratch: a choice's token and guesses
  PrefillPacer pacer;                     // the step's prompt-token budget beside decoders
  ParallelSampler parallel;               // o.sampling_threads
  std::vector<int32_t> presampled;        // per part: its token sampled ahead (presample), or -1
  std::vector<ParallelSampler::Job> jobs;  // scratch of presample
  std::thread thread;

  Impl(Backend& b, const Tokenizer& tk, const ServingOptions& opt)
      : backend(b), tokenizer(tk), o(opt),
        pacer(PrefillPacer::Options{.max_chunk = std::max(1u, opt.prefill_chunk),
                                    .idle_chunk = opt.prefill_idle_chunk,
                                    .min_chunk = std::max(1u, opt.prefill_min_chunk),
                                    .ratio = opt.prefill_pace}),
        parallel(opt.sampling_threads) {
    m.kv_tokens_budget = o.kv_budget_tokens;
    if (o.lookup_ngram > 0) lookup = std::make_unique<LookupDrafter>(static_cast<int>(o.lookup_ngram), 1);
    thread = std::thread([this] { loop(); });
  }

  void emit(Running& r, GenerationEvent e) {
    if (!r.req.on_event(e) && e.kind == GenerationEvent::Kind::kText) r.cancelled->store(true);
  }

  // Ends one choice with its final events (the held-back text, then its kDone); the last
  // choice to end ends the request.
  void finish_choice(Running& r, Choice& c, const std::string& reason) {
    if (c.ended()) return;
    c.next = -2;
    std::string tail = c.stops.stopped() ? "" : c.stops.push(c.decoder.flush()).emit;
    if (!c.stops.stopped()) tail += c.stops.flush();
    if (!tail.empty() || !c.logprobs.empty()) {
      GenerationEvent t;
      t.text = std::move(tail);
      t.index = c.index;
      t.logprobs = std::move(c.logprobs);
      c.logprobs.clear();
      emit(r, std::move(t));
    }
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::kDone;
    done.finish_reason = reason;
    done.index = c.index;
    done.prompt_tokens = static_cast<uint32_t>(r.req.prompt.size());
    done.completion_tokens = r.completion();
    done.last = ++r.ended == r.choices.size();
    if (done.last) {  // counted before the caller hears of it
      r.done = true;
      std::lock_guard<std::mutex> lock(mu);
      flags.erase(r.id);
      if (reason == "cancelled" || reason == "timeout") {
        ++m.requests_cancelled;
      } else {
        ++m.requests_finished;
      }
      m.prompt_tokens += r.req.prompt.size();
      m.completion_tokens += done.completion_tokens;
      m.kv_tokens_used -= r.context();
    }
    r.req.on_event(done);
  }

  // Ends every choice still going (cancellation, deadline, shutdown).
  void finish(Running& r, const std::string& reason) {
    for (Choice& c : r.choices) finish_choice(r, c, reason);
  }

  void fail(Running& r, const std::string& error) {
    if (r.done) return;
    r.done = true;
    for (Choice& c : r.choices) c.next = -2;
    GenerationEvent e;
    e.kind = GenerationEvent::Kind::kError;
    e.error = error;
    {
      std::lock_guard<std::mutex> lock(mu);
      flags.erase(r.id);
      ++m.requests_failed;
      m.kv_tokens_used -= r.context();
    }
    r.req.on_event(e);
  }

  std::shared_ptr<TokenGrammar> token_grammar(const GenerationRequest& req) {
    if (!vocab) vocab = TokenVocab::from_tokenizer(tokenizer);
    if (req.choices.grammar_key.empty()) return std::make_shared<TokenGrammar>(req.choices.grammar, vocab);
    auto it = grammars.find(req.choices.grammar_key);
    // A cache no request uses any more is rebuilt once it has grown large.
    if (it != grammars.end() && it->second.use_count() == 1 && it->second->overflowed()) grammars.erase(it), it = grammars.end();
    if (it != grammars.end()) return it->second;
    if (grammars.size() >= 4) {
      for (auto g = grammars.begin(); g != grammars.end();) g = g->second.use_count() == 1 ? grammars.erase(g) : std::next(g);
    }
    auto g = std::make_shared<TokenGrammar>(req.choices.grammar, vocab);
    grammars.emplace(req.choices.grammar_key, g);
    return g;
  }

  // Moves queued requests in while slots and KV budget allow (first come, first served).
  void admit() {
    std::unique_lock<std::mutex> lock(mu);
    while (!queue.empty() && running.size() < o.max_running) {
      Queued& q = queue.front();
      const uint64_t per_choice = q.req.prompt.size() + q.req.max_tokens;
      const uint64_t need = per_choice * q.req.choices.n;
      if (m.kv_tokens_used + need > o.kv_budget_tokens) break;  // waits for memory
      auto seq = Sequence::create(backend, static_cast<uint32_t>(per_choice), o.kv_type);
      if (!seq.ok()) {
        GenerationEvent e;
        e.kind = GenerationEvent::Kind::kError;
        e.error = seq.status().to_string();
        Queued dead = std::move(q);
        queue.pop_front();
        flags.erase(dead.id);
        ++m.requests_failed;
        lock.unlock();
        dead.req.on_event(e);
        lock.lock();
        continue;
      }
      m.kv_tokens_used += need;
      auto r = std::make_unique<Running>(q.id, std::move(q.req), q.cancelled, q.submitted, backend, std::move(*seq),
                                         tokenizer);
      queue.pop_front();
      if (lookup || o.nextn) {  // the guesses' rows must be able to go (a recurrent state: through a log)
        for (Choice& c : r->choices) c.keep_history(r->req);
        if (Status k = backend.keep_run_rollback(r->seq.id(), o.draft_max + 1); !k.ok()) log_warn(k.to_string());
        if (o.nextn) {  // before the prompt: the NextN block reads its hidden states
          if (Status k = backend.enable_nextn(r->seq.id()); !k.ok()) log_warn(k.to_string());
        }
      }
      if (r->req.choices.grammar) {
        lock.unlock();  // the first grammar builds the token table
        r->grammar = token_grammar(r->req);
        lock.lock();
      }
      running.push_back(std::move(r));
    }
    m.running = static_cast<uint32_t>(running.size());
    m.queued = static_cast<uint32_t>(queue.size());
  }

  // The prompt is in choice 0's cache: the other choices fork it.
  Status fork_choices(Running& r) {
    for (size_t k = 1; k < r.choices.size(); ++k) {
      MT_ASSIGN_OR_RETURN(r.choices[k].seq, backend.fork_sequence(r.seq.id()));
      r.choices[k].forked = true;
    }
    return Status::ok_status();
  }

  // Samples choice c's next token from its row of logits (the grammar's mask and the
  // request's bias applied; the logprobs from the raw row).
  // Returns the token, or -1 when the choice ended without one (a speculative guess is kept
  // by the caller when it equals the token: runtime/speculative.h).
  // picked >= 0: the token presample drew for it (the same draw, made on another thread).
  int32_t sample(Running& r, Choice& c, std::span<const float> row, Clock::time_point now, int32_t picked = -1) {
    std::span<const float> lg = row;
    if (r.grammar) {
      masked.assign(row.begin(), row.end());
      uint32_t allowed = apply_token_mask(r.grammar->mask(c.grammar_state), masked);
      for (const auto& [token, bias] : r.req.sampling.logit_bias) {  // bans may leave nothing
        float& l = masked[static_cast<size_t>(token)];
        if (bias <= -100 && l > -std::numeric_limits<float>::infinity()) {
          l = -std::numeric_limits<float>::infinity();
          --allowed;
        }
      }
      if (allowed == 0) {  // the grammar cannot go on
        finish_choice(r, c, "stop");
        return -1;
      }
      lg = masked;
    }
    const int32_t tok = picked >= 0 ? picked : c.sampler.sample(lg);
    if (r.req.choices.top_logprobs >= 0 && !tokenizer.is_eog(tok)) {
      TokenLogprobs lp;
      lp.chosen = {tok, tokenizer.token_to_piece(tok, true),
                   log_softmax_top(row, tok, static_cast<uint32_t>(r.req.choices.top_logprobs), &top)};
      for (const TokenLogprob& t : top) lp.top.push_back({t.token, tokenizer.token_to_piece(t.token, true), t.logprob});
      c.logprobs.push_back(std::move(lp));
    }
    on_token(r, c, tok, now);
    return tok;
  }

  // A sampled token: the text it adds (stop strings cut) and whether the choice is done.
  void on_token(Running& r, Choice& c, int32_t tok, Clock::time_point now) {
    c.sampler.accept(tok);
    ++c.completion;
    if (o.lookup_ngram > 0 || o.nextn) c.history.push_back(tok);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (r.first_text) keep_last(m.ttft_seconds, seconds(now - r.submitted), 1024);
      else keep_last(m.token_seconds, seconds(now - r.last_token), 4096);
    }
    r.first_text = false;
    r.last_token = now;
    if (tokenizer.is_eog(tok)) return finish_choice(r, c, "stop");
    if (r.grammar) c.grammar_state = r.grammar->advance(c.grammar_state, tok);
    const StopMatcher::Result out = c.stops.push(c.decoder.push(tok));
    if (!out.emit.empty() || (!c.logprobs.empty() && !out.stopped)) {
      GenerationEvent t;
      t.text = out.emit;
      t.token = tok;
      t.index = c.index;
      t.logprobs = std::move(c.logprobs);
      c.logprobs.clear();
      emit(r, std::move(t));
    }
    if (out.stopped) return finish_choice(r, c, "stop");
    if (r.grammar && (c.grammar_state < 0 || r.grammar->done(c.grammar_state))) return finish_choice(r, c, "stop");
    if (c.completion >= r.req.max_tokens) return finish_choice(r, c, "length");
    c.next = tok;
  }

  // A decoding choice's rows from `first`: each guess kept while the sampling agrees, the
  // token sampled where they part (or after the last guess); the rejected guesses' cache
  // rows truncated away.
  void verify(Running& r, Choice& c, size_t first, Clock::time_point now, int32_t picked = -1) {
    const uint32_t V = backend.n_vocab();
    const size_t guesses = c.draft.size();
    size_t accepted = 0;
    for (size_t i = 0; i <= guesses; ++i) {
      const std::span<const float> lg(&logits[(first + i) * V], V);
      const int32_t draft = i < guesses ? c.draft[i] : -1;
      const int32_t tok = sample(r, c, lg, now, i == 0 ? picked : -1);
      if (tok < 0 || draft < 0 || tok != draft || c.ended() || r.done) break;
      ++accepted;
    }
    if (guesses > 0) {
      std::lock_guard<std::mutex> lock(mu);
      m.draft_tokens += guesses;
      m.draft_accepted += accepted;
    }
    if (c.ended() || r.done || accepted == guesses) return;
    const uint32_t keep = static_cast<uint32_t>(r.req.prompt.size()) + c.completion - 1;  // all but c.next
    if (Status t = backend.truncate_sequence(c.seq, keep); !t.ok()) fail(r, t.to_string());
  }

  void drop_finished() {
    std::erase_if(running, [](const std::unique_ptr<Running>& r) { return r->done; });
  }

  // Requests decoding (some choice still going) and requests whose prompt is still going in.
  std::pair<uint32_t, uint32_t> decoding_and_prefilling() const {
    const auto going = [](const Choice& c) { return !c.ended(); };
    uint32_t decoding = 0, prefilling = 0;
    for (const auto& r : running) {
      if (r->prefilled < r->req.prompt.size()) {
        ++prefilling;
      } else if (std::any_of(r->choices.begin(), r->choices.end(), going)) {
        ++decoding;
      }
    }
    return {decoding, prefilling};
  }

  // The step's batch: every decoding choice's next token, and prompt chunks up to the
  // pacer's budget in all (prefill_chunk, less beside decoders: a long prompt never
  // stalls them).
  void build_batch() {
    batch.clear();
    parts.clear();
    const auto [decoding, prefilling] = decoding_and_prefilling();
    uint32_t prefill_left = pacer.budget(decoding, prefilling);
    for (auto& r : running) {
      const auto P = static_cast<uint32_t>(r->req.prompt.size());
      if (r->prefilled < P) {
        if (prefill_left == 0) continue;
        const uint32_t n = std::min(prefill_left, P - r->prefilled);
        prefill_left -= n;
        const bool last = r->prefilled + n == P;
        batch.add(r->seq.id(), r->prefilled, std::span<const int32_t>(r->req.prompt).subspan(r->prefilled, n),
                  last ? Logits::kLast : Logits::kNone);
        parts.push_back({r.get(), nullptr, n, last});
        continue;
      }
      for (Choice& c : r->choices) {
        if (c.ended()) continue;
        const uint32_t pos = P + c.completion - 1;  // c.next's
        c.draft.clear();
        const int want = std::min<int>(static_cast<int>(o.draft_max), static_cast<int>(r->req.max_tokens - c.completion) - 1);
        if (lookup && want > 0) (void)lookup->propose(c.history, want, &c.draft);  // lookup cannot fail
        if (o.nextn && want > 0 && !backend.propose_nextn(c.seq, c.history, want, &c.draft).ok()) c.draft.clear();
        rows.assign(1, c.next);
        rows.insert(rows.end(), c.draft.begin(), c.draft.end());
        batch.add(c.seq, pos, rows, Logits::kAll);
        parts.push_back({r.get(), &c, static_cast<uint32_t>(rows.size()), true});
      }
    }
  }

  void publish_experts(double eval_seconds) {
    std::lock_guard<std::mutex> lock(mu);
    ++m.steps;
    m.eval_seconds += eval_seconds;
    m.step_sequences.observe(parts.size());
    m.step_tokens.observe(batch.size());
    m.pacer_decode_step_s = pacer.decode_step_s();
    pacer.buckets(&m.pacer_chunks);  // in place: no allocation per step
    if (o.experts == nullptr) return;  // a snapshot for /metrics (the HTTP thread reads it under mu)
    const ExpertScheduler& es = *o.experts;
    const uint32_t n = static_cast<uint32_t>(es.cache().n_layers());
    m.expert_layers.resize(n);
    for (uint32_t l = 0; l < n; ++l) {
      const CacheCounters& c = es.cache().counters(l);
      const SchedulerCounters& k = es.counters(l);
      m.expert_layers[l] = {c.hits, c.misses, c.evictions, c.bytes_copied + k.staged_bytes, k.cpu_experts};
    }
    if (es.options().split_misses && es.options().split_fraction < 0) {
      uint32_t layer = 0;  // the first layer with experts: the profile's speed is per type
      while (layer + 1 < n && es.expert_bytes(layer) == 0) ++layer;
      const LineCost cost = es.cpu_cost(layer);
      m.expert_cpu_bytes_per_s = cost.per_byte_s > 0 ? 1.0 / cost.per_byte_s : 0;
      m.expert_cpu_fixed_s = cost.fixed_s;
      m.expert_cpu_learned = es.options().learn_costs && es.cpu_fit().ready();
      if (es.options().learn_costs && es.device_fit().ready()) {
        const LineCost dev = es.device_fit().cost();
        m.expert_dev_bytes_per_s = 1.0 / dev.per_byte_s;
        m.expert_dev_fixed_s = dev.fixed_s;
      }
    }
  }

  void step() {
    const Clock::time_point now = Clock::now();
    // Leavers first: cancelled (client gone) and past their deadline.
    for (auto& r : running) {
      if (r->cancelled->load()) {
        finish(*r, "cancelled");
      } else if (r->req.timeout.count() > 0 && now - r->submitted > r->req.timeout) {
        finish(*r, "timeout");
      }
    }
    drop_finished();
    if (running.empty()) return;
    build_batch();
    if (batch.empty()) return;
    const Clock::time_point eval_start = Clock::now();
    const Status s = backend.eval(batch, &logits);
    uint32_t decode_rows = 0, prompt_tokens = 0;  // the step's, from its parts
    for (const StepPart& p : parts) (p.c != nullptr ? decode_rows : prompt_tokens) += p.n;
    const double eval_seconds = seconds(Clock::now() - eval_start);
    pacer.observe(decode_rows, prompt_tokens, eval_seconds);
    publish_experts(eval_seconds);
    if (!s.ok()) {
      for (const StepPart& p : parts) fail(*p.r, s.to_string());
      return drop_finished();
    }
    const uint32_t V = backend.n_vocab();
    presample(V);
    size_t row = 0;
    const Clock::time_point done_at = Clock::now();
    for (size_t i = 0; i < parts.size(); ++i) {
      const StepPart& p = parts[i];
      Running& r = *p.r;
      if (p.c == nullptr) r.prefilled += p.n;
      if (!p.logits) continue;
      if (p.c != nullptr) {  // a decoding choice: its token's row and its guesses' rows
        const size_t first = row;
        row += p.n;
        if (!r.done) verify(r, *p.c, first, done_at, presampled.empty() ? -1 : presampled[i]);
        continue;
      }
      const std::span<const float> lg(&logits[row * V], V);
      ++row;
      if (r.done) continue;
      if (Status f = fork_choices(r); !f.ok()) {
        fail(r, f.to_string());
        continue;
      }
      for (Choice& c : r.choices) {
        if (!c.ended()) sample(r, c, lg, done_at);
      }
    }
    drop_finished();
    std::lock_guard<std::mutex> lock(mu);
    m.host_seconds += seconds(Clock::now() - now) - eval_seconds;
  }

  // With sampling threads: the step's plain decoding choices (one row: no guesses; no
  // grammar, no logprobs) sampled together ahead of the loop that applies their tokens.
  void presample(uint32_t V) {
    presampled.clear();
    if (!parallel.threaded()) return;
    presampled.assign(parts.size(), -1);
    jobs.clear();
    size_t row = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const StepPart& p = parts[i];
      if (!p.logits) continue;
      if (p.c == nullptr) {  // a prompt's last row: its choices are forked and sampled in the loop
        ++row;
        continue;
      }
      if (p.n == 1 && !p.r->done && !p.r->grammar && p.r->req.choices.top_logprobs < 0 && !p.c->ended()) {
        jobs.push_back({&p.c->sampler, std::span<const float>(&logits[row * V], V), &presampled[i]});
      }
      row += p.n;
    }
    parallel.sample(jobs);
  }

  // The running requests' KV cache as the backend holds it, after a step (cancelled and
  // finished requests already gone).
  void publish_kv() {
    uint64_t filled = 0;
    uint32_t sequences = 0;
    for (const auto& r : running) {
      for (const Choice& c : r->choices) {
        if (c.index > 0 && !c.forked) continue;  // not forked yet: the prompt is still going in
        filled += backend.position(c.seq);
        ++sequences;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    m.running = static_cast<uint32_t>(running.size());
    m.queued = static_cast<uint32_t>(queue.size());
    m.kv_tokens_filled = filled;
    m.kv_sequences = sequences;
    m.kv_bytes_used = o.kv_bytes_per_token == 0
                          ? 0
                          : m.kv_tokens_used * o.kv_bytes_per_token + uint64_t{sequences} * o.kv_bytes_per_sequence;
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty() || !running.empty(); });
        if (stop) break;
        // Idle: the first request waits a moment for those sent with it (ServingOptions::gather).
        // The wait ends gather after the latest arrival, at most 4 x gather after the first.
        while (!stop && running.empty() && o.gather.count() > 0 && !queue.empty() && queue.size() < o.max_running) {
          const size_t seen = queue.size();
          const Clock::time_point until = std::min(queue.front().submitted + 4 * o.gather, queue.back().submitted + o.gather);
          if (Clock::now() >= until) break;
          cv.wait_until(lock, until, [&] { return stop || queue.size() != seen; });
        }
        if (stop) break;
      }
      admit();
      step();
      publish_kv();
    }
    for (auto& r : running) finish(*r, "cancelled");
    running.clear();
    std::deque<Queued> left;
    {
      std::lock_guard<std::mutex> lock(mu);
      left.swap(queue);
    }
    for (Queued& q : left) {
      GenerationEvent done;
      done.kind = GenerationEvent::Kind::kDone;
      done.finish_reason = "cancelled";
      done.prompt_tokens = static_cast<uint32_t>(q.req.prompt.size());
      q.req.on_event(done);
    }
  }
};

Scheduler::Scheduler(Backend& backend, const Tokenizer& tokenizer, const ServingOptions& options) : options_(options) {
  MT_CHECK(options_.max_running > 0 && options_.n_ctx > 0);
  if (options_.kv_budget_tokens == 0) options_.kv_budget_tokens = static_cast<uint64_t>(options_.max_running) * options_.n_ctx;
  impl_ = std::make_unique<Impl>(backend, tokenizer, options_);
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

StatusOr<uint64_t> Scheduler::submit(GenerationRequest request) {
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  if (!request.on_event) return invalid_argument("no event callback");
  if (request.max_tokens == 0) return invalid_argument("max_tokens must be at least 1");
  for (int32_t id : request.prompt) {
    if (!impl_->tokenizer.valid(id)) return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  MT_RETURN_IF_ERROR(validate(request.sampling));
  MT_RETURN_IF_ERROR(validate_logit_bias(request.sampling, impl_->backend.n_vocab()));
  if (request.choices.n < 1 || request.choices.n > kMaxChoices) {
    return invalid_argument("n must be between 1 and " + std::to_string(kMaxChoices));
  }
  if (request.choices.top_logprobs < -1 || request.choices.top_logprobs > kMaxTopLogprobs) {
    return invalid_argument("top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));
  }
  const uint64_t need = request.prompt.size() + static_cast<uint64_t>(request.max_tokens);
  if (need > options_.n_ctx) {
    return invalid_argument("the prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
                            std::to_string(request.max_tokens) + ") exceed the context of " + std::to_string(options_.n_ctx));
  }
  if (need * request.choices.n > options_.kv_budget_tokens) {
    return invalid_argument("the request needs " + std::to_string(need * request.choices.n) +
                            " tokens of KV cache, the budget is " + std::to_string(options_.kv_budget_tokens));
  }
  auto flag = std::make_shared<std::atomic<bool>>(false);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    id = impl_->next_id++;
    impl_->flags[id] = flag;
    impl_->queue.push_back({id, std::move(request), flag, Clock::now()});
    ++impl_->m.requests_total;
    impl_->m.queued = static_cast<uint32_t>(impl_->queue.size());
  }
  impl_->cv.notify_all();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->flags.find(id);
  if (it != impl_->flags.end()) it->second->store(true);
  // A queued request is dropped when it would be admitted: it is cancelled at its first step.
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->m;
}

}  // namespace mt
