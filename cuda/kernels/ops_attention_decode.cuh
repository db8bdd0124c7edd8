// Internal to cuda/kernels/ops_attention_decode.cu and ops_attention_warps.cu: the split-K decode
// attention's shared pieces (see ops_attention_decode.cu's overview): the CTA shape and
// chunk limits, a row's vector loads, the chunk span a query sees, the merge of a head's
// chunks (merge_stats / merge_element), and the warps kernel's launcher
// (ops_attention_warps.cu).
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_attention.cuh"

namespace mt::cuda::detail::decode {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunk = 256;                 // positions per chunk at most (score buffers)
constexpr int kMinChunk = 32;
constexpr int64_t kTargetBlocks = 256;         // enough blocks to fill an H200 twice
constexpr int kGB = 8;                         // query heads per grouped block
constexpr int kWarpGroup = 4;                  // positions a warp of the warps kernel scores together

// Elements [e, e + N) of a row (e a multiple of N; N in 2, 4, 8; the row 16-byte aligned
// for F32 and F16: head_dim a multiple of 32), each as kv_load<KV> gives it.
template <QuantType KV, int N>
__device__ __forceinline__ void kv_load_n(const uint8_t* row, int e, float* out) {
  static_assert(N == 2 || N == 4 || N == 8);
  if constexpr (KV == QuantType::F32) {
    const float* p = reinterpret_cast<const float*>(row) + e;
    if constexpr (N == 2) {
      const float2 v = *reinterpret_cast<const float2*>(p);
      out[0] = v.x;
      out[1] = v.y;
    } else {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + i);
        out[i] = v.x;
        out[i + 1] = v.y;
        out[i + 2] = v.z;
        out[i + 3] = v.w;
      }
    }
  } else if constexpr (KV == QuantType::F16) {
    const __half2* p = reinterpret_cast<const __half2*>(reinterpret_cast<const __half*>(row) + e);
    __half2 h[N / 2];
    if constexpr (N == 2) {
      h[0] = p[0];
    } else if constexpr (N == 4) {
      *reinterpret_cast<uint2*>(h) = *reinterpret_cast<const uint2*>(p);
    } else {
      *reinterpret_cast<uint4*>(h) = *reinterpret_cast<const uint4*>(p);
    }
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
    static_assert(KV == QuantType::Q8_0);
    const uint8_t* blk = row + (e >> 5) * 34;
    const float d = __half2float(*reinterpret_cast<const __half*>(blk));
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(blk + 2 + (e & 31));  // 2-byte aligned
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const uint16_t two = qs[i];
      out[2 * i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(two & 0xFF)), d);
      out[2 * i + 1] = __fmul_rn(static_cast<float>(static_cast<int8_t>(two >> 8)), d);
    }
  }
}

// One (token, head)'s merge statistics over its n_chunks partials from ml + base: (M, 1 /
// L), M the largest m of a chunk with l > 0 (and the head's sink logit), L = sum_c l_c
// e^(m_c - M) in chunk order, plus e^(sink - M) (a sink is a chunk of one key whose value
// is zero; -inf: no sink). Partials are read past L1 (another launch wrote them).
__device__ __forceinline__ float2 merge_stats(const float2* ml, int64_t base, int n_chunks, float sink) {
  float M = sink;
  for (int c = 0; c < n_chunks; ++c) {
    const float2 p = __ldcg(ml + base + c);
    if (p.y > 0.0f) M = fmaxf(M, p.x);
  }
  float L = sink == -INFINITY ? 0.0f : expf(sink - M);
  for (int c = 0; c < n_chunks; ++c) {
    const float2 p = __ldcg(ml + base + c);
    if (p.y > 0.0f) L = __fmaf_rn(p.y, expf(p.x - M), L);
  }
  return make_float2(M, 1.0f / L);
}

// Element e of that (token, head)'s output: sum_c acc_c[e] e^(m_c - M) in chunk order,
// times 1 / L (st = merge_stats).
__device__ __forceinline__ float merge_element(const float2* ml, const float* acc, int64_t base, int n_chunks, int D,
                                               int e, float2 st) {
  float a = 0.0f;
  for (int c = 0; c < n_chunks; ++c) {
    const float2 p = __ldcg(ml + base + c);
    if (p.y > 0.0f) a = __fmaf_rn(__ldcg(acc + (base + c) * D + e), expf(p.x - st.x), a);
  }
  return __fmul_rn(a, st.y);
}

// Positions query t sees: [0, pos0 + t + 1), pos0 read on the device when the step is a
// replayed graph (then the split was sized for n_kv_cap; more positions than its chunks
// cover is a broken invariant).
__device__ __forceinline__ uint32_t query_n_kv(const AttnGeom& g, int t, int chunk_len, int n_chunks) {
  const uint32_t pos0 = g.pos_dev != nullptr ? *g.pos_dev : g.pos0;
  const uint32_t n_kv = g.rows != nullptr ? g.rows[t].n_kv : pos0 + static_cast<uint32_t>(t) + 1;
  if (n_kv > static_cast<uint32_t>(chunk_len) * static_cast<uint32_t>(n_chunks)) __trap();
  return n_kv;
}

// Chunk c's positions the query with n_kv keys sees: [jb, jb + len), len 0 when none (past
// its causal end, or wholly before its window).
struct ChunkSpan {
  uint32_t jb;
  int len;
};
__device__ __forceinline__ ChunkSpan chunk_span(const AttnGeom& g, uint32_t n_kv, int c, int chunk_len) {
  const uint32_t j0 = static_cast<uint32_t>(c) * static_cast<uint32_t>(chunk_len);
  const uint32_t j1 = min(j0 + static_cast<uint32_t>(chunk_len), n_kv);
  const uint32_t jb = max(j0, first_key(g.window, n_kv - 1));
  return {jb, jb < j1 ? static_cast<int>(j1 - jb) : 0};
}

// The warps kernel (ops_attention_warps.cu) over grid (n_chunks, n_head, n_tokens), head_dim
// 64, 128 or 256, g.warp_lanes its form; partials in attn_decode_grouped's layout, one
// chunk: the output itself.
template <QuantType KV>
void launch_warps(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, cudaStream_t stream);

}  // namespace mt::cuda::detail::decode
