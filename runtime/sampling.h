// The token sampler: logits in, one token id out, reproducibly.
//
// Pipeline, always in this order: logit bias (a bias of -100 or less bans the token) ->
// repetition penalties over the recent window ->
// (temperature 0: argmax, lowest id on ties) -> top-k -> softmax at the temperature ->
// top-p -> min-p (relative to the most likely token) -> renormalise -> one draw.
// Bias and penalties touch few tokens, so they become a short sparse list of overrides.
// Greedy and top-k (up to 1024) read the logits in place, block by block, skipping blocks
// that cannot change the answer (sampling_select.cpp), and only the k chosen become
// candidates (id, logit, weight). Otherwise all tokens are candidates and the filters are
// linear passes (top-p is a radix select), so a 150k vocab costs a few passes, never a full
// sort. Invariant: a given seed, history and logits
// give the same token on every platform and standard library (up to libm's exp): the PRNG
// is std::mt19937_64 (fully specified by the standard), the uniform draw is done by hand,
// and every sort uses a total order (value, then id), so no implementation-defined order
// reaches the draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/penalty_window.h"

namespace mt {

struct SamplingParams {
  float temperature = 0.8f;        // 0 = greedy
  int32_t top_k = 40;              // 0 = off
  float top_p = 0.95f;             // 1 = off; keep the smallest prefix whose mass >= top_p
  float min_p = 0.05f;             // 0 = off; drop tokens below min_p * max_prob
  float repeat_penalty = 1.0f;     // 1 = off; logit > 0 ? logit / p : logit * p
  int32_t repeat_last_n = 64;      // window of accepted tokens the penalties see; -1 = all
  float presence_penalty = 0.0f;   // subtracted once from a token present in the window
  float frequency_penalty = 0.0f;  // subtracted count-in-window times
  uint64_t seed = 0;               // 0 = a random seed (reported by Sampler::seed())
  // (token id, bias in [-100, 100]) added to the logit; <= -100 bans the token. Ids are
  // checked against the vocabulary by the Sampler's user (validate_logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// InvalidArgument naming the first bad field; a Sampler requires valid params.
Status validate(const SamplingParams& params);
// InvalidArgument when a logit_bias id is outside [0, n_vocab).
Status validate_logit_bias(const SamplingParams& params, uint32_t n_vocab);

// The model's own probabilities: log-softmax of the raw logits (no bias, penalty or
// temperature). Returns the value at `token` and fills *top with the k most likely tokens,
// highest first (ties: the lower id). -inf logits get -inf.
struct TokenLogprob {
  int32_t token;
  float logprob;
};
float log_softmax_top(std::span<const float> logits, int32_t token, uint32_t k, std::vector<TokenLogprob>* top);

class Sampler {
 public:
  // params must pass validate() (checked); n_vocab > 0.
  Sampler(const SamplingParams& params, uint32_t n_vocab);

  // Picks the next token from logits (n_vocab of them; finite or -inf, where -inf masks
  // a token). Does not add the token to the history: call accept() for that.
  int32_t sample(std::span<const float> logits);

  // Adds a token (prompt or generated) to the penalty history.
  void accept(int32_t token);

  // Whether sample() is row_argmax (core/row_argmax.h) of the raw logits: temperature 0
  // with no logit bias and no penalties (no random number is drawn either). A caller may
  // then ask the backend for the rows' argmax alone (Backend::eval_argmax).
  bool picks_argmax() const {
    return params_.temperature == 0 && params_.logit_bias.empty() && params_.repeat_penalty == 1.0f &&
           params_.frequency_penalty == 0.0f && params_.presence_penalty == 0.0f;
  }

  // The seed in use: params.seed, or the random one drawn when that was 0.
  uint64_t seed() const { return seed_; }

  // Clears the history and restarts the PRNG from seed(): the same calls replay the same
  // tokens.
  void reset();

 private:
  struct Candidate {
    int32_t id;
    float logit;   // after penalties
    float weight;  // exp((logit - max) / temperature): the unnormalised probability
  };

  // A logit that bias or penalties changed: the value every later step sees for `id`.
  struct Override {
    int32_t id;
    float logit;
  };

  void build_candidates(std::span<const float> logits);
  void build_overrides(std::span<const float> logits);  // fills overrides_, sorted by id
  int32_t greedy(std::span<const float> logits) const;
  bool selects_top_k() const;  // whether top-k is chosen from the logits in place
  void select_top_k(std::span<const float> logits);
  void top_k();
  float max_logit() const;
  void min_p_by_logit(float max);  // a cheap exact-preserving cut before softmax
  // Each step from softmax on returns the sum of the surviving weights, summed in list
  // order, which is the order draw() walks.
  double softmax(float max);
  double min_p(double total);
  double top_p(double total_before_min_p, double total);
  int32_t draw(double total);

  SamplingParams params_;
  uint32_t n_vocab_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  PenaltyWindow window_;
  std::vector<Candidate> candidates_;  // (n_vocab) at most, reused across calls
  std::vector<Candidate> scratch_;     // top-p's radix select buffer
  std::vector<Override> overrides_;    // this call's bias and penalties, sorted by id
  // params_.logit_bias stably sorted by token (a token's biases keep their order): each
  // call walks it instead of sorting the request's bias list again (thousands of entries
  // where a client bans every token that is not UTF-8 alone).
  std::vector<std::pair<int32_t, float>> bias_by_id_;
  bool sorted_ = false;                // candidates_ weights are non-increasing (top-k ran)
};

// Stop strings over streamed text. Generated pieces go in; what comes out is text that
// can no longer become part of a stop string. Invariant: the held-back tail is the longest
// suffix of the text so far that is a proper prefix of some stop string, so a stop split
// across any number of pieces is caught, and nothing after (or of) the stop is emitted.
// Byte-level: a held-back or emitted boundary never splits a UTF-8 character that the
// pieces themselves kept whole.
class StopMatcher {
 public:
  struct Result {
    std::string emit;  // safe to show now
    bool stopped;      // a stop string matched: emit ends right before it; generation ends
  };

  // Empty stop strings match nothing and are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds one piece. After a stop every call returns {"", true}.
  Result push(std::string_view piece);

  // End of generation without a stop: returns the held-back tail (empty after a stop).
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // (< longest stop) bytes not yet emitted
  bool stopped_ = false;
};

}  // namespace mt
