// The CPU's measured cost of a layer-step's routed experts, learned while running: the
// split of misses (scheduler.h) weighs the link against the CPU, and the CPU's speed is
// the figure least known before a run (a profile measured alone, or an assumed one, is off
// by 2x beside the GPU driver's threads and the server's). Each layer-step the CPU computes
// gives one sample (bytes of its distinct experts, seconds); the fit is the line
//   seconds = fixed_s + bytes * per_byte_s
// by least squares over the recent samples (each weight decays by kDecay per sample, so a
// change of conditions is followed within a few hundred layer-steps). With too few samples,
// or the bytes not spread enough to tell the fixed part from the slope, the line goes
// through the origin (the mean speed). The speed is rounded to 1/16 of an octave (4.4%)
// and the fixed part to 25 us, so that run-to-run noise rarely moves the split (which
// experts the CPU rounds).
#pragma once

#include <cstdint>

namespace mt {

struct CpuCost {
  double fixed_s = 0;      // per layer-step that computes any expert on the CPU
  double per_byte_s = 0;   // 1 / (the CPU's expert speed in bytes per second); 0: unknown
  // Seconds for the CPU to compute n experts of `bytes` each.
  double seconds(uint32_t n, uint64_t bytes) const {
    return n == 0 ? 0.0 : fixed_s + static_cast<double>(n) * static_cast<double>(bytes) * per_byte_s;
  }
};

class CpuCostFit {
 public:
  static constexpr double kDecay = 0.995;      // per sample: ~200 samples (4 steps of a 48-layer model)
  static constexpr double kMinWeight = 24.0;   // samples (decayed) before the fit is used

  // One layer-step: the CPU computed experts of `bytes` in all in `seconds`.
  void add(uint64_t bytes, double seconds);
  bool ready() const { return w_ >= kMinWeight; }
  // The fitted line (rounded as above); only when ready().
  CpuCost cost() const;
  uint64_t samples() const { return n_; }

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed sums, x in MB, y in seconds
  uint64_t n_ = 0;
};

}  // namespace mt
