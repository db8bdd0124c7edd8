// Scheduler: many generation requests served together on one model. One decode step
// serves every running request (their tokens go through the forward pass as one batch,
// so the MoE layer groups them by expert and a hot expert is read once per step, not once
// per request); a long prompt is prefilled in chunks interleaved with the running
// requests' decode steps; admission is by KV budget: a request that does not fit waits in
// the queue instead of failing; a cancelled request (client gone) or one past its
// deadline leaves at the next step and frees its KV cache.
//
// Requests come in as token ids; events (each new piece of text, then one final event)
// are delivered on the scheduler's own thread through the request's callback, which
// must not block; returning false from it cancels the request.
//
// A request may ask for n choices: its prompt is prefilled once, then its sequence is
// forked (Backend::fork_sequence) into n that sample on their own (seed + i), each with
// its own events (GenerationEvent::index), each ending with its own kDone; the last of them
// (`last`) ends the request. Per choice, optionally: the model's log-probabilities of each
// sampled token and its top alternatives (from the raw logits), and a grammar
// (runtime/grammar.h) that masks every token whose bytes it cannot accept and ends the
// choice as soon as the text is complete.
//
// The model is reached only through a Backend (backend/backend.h): a request's sequence is
// created at admission and freed when it leaves, and every step is one Backend::eval of
// all the step's tokens. Only the scheduler's thread touches the backend.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "runtime/grammar.h"
#include "runtime/sampling.h"
#include "server/prefill_pacer.h"
#include "tokenizer/tokenizer.h"

namespace mt {

class ExpertScheduler;

// One sampled token's log-probability and, best first, its top alternatives'.
struct LogprobEntry {
  int32_t token = -1;
  std::string piece;  // the token's bytes (control tokens: their text)
  float logprob = 0;
};
struct TokenLogprobs {
  LogprobEntry chosen;
  std::vector<LogprobEntry> top;
};

struct GenerationEvent {
  enum class Kind { kText, kDone, kError };
  Kind kind = Kind::kText;
  std::string text;                 // kText: the next piece (stop strings already cut)
  int32_t token = -1;               // kText: the token that produced it (-1: held-back tail)
  std::string finish_reason;        // kDone: "stop" (EOS, stop string, grammar complete), "length", "cancelled", "timeout"
  std::string error;                // kError
  uint32_t prompt_tokens = 0, completion_tokens = 0;  // kDone: usage of the request (all choices) so far
  uint32_t index = 0;               // the choice (kText, kDone)
  bool last = true;                 // kDone, kError: the request's final event
  std::vector<TokenLogprobs> logprobs;  // kText: the sampled tokens since the previous event (logprobs asked)
};

inline constexpr uint32_t kMaxChoices = 16;
inline constexpr int32_t kMaxTopLogprobs = 20;

// How many choices a request makes and what each reports and obeys.
struct ChoiceOptions {
  uint32_t n = 1;                   // choices (1..kMaxChoices), each a sequence of its own
  int32_t top_logprobs = -1;        // -1: none; 0..kMaxTopLogprobs: each token's logprob and this many alternatives
  std::shared_ptr<const Grammar> grammar;  // null: unconstrained
  std::string grammar_key;          // requests with equal keys (and grammars) share the grammar's token cache
  bool render_special = false;      // control tokens' text goes into the events (gpt-oss's harmony tool calls)
};

struct GenerationRequest {
  std::vector<int32_t> prompt;      // non-empty, ids valid
  SamplingParams sampling;          // validated by the caller
  uint32_t max_tokens = 256;
  std::vector<std::string> stops;
  std::chrono::milliseconds timeout{0};  // 0: none
  std::function<bool(const GenerationEvent&)> on_event;  // false: cancel
  ChoiceOptions choices;
};

struct ServingOptions {
  uint32_t max_running = 8;         // requests decoded together
  uint32_t n_ctx = 4096;            // per request: prompt + max_tokens must fit
  uint64_t kv_budget_tokens = 0;    // all running requests' contexts together; 0: max_running * n_ctx
  // Chunked prefill (server/prefill_pacer.h): at most prefill_chunk prompt tokens per step;
  // beside decoding sequences, as many as keep a step within prefill_pace x a plain decode
  // step (measured), at least prefill_min_chunk. prefill_pace 0: always prefill_chunk.
  uint32_t prefill_chunk = 256;
  uint32_t prefill_min_chunk = 16;
  double prefill_pace = 2.0;
  // While nothing decodes, at most prefill_idle_chunk prompt tokens per step (0:
  // prefill_chunk): a crowd's prompts go in together and its streams decode together.
  uint32_t prefill_idle_chunk = 0;
  // An idle scheduler given a request waits for more (until max_running are queued, gather
  // after the latest arrival, at most 4 x gather after the first) before the first step, so
  // requests sent together start together instead of the first alone and the rest paced
  // in beside it. 0: no wait.
  std::chrono::microseconds gather{0};
  // Speculative decoding by prompt lookup (runtime/speculative.h): each decoding choice's
  // step also evaluates up to draft_max guesses (what followed the most recent earlier
  // occurrence of its last lookup_ngram..1 tokens) and keeps those its sampling agrees
  // with. 0: off.
  uint32_t lookup_ngram = 0;
  // Or by the model's NextN (MTP) block (Backend::propose_nextn; CPU backend), each choice's
  // guesses from its sequence's final hidden states.
  bool nextn = false;
  uint32_t draft_max = 8;
  QuantType kv_type = QuantType::F16;
  // Threads that sample a step's plain decoding choices together (server/parallel_sampling.h);
  // 1: the scheduler's own thread samples them one after another. serve --device cuda: up to 8.
  uint32_t sampling_threads = 1;
  // The KV cache's bytes per position of one sequence at kv_type and a sequence's fixed
  // state (recurrent layers), for /metrics' bytes in use; 0: unknown (not reported).
  uint64_t kv_bytes_per_token = 0, kv_bytes_per_sequence = 0;
  // The scheduler of the experts' tiering, when the backend tiers them (the serve command
  // owns it): its counters are published in the metrics after every step. Only the
  // scheduler thread reads it.
  const ExpertScheduler* experts = nullptr;
};

// One MoE layer's expert-tiering counters since the start (experts/scheduler.h).
struct ExpertLayerCounters {
  uint64_t hits = 0, misses = 0, evictions = 0, h2d_bytes = 0, cpu_experts = 0;
};

// Steps counted by a per-step quantity (sequences or tokens in the step): per bucket of
// upper bounds (inclusive; a last bucket above them), and the sum of the observed values.
struct StepHistogram {
  std::vector<uint32_t> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1, not cumulative
  uint64_t sum = 0;
  explicit StepHistogram(std::vector<uint32_t> upper_bounds)
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}
  void observe(uint64_t value);
};

