// The KV cache store and the attention entry point on the device (cuda/kernels/ops.h).
//
// kv_store writes rows exactly as the CPU's KvCache does (quant/'s reference quantizers):
// F16 by __float2half_rn, Q8_0 one warp per 32-element block (amax / 127, d stored as
// half, codes roundf(x * (1 / d)) clamped to +-127, d == 0 or a non-finite 1 / d giving
// code 0), F32 copied.
//
// attention() checks the shapes, resolves the per-head byte geometry and sends batches of
// up to kAttnDecodeMaxTokens tokens to split-K flash decoding (ops_attention_decode.cu),
// longer ones to the tiled prefill kernel (ops_attention_prefill.cu).
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_attention.cuh"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

// rows (n_tokens, kv_dim) -> cache rows pos0.. as half.
__global__ void kv_store_f16_kernel(const float* rows, int n_tokens, int kv_dim, uint8_t* cache, uint64_t row_bytes,
                                    uint32_t pos0) {
  const int64_t n = static_cast<int64_t>(n_tokens) * kv_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / kv_dim, e = i % kv_dim;
    __half* dst = reinterpret_cast<__half*>(cache + (pos0 + static_cast<uint64_t>(t)) * row_bytes);
    dst[e] = __float2half_rn(rows[i]);
  }
}

// One warp per Q8_0 block; lane j quantizes element j.
__global__ void kv_store_q8_0_kernel(const float* rows, int n_tokens, int kv_dim, uint8_t* cache, uint64_t row_bytes,
                                     uint32_t pos0) {
  const int blocks_per_row = kv_dim / 32;
  const int64_t n_blocks = static_cast<int64_t>(n_tokens) * blocks_per_row;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= n_blocks) return;  // the whole warp (blockDim.x is a multiple of 32)
  const int64_t t = warp / blocks_per_row, b = warp % blocks_per_row;
  const float x = rows[t * kv_dim + b * 32 + lane];
  const float ax = fabsf(x);
  const float amax = detail::warp_max(ax > 0.0f ? ax : 0.0f);  // NaN counts as 0, as the CPU's `>`
  const float d = amax / 127;
  float id = 0.0f;
  if (d != 0.0f) {
    id = 1.0f / d;
    if (!isfinite(id)) id = 0.0f;
  }
  const float r = roundf(x * id);  // ties away from zero, as std::round
  const int q = r == r ? static_cast<int>(fminf(fmaxf(r, -127.0f), 127.0f)) : 0;
  uint8_t* blk = cache + (pos0 + static_cast<uint64_t>(t)) * row_bytes + b * 34;
  if (lane == 0) *reinterpret_cast<__half*>(blk) = __float2half_rn(d);
  blk[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
}

}  // namespace

void kv_store(QuantType type, const float* rows, int n_tokens, int kv_dim, uint8_t* cache, uint64_t row_bytes,
              uint32_t pos0, cudaStream_t stream) {
  MT_CHECK(n_tokens >= 0 && kv_dim > 0);
  const auto rb = mt::row_bytes(type, static_cast<uint64_t>(kv_dim));
  MT_CHECK(rb && *rb == row_bytes);
  if (n_tokens == 0) return;
  constexpr int kThreads = 256;
  switch (type) {
    case QuantType::F32:
      MT_CUDA_CHECK(cudaMemcpyAsync(cache + pos0 * row_bytes, rows, static_cast<size_t>(n_tokens) * row_bytes,
                                    cudaMemcpyDeviceToDevice, stream));
      break;
    case QuantType::F16: {
      const int64_t n = static_cast<int64_t>(n_tokens) * kv_dim;
      const int64_t b = (n + kThreads - 1) / kThreads;
      kv_store_f16_kernel<<<static_cast<int>(b < 65536 ? b : 65536), kThreads, 0, stream>>>(rows, n_tokens, kv_dim,
                                                                                         cache, row_bytes, pos0);
      MT_CUDA_CHECK_LAUNCH();
      break;
    }
    case QuantType::Q8_0: {
      const int64_t warps = static_cast<int64_t>(n_tokens) * (kv_dim / 32);
      const int64_t b = (warps * 32 + kThreads - 1) / kThreads;
      MT_CHECK(b < (int64_t{1} << 31));
      kv_store_q8_0_kernel<<<static_cast<int>(b), kThreads, 0, stream>>>(rows, n_tokens, kv_dim, cache, row_bytes,
                                                                         pos0);
      MT_CUDA_CHECK_LAUNCH();
      break;
    }
    default: MT_CHECK_MSG(false, "kv_store: KV cache type must be f16, q8_0 or f32");
  }
}

bool attention(const AttentionArgs& a, Workspace& ws, cudaStream_t stream) {
  MT_CHECK(a.n_tokens >= 0 && a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  MT_CHECK(a.head_dim > 0 && a.head_dim <= detail::kMaxHeadDim);
  const auto head_bytes = mt::row_bytes(a.kv_type, static_cast<uint64_t>(a.head_dim));
  MT_CHECK_MSG(head_bytes.has_value(), "attention: head_dim is not a whole number of KV cache blocks");
  MT_CHECK(a.kv_row_bytes >= *head_bytes * static_cast<uint64_t>(a.n_head_kv));
  if (a.n_tokens == 0) return false;
  detail::AttnGeom g{a.q,      a.k_cache, a.v_cache,           a.kv_row_bytes, *head_bytes,
                           a.n_tokens, a.n_head,  a.n_head / a.n_head_kv, a.head_dim,    a.pos0,
                           1.0f / std::sqrt(static_cast<float>(a.head_dim)), a.out, a.pos_dev, a.n_kv_cap,
                           a.window, a.sinks};
  g.warp_max = a.warp_max;
  g.warp_lanes = a.warp_lanes;
  g.qs = a.quant_qs, g.qmeta = a.quant_meta, g.qmode = a.quant_mode, g.qcounters = a.quant_counters;
  MT_CHECK_MSG(a.pos_dev == nullptr || a.n_tokens <= detail::kAttnDecodeMaxTokens,
               "attention: a position read on the device is for decode batches only");
  if (a.seq_rows != nullptr) {  // several sequences' decode tokens: the split sized for the longest
    MT_CHECK(a.pos_dev == nullptr && a.n_tokens <= kAttnDecodeMaxSeqTokens && a.max_n_kv > 0);
    g.rows = a.seq_rows;
    g.n_kv_cap = a.max_n_kv;
    return detail::attention_decode(a.kv_type, g, ws, stream);
  }
  if (a.n_tokens <= detail::kAttnDecodeMaxTokens) return detail::attention_decode(a.kv_type, g, ws, stream);
  detail::attention_prefill(a.kv_type, g, stream);
  return false;
}

size_t attention_workspace_bytes(int n_tokens, int n_head, int head_dim, uint32_t n_kv) {
  return detail::attention_decode_workspace_bytes(n_tokens, n_head, head_dim, n_kv);
}

}  // namespace mt::cuda
