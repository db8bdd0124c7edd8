#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/check.h"

namespace mt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Status bad_param(const char* field, const char* rule, double got) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "sampling: %s must be %s (got %g)", field, rule, got);
  return invalid_argument(buf);
}

// A double in [0, 1) from the top 53 bits: the same on every standard library, unlike
// std::uniform_real_distribution.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

uint64_t random_seed() {
  std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return s == 0 ? 1 : s;  // 0 means "pick one", so never report it
}

}  // namespace

Status validate(const SamplingParams& p) {
  // Written as !(ok) so NaN fails every rule.
  if (!(p.temperature >= 0 && std::isfinite(p.temperature)))
    return bad_param("temperature", "finite and >= 0", p.temperature);
  if (p.top_k < 0) return bad_param("top_k", ">= 0 (0 = off)", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) return bad_param("top_p", "in (0, 1] (1 = off)", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) return bad_param("min_p", "in [0, 1] (0 = off)", p.min_p);
  if (!(p.repeat_penalty > 0 && std::isfinite(p.repeat_penalty)))
    return bad_param("repeat_penalty", "finite and > 0 (1 = off)", p.repeat_penalty);
  if (p.repeat_last_n < -1)
    return bad_param("repeat_last_n", ">= -1 (-1 = whole history, 0 = off)", p.repeat_last_n);
  if (!std::isfinite(p.presence_penalty))
    return bad_param("presence_penalty", "finite", p.presence_penalty);
  if (!std::isfinite(p.frequency_penalty))
    return bad_param("frequency_penalty", "finite", p.frequency_penalty);
  for (const auto& [token, bias] : p.logit_bias) {
    if (!(bias >= -100 && bias <= 100)) return bad_param("logit_bias", "in [-100, 100]", bias);
    if (token < 0) return bad_param("logit_bias", "keyed by token ids >= 0", token);
  }
  return Status::ok_status();
}

Status validate_logit_bias(const SamplingParams& p, uint32_t n_vocab) {
  std::vector<bool> banned(n_vocab, false);
  uint32_t n_banned = 0;
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || static_cast<uint32_t>(token) >= n_vocab) {
      return invalid_argument("logit_bias: token id " + std::to_string(token) + " is not in the vocabulary (0.." +
                              std::to_string(n_vocab - 1) + ")");
    }
    if (bias <= -100 && !banned[static_cast<size_t>(token)]) {
      banned[static_cast<size_t>(token)] = true;
      ++n_banned;
    }
  }
  if (n_banned == n_vocab) return invalid_argument("logit_bias: every token of the vocabulary is banned");
  return Status::ok_status();
}

float log_softmax_top(std::span<const float> logits, int32_t token, uint32_t k, std::vector<TokenLogprob>* top) {
  MT_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size());
  float max = -kInf;
  for (float l : logits) max = std::max(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](float l) { return l == -kInf ? -kInf : static_cast<float>(static_cast<double>(l) - lse); };
  top->clear();
  k = std::min<uint32_t>(k, static_cast<uint32_t>(logits.size()));
  // A heap of the best k so far (the worst on top): one comparison for most tokens.
  auto better = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;  // as the heap's "less": the worst is on top
  };
  std::vector<int32_t> heap;
  heap.reserve(k);
  for (size_t i = 0; i < logits.size() && k > 0; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (heap.size() < k) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);  // best first
  for (int32_t id : heap) top->push_back({id, logprob(logits[static_cast<size_t>(id)])});
  return logprob(logits[static_cast<size_t>(token)]);
}

Sampler::Sampler(const SamplingParams& params, uint32_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      seed_(params.seed != 0 ? params.seed : random_seed()),
      rng_(seed_),
      window_(params.repeat_last_n) {
  MT_CHECK_MSG(validate(params).ok(), validate(params).to_string().c_str());
  MT_CHECK(n_vocab > 0 && n_vocab <= static_cast<uint32_t>(std::numeric_limits<int32_t>::max()));
  bias_by_id_ = params_.logit_bias;
  std::stable_sort(bias_by_id_.begin(), bias_by_id_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

void Sampler::accept(int32_t token) {
  MT_CHECK(token >= 0 && static_cast<uint32_t>(token) < n_vocab_);
  window_.push(token);
}

void Sampler::reset() {
  window_.clear();
  rng_.seed(seed_);
}

int32_t Sampler::sample(std::span<const float> logits) {
  MT_CHECK(logits.size() == n_vocab_);
  build_overrides(logits);
  if (params_.temperature == 0) return greedy(logits);
  if (selects_top_k()) {
    select_top_k(logits);
  } else {  // top-k off, or too large for a heap: every token is a candidate
    build_candidates(logits);
    for (const Override& o : overrides_) candidates_[static_cast<size_t>(o.id)].logit = o.logit;
    top_k();
  }
  const float max = max_logit();
  min_p_by_logit(max);
  const double total = softmax(max);
  // min-p before top-p gives the same set as the documented order (top-p, then min-p):
  // both keep a prefix of the tokens sorted by probability, top-p's prefix is measured
  // against the mass before min-p (`total`), and the shorter prefix wins either way.
  // Filtering first leaves top-p less to order.
  const double kept = top_p(total, min_p(total));
  return draw(kept);
}

void Sampler::build_candidates(std::span<const float> logits) {
  MT_CHECK(logits.size() == n_vocab_);
  candidates_.resize(n_vocab_);
  bool bad = false;
  for (uint32_t i = 0; i < n_vocab_; ++i) {
    candidates_[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
    bad |= !(logits[i] < kInf);  // NaN or +inf
  }
  MT_CHECK_MSG(!bad, "logits must be finite or -inf");
  sorted_ = false;
}

float Sampler::max_logit() const {
  float max = -kInf;
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  MT_CHECK_MSG(max > -kInf, "every token is masked (-inf)");
  return max;
}

// Masked (-inf) tokens are not removed: their weight is 0, which no filter keeps ahead of
// a positive weight and the draw never picks.
double Sampler::softmax(float max) {
  const float t = params_.temperature;
  for (Candidate& c : candidates_) c.weight = std::exp((c.logit - max) / t);  // best: 1
  double total = 0;  // a separate loop: next to the exp call the sum lives in memory
  for (const Candidate& c : candidates_) total += c.weight;
  return total;
}

// One draw over the survivors in their (deterministic) order, renormalised by their sum.
int32_t Sampler::draw(double total) {
  MT_CHECK(total > 0);  // the most likely token weighs 1 and survives every filter
  const double target = uniform01(rng_) * total;
  double mass = 0;
  int32_t last_positive = -1;
  for (const Candidate& c : candidates_) {
    if (c.weight <= 0) continue;
    mass += c.weight;
    last_positive = c.id;
    if (target < mass) return c.id;
  }
  return last_positive;  // target rounded up to total
}

}  // namespace mt
