// The element-wise operations of gpt-oss's experts and laguna's attention gate (cuda/kernels/ops.h),
// twins of model/ffn.cpp (add_expert_bias, swiglu_oai) and model/attention.cpp (the
// softplus output gate), each in the CPU's operation order.
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65536 ? b : 65536);
}

// gpt-oss's clamped SwiGLU of one element: g' = min(g, 7), u' = clamp(u, -7, 7),
// g' / (1 + e^(1.702 (-g'))) (u' + 1).
__device__ __forceinline__ float swiglu_oai_one(float g, float u) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  const float x = fminf(g, kLimit);
  const float y = fminf(fmaxf(u, -kLimit), kLimit);
  return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(__fmul_rn(kAlpha, -x)))), __fadd_rn(y, 1.0f));
}

__global__ void add_expert_bias_kernel(float* y, int64_t rows, int n, int64_t stride, const int32_t* experts,
                                       const float* bias) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n;
    const int c = static_cast<int>(i % n);
    y[r * stride + c] += bias[static_cast<int64_t>(experts[r]) * n + c];
  }
}

__global__ void swiglu_oai_pairs_kernel(const float* gu, int64_t rows, int ff, float* out) {
  const int64_t total = rows * ff;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / ff;
    const int c = static_cast<int>(i % ff);
    const float* row = gu + r * 2 * ff;
    out[i] = swiglu_oai_one(row[c], row[ff + c]);
  }
}

__global__ void swiglu_oai_kernel(const float* g, float* u, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    u[i] = swiglu_oai_one(g[i], u[i]);
  }
}

// model/activations.h softplus: x above 20 passes through.
__global__ void mul_softplus_gate_kernel(float* x, const float* gate, int64_t rows, int n, int G) {
  const int per = n / G;
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n;
    const int c = static_cast<int>(i % n);
    const float a = gate[r * G + c / per];
    const float sp = a > 20.0f ? a : logf(__fadd_rn(1.0f, expf(a)));
    x[i] = __fmul_rn(x[i], sp);
  }
}

}  // namespace

void add_expert_bias(float* y, int64_t rows, int n, int64_t stride, const int32_t* experts, const float* bias,
                     cudaStream_t stream) {
  MT_CHECK(rows >= 0 && n > 0 && stride >= n && experts != nullptr && bias != nullptr);
  if (rows == 0) return;
  add_expert_bias_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(y, rows, n, stride, experts, bias);
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu_oai_pairs(const float* gu, int64_t rows, int ff, float* out, cudaStream_t stream) {
  MT_CHECK(rows >= 0 && ff > 0);
  if (rows == 0) return;
  swiglu_oai_pairs_kernel<<<blocks_for(rows * ff), kThreads, 0, stream>>>(gu, rows, ff, out);
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu_oai(const float* g, float* u, int64_t n, cudaStream_t stream) {
  MT_CHECK(n >= 0 && g != nullptr);
  if (n == 0) return;
  swiglu_oai_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, u, n);
  MT_CUDA_CHECK_LAUNCH();
}

void mul_softplus_gate(float* x, const float* gate, int64_t rows, int n, int G, cudaStream_t stream) {
  MT_CHECK(rows >= 0 && n > 0 && G > 0 && n % G == 0);
  if (rows == 0) return;
  mul_softplus_gate_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(x, gate, rows, n, G);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
