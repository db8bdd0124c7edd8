// The float weight types of MMVQ (F32, F16, BF16) as the kernels read them, and the split
// form's one-row product (few rows: a CTA per row), for cuda/kernels/mmvq_float.cu.
#pragma once

#include "cuda/kernels/mmvq_common.cuh"

namespace mt::cuda::mmvq_detail {

// How a float weight row is read: kBytes per weight, kRows rows per warp in the warp
// form, act(x) = an activation as the CPU pairs it with the type, one<A>(row, i) = weight
// i (row A-byte aligned), eight(row, i, v) = weights i..i+7 (16-byte loads).
template <class W> struct FloatType;

template <>
struct FloatType<WeightF32> {
  static constexpr int kBytes = 4, kRows = 2;
  static __device__ __forceinline__ float act(float x) { return x; }
  template <int A>
  static __device__ __forceinline__ float one(const uint8_t* row, int i) {
    uint32_t w[1];
    ld_words<1, A>(row + 4 * static_cast<int64_t>(i), w);
    return __uint_as_float(w[0]);
  }
  static __device__ __forceinline__ void eight(const uint8_t* row, int i, float (&v)[8]) {
    uint32_t w[8];
    ld_words<8, 16>(row + 4 * static_cast<int64_t>(i), w);
    for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(w[k]);
  }
};

// F16 and BF16: element 2k in the low half of word k, 2k + 1 in the high half.
template <bool kBf16>
struct Float16Type {
  static constexpr int kBytes = 2, kRows = 1;
  static __device__ __forceinline__ float widen(uint32_t h) {
    return kBf16 ? __uint_as_float(h << 16) : h2f(h);
  }
  // X rounded to the weight's type first, as the CPU does (its activation type for F16
  // and BF16 weights is F16 / BF16): the products then match it, not only approach it.
  static __device__ __forceinline__ float act(float x) {
    if constexpr (kBf16) {
      const uint32_t u = __float_as_uint(x);
      if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
      return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
    } else {
      return __half2float(__float2half_rn(x));
    }
  }
  template <int A>
  static __device__ __forceinline__ float one(const uint8_t* row, int i) {
    return widen(ld_u16<A>(row + 2 * static_cast<int64_t>(i)));
  }
  static __device__ __forceinline__ void eight(const uint8_t* row, int i, float (&v)[8]) {
    uint32_t w[4];
    ld_words<4, 16>(row + 2 * static_cast<int64_t>(i), w);
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = widen(w[k] & 0xFFFFu);
      v[2 * k + 1] = widen(w[k] >> 16);
    }
  }
};
template <> struct FloatType<WeightF16> : Float16Type<false> {};
template <> struct FloatType<WeightBF16> : Float16Type<true> {};

// Few rows (a router: 128 x 2048 f32): a warp per row would leave most of the GPU idle
// and walk each row in dependent steps, so the split form gives one row of a dense
// product to a CTA of kSplitThreads, each thread 8 consecutive weights per step (16-byte
// loads), the CTA's partial sums added through shared memory.
inline constexpr int kSplitThreads = 256;
inline constexpr int64_t kSplitMaxRows = 1024;

// Row `row` of matrix p.mat times the NT activation rows, by the whole CTA (blockDim
// kSplitThreads; rows and x 16-byte aligned, n_in % 8 == 0): y[t * n_out + row], written
// by thread t < NT.
template <class W, int NT>
__device__ __forceinline__ void split_row(const MmvqArgs& p, int64_t row) {
  using F = FloatType<W>;
  __shared__ float part[NT][kSplitThreads / 32];
  const uint8_t* wrow = p.w + static_cast<uint64_t>(p.mat) * p.matrix_bytes + static_cast<uint64_t>(row) * p.row_bytes;
  float acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
#pragma unroll 2
  for (int i = 8 * static_cast<int>(threadIdx.x); i < p.n_in; i += 8 * kSplitThreads) {
    float w[8];
    F::eight(wrow, i, w);
    for (int t = 0; t < NT; ++t) {
      const float* xr = p.x + static_cast<int64_t>(t) * p.n_in + i;
      float4 x0 = __ldg(reinterpret_cast<const float4*>(xr));
      float4 x1 = __ldg(reinterpret_cast<const float4*>(xr) + 1);
      x0 = {F::act(x0.x), F::act(x0.y), F::act(x0.z), F::act(x0.w)};
      x1 = {F::act(x1.x), F::act(x1.y), F::act(x1.z), F::act(x1.w)};
      float sacc = acc[t];
      sacc = fmaf(w[0], x0.x, sacc), sacc = fmaf(w[1], x0.y, sacc), sacc = fmaf(w[2], x0.z, sacc);
      sacc = fmaf(w[3], x0.w, sacc), sacc = fmaf(w[4], x1.x, sacc), sacc = fmaf(w[5], x1.y, sacc);
      sacc = fmaf(w[6], x1.z, sacc), sacc = fmaf(w[7], x1.w, sacc);
      acc[t] = sacc;
    }
  }
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  for (int t = 0; t < NT; ++t) {
    const float v = group_sum<32>(acc[t]);
    if (lane == 0) part[t][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < NT) {
    float total = 0.f;
    for (int w = 0; w < kSplitThreads / 32; ++w) total += part[threadIdx.x][w];
    p.y[static_cast<int64_t>(threadIdx.x) * p.n_out + row] = total;
  }
}

}  // namespace mt::cuda::mmvq_detail
