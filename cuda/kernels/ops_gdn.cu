// The Gated DeltaNet mixer's own operations on the device (cuda/kernels/ops.h), twins of
// model/gated_delta_net.cpp and model/delta_rule.cpp: the causal conv with its state, the
// gates, the delta rule (one block per value head, its state column per thread in
// registers; long runs go to the chunked form, cuda/kernels/ops_gdn_chunk.cu), the z-gated
// RMSNorm; and the gated attention's query split and gate.
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_gdn_chunk.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kMaxConv = 8;
// Runs of this many tokens or more take the chunked form (cuda/kernels/ops_gdn_chunk.cu). A chunk
// costs what it costs however few of its 64 tokens are used, about 10 to 15 recurrent
// tokens' time (H200, dk 128: 8 tokens of 32 value heads 28 us chunked vs 45 recurrent; 16
// tokens of 64 heads, two waves of CTAs, 50 vs 58 us); 4096 tokens run 6.5x faster.
constexpr int kChunkedMinTokens = 16;

int blocks_for(int64_t n) {
  const int64_t b = (n + kEltThreads - 1) / kEltThreads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// One thread per channel c, the tokens in order: the window (Kc - 1 earlier raw values and
// the current one) in registers, started from the conv state and left there at the end.
__global__ void gdn_conv_kernel(const float* qkv, int64_t qkv_stride, const float* w, float* state, float* u, int T,
                                int C, int Kc) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float win[kMaxConv];
  for (int j = 0; j < Kc - 1; ++j) win[j] = state[static_cast<int64_t>(j) * C + c];
  float wc[kMaxConv];
  for (int j = 0; j < Kc; ++j) wc[j] = w[static_cast<int64_t>(c) * Kc + j];
  for (int t = 0; t < T; ++t) {
    win[Kc - 1] = qkv[t * qkv_stride + c];
    float acc = 0.0f;
    for (int j = 0; j < Kc; ++j) acc += wc[j] * win[j];
    u[static_cast<int64_t>(t) * C + c] = silu(acc);
    for (int j = 0; j + 1 < Kc; ++j) win[j] = win[j + 1];
  }
  for (int j = 0; j < Kc - 1; ++j) state[static_cast<int64_t>(j) * C + c] = win[j];
}

// (beta, g) of token t, value head h: beta = sigmoid(b), g = ssm_a softplus(a + dt_bias).
// grouped (qwen3next): b and a of head h sit in one row per key head [b x r | a x r].
__device__ __forceinline__ float2 gate_values(const GdnGateArgs& ga, int t, int h, int r) {
  float bv, av;
  if (ga.grouped) {
    const int grp = h / r, k = h % r;
    bv = ga.b[t * ga.stride + grp * 2 * r + k];
    av = ga.b[t * ga.stride + grp * 2 * r + r + k];
  } else {
    bv = ga.b[t * ga.stride + h];
    av = ga.a[t * ga.stride + h];
  }
  return make_float2(1.0f / (1.0f + expf(-bv)), ga.ssm_a[h] * softplus(av + ga.dt_bias[h]));
}

// One thread per (token, value head).
__global__ void gdn_gates_kernel(GdnGateArgs ga, int T, int nv, int r, float* beta, float* g) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * nv) return;  // T * nv < 65536 * 256: one pass
  const int t = static_cast<int>(i / nv), h = static_cast<int>(i % nv);
  const float2 bg = gate_values(ga, t, h, r);
  beta[i] = bg.x;
  g[i] = bg.y;
}

