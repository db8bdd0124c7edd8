// The softmax top-k of one token's router logits by one warp, for the router kernel
// (cuda/kernels/ops_moe.cu): K rounds of a warp arg-max over the probabilities (ties: lower id),
// renormalized by their sum in rank order if asked; the probabilities in shared memory
// (topk_warp) or, up to 256 experts, in registers (topk_warp_regs, the same bytes).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda::detail {

inline constexpr float kTopkRemoved = -1.0f;  // probabilities are >= 0; a picked expert gets this

// The K arg-max rounds over the probabilities the warp's lanes hold (entries lane, lane +
// 32, ... < n_expert): best(bv, bi) lowers nothing and raises (bv, bi) to the lane's largest
// remaining entry, ascending, so the first of equal values (lowest id) stays; take(e) marks
// entry e (this lane's) picked. The top K to ids / weights, renormalized by their sum in
// rank order if asked.
template <class Best, class Take>
__device__ __forceinline__ void topk_rounds(Best best, Take take, int n_expert, int K, bool renormalize, int32_t* ids,
                                            float* weights) {
  const int lane = threadIdx.x & 31;
  float picked_sum = 0.0f;  // in rank order, as the CPU
  float my_w = 0.0f;        // lane r: the weight of rank r
  int my_id = 0;
  for (int r = 0; r < K; ++r) {
    float bv = -2.0f;  // below kTopkRemoved: a lane whose entries are all picked still loses
    int bi = INT_MAX;
    best(bv, bi);
    warp_argmax(bv, bi);
    if (bi < n_expert && lane == (bi & 31)) take(bi);
    if (lane == r) {
      my_w = bv;
      my_id = bi < n_expert ? bi : 0;  // only NaN logits leave no winner
    }
    picked_sum += bv;
  }
  if (lane < K) {
    if (renormalize) my_w /= fmaxf(picked_sum, 6.103515625e-5f);
    ids[lane] = my_id;
    weights[lane] = my_w;
  }
}

// One token by one warp (every lane present): row (n_expert logits, read past L1: the
// fused form reads rows other CTAs wrote) -> p (this warp's n_expert floats of shared
// memory) = softmax; the top K to ids / weights (K entries each), renormalized if asked.
__device__ __forceinline__ void topk_warp(const float* row, float* p, int n_expert, int K, bool renormalize,
                                          int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  softmax_warp(row, p, n_expert);
  auto best = [&](float& bv, int& bi) {
    for (int e = lane; e < n_expert; e += 32) {
      if (p[e] > bv) {
        bv = p[e];
        bi = e;
      }
    }
  };
  auto take = [&](int e) { p[e] = kTopkRemoved; };
  topk_rounds(best, take, n_expert, K, renormalize, ids, weights);
}

// topk_warp with the probabilities in registers: lane l holds entries l + 32 k, k <
// PER (n_expert <= 32 * PER), so neither the softmax nor the K arg-max rounds touch shared
// memory (a decode step routes one token: its latency is the step's). The same float and
// double operations in the same order as topk_warp: the same ids and weights, bit for bit.
template <int PER>
__device__ __forceinline__ void topk_warp_regs(const float* row, int n_expert, int K, bool renormalize, int32_t* ids,
                                               float* weights) {
  const int lane = threadIdx.x & 31;
  float p[PER];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int e = lane + 32 * k;
    p[k] = e < n_expert ? __ldcg(row + e) : -INFINITY;
    if (e < n_expert) mx = fmaxf(mx, p[k]);
  }
  mx = warp_max(mx);
  double sum = 0.0;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    if (lane + 32 * k < n_expert) {
      const float v = static_cast<float>(exp(static_cast<double>(p[k] - mx)));
      p[k] = v;
      sum += v;
    }
  }
  sum = warp_sum(sum);
  const float inv = static_cast<float>(1.0 / sum);
#pragma unroll
  for (int k = 0; k < PER; ++k) p[k] *= inv;
  auto best = [&](float& bv, int& bi) {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if (lane + 32 * k < n_expert && p[k] > bv) {
        bv = p[k];
        bi = lane + 32 * k;
      }
    }
  };
  auto take = [&](int e) {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if (lane + 32 * k == e) p[k] = kTopkRemoved;
    }
  };
  topk_rounds(best, take, n_expert, K, renormalize, ids, weights);
}

}  // namespace mt::cuda::detail
