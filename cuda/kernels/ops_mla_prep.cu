// The latent row's preparation for multi-head latent attention (cuda/kernels/ops_mla.h mla_prep):
// grid (n_head + 1, T). Block h < n_head copies head h's nope dims of token t to its slot
// and ropes its pe dims (one thread per pair); block n_head builds the latent row in
// shared memory (rms_norm_kernel's double square sum, then the pairs roped) and stores it
// with kv_store's roundings (F16 round to nearest even; Q8_0 a warp per 32-dim block). The
// angles are model/attention.cpp rope_angles' float expression, operation by operation
// (YaRN included); cos and sin through double sincos, as cuda/kernels/ops_norm_rope.cu.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/ops_mla.cuh"
#include "cuda/kernels/ops_mla.h"

namespace mt::cuda {
namespace {

using mla_detail::kMaxP;
using mla_detail::kMaxR;
using mla_detail::kThreads;
using mla_detail::kWarps;
using mla_detail::q8_0_code;

// Pair k's cos and sin at pos (cuda/kernels/ops_device.cuh rope_cos_sin with the layer's constants).
__device__ __forceinline__ void rope_cos_sin(const MlaRope& r, uint32_t pos, int k, float* c, float* s) {
  detail::rope_cos_sin(pos, k, r.theta_scale, r.freq_scale, r.attn_factor, r.yarn_ext, r.yarn_lo, r.yarn_hi,
                       r.yarn_mscale, c, s);
}

// NORM-style rotation of the pair (x[0], x[1]) into out[0], out[1] (out may be x).
__device__ __forceinline__ void rotate_pair(const float* x, float c, float s, float* out) {
  const float x0 = x[0], x1 = x[1];
  out[0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  out[1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}


__global__ void __launch_bounds__(kThreads) mla_prep_kernel(MlaPrepArgs a) {
  extern __shared__ float row_sh[];  // (R + P) the latent row (block n_head)
  __shared__ double scratch[32];
  const int t = blockIdx.y, tid = threadIdx.x, half = a.P / 2;
  const uint32_t pos = (a.pos_dev != nullptr ? *a.pos_dev : a.pos0) + static_cast<uint32_t>(t);
  if (static_cast<int>(blockIdx.x) < a.n_head) {  // a query head: uniform over the block
    const int h = blockIdx.x;
    const float* src = a.q + t * a.q_stride + static_cast<int64_t>(h) * (a.nope + a.P);
    const int64_t slot = static_cast<int64_t>(t) * a.n_head + h;
    for (int e = tid; e < a.nope; e += blockDim.x) a.q_nope[slot * a.nope + e] = src[e];
    for (int k = tid; k < half; k += blockDim.x) {
      float c, s;
      rope_cos_sin(a.rope, pos, k, &c, &s);
      rotate_pair(src + a.nope + 2 * k, c, s, a.q_pe + slot * a.P + 2 * k);
    }
    return;
  }
  // The latent row: rms_norm of the first R dims (model/attention.cpp rms_norm), pe roped.
  const int R = a.R, L = a.R + a.P;
  const float* src = a.c + t * a.c_stride;
  double sum = 0.0;
  for (int e = tid; e < R; e += blockDim.x) {
    const double v = src[e];
    sum += v * v;
  }
  sum = detail::block_sum(sum, scratch);
  const float mean = static_cast<float>(sum / static_cast<double>(R));
  const float scale = 1.0f / sqrtf(mean + a.eps);
  for (int e = tid; e < R; e += blockDim.x) {
    const float v = src[e] * scale;
    row_sh[e] = a.kv_norm != nullptr ? v * a.kv_norm[e] : v;
  }
  for (int k = tid; k < half; k += blockDim.x) {
    float c, s;
    rope_cos_sin(a.rope, pos, k, &c, &s);
    rotate_pair(src + R + 2 * k, c, s, row_sh + R + 2 * k);
  }
  __syncthreads();
  uint8_t* row = a.cache + static_cast<uint64_t>(pos) * a.row_bytes;
  switch (a.kv_type) {
    case QuantType::F32:
      for (int e = tid; e < L; e += blockDim.x) reinterpret_cast<float*>(row)[e] = row_sh[e];
      break;
    case QuantType::F16:
      for (int e = tid; e < L; e += blockDim.x) reinterpret_cast<__half*>(row)[e] = __float2half_rn(row_sh[e]);
      break;
    default: {  // Q8_0 (L % 32 == 0): warp w quantizes blocks w, w + warps, ...
      const int lane = tid & 31, n_warps = blockDim.x >> 5;
      for (int b = tid >> 5; b < L / 32; b += n_warps) {
        float d;
        const int q = q8_0_code(row_sh[b * 32 + lane], &d);
        uint8_t* blk = row + b * 34;
        if (lane == 0) *reinterpret_cast<__half*>(blk) = __float2half_rn(d);
        blk[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
    }
  }
}

}  // namespace

void mla_prep(const MlaPrepArgs& a, cudaStream_t stream) {
  MT_CHECK(a.n_tokens >= 0 && a.n_head > 0 && a.R > 0 && a.R <= kMaxR && a.P > 0 && a.P <= kMaxP && a.P % 2 == 0);
  MT_CHECK(a.nope >= 0 && a.c_stride >= a.R + a.P && a.q_stride >= static_cast<int64_t>(a.n_head) * (a.nope + a.P));
  const auto rb = mt::row_bytes(a.kv_type, static_cast<uint64_t>(a.R + a.P));
  MT_CHECK_MSG(rb.has_value() && *rb == a.row_bytes &&
                   (a.kv_type == QuantType::F16 || a.kv_type == QuantType::F32 || a.kv_type == QuantType::Q8_0),
               "mla_prep: the latent cache must be f16, f32 or q8_0 rows of kv_lora_rank + n_rot");
  MT_CHECK(a.n_tokens <= 65535);
  if (a.n_tokens == 0) return;
  const size_t smem = static_cast<size_t>(a.R + a.P) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.n_head + 1), static_cast<unsigned>(a.n_tokens));
  mla_prep_kernel<<<grid, kThreads, smem, stream>>>(a);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