// One block of DK threads per value head: thread j keeps column j of the state (S[i][j],
// i < DK) in registers; per token the block L2-normalises its key head's q and k into
// shared memory, then each thread decays its column, computes its delta and updates it,
// and writes o_j = scale S^T q. The state is stored transposed, m[j * DK + i] = S[i][j].
// kFused (the decode step): beta and g computed here from the raw gate inputs
// (gate_values), and o_j written through the z-gated RMSNorm of its head (the sum of
// squares in double as gated_rms_norm_kernel): three launches' numbers in one.
template <int DK, bool kFused>
__global__ void __launch_bounds__(DK) delta_rule_kernel(DeltaRuleArgs a, GdnGateArgs ga, GdnNormArgs na) {
  const int h = blockIdx.x, j = threadIdx.x;
  const int kh = a.tiled ? h % a.nk : h / (a.nv / a.nk);
  __shared__ float qs[DK], ks[DK];
  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
  float S[DK];
  float* m = a.state + static_cast<int64_t>(h) * DK * DK + static_cast<int64_t>(j) * DK;
#pragma unroll
  for (int i = 0; i < DK; ++i) S[i] = m[i];
  const float scale = rsqrtf(static_cast<float>(DK));
  for (int t = 0; t < a.T; ++t) {
    const float* row = a.u + static_cast<int64_t>(t) * a.conv_dim;
    const float qv = row[kh * DK + j], kv = row[a.key_dim + kh * DK + j];
    const float qn = detail::block_sum(qv * qv, scratch);
    const float kn = detail::block_sum(kv * kv, scratch);
    qs[j] = qv / fmaxf(sqrtf(qn), a.eps);
    ks[j] = kv / fmaxf(sqrtf(kn), a.eps);
    __syncthreads();
    const float v = row[2 * a.key_dim + h * DK + j];
    float decay, beta;
    if constexpr (kFused) {
      const float2 bg = gate_values(ga, t, h, a.nv / a.nk);
      decay = expf(bg.y);
      beta = bg.x;
    } else {
      decay = expf(a.g[static_cast<int64_t>(t) * a.nv + h]);
      beta = a.beta[static_cast<int64_t>(t) * a.nv + h];
    }
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < DK; ++i) {
      S[i] *= decay;
      dot += S[i] * ks[i];
    }
    const float delta = (v - dot) * beta;
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < DK; ++i) {
      S[i] += ks[i] * delta;
      o += S[i] * qs[i];
    }
    o *= scale;
    float* out = a.out + static_cast<int64_t>(t) * a.nv * DK + h * DK;
    if constexpr (kFused) {
      const double sum = detail::block_sum(static_cast<double>(o) * o, scratch_d);
      const float nscale = 1.0f / sqrtf(static_cast<float>(sum / DK) + na.eps);
      out[j] = o * nscale * na.w[j] * silu(na.z[t * na.z_stride + static_cast<int64_t>(h) * DK + j]);
    } else {
      out[j] = o;
    }
    __syncthreads();  // qs / ks are rewritten by the next token
  }
#pragma unroll
  for (int i = 0; i < DK; ++i) m[i] = S[i];
}

// One block per (token, value head): o <- rms_norm(o) * w * silu(z), in place.
__global__ void gated_rms_norm_kernel(float* o, const float* z, int64_t z_stride, const float* w, int nv, int dv,
                                      float eps) {
  __shared__ double scratch[32];
  const int t = blockIdx.x / nv, h = blockIdx.x % nv;
  float* x = o + static_cast<int64_t>(t) * nv * dv + static_cast<int64_t>(h) * dv;
  const float* zr = z + t * z_stride + static_cast<int64_t>(h) * dv;
  double sum = 0.0;
  for (int i = threadIdx.x; i < dv; i += blockDim.x) sum += static_cast<double>(x[i]) * x[i];
  sum = detail::block_sum(sum, scratch);
  const float scale = 1.0f / sqrtf(static_cast<float>(sum / dv) + eps);
  for (int i = threadIdx.x; i < dv; i += blockDim.x) x[i] = x[i] * scale * w[i] * silu(zr[i]);
}

