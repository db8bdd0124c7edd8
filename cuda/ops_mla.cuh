// Internal to cuda/ops_mla*.cu: what the latent prep and attention kernels share (the
// CTA size, the supported latent / rope widths, the warp's Q8_0 block quantizer).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/ops_reduce.cuh"

namespace mt::cuda::mla_detail {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kMaxR = 1024, kMaxP = 256;

// One Q8_0 block by a warp (lane j: element x of the block), as quant/'s reference
// quantizer and kv_store: d = amax / 127 (NaN counts as 0), code = roundf(x / d) clamped
// to +-127, 0 where 1 / d is not finite. Returns the code; *d_out = d (before the half).
__device__ __forceinline__ int q8_0_code(float x, float* d_out) {
  const float ax = fabsf(x);
  const float amax = detail::warp_max(ax > 0.0f ? ax : 0.0f);
  const float d = amax / 127;
  float id = 0.0f;
  if (d != 0.0f) {
    id = 1.0f / d;
    if (!isfinite(id)) id = 0.0f;
  }
  const float r = roundf(x * id);
  *d_out = d;
  return r == r ? static_cast<int>(fminf(fmaxf(r, -127.0f), 127.0f)) : 0;
}

}  // namespace mt::cuda::mla_detail
