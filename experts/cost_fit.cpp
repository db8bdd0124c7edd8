#include "experts/cost_fit.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

namespace {
constexpr double kMB = 1e6;
constexpr double kSpeedSteps = 16;     // the speed is rounded to 1/16 of an octave (4.4%)
constexpr double kFixedStep = 25e-6;   // seconds: the fixed part is rounded to this
// The slope is trusted only when the samples' bytes spread at least this much (relative
// standard deviation); else the fit goes through the origin.
constexpr double kMinSpread = 0.15;
}  // namespace

void CostFit::add(uint64_t bytes, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  const double x = static_cast<double>(bytes) / kMB;
  w_ = w_ * kDecay + 1;
  sx_ = sx_ * kDecay + x;
  sy_ = sy_ * kDecay + seconds;
  sxx_ = sxx_ * kDecay + x * x;
  sxy_ = sxy_ * kDecay + x * seconds;
  ++n_;
}

LineCost CostFit::cost() const {
  MT_CHECK(ready());
  const double mx = sx_ / w_, my = sy_ / w_;
  const double var = std::max(0.0, sxx_ / w_ - mx * mx);
  double fixed = 0, slope = my / mx;  // seconds per MB through the origin
  if (std::sqrt(var) >= kMinSpread * mx) {
    const double s = (sxy_ / w_ - mx * my) / var;
    const double a = my - s * mx;
    if (s > 0 && a >= 0) fixed = a, slope = s;  // else a line no CPU follows: the mean speed
  }
  const double speed = std::exp2(std::round(std::log2(kMB / slope) * kSpeedSteps) / kSpeedSteps);
  LineCost c;
  c.fixed_s = kFixedStep * std::round(fixed / kFixedStep);
  c.per_byte_s = 1.0 / speed;
  return c;
}

}  // namespace mt
