// Device routines that quantize activations the way the CPU's paired activation type
// does (cuda/kernels/mmvq_kernels.h ActQuant), shared by the quantize kernels
// (cuda/kernels/mmvq_quantize.cu) and the kernels that produce activations and quantize them in
// the same launch (cuda/kernels/ops_fused.cu). See mmvq_quantize.cu for the exact rules.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mt::cuda::act_detail {

inline constexpr unsigned kFull = 0xffffffffu;

// SwiGLU's value of one (gate, up) pair, the one definition every kernel that makes the
// down projection's input uses (so a fused launch's bytes equal the separate ones').
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float swiglu_value(float g, float u) { return silu(g) * u; }

// quant/quantize_util.h nearest_int(iscale * v), clamped to -128..127. The reference's
// float ops on x86 / ARM carry a NaN operand's payload (quieted) through the multiply
// and the add, so its integer is the payload's low 22 bits; the device's NaN results are
// canonical, so that case reads the payload from v itself.
__device__ __forceinline__ int q8_k_quant(float iscale, float v) {
  if (isnan(v)) return static_cast<int>(min(__float_as_uint(v) & 0x003FFFFFu, 127u));
  const float biased = __fadd_rn(__fmul_rn(iscale, v), 12582912.f);  // 1.5 * 2^23
  const int n = static_cast<int>(__float_as_uint(biased) & 0x007FFFFFu) - 0x00400000;
  return max(-128, min(127, n));
}

// One warp quantizes one 32-element Q8_0 / Q8_1 block: lane j holds element j (v) and
// writes its quant to *q; lane 0 writes the block's meta entry. Every lane must call it.
__device__ __forceinline__ void quantize_q8_0_warp(float v, int lane, int8_t* q, uint2* meta) {
  float amax = fmaxf(fabsf(v), 0.f);  // fmaxf(NaN, 0) = 0: NaN never wins, as in abs_max's `>`
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  const float d = __fdiv_rn(amax, 127.f);
  float id = d == 0.f ? 0.f : __fdiv_rn(1.f, d);
  if (!isfinite(id)) id = 0.f;
  const float r = roundf(__fmul_rn(v, id));  // ties away from zero, as std::round
  const int qi = r != r ? 0 : static_cast<int>(fminf(fmaxf(r, -127.f), 127.f));
  *q = static_cast<int8_t>(qi);
  int half_sum = qi;  // over lanes 0..15 or 16..31
  for (int o = 8; o > 0; o >>= 1) half_sum += __shfl_xor_sync(kFull, half_sum, o);
  const int hi = __shfl_sync(kFull, half_sum, 16);
  if (lane == 0) {
    const float d_rounded = __half2float(__float2half_rn(d));
    const uint32_t sums = (static_cast<uint32_t>(half_sum) & 0xFFFFu) | (static_cast<uint32_t>(hi) << 16);
    *meta = make_uint2(__float_as_uint(d_rounded), sums);
  }
}

// One warp quantizes one 256-element Q8_K block: lane j holds elements 8j..8j+7 in v;
// qs = the block's 256 quants (lane j writes 8 bytes at qs + 8j; 8-byte aligned), meta
// = its 8 entries (d bits, int16 sums of each 16). Every lane of the warp must call it.
__device__ __forceinline__ void quantize_q8_k_warp(const float (&v)[8], int lane, int8_t* qs, uint2* meta) {
  // The winner as one 64-bit key: |x| bits (NaN as 0) above (255 - index) << 1 | sign.
  // The larger magnitude wins; on equal magnitudes the smaller index (abs_max keeps the
  // first); the sign rides along (indices differ, so it never decides).
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t bits = __float_as_uint(v[i]);
    const uint32_t mag = isnan(v[i]) ? 0u : bits & 0x7FFFFFFFu;
    const uint32_t index = static_cast<uint32_t>(8 * lane + i);
    const uint64_t k = (static_cast<uint64_t>(mag) << 32) | ((255u - index) << 1) | (bits >> 31);
    key = k > key ? k : key;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(kFull, key, o);
    key = other > key ? other : key;
  }
  const uint32_t max_mag = static_cast<uint32_t>(key >> 32);
  float iscale = 0.f;
  if (max_mag != 0) {
    const float max_signed = __uint_as_float(max_mag | (static_cast<uint32_t>(key & 1u) << 31));
    iscale = __fdiv_rn(-127.f, max_signed);
    if (!isfinite(iscale)) iscale = 0.f;
  }

  uint32_t packed[2] = {0u, 0u};  // elements 8j..8j+3, 8j+4..8j+7
  int sum = 0;
  if (iscale != 0.f) {  // also false for -0 (max infinite): the reference's memset
    for (int i = 0; i < 8; ++i) {
      const int q = q8_k_quant(iscale, v[i]);
      packed[i / 4] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (i % 4));
      sum += q;
    }
  }
  *reinterpret_cast<uint2*>(qs + 8 * lane) = make_uint2(packed[0], packed[1]);

  // Lanes 2g, 2g + 1 hold the 16 quants of group g; meta entry b (lanes 4b..4b+3) takes
  // groups 2b and 2b + 1.
  const int sum16 = sum + __shfl_xor_sync(kFull, sum, 1);
  const int sum16_next = __shfl_down_sync(kFull, sum16, 2);
  if (lane % 4 == 0) {
    const float d = iscale != 0.f ? __fdiv_rn(1.f, iscale) : 0.f;
    meta[lane / 4] = make_uint2(__float_as_uint(d),
                                (static_cast<uint32_t>(sum16) & 0xFFFFu) | (static_cast<uint32_t>(sum16_next) << 16));
  }
}

}  // namespace mt::cuda::act_detail
