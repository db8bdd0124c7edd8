// The warps kernel of decode attention (see ops_attention_decode.cu's overview): a CTA per
// (chunk, query head, token), each warp an online-softmax decoder over its positions, the
// four warps merged in shared memory; one chunk writes the normalised output itself (and,
// AttnGeom::qs set, its rows quantized for the output projection). Its lanes form scores
// 32 positions per warp at once, a lane per position.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/act_quant.cuh"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops_attention_decode.cuh"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda::detail::decode {
namespace {

// The warps kernel in one chunk, AttnGeom::qs set: head h's output of token t (out_sh, D
// floats of this CTA's shared memory, also in g.out) quantized in g.qmode into the row's
// quants, as cuda/kernels/act_quant.cuh's routines quantize any row. A block within the head: this
// CTA's warps quantize it from out_sh. A block over several heads (Q8_K at D 64 / 128):
// every CTA of it counts itself done on the block's counter after a fence, and the one
// that counts last reads the block's outputs back from g.out (L2) and quantizes it.
template <int D>
__device__ __forceinline__ void quantize_head_out(const AttnGeom& g, int t, int h, float* out_sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row_elems = static_cast<int64_t>(g.n_head) * D;
  int8_t* qrow = g.qs + t * row_elems;
  uint2* mrow = g.qmeta + t * row_elems / 32;
  const int e0 = h * D;  // the head's first element of the row
  __syncthreads();       // out_sh complete
  if (g.qmode != ActQuant::kQ8_K) {
    for (int b = warp; b < D / 32; b += kWarps) {
      act_detail::quantize_q8_0_warp(out_sh[32 * b + lane], lane, qrow + e0 + 32 * b + lane, mrow + e0 / 32 + b);
    }
    return;
  }
  if constexpr (D >= 256) {
    for (int b = warp; b < D / 256; b += kWarps) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = out_sh[256 * b + 8 * lane + i];
      act_detail::quantize_q8_k_warp(v, lane, qrow + e0 + 256 * b, mrow + (e0 + 256 * b) / 32);
    }
  } else {
    __shared__ bool last_sh;
    const int blk = e0 / 256;  // the row's 256-element block
    __threadfence();           // this CTA's g.out writes before its count
    __syncthreads();
    if (tid == 0) {
      uint32_t* counter = g.qcounters + t * (row_elems / 256) + blk;
      const bool last = atomicAdd(counter, 1u) == 256 / D - 1;
      if (last) *counter = 0;  // ready for the next launch
      last_sh = last;
    }
    __syncthreads();
    if (!last_sh || warp != 0) return;
    __threadfence();  // the other heads' writes, seen through their counts
    const float* src = g.out + t * row_elems + 256 * blk + 8 * lane;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __ldcg(src + i);  // (L2: not a stale L1 line)
    act_detail::quantize_q8_k_warp(v, lane, qrow + 256 * blk, mrow + 256 * blk / 32);
  }
}

// One round of kLanes: lane l's score of position row (its whole head slice, q from
// shared memory), in eight partial sums.
template <QuantType KV, int D>
__device__ __forceinline__ float lane_score(const uint8_t* row, const float4* q_sh4) {
  float part[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) part[k] = 0.0f;
#pragma unroll 4
  for (int e = 0; e < D; e += 8) {
    float kx[8];
    kv_load_n<KV, 8>(row, e, kx);
    const float4 qa = q_sh4[e / 4], qb = q_sh4[e / 4 + 1];  // (every lane the same address: a broadcast)
    part[0] = __fmaf_rn(qa.x, kx[0], part[0]);
    part[1] = __fmaf_rn(qa.y, kx[1], part[1]);
    part[2] = __fmaf_rn(qa.z, kx[2], part[2]);
    part[3] = __fmaf_rn(qa.w, kx[3], part[3]);
    part[4] = __fmaf_rn(qb.x, kx[4], part[4]);
    part[5] = __fmaf_rn(qb.y, kx[5], part[5]);
    part[6] = __fmaf_rn(qb.z, kx[6], part[6]);
    part[7] = __fmaf_rn(qb.w, kx[7], part[7]);
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The lanes form's pass of one warp over its rounds of the chunk's len positions from
// k_base / v_base (kLanes below): lane l scores position l of a round against q in shared
// memory, then the round's values are added, each position's p shuffled from its lane.
// m, l, o: the warp's online-softmax state (running max, sum of e^(s - m), its elements of
// sum e^(s - m) v).
template <QuantType KV, int EPL>
__device__ __forceinline__ void decode_rounds(const AttnGeom& g, int len, const uint8_t* k_base, const uint8_t* v_base,
                                              const float4* q_sh4, int warp, int lane, float& m, float& l,
                                              float (&o)[EPL]) {
  constexpr int D = 32 * EPL;
  auto k_row = [&](int j) -> const uint8_t* { return k_base + static_cast<uint64_t>(j) * g.row_bytes; };
  auto v_row = [&](int j) -> const uint8_t* { return v_base + static_cast<uint64_t>(j) * g.row_bytes; };
  for (int jr = warp * 32; jr < len; jr += kWarps * 32) {
    const int j = jr + lane;
    const bool live = j < len;
    const float s = live ? lane_score<KV, D>(k_row(j), q_sh4) * g.scale : -INFINITY;
    const float mx = fmaxf(m, warp_max(s));  // finite: lane 0's position is in the chunk
    const float corr = expf(m - mx);         // m = -inf at the first round: 0
    const float p = live ? expf(s - mx) : 0.0f;
    l = __fmaf_rn(l, corr, warp_sum(p));
#pragma unroll
    for (int k = 0; k < EPL; ++k) o[k] *= corr;
    const int n = min(32, len - jr);  // uniform over the warp
#pragma unroll 8
    for (int i = 0; i < n; ++i) {
      const float pi = __shfl_sync(0xffffffffu, p, i);
      float vx[EPL];
      kv_load_n<KV, EPL>(v_row(jr + i), lane * EPL, vx);
#pragma unroll
      for (int k = 0; k < EPL; ++k) o[k] = __fmaf_rn(pi, vx[k], o[k]);
    }
    m = mx;
  }
}

// The plain form's pass of one warp (kWarpGroup positions a step, each score a warp sum;
// q_row in global memory), on the same state.
template <QuantType KV, int EPL>
__device__ __forceinline__ void decode_groups(const AttnGeom& g, int len, const uint8_t* k_base, const uint8_t* v_base,
                                              const float* q_row, int warp, int lane, float& m, float& l,
                                              float (&o)[EPL]) {
  auto k_row = [&](int j) -> const uint8_t* { return k_base + static_cast<uint64_t>(j) * g.row_bytes; };
  auto v_row = [&](int j) -> const uint8_t* { return v_base + static_cast<uint64_t>(j) * g.row_bytes; };
  float q[EPL];
  kv_load_n<QuantType::F32, EPL>(reinterpret_cast<const uint8_t*>(q_row), lane * EPL, q);
#pragma unroll 2
  for (int j0 = warp * kWarpGroup; j0 < len; j0 += kWarps * kWarpGroup) {
    float s[kWarpGroup];
    float vx[kWarpGroup][EPL];
#pragma unroll
    for (int i = 0; i < kWarpGroup; ++i) {
      s[i] = 0.0f;
#pragma unroll
      for (int k = 0; k < EPL; ++k) vx[i][k] = 0.0f;
      if (j0 + i < len) {  // uniform over the warp
        float kx[EPL];
        kv_load_n<KV, EPL>(k_row(j0 + i), lane * EPL, kx);
        kv_load_n<KV, EPL>(v_row(j0 + i), lane * EPL, vx[i]);
#pragma unroll
        for (int k = 0; k < EPL; ++k) s[i] = __fmaf_rn(q[k], kx[k], s[i]);
      }
    }
    float mx = m;
#pragma unroll
    for (int i = 0; i < kWarpGroup; ++i) {
      s[i] = j0 + i < len ? warp_sum(s[i]) * g.scale : -INFINITY;
      mx = fmaxf(mx, s[i]);
    }
    const float corr = expf(m - mx);  // m = -inf at the first group: 0 (mx is finite there)
    l *= corr;
#pragma unroll
    for (int k = 0; k < EPL; ++k) o[k] *= corr;
#pragma unroll
    for (int i = 0; i < kWarpGroup; ++i) {
      const float p = expf(s[i] - mx);  // 0 past the chunk
      l += p;
#pragma unroll
      for (int k = 0; k < EPL; ++k) o[k] = __fmaf_rn(p, vx[i][k], o[k]);
    }
    m = mx;
  }
}

// Grid (n_chunks, n_head, n_tokens): the warps kernel (see the top). Partials in
// attn_decode_grouped's layout; n_chunks == 1: the output row itself, sink included.
// kLanes (AttnGeom::warp_lanes): a warp takes rounds of 32 positions, lane l scoring
// position l of the round over the whole head (q broadcast from shared memory), so a
// round's scores need one max and one sum reduction instead of a warp sum per position;
// the values then go as before, each position's p shuffled from its lane. Chunks of at
// most 32 positions keep the plain form.
template <QuantType KV, int EPL, bool kLanes>
__global__ void __launch_bounds__(kThreads)
    attn_decode_warps(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc) {
  constexpr int D = 32 * EPL;
  __shared__ float o_sh[kWarps][D];
  __shared__ float2 ml_sh[kWarps];
  __shared__ float4 q_sh4[kLanes ? D / 4 : 1];
  const int c = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t part = (static_cast<int64_t>(t) * g.n_head + h) * n_chunks + c;
  const uint32_t n_kv = query_n_kv(g, t, chunk_len, n_chunks);
  const ChunkSpan span = chunk_span(g, n_kv, c, chunk_len);
  if (span.len == 0) {  // uniform over the block, before any barrier (n_chunks > 1 only)
    if (tid == 0) ml[part] = make_float2(-INFINITY, 0.0f);
    return;
  }
  const int kvh = h / g.group;
  const float* q_row = g.q + (static_cast<int64_t>(t) * g.n_head + h) * D;
  const uint8_t* k_base = token_k(g, t) + kvh * g.head_bytes + static_cast<uint64_t>(span.jb) * g.row_bytes;
  const uint8_t* v_base = token_v(g, t) + kvh * g.head_bytes + static_cast<uint64_t>(span.jb) * g.row_bytes;
  // This warp's flash decoder: running max m, sum l of e^(s - m), o = sum e^(s - m) v.
  float m = -INFINITY, l = 0.0f;
  float o[EPL];
#pragma unroll
  for (int k = 0; k < EPL; ++k) o[k] = 0.0f;
  // kLanes: the lanes form where the chunk has more than one round's positions (the plain
  // form measured faster at 8: 3.8 vs 5.2 us); the choice is uniform over the block.
  if (kLanes && span.len > 32) {
    for (int i = tid; i < D / 4; i += kThreads) q_sh4[i] = reinterpret_cast<const float4*>(q_row)[i];
    __syncthreads();
    decode_rounds<KV, EPL>(g, span.len, k_base, v_base, q_sh4, warp, lane, m, l, o);
  } else {
    decode_groups<KV, EPL>(g, span.len, k_base, v_base, q_row, warp, lane, m, l, o);
  }

  // The warps' decoders merged (a warp with no position has l = 0 and is skipped).
  if (lane == 0) ml_sh[warp] = make_float2(m, l);
#pragma unroll
  for (int k = 0; k < EPL; ++k) o_sh[warp][lane * EPL + k] = o[k];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (ml_sh[w].y > 0.0f) M = fmaxf(M, ml_sh[w].x);
  }
  float f[kWarps], L = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    f[w] = ml_sh[w].y > 0.0f ? expf(ml_sh[w].x - M) : 0.0f;
    L = __fmaf_rn(ml_sh[w].y, f[w], L);
  }
  if (n_chunks == 1) {  // the whole row: normalised here, with the head's sink logit
    const float sink = g.sinks != nullptr ? g.sinks[h] : -INFINITY;
    const float M2 = fmaxf(M, sink);
    const float rescale = expf(M - M2);
    const float denom = __fmaf_rn(L, rescale, sink == -INFINITY ? 0.0f : expf(sink - M2));
    const float mul = rescale / denom;
    for (int e = tid; e < D; e += kThreads) {
      float a = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) a = __fmaf_rn(o_sh[w][e], f[w], a);
      g.out[(static_cast<int64_t>(t) * g.n_head + h) * D + e] = a * mul;
      o_sh[0][e] = a * mul;  // (element e is this thread's alone: read above, written here)
    }
    if (g.qs != nullptr) quantize_head_out<D>(g, t, h, o_sh[0]);
    return;
  }
  for (int e = tid; e < D; e += kThreads) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) a = __fmaf_rn(o_sh[w][e], f[w], a);
    acc[part * D + e] = a;
  }
  if (tid == 0) ml[part] = make_float2(M, L);
}

