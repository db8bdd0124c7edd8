#include "server/scheduler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/check.h"
#include "experts/scheduler.h"
#include "tokenizer/stream_decoder.h"

namespace mt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A request from admission to its last event.
struct Running {
  uint64_t id = 0;
  GenerationRequest req;
  std::shared_ptr<std::atomic<bool>> cancelled;
  Clock::time_point submitted, last_token;
  Sequence seq;  // its KV cache in the backend, freed with it
  Sampler sampler;
  StreamDecoder decoder;
  StopMatcher stops;
  uint32_t prefilled = 0;    // prompt tokens already in the cache
  uint32_t completion = 0;   // tokens generated
  int32_t next = -1;         // the sampled token to feed next (decode)
  bool first_text = true;

  Running(uint64_t i, GenerationRequest r, std::shared_ptr<std::atomic<bool>> c, Clock::time_point t, Sequence s,
          uint32_t n_vocab, const Tokenizer& tok)
      : id(i),
        req(std::move(r)),
        cancelled(std::move(c)),
        submitted(t),
        last_token(t),
        seq(std::move(s)),
        sampler(req.sampling, n_vocab),
        decoder(tok),
        stops(req.stops) {
    for (int32_t t0 : req.prompt) sampler.accept(t0);
  }
  uint32_t context() const { return static_cast<uint32_t>(req.prompt.size()) + req.max_tokens; }
};

struct Queued {
  uint64_t id;
  GenerationRequest req;
  std::shared_ptr<std::atomic<bool>> cancelled;
  Clock::time_point submitted;
};

template <class T>
void keep_last(std::vector<T>& v, T x, size_t n) {
  if (v.size() >= n) v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() - n + 1));
  v.push_back(x);
}

}  // namespace

