// Activation rows f32 -> int8 quants + per-32 meta (cuda/kernels/mmvq_kernels.h Q8_1Rows), bit-exact
// with quant/'s reference quantize_block of the activation type the CPU pairs with the
// weight (cpu/kernels.h), so every integer dot product equals the CPU's.
//
//   kQ8_0 / kQ8_1 (one warp per 32 elements, lane j holds element j): amax = the largest
//     |x| (NaN counts as 0), d = amax / 127, id = 1 / d (0 when d is 0 or the inverse is
//     not finite), q = roundf(x * id) clamped to +-127 (NaN -> 0); meta d = float(fp16(d)).
//     Both modes write the same bytes (BlockQ8_0 and BlockQ8_1 share d and the quants).
//   kQ8_K (one warp per 256 elements, lane j holds elements 8j..8j+7): the signed value
//     of largest magnitude, the first one on equal magnitudes, NaN never chosen (quant/
//     abs_max); iscale = -127 / max (0 if that is not finite, or when the block is all
//     zero); q = nearest_int(iscale * x) clamped to -128..127, nearest_int being the
//     magic-number round (x + 1.5 * 2^23, the low 23 bits of the sum) whose ties go to
//     even; d = 1 / iscale as f32, repeated in the 8 meta entries of the block; iscale 0
//     gives quants 0 and d 0 (the reference's memset).
//
// Every float operation is one IEEE operation written as an intrinsic (__fdiv_rn,
// __fmul_rn, __fadd_rn), so no FMA can form and no approximate division is used; the
// reductions (max, int sums) are exact. The sums of each 16 quants are exact int16s.
#include <cuda_fp16.h>

#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/act_quant.cuh"
#include "cuda/kernels/mmvq_kernels.h"

namespace mt::cuda {
namespace {

// ---- kQ8_0 / kQ8_1: per 32 elements

constexpr int kThreads32 = 256;  // 8 blocks of 32 per CTA

__global__ void __launch_bounds__(kThreads32)
    quantize_q8_0_kernel(const float* __restrict__ x, int n_in, int8_t* __restrict__ qs, uint2* __restrict__ meta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads32 + threadIdx.x;
  if (i >= n_in) return;  // n_in % 32 == 0: whole warps leave
  const int64_t at = static_cast<int64_t>(blockIdx.y) * n_in + i;
  act_detail::quantize_q8_0_warp(x[at], static_cast<int>(threadIdx.x & 31), qs + at, meta + at / 32);
}

// ---- kQ8_K: per 256 elements

constexpr int kWarpsK = 8;  // 256-element blocks per CTA
constexpr int kPerLane = 8;

// kVec: x is 16-byte aligned (then so is every row and every lane's 8 elements).
template <bool kVec>
__global__ void __launch_bounds__(32 * kWarpsK)
    quantize_q8_k_kernel(const float* __restrict__ x, int n_in, int8_t* __restrict__ qs, uint2* __restrict__ meta) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kWarpsK + threadIdx.x / 32;  // 256-block of the row
  if (block * 256 >= n_in) return;  // n_in % 256 == 0: whole warps leave
  const int64_t at = static_cast<int64_t>(blockIdx.y) * n_in + block * 256 + kPerLane * lane;  // first element
  float v[kPerLane];
  if constexpr (kVec) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x + at));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x + at) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    for (int i = 0; i < kPerLane; ++i) v[i] = __ldg(x + at + i);
  }

  const int64_t base = at - kPerLane * lane;  // the block's first element
  act_detail::quantize_q8_k_warp(v, lane, qs + base, meta + base / 32);
}

}  // namespace

ActQuant act_quant_for(QuantType weight) {
  switch (weight) {
    case QuantType::Q4_0: case QuantType::Q5_0: case QuantType::Q8_0: case QuantType::IQ4_NL:
    case QuantType::MXFP4:
      return ActQuant::kQ8_0;
    case QuantType::Q4_1: case QuantType::Q5_1:
      return ActQuant::kQ8_1;
    case QuantType::Q2_K: case QuantType::Q3_K: case QuantType::Q4_K: case QuantType::Q5_K:
    case QuantType::Q6_K: case QuantType::IQ4_XS:
      return ActQuant::kQ8_K;
    default:
      MT_CHECK_MSG(false, "act_quant_for: the weight type has no quantized activation pairing");
      return ActQuant::kQ8_0;
  }
}

void launch_quantize_act(const float* x, int rows, int n_in, ActQuant mode, Q8_1Rows out, cudaStream_t stream) {
  MT_CHECK(rows >= 0 && n_in >= 0 && n_in % (mode == ActQuant::kQ8_K ? 256 : 32) == 0);
  MT_CHECK(reinterpret_cast<uintptr_t>(out.qs) % 8 == 0 && reinterpret_cast<uintptr_t>(out.meta) % 8 == 0);
  if (rows == 0 || n_in == 0) return;
  constexpr int kMaxGridY = 65535;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;  // then every row is (n_in % 32 == 0)
  for (int r0 = 0; r0 < rows; r0 += kMaxGridY) {  // rows on grid.y, in chunks of its limit
    const int chunk = rows - r0 < kMaxGridY ? rows - r0 : kMaxGridY;
    const int64_t first = static_cast<int64_t>(r0) * n_in;
    const float* xc = x + first;
    int8_t* qs = out.qs + first;
    uint2* meta = out.meta + first / 32;
    if (mode == ActQuant::kQ8_K) {
      constexpr int kElemsPerCta = 256 * kWarpsK;
      const dim3 grid(static_cast<unsigned>((n_in + kElemsPerCta - 1) / kElemsPerCta), static_cast<unsigned>(chunk));
      if (vec) {
        quantize_q8_k_kernel<true><<<grid, 32 * kWarpsK, 0, stream>>>(xc, n_in, qs, meta);
      } else {
        quantize_q8_k_kernel<false><<<grid, 32 * kWarpsK, 0, stream>>>(xc, n_in, qs, meta);
      }
    } else {
      const dim3 grid(static_cast<unsigned>((n_in + kThreads32 - 1) / kThreads32), static_cast<unsigned>(chunk));
      quantize_q8_0_kernel<<<grid, kThreads32, 0, stream>>>(xc, n_in, qs, meta);
    }
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
