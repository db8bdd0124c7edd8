#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/check.h"

namespace mt {
// ---- prompt lookup

Status LookupDrafter::propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
  draft->clear();
  const size_t size = history.size();
  for (int n = max_ngram_; n >= min_ngram_ && max_n > 0; --n) {
    const size_t ngram = static_cast<size_t>(n);
    if (size <= ngram) continue;
    const auto suffix = history.subspan(size - ngram);
    for (size_t start = size - ngram; start-- > 0;) {  // most recent occurrence first
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + static_cast<ptrdiff_t>(start))) continue;
      const size_t follow = start + ngram;  // < size: start < size - ngram
      const size_t end = std::min(size, follow + static_cast<size_t>(max_n));
      draft->assign(history.begin() + static_cast<ptrdiff_t>(follow), history.begin() + static_cast<ptrdiff_t>(end));
      return {};
    }
  }
  return {};
}

Status NextnDrafter::prepare_target(Backend& backend, SeqId seq) {
  MT_RETURN_IF_ERROR(backend.enable_nextn(seq));
  backend_ = &backend;
  seq_ = seq;
  return {};
}

Status NextnDrafter::propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
  draft->clear();
  if (backend_ == nullptr) return invalid_argument("NextN drafting: prepare_target was not called on the target's sequence");
  return backend_->propose_nextn(seq_, history, max_n, draft);
}

std::string LookupDrafter::describe() const {
  return "prompt lookup (n-grams " + std::to_string(max_ngram_) + " down to " + std::to_string(min_ngram_) + ")";
}

// ---- a draft model

StatusOr<std::unique_ptr<ModelDrafter>> ModelDrafter::create(Backend& backend, uint32_t n_ctx, std::string name) {
  MT_ASSIGN_OR_RETURN(SeqId seq, backend.create_sequence(n_ctx));
  return std::unique_ptr<ModelDrafter>(new ModelDrafter(backend, seq, std::move(name)));
}

ModelDrafter::~ModelDrafter() { backend_.free_sequence(seq_); }

Status ModelDrafter::propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
  draft->clear();
  const uint32_t room = backend_.n_ctx(seq_) > history.size() ? backend_.n_ctx(seq_) - static_cast<uint32_t>(history.size()) : 0;
  max_n = std::min<int>(max_n, static_cast<int>(room));
  if (max_n <= 0 || history.empty()) return {};
  // Keep what the sequence shares with the history; at least the last token is fed again
  // (its logits give the first guess).
  size_t common = static_cast<size_t>(std::mismatch(fed_.begin(), fed_.end(), history.begin(), history.end()).first - fed_.begin());
  common = std::min(common, history.size() - 1);
  if (common < fed_.size()) {
    MT_RETURN_IF_ERROR(backend_.truncate_sequence(seq_, static_cast<uint32_t>(common)));
    fed_.resize(common);
  }
  batch_.clear();
  batch_.add(seq_, static_cast<uint32_t>(common), history.subspan(common), Logits::kLast);
  MT_RETURN_IF_ERROR(backend_.eval_argmax(batch_, &ids_));  // greedy: only the pick leaves the device
  fed_.insert(fed_.end(), history.begin() + static_cast<ptrdiff_t>(common), history.end());
  for (int i = 0; i < max_n; ++i) {
    const int32_t guess = ids_.at(0);
    draft->push_back(guess);
    if (i + 1 == max_n) break;  // the last guess need not be fed
    batch_.clear();
    batch_.add(seq_, static_cast<uint32_t>(fed_.size()), guess, true);
    MT_RETURN_IF_ERROR(backend_.eval_argmax(batch_, &ids_));
    fed_.push_back(guess);
  }
  return {};
}

// ---- the labelled acceptance mode

ScriptedDrafter::ScriptedDrafter(std::vector<int32_t> reference, double acceptance, uint32_t n_vocab, uint64_t seed,
                                 bool hold)
    : reference_(std::move(reference)), acceptance_(acceptance), n_vocab_(n_vocab), seed_(seed), hold_(hold), rng_(seed) {
  MT_CHECK(acceptance >= 0 && acceptance <= 1 && n_vocab > 1);
}

Status ScriptedDrafter::propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
  draft->clear();
  const size_t at = history.size();
  // A history off the script gets nothing (the hold keeps a decoder's on it).
  if (at > reference_.size() || !std::equal(history.begin(), history.end(), reference_.begin())) return {};
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int i = 0; i < max_n && at + static_cast<size_t>(i) < reference_.size(); ++i) {
    const int32_t right = reference_[at + static_cast<size_t>(i)];
    const bool keep = uniform(rng_) < acceptance_;
    draft->push_back(keep ? right : static_cast<int32_t>((static_cast<uint32_t>(right) + 1) % n_vocab_));
  }
  return {};
}

