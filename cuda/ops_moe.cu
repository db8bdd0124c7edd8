// The MoE element work on the device (cuda/ops.h): router softmax + top-k, SwiGLU, the
// weighted combine of the experts' rows.
//
// router_topk: one warp per token, its probabilities (n_expert <= 512) in shared memory,
// lane l owning experts l, l + 32, ...: every lane reads and writes only its own entries,
// so the warp needs no barrier. K rounds of a warp arg-max (ties: lower id) pick the
// ranks; the exp is taken in double and rounded to float (the correctly rounded value
// the CPU's std::exp(float) gives in all but rare cases), the sum in double as the CPU.
// moe_combine: one block per token, the sum in rank order with explicitly rounded
// multiply and add (no FMA contraction), as model/ffn.cpp's loop.
#include <climits>
#include <cmath>

#include "core/check.h"
#include "cuda/ops.h"
#include "cuda/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kRouterWarps = 4;  // tokens per block
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 32;     // rank r's weight lives in lane r
constexpr float kRemoved = -1.0f;  // probabilities are >= 0; a picked expert gets this

// logits (T, n_expert) -> ids, weights (T, K).
__global__ void __launch_bounds__(kRouterWarps * 32)
    router_topk_kernel(const float* logits, int n_tokens, int n_expert, int K, bool renormalize, int32_t* ids,
                       float* weights) {
  __shared__ float probs[kRouterWarps][kMaxExperts];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRouterWarps + warp;
  if (t >= n_tokens) return;  // the whole warp: the kernel has no block barrier
  float* p = probs[warp];
  const float* row = logits + static_cast<int64_t>(t) * n_expert;

  float mx = -INFINITY;
  for (int e = lane; e < n_expert; e += 32) {
    p[e] = row[e];
    mx = fmaxf(mx, p[e]);
  }
  mx = detail::warp_max(mx);
  double sum = 0.0;
  for (int e = lane; e < n_expert; e += 32) {
    const float v = static_cast<float>(exp(static_cast<double>(p[e] - mx)));
    p[e] = v;
    sum += v;
  }
  sum = detail::warp_sum(sum);
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = lane; e < n_expert; e += 32) p[e] *= inv;

  float picked_sum = 0.0f;  // in rank order, as the CPU
  float my_w = 0.0f;        // lane r: the weight of rank r
  int my_id = 0;
  for (int r = 0; r < K; ++r) {
    float bv = -2.0f;  // below kRemoved: a lane whose entries are all picked still loses
    int bi = INT_MAX;
    for (int e = lane; e < n_expert; e += 32) {
      if (p[e] > bv) {  // ascending e: the first of equal values (lowest id) stays
        bv = p[e];
        bi = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (bi < n_expert && lane == (bi & 31)) p[bi] = kRemoved;
    if (lane == r) {
      my_w = bv;
      my_id = bi < n_expert ? bi : 0;  // only NaN logits leave no winner
    }
    picked_sum += bv;
  }
  if (lane < K) {
    if (renormalize) my_w /= fmaxf(picked_sum, 6.103515625e-5f);
    ids[static_cast<int64_t>(t) * K + lane] = my_id;
    weights[static_cast<int64_t>(t) * K + lane] = my_w;
  }
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__global__ void swiglu_kernel(const float* g, float* u, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    u[i] = g != nullptr ? silu(g[i]) * u[i] : silu(u[i]);
  }
}

// One block per token: d (T*K, n), weights (T, K), d_sh (T, n), gate_inp (n), h (T, n).
__global__ void moe_combine_kernel(const float* d, const float* weights, int K, int n, const float* d_sh,
                                   const float* gate_inp, const float* h, float* out) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  float gate = 1.0f;
  if (d_sh != nullptr && gate_inp != nullptr) {
    float z = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) z += gate_inp[j] * h[t * n + j];
    z = detail::block_sum(z, scratch);
    gate = 1.0f / (1.0f + expf(-z));
  }
  const float* w = weights + t * K;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float o = 0.0f;
    for (int k = 0; k < K; ++k) o = __fadd_rn(o, __fmul_rn(d[(t * K + k) * n + j], w[k]));
    if (d_sh != nullptr) o = __fadd_rn(o, __fmul_rn(d_sh[t * n + j], gate));
    out[t * n + j] = o;
  }
}

}  // namespace

void router_topk(const float* logits, int n_tokens, int n_expert, int K, bool renormalize, int32_t* ids,
                 float* weights, cudaStream_t stream) {
  MT_CHECK(n_expert > 0 && n_expert <= kMaxExperts);
  MT_CHECK(K > 0 && K <= n_expert && K <= kMaxTopK);
  if (n_tokens <= 0) return;
  const int blocks = (n_tokens + kRouterWarps - 1) / kRouterWarps;
  router_topk_kernel<<<blocks, kRouterWarps * 32, 0, stream>>>(logits, n_tokens, n_expert, K, renormalize, ids,
                                                               weights);
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* g, float* u, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t b = (n + kThreads - 1) / kThreads;
  swiglu_kernel<<<static_cast<int>(b < 65536 ? b : 65536), kThreads, 0, stream>>>(g, u, n);
  MT_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* d, const float* weights, int n_tokens, int K, int n, const float* d_sh,
                 const float* shexp_gate_inp, const float* h, float* out, cudaStream_t stream) {
  MT_CHECK(K > 0 && n > 0);
  MT_CHECK(d_sh == nullptr || shexp_gate_inp == nullptr || h != nullptr);
  if (n_tokens <= 0) return;
  moe_combine_kernel<<<n_tokens, 256, 0, stream>>>(d, weights, K, n, d_sh, shexp_gate_inp, h, out);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
