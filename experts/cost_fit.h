// The measured cost of each side of the split of misses (scheduler.h), learned while
// running. The split weighs the device's share (copied in, then computed there) against
// the CPU's, and a profile measured alone, or an assumed one, is off by up to 2x in a run:
// the CPU's threads and the link's copies read the same host memory at once, beside the
// GPU driver's and the server's threads. Each decode-like layer-step gives each side one
// sample (bytes of the misses it took, seconds it took: the CPU's on the host clock, the
// device's from its events, its fixed part being the hits' products); the fit is the line
//   seconds = fixed_s + bytes * per_byte_s
// by least squares over the recent samples (each weight decays by kDecay per sample, so a
// change of conditions is followed within a few hundred layer-steps). With too few
// samples, or the bytes not spread enough to tell the fixed part from the slope, the line
// goes through the origin (the mean speed). The speed is rounded to 1/16 of an octave
// (4.4%) and the fixed part to 25 us, so that run-to-run noise rarely moves the split
// (which experts the CPU rounds).
#pragma once

#include <cstdint>

namespace mt {

struct LineCost {
  double fixed_s = 0;      // per layer-step
  double per_byte_s = 0;   // 1 / (the speed in bytes per second); 0: unknown
  // Seconds for n experts of `bytes` each on a side that takes them only when n > 0 (the CPU).
  double seconds(uint32_t n, uint64_t bytes) const {
    return n == 0 ? 0.0 : fixed_s + static_cast<double>(n) * static_cast<double>(bytes) * per_byte_s;
  }
};

class CostFit {
 public:
  static constexpr double kDecay = 0.995;      // per sample: ~200 samples (4 steps of a 48-layer model)
  static constexpr double kMinWeight = 24.0;   // samples (decayed) before the fit is used

  // One layer-step: the side took `bytes` of misses (0: none, its fixed work only) in `seconds`.
  void add(uint64_t bytes, double seconds);
  // Enough samples, some of them with bytes (the speed needs them).
  bool ready() const { return w_ >= kMinWeight && sx_ > 1e-3 * w_; }
  // The fitted line (rounded as above); only when ready().
  LineCost cost() const;
  uint64_t samples() const { return n_; }

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed sums, x in MB, y in seconds
  uint64_t n_ = 0;
};

}  // namespace mt
