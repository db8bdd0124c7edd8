// When to draft and how long, chosen by measurement. DraftLength keeps the cost model: a
// step that evaluates n rows (the pending token and n - 1 guesses) costs what the last
// steps of n rows cost (the median of the last five, the least of fewer than three: a
// step that captured a graph or met a cold cache is an outlier, not a cost; the whole step:
// proposal, verification, sampling, rollback; unmeasured row counts read off the line
// through the measured ones),
// a guess is kept with the per-guess acceptance the last steps showed, and a draft of L
// guesses yields (1 - p^(L+1)) / (1 - p) tokens per step; the L in [min, max] with the
// most tokens per second wins, and its rate over a plain step's is the gain. SpecThrottle
// turns drafting off while that gain is under 1 + kMargin (backing off 8 plain steps,
// doubling to 256, then one probe), so the model, not a noisy per-token comparison, says
// whether speculation pays. Whatever makes a long verification dear (the union of the
// guesses' experts, cache misses, a compute-bound CPU) is in the costs. DraftPolicy joins
// the two: the first two steps are plain (the first one's time, a sequence's set-up such
// as its decode graph's capture, is not a cost), the first draft the longest, then the
// model's choice. Every kProbeEvery-th step drafts a neighbour of the best length instead,
// the one measured longest ago (or never): a cost line bends (a tiered step's union of
// experts), and costs move (a cache warming, a split of misses learned), so a length the
// line misjudges is found. The costs are the machine's, not the text's: a policy can
// start from another's (warm_start: bench's runs, one after another) and then skips the
// plain steps and the long first draft, keeping only its own acceptance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt {

class DraftLength {
 public:
  DraftLength(int min_len, int max_len);
  // Guesses to ask for in the next step: max until steps of two row counts are measured
  // (one long draft spans the range; the line from 1 to 2 rows misjudges a cost that is
  // not linear in the rows).
  int choose() const;
  // After a step that evaluated `guesses` guesses (0: a plain step), kept `accepted` of
  // them, in `seconds` (negative: the time is no cost, only the acceptance counts).
  void observe(int guesses, int accepted, double seconds);
  // The per-guess acceptance (a guess kept, given the ones before it were).
  double acceptance() const;
  // The estimated seconds of a step of `rows` rows; 0 before any step is measured.
  double step_seconds(int rows) const;
  // Expected tokens per second of a step drafting `guesses` guesses; 0 when unmeasured.
  double rate(int guesses) const;
  // The best drafting length's rate (at least one guess) over rate(0): what drafting is
  // expected to gain over plain steps; 0 while a plain step or no drafted step is measured.
  double gain() const;
  // Expected tokens of a step that drafts `guesses` guesses at acceptance p.
  static double expected_tokens(int guesses, double p);
  // The measured step costs of `other` (same lengths), this one's acceptance kept.
  void take_costs(const DraftLength& other);
  static constexpr int kProbeEvery = 24;  // timed steps between probes of the best's neighbours

 private:
  static constexpr int kKept = 5;  // samples kept per row count
  struct Samples {
    double s[kKept] = {};
    int n = 0;  // samples seen (the last kKept kept, in a ring)
    double estimate() const;
  };
  int measured_rows() const;
  // The length in [shortest, max] with the most expected tokens per second (*rate: that rate).
  int best_from(int shortest, double* rate) const;
  double cost(int rows) const { return samples_[static_cast<size_t>(rows)].estimate(); }
  int min_, max_;
  std::vector<Samples> samples_;  // (max + 2): step seconds by rows
  std::vector<uint64_t> seen_at_;  // (max + 2): observed_ after each row count's last sample (0: never)
  uint64_t observed_ = 0;          // timed steps observed
  double kept_ = 1, missed_ = 1;  // decayed counts of kept and rejected guesses (a prior of 1/2)
};

// Whether drafting pays, by the cost model's gain (DraftLength::gain). While it is under
// 1 + kMargin (judged after kMinDrafted drafted steps; one is noise), drafting is off for a
// back-off of plain steps (8, doubling to 256 while it keeps losing), then tried again with
// one probe step judged alone. A forced plain step every kPlainEvery keeps the plain cost
// current.
class SpecThrottle {
 public:
  static constexpr int kPlainEvery = 16;
  // While the last verdict's gain is at least kSureGain, a plain step only every
  // kPlainEverySure: each forced plain step gives up a drafted step's tokens (an H100 at
  // P 0.7, 2.4 tokens a step: ~4% at 1 in 16), and a gain that large is far from the line.
  static constexpr int kPlainEverySure = 64;
  static constexpr double kSureGain = 1.25;
  static constexpr int kMinDrafted = 3;
  static constexpr uint64_t kFirstBackoff = 8;
  static constexpr uint64_t kPlainFirst = 2;  // plain steps at the start (the first one's time is set-up)
  static constexpr double kMargin = 0.03;  // a predicted gain under 3% is not worth the risk
  // Before a step: false for a plain step (no guesses).
  bool draft(uint64_t step) const;
  // The costs are known already (DraftPolicy::warm_start): no plain steps first.
  void skip_plain_first() { plain_first_ = 0; }
  // After a step with `guesses` guesses; gain: the model's verdict after it (0: unknown).
  void observe(uint64_t step, int guesses, double gain);
  uint64_t off_steps() const { return off_steps_; }  // plain steps spent backed off

 private:
  int drafted_n_ = 0;  // drafted steps since the last verdict
  uint64_t plain_first_ = kPlainFirst;
  uint64_t off_until_ = 0, backoff_ = kFirstBackoff, off_steps_ = 0;
  double last_gain_ = 0;  // the last verdict's gain (0: none yet)
};

// One sequence's drafting decisions: the guesses to ask for before each step and the
// measurements after it.
class DraftPolicy {
 public:
  // adaptive: the length by the model (else always max); throttle: SpecThrottle may turn
  // drafting off (adaptive only).
  DraftPolicy(int min_len, int max_len, bool adaptive, bool throttle);
  int next(uint64_t step) const;  // guesses to ask for in step `step` (0: a plain step)
  // set_up: the step did a one-time set-up (Backend::setups grew: a graph captured for a
  // new row count or span), so its time measured that, not the step; only its acceptance
  // counts. Before, a new row count's first step (its batch graph's capture) stood as its
  // cost until two more steps of it came, and the model then avoided that length: an H100
  // drafted 1.39 guesses a step at P 0.7 where a fixed 4 ran 1.60x and a fixed 3 1.63x.
  void observe(uint64_t step, int guesses, int accepted, double seconds, bool set_up = false);
  // Start from `other`'s measured step costs (the same lengths; see DraftLength).
  void warm_start(const DraftPolicy& other);
  const DraftLength& length() const { return length_; }
  const SpecThrottle& throttle() const { return throttle_; }

 private:
  int max_;
  bool adaptive_, throttled_;
  DraftLength length_;
  SpecThrottle throttle_;
};

}  // namespace mt
