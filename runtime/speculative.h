// Speculative decoding: a drafter guesses the next few tokens, the target evaluates the
// pending token and the guesses in one batched call (Backend::eval: each MoE layer reads a
// selected expert once for all of them), and keeps the longest prefix its own sampling
// agrees with, plus the token it sampled where they part (or after the last guess).
//
// Invariant: the tokens are plain decoding's, token for token and seed for seed (the
// labelled mode's script aside: ScriptedDrafter). Each row's
// token is Sampler::sample's draw, the same random numbers in the same order as plain
// decoding, and a guess is kept only when it equals that draw. For a drafter that proposes
// its tokens for sure (every drafter here does) a guess is then kept with the probability
// the target gives it, as the textbook rejection rule keeps it, and the output needs no
// resampling: at any temperature the text equals plain decoding's wherever the batched rows'
// logits equal the one-token rows' (a near tie aside). After a step the sequence holds
// the accepted tokens only: the rejected guesses' cache rows are truncated away
// (Backend::truncate_sequence), never copied; a recurrent (Gated DeltaNet) state goes back
// through Backend::keep_run_rollback's log of the verification run.
//
// A step's state: `history` is the prompt and every token produced so far; all of it but
// its last token (the pending one) is in the target's sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "runtime/draft_length.h"
#include "runtime/sampling.h"

namespace mt {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_n tokens to follow `history` into *draft (cleared first); fewer or none is
  // allowed (the step then costs what a plain one does).
  virtual Status propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) = 0;
  // "lookup", "draft model", ...: for reports.
  virtual std::string describe() const = 0;
  // Called with the target's sequence before its first token is evaluated (a drafter that
  // reads the target's own states asks for them here). The default needs nothing.
  virtual Status prepare_target(Backend& backend, SeqId seq) {
    (void)backend, (void)seq;
    return {};
  }
  // The labelled mode's script: true with *token the token the history must hold at
  // `index`, whatever the target picks there. The default holds nothing.
  virtual bool scripted_token(size_t index, int32_t* token) const {
    (void)index, (void)token;
    return false;
  }
};

// NextN (MTP) drafting: the target model's own NextN block guesses from the target's final
// hidden states (Backend::propose_nextn), the first guess from the state of the last
// evaluated position and the pending token, each further one chained on the block's own
// output. No second model; the file must carry the block (glm4moe, deepseek2, qwen35moe /
// qwen3next converted with it).
class NextnDrafter final : public Drafter {
 public:
  Status prepare_target(Backend& backend, SeqId seq) override;
  Status propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) override;
  std::string describe() const override { return "NextN (MTP) block"; }

 private:
  Backend* backend_ = nullptr;
  SeqId seq_ = 0;
};

// Prompt lookup: the most recent earlier occurrence of the history's last n tokens (n from
// max_ngram down to min_ngram) is taken to continue the same way: the tokens that followed
// it are proposed. No model; pays on text that repeats its prompt (code, quotes, edits).
class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(int max_ngram = 3, int min_ngram = 1) : max_ngram_(max_ngram), min_ngram_(min_ngram) {}
  Status propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) override;
  std::string describe() const override;

 private:
  int max_ngram_, min_ngram_;
};

// A smaller model of the same vocabulary, decoding greedily in its own sequence of its own
// backend; the sequence follows the history (its rejected guesses truncated away before the
// next proposal), so each proposal feeds only the tokens it has not seen.
class ModelDrafter final : public Drafter {
 public:
  // backend outlives the drafter; n_ctx as the target's.
  static StatusOr<std::unique_ptr<ModelDrafter>> create(Backend& backend, uint32_t n_ctx, std::string name);
  ~ModelDrafter() override;
  Status propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) override;
  std::string describe() const override { return "draft model " + name_; }

 private:
  ModelDrafter(Backend& backend, SeqId seq, std::string name) : backend_(backend), seq_(seq), name_(std::move(name)) {}
  Backend& backend_;
  SeqId seq_;
  std::string name_;
  std::vector<int32_t> fed_;  // the tokens in seq_, in order
  Batch batch_;
  std::vector<int32_t> ids_;  // the last evaluation's greedy pick
};

