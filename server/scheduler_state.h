// The scheduler's per-request state (server/scheduler.cpp only): a running request, its
// choices (sequence, sampler, text and grammar state), a queued request, and one
// request's part of a step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "runtime/grammar_tokens.h"
#include "runtime/sampling.h"
#include "server/scheduler.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace mt::sched {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One choice of a running request: its sequence (choice 0's is the request's own, the
// others are forks made once the prompt is in), sampler, text state and grammar state.
struct Choice {
  uint32_t index = 0;
  SeqId seq = 0;
  bool forked = false;  // seq is a fork this choice owns
  Sampler sampler;
  StreamDecoder decoder;
  StopMatcher stops;
  int32_t grammar_state = 0;
  uint32_t completion = 0;  // tokens generated
  int32_t next = -1;        // the sampled token to feed next (decode); -2: ended
  std::vector<TokenLogprobs> logprobs;  // sampled since the last event
  std::vector<int32_t> history;  // with prompt lookup: the prompt and every token sampled
  std::vector<int32_t> draft;    // this step's guesses after `next`

  Choice(uint32_t i, const GenerationRequest& req, uint32_t n_vocab, const Tokenizer& tok)
      : index(i), sampler(choice_params(req.sampling, i), n_vocab),
        decoder(tok, req.choices.render_special),
        stops(req.stops) {
    for (int32_t t0 : req.prompt) sampler.accept(t0);
  }
  void keep_history(const GenerationRequest& req) { history = req.prompt; }
  bool ended() const { return next == -2; }
  // Choice i draws from seed + i (a fixed seed stays reproducible; 0 stays random).
  static SamplingParams choice_params(SamplingParams p, uint32_t i) {
    if (p.seed != 0 && i > 0) {
      p.seed += i;
      if (p.seed == 0) p.seed = 1;
    }
    return p;
  }
};

// A request from admission to its last event.
struct Running {
  uint64_t id = 0;
  GenerationRequest req;
  std::shared_ptr<std::atomic<bool>> cancelled;
  Clock::time_point submitted, last_token;
  Backend& backend;
  Sequence seq;  // choice 0's KV cache in the backend, freed with it (forks: freed by ~Running)
  std::vector<Choice> choices;
  std::shared_ptr<TokenGrammar> grammar;  // with req.choices.grammar
  uint32_t prefilled = 0;  // prompt tokens already in the cache
  uint32_t ended = 0;      // choices ended
  bool first_text = true;
  bool done = false;       // its last event was sent

  Running(uint64_t i, GenerationRequest r, std::shared_ptr<std::atomic<bool>> c, Clock::time_point t, Backend& b,
          Sequence s, const Tokenizer& tok)
      : id(i), req(std::move(r)), cancelled(std::move(c)), submitted(t), last_token(t), backend(b), seq(std::move(s)) {
    choices.reserve(req.choices.n);
    for (uint32_t k = 0; k < req.choices.n; ++k) choices.emplace_back(k, req, backend.n_vocab(), tok);
    choices[0].seq = seq.id();
  }
  ~Running() {
    for (size_t k = 1; k < choices.size(); ++k) {
      if (choices[k].forked) backend.free_sequence(choices[k].seq);
    }
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
  uint32_t context() const { return req.choices.n * (static_cast<uint32_t>(req.prompt.size()) + req.max_tokens); }
  uint32_t completion() const {
    uint32_t c = 0;
    for (const Choice& ch : choices) c += ch.completion;
    return c;
  }
};

struct Queued {
  uint64_t id;
  GenerationRequest req;
  std::shared_ptr<std::atomic<bool>> cancelled;
  Clock::time_point submitted;
};

template <class T>
inline void keep_last(std::vector<T>& v, T x, size_t n) {
  if (v.size() >= n) v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() - n + 1));
  v.push_back(x);
}

// One request's part of a step: n tokens of one choice's sequence (prefill: choice 0),
// and whether its last row's logits come back.
struct StepPart {
  Running* r = nullptr;
  Choice* c = nullptr;
  uint32_t n = 0;
  bool logits = false;
};


}  // namespace mt::sched
