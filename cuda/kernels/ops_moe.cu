// The MoE element work on the device (cuda/kernels/ops.h): router softmax + top-k, SwiGLU and the
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
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"
#include "cuda/kernels/ops_topk.cuh"

namespace mt::cuda {
namespace {

constexpr int kRouterWarps = 4;  // tokens per block
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 32;     // rank r's weight lives in lane r

// logits (T, n_expert) -> ids, weights (T, K); PER > 0: the probabilities in registers
// (n_expert <= 32 * PER: topk_warp_regs, the same bytes), 0: in shared memory.
template <int PER>
__global__ void __launch_bounds__(kRouterWarps * 32)
    router_topk_kernel(const float* logits, int n_tokens, int n_expert, int K, bool renormalize, int32_t* ids,
                       float* weights) {
  const int warp = threadIdx.x >> 5;
  const int t = blockIdx.x * kRouterWarps + warp;
  if (t >= n_tokens) return;  // the whole warp: the kernel has no block barrier
  if constexpr (PER > 0) {
    detail::topk_warp_regs<PER>(logits + static_cast<int64_t>(t) * n_expert, n_expert, K, renormalize,
                                ids + static_cast<int64_t>(t) * K, weights + static_cast<int64_t>(t) * K);
  } else {
    __shared__ float probs[kRouterWarps][kMaxExperts];
    detail::topk_warp(logits + static_cast<int64_t>(t) * n_expert, probs[warp], n_expert, K, renormalize,
                      ids + static_cast<int64_t>(t) * K, weights + static_cast<int64_t>(t) * K);
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
  // The probabilities in registers up to 256 experts, in shared memory above.
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kRouterWarps * 32, 0, stream>>>(logits, n_tokens, n_expert, K, renormalize, ids, weights);
  };
  if (n_expert <= 64) {
    launch(router_topk_kernel<2>);
  } else if (n_expert <= 128) {
    launch(router_topk_kernel<4>);
  } else if (n_expert <= 256) {
    launch(router_topk_kernel<8>);
  } else {
    launch(router_topk_kernel<0>);
  }
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* g, float* u, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t b = (n + kThreads - 1) / kThreads;
  swiglu_kernel<<<static_cast<int>(b < 65536 ? b : 65536), kThreads, 0, stream>>>(g, u, n);
  MT_CUDA_CHECK_LAUNCH();
}

void moe_combine(const MoeCombineIn& c, int n_tokens, int n, float* out, cudaStream_t stream) {
  MT_CHECK(c.K > 0 && n > 0);
  MT_CHECK(c.d_sh == nullptr || c.gate_inp == nullptr || c.h != nullptr);
  if (n_tokens <= 0) return;
  moe_combine_kernel<<<n_tokens, 256, 0, stream>>>(c.d, c.weights, c.K, n, c.d_sh, c.gate_inp, c.h, out);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