struct SchedulerMetrics {
  uint64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0, steps = 0;
  // Seconds of the scheduler's steps in the backend's eval and in everything else of a step
  // (building the batch, sampling, text, bookkeeping), summed: where a step's time goes.
  double eval_seconds = 0, host_seconds = 0;
  uint64_t draft_tokens = 0, draft_accepted = 0;  // speculative guesses evaluated and kept (--lookup)
  uint32_t running = 0, queued = 0;
  uint64_t kv_tokens_used = 0, kv_tokens_budget = 0;  // used: the contexts reserved by running requests
  // After each step: the positions written in running requests' caches, their sequences
  // (a request with n choices holds n) and the bytes reserved (0 when the bytes per token are unknown).
  uint64_t kv_tokens_filled = 0, kv_bytes_used = 0;
  uint32_t kv_sequences = 0;
  StepHistogram step_sequences{{1, 2, 4, 8, 16, 32, 64, 128}};  // sequences evaluated per step
  StepHistogram step_tokens{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}};  // tokens per step
  std::vector<double> ttft_seconds;         // time to first token of finished requests (last 1024)
  std::vector<double> token_seconds;        // per-token latency samples (last 4096)
  std::vector<ExpertLayerCounters> expert_layers;  // per layer (with tiered experts), after the last step
  // The split of misses' costs as they stand after the last step (experts/cost_fit.h):
  // the CPU's (learned or the profile's) and the device's (learned; 0 until then), bytes
  // per second (0: no split) and fixed seconds per layer-step.
  double expert_cpu_bytes_per_s = 0, expert_cpu_fixed_s = 0;
  double expert_dev_bytes_per_s = 0, expert_dev_fixed_s = 0;
  bool expert_cpu_learned = false;
  // The prefill pacer's measurements (server/prefill_pacer.h), after the last step: its
  // plain decode step and each chunk size's extra time (0: not measured yet).
  double pacer_decode_step_s = 0;
  std::vector<PrefillPacer::Bucket> pacer_chunks;
};

class Scheduler {
 public:
  Scheduler(Backend& backend, const Tokenizer& tokenizer, const ServingOptions& options);
  ~Scheduler();  // stops the loop; running requests get a kDone "cancelled"
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; InvalidArgument when it can never fit (prompt + max_tokens >
  // n_ctx, or n times that > the KV budget) or is malformed. The returned id can cancel it.
  StatusOr<uint64_t> submit(GenerationRequest request);
  void cancel(uint64_t id);
  SchedulerMetrics metrics() const;
  const ServingOptions& options() const { return options_; }

  struct Impl;

 private:
  ServingOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt
