// Internal to the attention kernels (cuda/kernels/ops_kv_attention.cu, ops_attention_decode.cu,
// ops_attention_prefill.cu):
// reading one element of a cached K or V head slice in place, and the geometry both
// paths share.
//
// Invariant: kv_load<T>(row, e) is exactly quant/'s reference dequantization of element
// e of the row (F16: the half widened; Q8_0: fp16 d times the int8 code, one float
// multiply; F32: the float), so the device attends over the same values as the CPU.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/memory.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "cuda/kernels/ops.h"
#include "quant/types.h"

namespace mt::cuda::detail {

inline constexpr int kMaxHeadDim = 256;
// Up to this many query tokens attention takes the split-K decode path.
inline constexpr int kAttnDecodeMaxTokens = 8;

template <QuantType T>
__device__ __forceinline__ float kv_load(const uint8_t* row, int e);

template <>
__device__ __forceinline__ float kv_load<QuantType::F32>(const uint8_t* row, int e) {
  return reinterpret_cast<const float*>(row)[e];
}

template <>
__device__ __forceinline__ float kv_load<QuantType::F16>(const uint8_t* row, int e) {
  return __half2float(reinterpret_cast<const __half*>(row)[e]);
}

// Q8_0 block: fp16 d (2 bytes) then 32 int8 codes; 34 bytes.
template <>
__device__ __forceinline__ float kv_load<QuantType::Q8_0>(const uint8_t* row, int e) {
  const uint8_t* blk = row + (e >> 5) * 34;
  const float d = __half2float(*reinterpret_cast<const __half*>(blk));
  return __fmul_rn(static_cast<float>(static_cast<int8_t>(blk[2 + (e & 31)])), d);
}

// The attention call with the per-head byte geometry resolved on the host.
struct AttnGeom {
  const float* q;      // (n_tokens, n_head, D)
  const uint8_t* k;    // cache rows, row_bytes apart
  const uint8_t* v;
  uint64_t row_bytes;  // one cache row (all KV heads)
  uint64_t head_bytes; // one KV head's slice of a row
  int n_tokens, n_head, group, D;  // group = n_head / n_head_kv
  uint32_t pos0;
  float scale;         // 1 / sqrt(D)
  float* out;          // (n_tokens, n_head, D)
  const uint32_t* pos_dev = nullptr;  // set: pos0 is *pos_dev, read on the device (decode)
  uint32_t n_kv_cap = 0;              // with pos_dev: the decode split is sized for this
  uint32_t window = 0;                // sliding window: query at p sees keys (p - window, p]; 0: all
  const float* sinks = nullptr;       // (n_head) a logit per head in the softmax's denominator only, or null
  uint32_t warp_max = 0;              // AttentionArgs warp_max
  bool warp_lanes = false;            // AttentionArgs warp_lanes
  int8_t* qs = nullptr;               // AttentionArgs quant_qs, quant_meta, quant_mode, quant_counters
  uint2* qmeta = nullptr;
  ActQuant qmode = ActQuant::kQ8_0;
  uint32_t* qcounters = nullptr;
  const SeqKvRow* rows = nullptr;     // AttentionArgs seq_rows: token t's cache and n_kv
};

// Token t's K and V cache (a pass of several sequences: its own sequence's).
__device__ __forceinline__ const uint8_t* token_k(const AttnGeom& g, int t) { return g.rows ? g.rows[t].k : g.k; }
__device__ __forceinline__ const uint8_t* token_v(const AttnGeom& g, int t) { return g.rows ? g.rows[t].v : g.v; }

// The first key position a query at position p sees.
__device__ __forceinline__ uint32_t first_key(uint32_t window, uint32_t p) {
  return window == 0 || p + 1 <= window ? 0u : p + 1 - window;
}

// The split-K decode path (ops_attention_decode.cu), n_tokens <= kAttnDecodeMaxTokens,
// and the workspace it takes for any call of at most n_tokens tokens and n_kv positions.
// True when it also quantized the output rows (AttnGeom::qs: the warps kernel in one chunk).
bool attention_decode(QuantType kv_type, const AttnGeom& g, Workspace& ws, cudaStream_t stream);
size_t attention_decode_workspace_bytes(int n_tokens, int n_head, int head_dim, uint32_t n_kv);

// The tiled prefill path (ops_attention_prefill.cu).
void attention_prefill(QuantType kv_type, const AttnGeom& g, cudaStream_t stream);

}  // namespace mt::cuda::detail
