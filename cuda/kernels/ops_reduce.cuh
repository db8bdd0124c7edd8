// Warp and block reductions shared by the ops kernels (cuda/kernels/ops_*.cu).
//
// Invariant: warp forms use full-mask shuffles, so every lane of the warp must call them
// (no lane may have returned or be in a divergent branch). Block forms must be reached by
// every thread of the block, blockDim.x a multiple of 32 (<= 1024); they hand the same
// value to every thread (partials combined in warp order) and end with a barrier, so the
// 32-entry scratch can be reused by the next call at once.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/kernels/check.h"

// Error check after a launch (the launch configuration, not the kernel's completion).
#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())

namespace mt::cuda::detail {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// scratch: 32 entries of shared memory.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < n_warps; ++w) r += scratch[w];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < n_warps; ++w) r = fmaxf(r, scratch[w]);
  __syncthreads();
  return r;
}

// Warp arg-max: every lane gets the warp's largest v and its index i, ties to the lower i.
// v is never NaN (the callers' candidates come from strict > comparisons) and i >= 0.
// sm_80+: two warp-wide integer reductions instead of five shuffle rounds (a decode step's
// top-k runs K of these back to back): the largest order key of v (equal floats, -0 and
// +0 included, give equal keys), the lowest i among the lanes holding it, and v from the
// lane holding both, so the result is the shuffle tree's, bit for bit.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  const uint32_t key = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);  // monotonic in v
  const uint32_t top = __reduce_max_sync(0xffffffffu, key);
  const uint32_t idx = __reduce_min_sync(0xffffffffu, key == top ? static_cast<uint32_t>(i) : 0xFFFFFFFFu);
  const unsigned holder = __ballot_sync(0xffffffffu, key == top && static_cast<uint32_t>(i) == idx);
  v = __shfl_sync(0xffffffffu, v, __ffs(static_cast<int>(holder)) - 1);
  i = static_cast<int>(idx);
#else
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
#endif
}

// Softmax of n values by one warp, as model/attention.cpp's softmax: p[e] = exp(row[e] -
// max) / sum, the exp taken in double and rounded to float (the correctly rounded value
// the CPU's std::exp(float) gives in all but rare cases), the sum in double. Lane l owns
// entries l, l + 32, ... of p; row is read past L1 (other CTAs may have written it).
__device__ __forceinline__ void softmax_warp(const float* row, float* p, int n) {
  const int lane = threadIdx.x & 31;
  float mx = -INFINITY;
  for (int e = lane; e < n; e += 32) {
    p[e] = __ldcg(row + e);
    mx = fmaxf(mx, p[e]);
  }
  mx = warp_max(mx);
  double sum = 0.0;
  for (int e = lane; e < n; e += 32) {
    const float v = static_cast<float>(exp(static_cast<double>(p[e] - mx)));
    p[e] = v;
    sum += v;
  }
  sum = warp_sum(sum);
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = lane; e < n; e += 32) p[e] *= inv;
}

}  // namespace mt::cuda::detail