template <QuantType KV, int EPL>
void launch_lanes(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(g.n_head), static_cast<unsigned>(g.n_tokens));
  if (g.warp_lanes) {
    attn_decode_warps<KV, EPL, true><<<grid, kThreads, 0, stream>>>(g, chunk_len, n_chunks, ml, acc);
  } else {
    attn_decode_warps<KV, EPL, false><<<grid, kThreads, 0, stream>>>(g, chunk_len, n_chunks, ml, acc);
  }
}

}  // namespace

template <QuantType KV>
void launch_warps(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, cudaStream_t stream) {
  switch (g.D) {
    case 64: launch_lanes<KV, 2>(g, chunk_len, n_chunks, ml, acc, stream); break;
    case 128: launch_lanes<KV, 4>(g, chunk_len, n_chunks, ml, acc, stream); break;
    case 256: launch_lanes<KV, 8>(g, chunk_len, n_chunks, ml, acc, stream); break;
    default: MT_CHECK_MSG(false, "attention: no warps kernel for this head_dim");
  }
  MT_CUDA_CHECK_LAUNCH();
}

template void launch_warps<QuantType::F16>(const AttnGeom&, int, int, float2*, float*, cudaStream_t);
template void launch_warps<QuantType::Q8_0>(const AttnGeom&, int, int, float2*, float*, cudaStream_t);
template void launch_warps<QuantType::F32>(const AttnGeom&, int, int, float2*, float*, cudaStream_t);

}  // namespace mt::cuda::detail::decode
