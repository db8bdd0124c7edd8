// Internal to cuda/kernels/ops*.cu: device pieces several kernels share, each the CPU's arithmetic
// operation by operation: the RoPE angle of one rotation pair (model/attention.cpp
// rope_angles, YaRN included) and the warp's Q8_0 block quantizer (quant/'s reference, as
// kv_store writes a cache row).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda::detail {

// cos and sin of rotation pair k at position pos: theta = pos * freq_scale * theta_scale^k
// built by repeated float multiplication (yarn_ext 0), or YaRN's mix of the interpolated
// and extrapolated angles by the ramp over [yarn_lo, yarn_hi]; times attn_factor (plain)
// or yarn_mscale (YaRN). sin / cos through double sincos.
__device__ __forceinline__ void rope_cos_sin(uint32_t pos, int k, float theta_scale, float freq_scale, float attn_factor,
                                             float yarn_ext, float yarn_lo, float yarn_hi, float yarn_mscale, float* c,
                                             float* s) {
  float theta, mscale = attn_factor;
  if (yarn_ext == 0.0f) {
    theta = static_cast<float>(pos) * freq_scale;
    for (int j = 0; j < k; ++j) theta = __fmul_rn(theta, theta_scale);
  } else {
    float extrap = static_cast<float>(pos);
    for (int j = 0; j < k; ++j) extrap = __fmul_rn(extrap, theta_scale);
    const float interp = __fmul_rn(freq_scale, extrap);
    const float y = __fdiv_rn(__fsub_rn(static_cast<float>(k), yarn_lo), fmaxf(0.001f, __fsub_rn(yarn_hi, yarn_lo)));
    const float ramp_mix = __fmul_rn(__fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y))), yarn_ext);
    theta = __fadd_rn(__fmul_rn(interp, __fsub_rn(1.0f, ramp_mix)), __fmul_rn(extrap, ramp_mix));
    mscale = yarn_mscale;
  }
  double sd = 0.0, cd = 0.0;
  sincos(static_cast<double>(theta), &sd, &cd);
  float sf = static_cast<float>(sd), cf = static_cast<float>(cd);
  if (mscale != 1.0f) sf = __fmul_rn(sf, mscale), cf = __fmul_rn(cf, mscale);
  *c = cf;
  *s = sf;
}

// One call's RoPE: rotated dims, theta_scale = freq_base^(-2 / n_rot) (the CPU's float
// expression), the scales and YaRN's terms (rope_cos_sin), halves (neox) or pairs.
struct RopeArgs {
  int n_rot;
  float theta_scale, freq_scale, attn_factor, yarn_ext, yarn_lo, yarn_hi, yarn_mscale;
  bool neox;
};

// Element e of one head (live when e < D) as attention's prep computes it: rms-normed by
// norm_w when set (the head's square sum in double, as rms_norm_kernel), then rotated at
// pos when rope is set. Every thread of the block calls it (blockDim >= D); head_sh (D
// floats) and scratch (32) are the block's; it ends with a barrier, so they may be
// reused at once.
// early: the norm weight read and the angle computed first, before the square sum's
// barriers (the same values; their latency overlaps the reduction's).
__device__ __forceinline__ float head_norm_rope(float v, int e, int D, const float* norm_w, float eps,
                                                const RopeArgs* rope, uint32_t pos, float* head_sh, double* scratch,
                                                bool early = false) {
  const bool live = e < D;
  const bool roped = rope != nullptr && rope->n_rot > 0;  // uniform over the block
  const int half = roped ? rope->n_rot / 2 : 0;
  const bool rotates = roped && live && e < rope->n_rot;
  const bool first = rotates && (rope->neox ? e < half : (e % 2 == 0));
  const int k = !rotates ? 0 : rope->neox ? (first ? e : e - half) : e / 2;
  float cf = 0.0f, sf = 0.0f, nw = 0.0f;
  if (early) {
    if (norm_w != nullptr && live) nw = norm_w[e];
    if (rotates) {
      rope_cos_sin(pos, k, rope->theta_scale, rope->freq_scale, rope->attn_factor, rope->yarn_ext, rope->yarn_lo,
                   rope->yarn_hi, rope->yarn_mscale, &cf, &sf);
    }
  }
  if (norm_w != nullptr) {  // uniform over the block
    const double vd = v;
    const double sum = block_sum(live ? vd * vd : 0.0, scratch);
    const float mean = static_cast<float>(sum / static_cast<double>(D));
    const float scale = 1.0f / sqrtf(mean + eps);
    if (live) v = v * scale * (early ? nw : norm_w[e]);
  }
  if (roped) {
    if (live) head_sh[e] = v;
    __syncthreads();
    if (rotates) {
      const int i0 = rope->neox ? k : 2 * k;
      const int i1 = rope->neox ? k + half : 2 * k + 1;
      if (!early) {
        rope_cos_sin(pos, k, rope->theta_scale, rope->freq_scale, rope->attn_factor, rope->yarn_ext, rope->yarn_lo,
                     rope->yarn_hi, rope->yarn_mscale, &cf, &sf);
      }
      const float x0 = head_sh[i0], x1 = head_sh[i1];
      v = first ? __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf)) : __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
    }
    __syncthreads();
  }
  return v;
}

// One Q8_0 block by a warp (lane j: element x of the block): d = amax / 127 (NaN counts as
// 0), code = roundf(x / d) clamped to +-127, 0 where 1 / d is not finite. Returns the
// code; *d_out = d (before its rounding to half).
__device__ __forceinline__ int q8_0_code(float x, float* d_out) {
  const float ax = fabsf(x);
  const float amax = warp_max(ax > 0.0f ? ax : 0.0f);
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

}  // namespace mt::cuda::detail