// One request's part of a step: n tokens, and whether its last row's logits come back.
struct StepPart {
  Running* r = nullptr;
  uint32_t n = 0;
  bool logits = false;
};

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
  std::thread thread;

  Impl(Backend& b, const Tokenizer& tk, const ServingOptions& opt) : backend(b), tokenizer(tk), o(opt) {
    m.kv_tokens_budget = o.kv_budget_tokens;
    thread = std::thread([this] { loop(); });
  }

  // Ends a running request with a final event (and the held-back text).
  void finish(Running& r, const std::string& reason) {
    std::string tail = r.stops.stopped() ? "" : r.stops.push(r.decoder.flush()).emit;
    if (!r.stops.stopped()) tail += r.stops.flush();
    if (!tail.empty()) r.req.on_event({GenerationEvent::Kind::kText, tail, -1, "", "", 0, 0});
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::kDone;
    done.finish_reason = reason;
    done.prompt_tokens = static_cast<uint32_t>(r.req.prompt.size());
    done.completion_tokens = r.completion;
    {  // counted before the caller hears of it
      std::lock_guard<std::mutex> lock(mu);
      flags.erase(r.id);
      if (reason == "cancelled" || reason == "timeout") {
        ++m.requests_cancelled;
      } else {
        ++m.requests_finished;
      }
      m.prompt_tokens += r.req.prompt.size();
      m.completion_tokens += r.completion;
      m.kv_tokens_used -= r.context();
    }
    r.req.on_event(done);
  }

  void fail(Running& r, const std::string& error) {
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

  // Moves queued requests in while slots and KV budget allow (first come, first served).
  void admit() {
    std::unique_lock<std::mutex> lock(mu);
    while (!queue.empty() && running.size() < o.max_running) {
      Queued& q = queue.front();
      const uint64_t need = q.req.prompt.size() + q.req.max_tokens;
      if (m.kv_tokens_used + need > o.kv_budget_tokens) break;  // waits for memory
      auto seq = Sequence::create(backend, static_cast<uint32_t>(need), o.kv_type);
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
      running.push_back(std::make_unique<Running>(q.id, std::move(q.req), q.cancelled, q.submitted, std::move(*seq),
                                                  backend.n_vocab(), tokenizer));
      queue.pop_front();
    }
    m.running = static_cast<uint32_t>(running.size());
    m.queued = static_cast<uint32_t>(queue.size());
  }

  // A sampled token: the text it adds (stop strings cut) and whether the request is done.
  void on_token(Running& r, int32_t tok, Clock::time_point now) {
    r.sampler.accept(tok);
    ++r.completion;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (r.first_text) keep_last(m.ttft_seconds, seconds(now - r.submitted), 1024);
      else keep_last(m.token_seconds, seconds(now - r.last_token), 4096);
    }
    r.first_text = false;
    r.last_token = now;
    r.next = -2;  // done unless it goes on below
    if (tokenizer.is_eog(tok)) return finish(r, "stop");
    const StopMatcher::Result out = r.stops.push(r.decoder.push(tok));
    if (!out.emit.empty() && !r.req.on_event({GenerationEvent::Kind::kText, out.emit, tok, "", "", 0, 0})) {
      r.cancelled->store(true);
    }
    if (out.stopped) return finish(r, "stop");
    if (r.completion >= r.req.max_tokens) return finish(r, "length");
    r.next = tok;
  }

  void step() {
    const Clock::time_point now = Clock::now();
    // Leavers first: cancelled (client gone) and past their deadline.
    for (auto& r : running) {
      if (r->cancelled->load()) {
        finish(*r, "cancelled");
        r->next = -2;
      } else if (r->req.timeout.count() > 0 && now - r->submitted > r->req.timeout) {
        finish(*r, "timeout");
        r->next = -2;
      }
    }
    std::erase_if(running, [](const std::unique_ptr<Running>& r) { return r->next == -2; });
    if (running.empty()) return;
    // The step's batch: every decoding request's next token, and prompt chunks up to
    // prefill_chunk tokens in all (so a long prompt never stalls the decoders).
    batch.clear();
    parts.clear();
    uint32_t prefill_left = std::max(1u, o.prefill_chunk);
    for (auto& r : running) {
      const auto P = static_cast<uint32_t>(r->req.prompt.size());
      if (r->prefilled < P) {
        if (prefill_left == 0) continue;
        const uint32_t n = std::min(prefill_left, P - r->prefilled);
        prefill_left -= n;
        const bool last = r->prefilled + n == P;
        batch.add(r->seq.id(), r->prefilled, std::span<const int32_t>(r->req.prompt).subspan(r->prefilled, n),
                  last ? Logits::kLast : Logits::kNone);
        parts.push_back({r.get(), n, last});
      } else {
        batch.add(r->seq.id(), P + r->completion - 1, r->next, true);
        parts.push_back({r.get(), 1, true});
      }
    }
    if (batch.empty()) return;
    const Status s = backend.eval(batch, &logits);
    {
      std::lock_guard<std::mutex> lock(mu);
      ++m.steps;
      if (o.experts != nullptr) {  // a snapshot for /metrics (the HTTP thread reads it under mu)
        const ExpertScheduler& es = *o.experts;
        const uint32_t n = static_cast<uint32_t>(es.cache().n_layers());
        m.expert_layers.resize(n);
        for (uint32_t l = 0; l < n; ++l) {
          const CacheCounters& c = es.cache().counters(l);
          const SchedulerCounters& k = es.counters(l);
          m.expert_layers[l] = {c.hits, c.misses, c.evictions, c.bytes_copied + k.staged_bytes, k.cpu_experts};
        }
      }
    }
    if (!s.ok()) {
      for (const StepPart& p : parts) {
        fail(*p.r, s.to_string());
        p.r->next = -2;
      }
      std::erase_if(running, [](const std::unique_ptr<Running>& r) { return r->next == -2; });
      return;
    }
    const uint32_t V = backend.n_vocab();
    size_t row = 0;
    const Clock::time_point done_at = Clock::now();
    for (const StepPart& p : parts) {
      Running& r = *p.r;
      const bool prefill = r.prefilled < r.req.prompt.size();
      if (prefill) r.prefilled += p.n;
      if (!p.logits) continue;
      const std::span<const float> lg(&logits[row * V], V);
      ++row;
      on_token(r, r.sampler.sample(lg), done_at);
    }
    std::erase_if(running, [](const std::unique_ptr<Running>& r) { return r->next == -2; });
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty() || !running.empty(); });
        if (stop) break;
      }
      admit();
      step();
      std::lock_guard<std::mutex> lock(mu);
      m.running = static_cast<uint32_t>(running.size());
      m.queued = static_cast<uint32_t>(queue.size());
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
  const uint64_t need = request.prompt.size() + static_cast<uint64_t>(request.max_tokens);
  if (need > options_.n_ctx) {
    return invalid_argument("the prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
                            std::to_string(request.max_tokens) + ") exceed the context of " + std::to_string(options_.n_ctx));
  }
  if (need > options_.kv_budget_tokens) {
    return invalid_argument("the request needs " + std::to_string(need) + " tokens of KV cache, the budget is " +
                            std::to_string(options_.kv_budget_tokens));
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
