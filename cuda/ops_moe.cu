// The MoE element work on the device (cuda/ops.h): router softmax + top-k, SwiGLU, the
// weighted combine of the experts' rows, and the decode step's router product fused with
// its top-k.
//
// router_topk: one warp per token, its probabilities (n_expert <= 512) in shared memory,
// lane l owning experts l, l + 32, ...: every lane reads and writes only its own entries,
// so the warp needs no barrier. K rounds of a warp arg-max (ties: lower id) pick the
// ranks; the exp is taken in double and rounded to float (the correctly rounded value
// the CPU's std::exp(float) gives in all but rare cases), the sum in double as the CPU.
// router_fused: a CTA per logits row computes it as matmul's split float product does
// (cuda/mmvq_float.cuh split_row, the same code), counts itself done on a device counter
// after a fence, and the CTA that counts last routes every token with router_topk's warp
// routine: the bytes of matmul + router_topk, in one launch.
// moe_combine: one block per token, the sum in rank order with explicitly rounded
// multiply and add (no FMA contraction), as model/ffn.cpp's loop.
#include <climits>
#include <cmath>

#include "core/check.h"
#include "cuda/dispatch.h"
#include "cuda/env_switch.h"
#include "cuda/mmvq_float.cuh"
#include "cuda/ops.h"
#include "cuda/pdl.h"
#include "cuda/ops_reduce.cuh"
#include "cuda/ops_topk.cuh"

namespace mt::cuda {
namespace {

constexpr int kRouterWarps = 4;  // tokens per block
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 32;     // rank r's weight lives in lane r
constexpr int kFusedWarps = mmvq_detail::kSplitThreads / 32;  // router_fused: tokens routed by its last CTA
static_assert(kFusedWarps >= kMmvqMaxTokens, "router_fused routes a token per warp of one CTA");

// logits (T, n_expert) -> ids, weights (T, K); PER > 0: the probabilities in registers
// (n_expert <= 32 * PER: topk_warp_regs, the same bytes), 0: in shared memory.
template <int PER>
__global__ void __launch_bounds__(kRouterWarps * 32)
    router_topk_kernel(const float* logits, int n_tokens, int n_expert, int K, bool renormalize, int32_t* ids,
                       float* weights) {
  pdl_start();  // (cuda/pdl.h: launched dependent)
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

// Grid (n_expert), kSplitThreads: CTA e computes logit e of each of the NT tokens (p.y =
// logits (NT, n_expert), p.x = the rows), then the last CTA to finish routes token t with
// warp t and puts the counter back to zero for the next launch.
template <class W, int NT>
__global__ void __launch_bounds__(mmvq_detail::kSplitThreads)
    router_fused_kernel(const MmvqArgs p, int K, bool renormalize, int32_t* ids, float* weights, uint32_t* counter) {
  __shared__ float probs[NT][kMaxExperts];
  __shared__ bool last;
  mmvq_detail::split_row<W, NT>(p, blockIdx.x);
  __threadfence();  // this CTA's logits are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;  // uniform over the CTA
  __threadfence();    // every other CTA's logits are seen after its count
  const int warp = threadIdx.x >> 5;
  if (warp < NT) {
    detail::topk_warp(p.y + static_cast<int64_t>(warp) * p.n_out, probs[warp], static_cast<int>(p.n_out), K, renormalize,
              ids + static_cast<int64_t>(warp) * K, weights + static_cast<int64_t>(warp) * K);
  }
  if (threadIdx.x == 0) *counter = 0;
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
  // Registers for up to 256 experts (MOETIER_CUDA_TOPK_SMEM=1: shared memory always).
  static EnvSwitch smem_switch("MOETIER_CUDA_TOPK_SMEM");
  const bool regs = !smem_switch.on();
  auto launch = [&](auto kernel) {
    launch_dependent(kernel, dim3(blocks), dim3(kRouterWarps * 32), 0, stream, logits, n_tokens, n_expert, K,
                     renormalize, ids, weights);
  };
  if (regs && n_expert <= 64) {
    launch(router_topk_kernel<2>);
  } else if (regs && n_expert <= 128) {
    launch(router_topk_kernel<4>);
  } else if (regs && n_expert <= 256) {
    launch(router_topk_kernel<8>);
  } else {
    launch(router_topk_kernel<0>);
  }
  MT_CUDA_CHECK_LAUNCH();
}

bool router_fused_supports(const DeviceMatrix& w, const RouterFusedArgs& a) {
  const bool float_type = w.type == QuantType::F32 || w.type == QuantType::F16 || w.type == QuantType::BF16;
  if (!float_type || w.data == nullptr || a.x == nullptr || a.counter == nullptr) return false;
  // Where matmul(w, 0, x, T, ...) takes mmvq's split float form (cuda/mmvq.cpp, mmvq_float.cu).
  const uint64_t bits = reinterpret_cast<uintptr_t>(w.data) | w.row_bytes | (w.n_mat > 1 ? w.matrix_bytes : 0);
  const bool vec = bits % 16 == 0 && w.n_in > 0 && w.n_in % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  return vec && a.n_tokens >= 1 && a.n_tokens <= kMmvqMaxTokens &&
         a.n_tokens <= mmvq_max_tokens(current_sm(), w.type, false) && w.n_out > 0 && w.n_out <= kMaxExperts &&
         w.n_out <= mmvq_detail::kSplitMaxRows && a.K > 0 && a.K <= w.n_out && a.K <= kMaxTopK;
}

void router_fused(const DeviceMatrix& w, const RouterFusedArgs& a, cudaStream_t stream) {
  MT_CHECK_MSG(router_fused_supports(w, a), "router_fused: unsupported router (check router_fused_supports)");
  MmvqArgs p;
  p.w = w.data;
  p.row_bytes = w.row_bytes;
  p.matrix_bytes = w.matrix_bytes;
  p.n_mat = w.n_mat;
  p.n_in = static_cast<int>(w.n_in);
  p.n_out = w.n_out;
  p.n_tokens = a.n_tokens;
  p.x = a.x;
  p.x_aligned16 = true;
  p.y = a.logits;
  p.align = 16;
  const unsigned grid = static_cast<unsigned>(w.n_out);
  constexpr int kThreads = mmvq_detail::kSplitThreads;
  mmvq_detail::with_tokens(a.n_tokens, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    switch (w.type) {
      case QuantType::F32:
        router_fused_kernel<WeightF32, NT><<<grid, kThreads, 0, stream>>>(p, a.K, a.renormalize, a.ids, a.weights,
                                                                         a.counter);
        break;
      case QuantType::F16:
        router_fused_kernel<WeightF16, NT><<<grid, kThreads, 0, stream>>>(p, a.K, a.renormalize, a.ids, a.weights,
                                                                         a.counter);
        break;
      default:
        router_fused_kernel<WeightBF16, NT><<<grid, kThreads, 0, stream>>>(p, a.K, a.renormalize, a.ids, a.weights,
                                                                          a.counter);
    }
  });
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