// One thread per (token, element of q_dim): head h's query and gate halves apart.
__global__ void split_gated_q_kernel(const float* src, int64_t stride, int T, int n_head, int hd, float* q,
                                     float* gate) {
  const int64_t Q = static_cast<int64_t>(n_head) * hd;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < T * Q;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / Q, e = i % Q, h = e / hd, d = e % hd;
    const float* head = src + t * stride + h * 2 * hd;
    q[i] = head[d];
    gate[i] = head[hd + d];
  }
}

__global__ void mul_sigmoid_kernel(float* x, const float* gate, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= 1.0f / (1.0f + expf(-gate[i]));
  }
}

}  // namespace

bool gdn_supports(int state_size, int conv_kernel) {
  return (state_size == 64 || state_size == 128) && conv_kernel >= 2 && conv_kernel <= kMaxConv;
}

void gdn_conv(const GdnConvArgs& a, cudaStream_t stream) {
  MT_CHECK(a.Kc >= 2 && a.Kc <= kMaxConv);
  gdn_conv_kernel<<<blocks_for(a.C), kEltThreads, 0, stream>>>(a.qkv, a.qkv_stride, a.w, a.state, a.u, a.T, a.C, a.Kc);
  MT_CUDA_CHECK(cudaGetLastError());
}

void gdn_gates(const GdnGateArgs& ga, int T, int nv, int nk, float* beta, float* g, cudaStream_t stream) {
  gdn_gates_kernel<<<blocks_for(static_cast<int64_t>(T) * nv), kEltThreads, 0, stream>>>(ga, T, nv, nv / nk, beta, g);
  MT_CUDA_CHECK(cudaGetLastError());
}

void delta_rule(const DeltaRuleArgs& a, cudaStream_t stream) {
  MT_CHECK(a.nk > 0 && a.nv % a.nk == 0);
  if (a.T >= kChunkedMinTokens) {
    delta_rule_chunked(a, stream);
    return;
  }
  switch (a.dk) {
    case 64: delta_rule_kernel<64, false><<<a.nv, 64, 0, stream>>>(a, {}, {}); break;
    case 128: delta_rule_kernel<128, false><<<a.nv, 128, 0, stream>>>(a, {}, {}); break;
    default: MT_CHECK(false && "delta_rule: state size must be 64 or 128 (gdn_supports)");
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

bool delta_rule_gated_fits(int T) { return T < kChunkedMinTokens; }

void delta_rule_gated(const DeltaRuleArgs& a, const GdnGateArgs& ga, const GdnNormArgs& na, cudaStream_t stream) {
  MT_CHECK(a.nk > 0 && a.nv % a.nk == 0 && delta_rule_gated_fits(a.T) && na.w != nullptr && na.z != nullptr);
  switch (a.dk) {
    case 64: delta_rule_kernel<64, true><<<a.nv, 64, 0, stream>>>(a, ga, na); break;
    case 128: delta_rule_kernel<128, true><<<a.nv, 128, 0, stream>>>(a, ga, na); break;
    default: MT_CHECK(false && "delta_rule: state size must be 64 or 128 (gdn_supports)");
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

void gated_rms_norm(float* o, const GdnNormArgs& na, int T, int nv, int dv, cudaStream_t stream) {
  gated_rms_norm_kernel<<<T * nv, 128, 0, stream>>>(o, na.z, na.z_stride, na.w, nv, dv, na.eps);
  MT_CUDA_CHECK(cudaGetLastError());
}

void split_gated_q(const float* src, int64_t stride, int T, int n_head, int hd, float* q, float* gate,
                   cudaStream_t stream) {
  split_gated_q_kernel<<<blocks_for(static_cast<int64_t>(T) * n_head * hd), kEltThreads, 0, stream>>>(src, stride, T, n_head,
                                                                                                      hd, q, gate);
  MT_CUDA_CHECK(cudaGetLastError());
}

void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t stream) {
  mul_sigmoid_kernel<<<blocks_for(n), kEltThreads, 0, stream>>>(x, gate, n);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
