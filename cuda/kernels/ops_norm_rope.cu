// RMSNorm, RoPE and the two element-wise adds on the device (cuda/kernels/ops.h).
//
// Each kernel computes a row or an element with the operation order of its CPU twin in
// model/attention.cpp: the RMSNorm square sum in double, mean and scale in float; RoPE's
// theta by repeated float multiplication from the host's std::pow scale, the rotation
// with explicitly rounded float operations (no FMA contraction). cos and sin are taken in
// double and rounded to float: that is the correctly rounded float value the CPU's
// std::cos/std::sin (float) return in all but rare cases, where CUDA's cosf may be 2 ulp
// off.
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kEltThreads = 256;

int elt_blocks(int64_t n) {
  const int64_t b = (n + kEltThreads - 1) / kEltThreads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

// One block per row; x row r at x + r * x_stride, out row at out + r * out_stride.
__global__ void rms_norm_kernel(const float* x, int64_t x_stride, const float* w, float eps, int n, float* out,
                                int64_t out_stride) {
  __shared__ double scratch[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * x_stride;
  float* yr = out + static_cast<int64_t>(blockIdx.x) * out_stride;
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = xr[i];
    sum += v * v;
  }
  sum = detail::block_sum(sum, scratch);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * scale;  // read before the write: out may be x (same stride)
    yr[i] = w != nullptr ? v * w[i] : v;
  }
}

// One thread per (token, head, pair k); theta_k = pos * freq_scale * theta_scale^k, the
// product built one multiplication at a time as the CPU's rope_angles.
__global__ void rope_kernel(float* x, int n_tokens, int n_heads, int head_dim, int n_rot, uint32_t pos0,
                            float theta_scale, float freq_scale, bool neox) {
  const int half = n_rot / 2;
  const int64_t n = static_cast<int64_t>(n_tokens) * n_heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int k = static_cast<int>(i % half);
    const int64_t th = i / half;  // token * n_heads + head
    const uint32_t pos = pos0 + static_cast<uint32_t>(th / n_heads);
    float theta = static_cast<float>(pos) * freq_scale;
    for (int j = 0; j < k; ++j) theta = __fmul_rn(theta, theta_scale);
    double s = 0.0, c = 0.0;
    sincos(static_cast<double>(theta), &s, &c);
    const float sf = static_cast<float>(s), cf = static_cast<float>(c);
    float* head = x + th * head_dim;
    const int i0 = neox ? k : 2 * k;
    const int i1 = neox ? k + half : 2 * k + 1;
    const float x0 = head[i0], x1 = head[i1];
    head[i0] = __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
    head[i1] = __fadd_rn(__fmul_rn(x0, sf), __fmul_rn(x1, cf));
  }
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t rows, int n) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += b[i % n];
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

}  // namespace

void rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  MT_CHECK(a.n > 0 && a.rows >= 0);
  if (a.rows == 0) return;
  int threads = (a.n + 31) / 32 * 32;
  threads = threads < 256 ? threads : 256;
  rms_norm_kernel<<<a.rows, threads, 0, stream>>>(a.x, a.x_stride, a.w, a.eps, a.n, a.out, a.out_stride);
  MT_CUDA_CHECK_LAUNCH();
}

void rope(float* x, int n_tokens, int n_heads, int head_dim, const RopeParams& r, cudaStream_t stream) {
  MT_CHECK(r.n_rot >= 0 && r.n_rot <= head_dim && r.n_rot % 2 == 0);
  const int64_t n = static_cast<int64_t>(n_tokens) * n_heads * (r.n_rot / 2);
  if (n == 0) return;
  // The CPU's float expression (model/attention.cpp rope_angles), evaluated on the host.
  const float theta_scale = std::pow(r.freq_base, -2.0f / static_cast<float>(r.n_rot));
  rope_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(x, n_tokens, n_heads, head_dim, r.n_rot, r.pos0, theta_scale,
                                                        r.freq_scale, r.neox);
  MT_CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, const float* b, int rows, int n, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(rows) * n;
  if (total == 0) return;
  add_bias_kernel<<<elt_blocks(total), kEltThreads, 0, stream>>>(y, b, rows, n);
  MT_CUDA_CHECK_LAUNCH();
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(y, x, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
