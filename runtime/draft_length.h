// The draft length that yields the most tokens per second, chosen by measurement: a step
// that evaluates n rows (the pending token and n - 1 guesses) costs what the last steps of
// n rows cost (moving averages; unmeasured row counts read off the line through the
// measured ones), a guess is kept with the per-guess acceptance the last steps showed, and
// a draft of L guesses then yields (1 - p^(L+1)) / (1 - p) tokens per step; the L in
// [min, max] with the most tokens per second of step wins. Whatever makes a long
// verification dear (the union of the guesses' experts, cache misses, a compute-bound CPU)
// is in the costs; whether drafting pays at all stays SpecThrottle's verdict
// (speculative.h), which compares drafted steps with plain ones.
#pragma once

#include <vector>

namespace mt {

class DraftLength {
 public:
  DraftLength(int min_len, int max_len);
  // Guesses to ask for in the next step: max until steps of two row counts are measured.
  int choose() const;
  // After a step that evaluated `guesses` guesses (0: a plain step), kept `accepted` of
  // them, in `seconds`.
  void observe(int guesses, int accepted, double seconds);
  // The per-guess acceptance (a guess kept, given the ones before it were).
  double acceptance() const;
  // The estimated seconds of a step of `rows` rows; 0 before any step is measured.
  double step_seconds(int rows) const;
  // Expected tokens of a step that drafts `guesses` guesses at acceptance p.
  static double expected_tokens(int guesses, double p);

 private:
  int min_, max_;
  std::vector<double> cost_;  // (max + 2): seconds by rows, a moving average; 0 unmeasured
  double kept_ = 1, missed_ = 1;  // decayed counts of kept and rejected guesses (a prior of 1/2)
};

}  // namespace mt