bool ScriptedDrafter::scripted_token(size_t index, int32_t* token) const {
  if (!hold_ || index >= reference_.size()) return false;
  *token = reference_[index];
  return true;
}

std::string ScriptedDrafter::describe() const {
  char text[96];
  std::snprintf(text, sizeof(text), "LABELLED acceptance mode (the target's own tokens, each kept with p = %.2f)", acceptance_);
  return text;
}

// ---- verification

SpeculativeDecoder::SpeculativeDecoder(Backend& backend, SeqId seq, Drafter& drafter, SpecConfig config)
    : backend_(backend),
      seq_(seq),
      drafter_(drafter),
      config_(config),
      policy_(config.draft_min, config.draft_max, config.adaptive, config.throttle) {
  MT_CHECK(config.draft_max >= 0 && config.draft_min >= 0 && config.draft_min <= std::max(config.draft_max, 0));
}

Status SpeculativeDecoder::step(std::vector<int32_t>* history, Sampler& sampler, int max_new, Trace* trace) {
  MT_CHECK(history != nullptr && !history->empty() && max_new >= 1);
  if (!rollback_kept_) {  // a recurrent model must be able to cut a verification run short
    MT_RETURN_IF_ERROR(backend_.keep_run_rollback(seq_, static_cast<uint32_t>(config_.draft_max) + 1));
    rollback_kept_ = true;
  }
  const uint32_t pos0 = backend_.position(seq_);
  MT_CHECK_MSG(pos0 + 1 == history->size(), "the sequence must hold the history but its pending token");
  const uint32_t n_ctx = backend_.n_ctx(seq_);
  const int room = pos0 + 1 < n_ctx ? static_cast<int>(n_ctx - pos0 - 1) : 0;  // positions after the pending token
  const int want = std::min({policy_.next(stats_.steps), max_new - 1, room});
  draft_.clear();
  // The step's time: the proposal, the verification, the rows' sampling and the rollback
  // (what a longer draft costs beside its rows' evaluation).
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t setups = backend_.setups();
  if (want > 0) MT_RETURN_IF_ERROR(drafter_.propose(*history, want, &draft_));
  if (draft_.size() > static_cast<size_t>(std::max(want, 0))) draft_.resize(static_cast<size_t>(std::max(want, 0)));
  const uint32_t n_vocab = backend_.n_vocab();
  for (int32_t t : draft_) {
    MT_CHECK_MSG(t >= 0 && static_cast<uint32_t>(t) < n_vocab, "a drafter proposed a token outside the vocabulary");
  }

  rows_.assign(1, history->back());
  rows_.insert(rows_.end(), draft_.begin(), draft_.end());
  batch_.clear();
  batch_.add(seq_, pos0, rows_, Logits::kAll);
  // Greedy without bias or penalties: the rows' argmax alone (on the GPU only the ids leave
  // the device), which is exactly what sample() would pick from their logits.
  const bool argmax_only = sampler.picks_argmax();
  if (argmax_only) {
    MT_RETURN_IF_ERROR(backend_.eval_argmax(batch_, &ids_, trace));
  } else {
    MT_RETURN_IF_ERROR(backend_.eval(batch_, &logits_, trace));
  }

  size_t accepted = 0;
  for (size_t i = 0; i <= draft_.size(); ++i) {
    const bool guessed = i < draft_.size();
    // plain decoding's draw; a guess is kept when it equals it
    int32_t token = argmax_only ? ids_[i] : sampler.sample({logits_.data() + i * n_vocab, n_vocab});
    int32_t scripted;
    if (drafter_.scripted_token(history->size(), &scripted) && scripted != token) {  // the labelled mode's hold
      token = scripted;
      ++stats_.held;
    }
    sampler.accept(token);
    history->push_back(token);
    if (!guessed || token != draft_[i]) break;
    ++accepted;
  }
  if (accepted < draft_.size()) {  // the rejected guesses' rows go; nothing is copied
    MT_RETURN_IF_ERROR(backend_.truncate_sequence(seq_, pos0 + 1 + static_cast<uint32_t>(accepted)));
  }

  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  policy_.observe(stats_.steps, static_cast<int>(draft_.size()), static_cast<int>(accepted), step_s,
                  backend_.setups() != setups);
  ++stats_.steps;
  stats_.backed_off = policy_.throttle().off_steps();
  stats_.drafted += draft_.size();
  stats_.accepted += accepted;
  stats_.emitted += accepted + 1;
  return {};
}

}  // namespace mt
