// Scale searches shared by the K-quant reference quantizers (declared in
// quant/quantize_util.h). Each tries a sweep of candidate scales around the plain
// max-based one and keeps the one with the smallest weighted error; the float32
// operation order matches ggml's so the chosen codes are the same.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "quant/quantize_util.h"

namespace mt::quant_internal {

float search_affine(const float* x, const float* weights, int n, const AffineSearch& p,
                    uint8_t* L, float* neg_min) {
  MT_CHECK(n >= 1 && n <= kMaxGroup);
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  float iscale = static_cast<float>(p.nmax) / (max - min);
  if (max == min || !std::isfinite(iscale)) {
    std::memset(L, 0, static_cast<size_t>(n));
    *neg_min = -min;
    return 0.f;
  }
  float scale = 1.f / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, p.nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = p.use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  uint8_t aux[kMaxGroup];
  for (int is = 0; p.nstep >= 1 && is <= p.nstep; ++is) {  // nstep 0: no sweep at all
    // min is the best offset so far: later candidates are measured from it.
    iscale = (p.rmin + p.rdelta * static_cast<float>(is) + static_cast<float>(p.nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, p.nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float wl = weights[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
      diff = p.use_mad ? std::fabs(diff) : diff * diff;
      cur_error += weights[i] * diff;
    }
    if (cur_error < best_error) {
      std::memcpy(L, aux, static_cast<size_t>(n));
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

namespace {

// Weighted sums of one candidate inverse scale: sum w x l and sum w l^2 with w = x^2.
struct SymmetricSums {
  float sumlx = 0;
  float suml2 = 0;
};
SymmetricSums symmetric_sums(const float* x, int n, int nmax, float iscale) {
  SymmetricSums s;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    s.sumlx += w * x[i] * static_cast<float>(l);
    s.suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  return s;
}

void symmetric_codes(const float* x, int n, int nmax, float iscale, int8_t* L) {
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  }
}

}  // namespace

float search_symmetric(const float* x, int n, int nmax, int8_t* L) {
  const AbsMax am = abs_max(x, n);
  if (am.amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / am.max;
  symmetric_codes(x, n, nmax, iscale, L);
  SymmetricSums s = symmetric_sums(x, n, nmax, iscale);
  float scale = s.suml2 != 0 ? s.sumlx / s.suml2 : 0.f;
  float best = scale * s.sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / am.max;
    s = symmetric_sums(x, n, nmax, iscale);
    if (s.suml2 > 0 && s.sumlx * s.sumlx > best * s.suml2) {
      symmetric_codes(x, n, nmax, iscale, L);
      scale = s.sumlx / s.suml2;
      best = scale * s.sumlx;
    }
  }
  return scale;
}

float search_symmetric_refine(const float* x, int n, int nmax, int8_t* L) {
  const AbsMax am = abs_max(x, n);
  if (am.amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / am.max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one code at a time to its best value for the current
  // least-squares scale while that raises sumlx^2 / suml2; at most 5 sweeps.
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * li * li;
      const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      const float nl = static_cast<float>(new_l);
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.f;
}

}  // namespace mt::quant_internal