// The labelled acceptance mode (for measuring the mechanics on models whose drafts could
// never agree, e.g. random-weight synthetic ones): proposes the target's own continuation,
// computed beforehand by plain greedy decoding, each token right with probability
// `acceptance` and otherwise a wrong one. A history off the script gets no proposal.
// With `hold` (bench's measurement) the script also holds the output: where the target's
// pick differs from it (a near tie the batched rows decide otherwise than the one-token
// rows did: on the GPU their products sum in another order, and a tiered run's split of
// experts between the CPU and the device follows its timing) the script's token is kept
// and SpecStats::held counts it. Without the hold such a run left its script at the first
// near tie and drafted nothing more, measuring plain decoding; with adaptive lengths no two
// runs took the same rows, so no script could be settled in advance. Every step still
// evaluates every row: only which of two near-equal tokens follows is staged, as the
// acceptance is. Without it (the default) the output is the target's, as for any drafter.
class ScriptedDrafter final : public Drafter {
 public:
  // reference: the prompt followed by the plain greedy continuation.
  ScriptedDrafter(std::vector<int32_t> reference, double acceptance, uint32_t n_vocab, uint64_t seed, bool hold = false);
  Status propose(std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) override;
  std::string describe() const override;
  bool scripted_token(size_t index, int32_t* token) const override;
  // The random numbers from the start again: the same run then gets the same guesses.
  void restart() { rng_.seed(seed_); }
  const std::vector<int32_t>& reference() const { return reference_; }

 private:
  std::vector<int32_t> reference_;
  double acceptance_;
  uint32_t n_vocab_;
  uint64_t seed_;
  bool hold_;
  std::mt19937_64 rng_;
};

struct SpecConfig {
  int draft_max = 8;  // longest proposal asked for
  int draft_min = 1;  // the adaptive length never drops below this
  bool adaptive = true;  // DraftLength (draft_length.h) picks each step's length by measurement
  bool throttle = true;  // adaptive only: SpecThrottle turns drafting off while it does not pay
};

struct SpecStats {
  uint64_t steps = 0;     // verification calls (plain steps included: a step with no draft)
  uint64_t drafted = 0;   // guesses evaluated
  uint64_t accepted = 0;  // guesses kept
  uint64_t emitted = 0;   // tokens produced (accepted + one per step)
  uint64_t backed_off = 0;  // plain steps while SpecThrottle (draft_length.h) had drafting off
  uint64_t held = 0;        // the labelled mode: picks the script overrode (near ties; ScriptedDrafter)
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
  double tokens_per_step() const { return steps > 0 ? static_cast<double>(emitted) / static_cast<double>(steps) : 0.0; }
};

// Drives one sequence of the target: each step() evaluates the pending token and a
// proposal, and appends the tokens it produced (1 to draft length + 1) to the history.
class SpeculativeDecoder {
 public:
  // backend and drafter outlive the decoder; seq holds history minus its last token.
  SpeculativeDecoder(Backend& backend, SeqId seq, Drafter& drafter, SpecConfig config);

  // Appends the step's tokens to *history and to the sampler's penalty window (the
  // sampler sees each before the next row is sampled, as in plain decoding); at most
  // max_new tokens (>= 1). trace sees the verification call.
  Status step(std::vector<int32_t>* history, Sampler& sampler, int max_new, Trace* trace = nullptr);

  const SpecStats& stats() const { return stats_; }
  const DraftPolicy& policy() const { return policy_; }
  // Before the first step: the draft lengths' costs as `previous` measured them (an
  // earlier sequence on the same backend and drafter; DraftPolicy::warm_start).
  void warm_start(const DraftPolicy& previous) { policy_.warm_start(previous); }

 private:
  Backend& backend_;
  SeqId seq_;
  Drafter& drafter_;
  SpecConfig config_;
  bool rollback_kept_ = false;  // Backend::keep_run_rollback asked for
  DraftPolicy policy_;
  SpecStats stats_;
  Batch batch_;
  std::vector<int32_t> draft_, rows_, ids_;  // ids_: the rows' argmax (Sampler::picks_argmax)
  std::vector<float> logits_;
};

}  // namespace mt
