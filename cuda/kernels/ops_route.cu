// The general router (cuda/kernels/ops.h router_route), twin of model/ffn.cpp route_token: one warp
// per token, lane l owning experts l, l + 32, ... of the token's scores and selection scores
// in shared memory. Scores: softmax (max-subtracted, exp in double rounded to float, the
// sum in double, as the CPU) or sigmoid; selection = score + bias; group-limited routing
// keeps the n_group_used groups with the best sums of their two best selection scores
// (ties to the lower group, lane 0 serially: at most 64 groups); K rounds of a warp
// arg-max over the selection scores (ties: lower id) pick the ranks, weighted by the
// unbiased scores, renormalised (sum clamped at 6.103515625e-5) and scaled as asked.
// gpt-oss: the raw (biased) logits choose and the K weights are their softmax.
#include <climits>
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kWarps = 4;         // tokens per block
constexpr int kMaxExperts = 512;
constexpr int kMaxGroups = 64;

__global__ void __launch_bounds__(kWarps * 32) route_kernel(const float* logits, int n_tokens, int X, int K, RouteMath m,
                                                            const float* bias, int32_t* ids, float* weights) {
  __shared__ float p_all[kWarps][kMaxExperts], s_all[kWarps][kMaxExperts];
  __shared__ unsigned char keep_all[kWarps][kMaxGroups];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= n_tokens) return;  // whole warps leave together
  float* p = p_all[warp];
  float* s = s_all[warp];
  const float* row = logits + static_cast<int64_t>(t) * X;
  if (m.softmax_selected) {
    for (int e = lane; e < X; e += 32) p[e] = m.logit_bias != nullptr ? row[e] + m.logit_bias[e] : row[e];
  } else if (m.sigmoid) {
    for (int e = lane; e < X; e += 32) p[e] = 1.0f / (1.0f + expf(-row[e]));
  } else {
    detail::softmax_warp(row, p, X);
  }
  for (int e = lane; e < X; e += 32) s[e] = bias != nullptr ? p[e] + bias[e] : p[e];
  __syncwarp();
  if (m.n_groups > 1) {
    const int G = m.n_groups, per = X / G;
    unsigned char* keep = keep_all[warp];
    if (lane == 0) {
      float score[kMaxGroups];
      for (int g = 0; g < G; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; ++e) {
          if (s[e] > best) {
            second = best;
            best = s[e];
          } else if (s[e] > second) {
            second = s[e];
          }
        }
        score[g] = best + second;
        keep[g] = 0;
      }
      for (int r = 0; r < m.n_group_used; ++r) {  // the best remaining group, ties to the lower
        int bg = -1;
        for (int g = 0; g < G; ++g) {
          if (!keep[g] && (bg < 0 || score[g] > score[bg])) bg = g;
        }
        keep[bg] = 1;
      }
    }
    __syncwarp();
    for (int e = lane; e < X; e += 32) {
      if (!keep[e / per]) s[e] = -INFINITY;
    }
    __syncwarp();
  }
  float sum = 0.0f, my_w = 0.0f;  // lane r: rank r's weight (K <= 32)
  int my_id = 0;
  for (int r = 0; r < K; ++r) {
    float v = -INFINITY;
    int i = INT_MAX;
    for (int e = lane; e < X; e += 32) {
      if (s[e] > v || (s[e] == v && e < i)) {
        v = s[e];
        i = e;
      }
    }
    detail::warp_argmax(v, i);
    const float w = p[i];
    sum += w;  // in rank order, as the CPU
    if (lane == r) {
      my_w = w;
      my_id = i;
    }
    __syncwarp();
    if (lane == (i & 31)) s[i] = -INFINITY;  // its owner takes it out
    __syncwarp();
  }
  if (m.softmax_selected) {  // model/attention.cpp softmax over the K weights: exp in float, the sum in double
    const float mx = detail::warp_max(lane < K ? my_w : -INFINITY);
    const float ex = lane < K ? expf(my_w - mx) : 0.0f;
    double total = 0.0;
    for (int r = 0; r < K; ++r) total += static_cast<double>(__shfl_sync(0xffffffffu, ex, r));
    my_w = ex * static_cast<float>(1.0 / total);
  }
  if (lane < K) {
    float w = my_w;
    if (m.renormalize) w /= fmaxf(sum, 6.103515625e-5f);
    if (m.scale != 1.0f) w *= m.scale;
    ids[static_cast<int64_t>(t) * K + lane] = my_id;
    weights[static_cast<int64_t>(t) * K + lane] = w;
  }
}

}  // namespace

void router_route(const float* logits, int n_tokens, int n_expert, int K, const RouteMath& m, int32_t* ids,
                  float* weights, cudaStream_t stream) {
  MT_CHECK(n_expert > 0 && n_expert <= kMaxExperts && K > 0 && K <= 32 && K <= n_expert);
  MT_CHECK(m.n_groups <= kMaxGroups && (m.n_groups <= 1 || n_expert % m.n_groups == 0));
  if (n_tokens <= 0) return;
  route_kernel<<<(n_tokens + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(logits, n_tokens, n_expert, K, m,
                                                                           m.selection_bias, ids, weights);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
