// The warps kernel of decode attention (see ops_attention_decode.cu's overview): a CTA per
// (chunk, query head, token), each warp an online-softmax decoder over its positions, the
// four warps merged in shared memory; one chunk writes the normalised output itself (and,
// AttnGeom::qs set, its rows quantized for the output projection). Its lanes form scores
// 32 positions per warp at once, a lane per position; its prep form (AttentionArgs::prep)
// preps the token's heads and new K / V rows in the same launch.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/act_quant.cuh"
#include "cuda/check.h"
#include "cuda/ops_attention_decode.cuh"
#include "cuda/ops_device.cuh"
#include "cuda/ops_reduce.cuh"
#include "cuda/pdl.h"

namespace mt::cuda::detail::decode {
namespace {

// The warps kernel in one chunk, AttnGeom::qs set: head h's output of token t (out_sh, D
// floats of this CTA's shared memory, also in g.out) quantized in g.qmode into the row's
// quants, as cuda/act_quant.cuh's routines quantize any row. A block within the head: this
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

// The prep in the warps kernel's launch (AttentionArgs::prep; one token, head_dim D <=
// kThreads): thread e takes element e as attn_prep_kernel does (bias, head_norm_rope,
// the cache's rounding), for query head h into q_out (D floats) and, has_new (this
// chunk holds the token's position pos), for KV head kvh's new K and V rows into k_new /
// v_new (the head's slice of a cache row, in the cache's bytes), also stored into the
// cache where `store`. Every thread of the CTA calls it; it ends with a barrier.
template <QuantType KV, int D>
__device__ __forceinline__ void prep_in_launch(const AttnPrepArgs& a, float theta_scale, bool early, int h, int kvh,
                                               uint32_t pos, bool has_new, bool store, float* q_out, uint8_t* k_new,
                                               uint8_t* v_new, float* head_sh, double* scratch) {
  static_assert(D <= kThreads, "a thread per element");
  const int e = threadIdx.x;
  const bool live = e < D;
  const RopeArgs rope{a.n_rot, theta_scale, a.freq_scale, a.attn_factor, a.yarn_ext,
                      a.yarn_lo, a.yarn_hi, a.yarn_mscale, a.neox};
  float v = 0.0f;
  if (live) {
    v = a.q_src[h * D + e];
    if (a.bq != nullptr) v += a.bq[h * D + e];
  }
  v = head_norm_rope(v, e, D, a.q_norm, a.eps, &rope, pos, head_sh, scratch, early);
  if (live) q_out[e] = v;
  if (has_new) {  // uniform over the CTA
    for (int kind = 0; kind < 2; ++kind) {
      const bool is_k = kind == 0;
      const float* src = is_k ? a.k_src : a.v_src;
      const float* bias = is_k ? a.bk : a.bv;
      float x = 0.0f;
      if (live) {
        x = src[kvh * D + e];
        if (bias != nullptr) x += bias[kvh * D + e];
      }
      x = head_norm_rope(x, e, D, is_k ? a.k_norm : nullptr, a.eps, is_k ? &rope : nullptr, pos, head_sh, scratch, early);
      uint8_t* row_sh = is_k ? k_new : v_new;  // the KV head's slice of the row
      uint8_t* row_g = store ? (is_k ? a.k_cache : a.v_cache) + static_cast<uint64_t>(pos) * a.row_bytes +
                                   static_cast<uint64_t>(kvh) * (KV == QuantType::Q8_0 ? D / 32 * 34 : D * (KV == QuantType::F32 ? 4 : 2))
                             : nullptr;
      if constexpr (KV == QuantType::F16) {
        if (live) {
          const __half hv = __float2half_rn(x);
          reinterpret_cast<__half*>(row_sh)[e] = hv;
          if (row_g != nullptr) reinterpret_cast<__half*>(row_g)[e] = hv;
        }
      } else if constexpr (KV == QuantType::F32) {
        if (live) {
          reinterpret_cast<float*>(row_sh)[e] = x;
          if (row_g != nullptr) reinterpret_cast<float*>(row_g)[e] = x;
        }
      } else {  // Q8_0: a warp per 32-element block (D a multiple of 32: whole warps)
        if (live) {
          float d;
          const int q = q8_0_code(x, &d);
          const int off = (e / 32) * 34;
          if ((e & 31) == 0) *reinterpret_cast<__half*>(row_sh + off) = __float2half_rn(d);
          row_sh[off + 2 + (e & 31)] = static_cast<uint8_t>(static_cast<int8_t>(q));
          if (row_g != nullptr) {
            if ((e & 31) == 0) *reinterpret_cast<__half*>(row_g + off) = __float2half_rn(d);
            row_g[off + 2 + (e & 31)] = static_cast<uint8_t>(static_cast<int8_t>(q));
          }
        }
      }
    }
  }
  __syncthreads();
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

// Grid (n_chunks, n_head, n_tokens): the warps kernel (see the top). Partials in
// attn_decode_grouped's layout; n_chunks == 1: the output row itself, sink included.
// kLanes (AttnGeom::warp_lanes): a warp takes rounds of 32 positions, lane l scoring
// position l of the round over the whole head (q broadcast from shared memory), so a
// round's scores need one max and one sum reduction instead of a warp sum per position;
// the values then go as before, each position's p shuffled from its lane. Chunks of at
// most 32 positions keep the plain form.
// kPrep (AttentionArgs::prep, one token, D <= kThreads): the CTA preps its query head and,
// where its chunk holds the new position, its KV head's new rows first (prep_in_launch);
// the new position's K / V rows are then read from shared memory, the others from the cache.
template <QuantType KV, int EPL, bool kLanes, bool kPrep>
__global__ void __launch_bounds__(kThreads)
    attn_decode_warps(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc, AttnPrepArgs pa,
                      float theta_scale, bool early) {
  pdl_start();  // (cuda/pdl.h: launched dependent)
  constexpr int D = 32 * EPL;
  constexpr int kRowBytes = KV == QuantType::Q8_0 ? D / 32 * 34 : D * (KV == QuantType::F32 ? 4 : 2);
  __shared__ float o_sh[kWarps][D];
  __shared__ float2 ml_sh[kWarps];
  __shared__ float4 q_sh4[kLanes ? D / 4 : 1];
  __shared__ __align__(16) float q_prep[kPrep ? D : 1];
  __shared__ __align__(16) uint8_t kv_new[2][kPrep ? kRowBytes : 1];  // the new position's K and V head rows
  __shared__ float head_sh[kPrep ? D : 1];
  __shared__ double scratch_d[kPrep ? 32 : 1];
  const int c = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t part = (static_cast<int64_t>(t) * g.n_head + h) * n_chunks + c;
  const uint32_t n_kv = query_n_kv(g, t, chunk_len, n_chunks);
  const ChunkSpan span = chunk_span(g, n_kv, c, chunk_len);
  if (span.len == 0) {  // uniform over the block, before any barrier (n_chunks > 1 only)
    if (tid == 0) ml[part] = make_float2(-INFINITY, 0.0f);
    if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h, 1);
    return;
  }
  const int kvh = h / g.group;
  const float* q_row = g.q + (static_cast<int64_t>(t) * g.n_head + h) * D;
  const uint8_t* k_base = g.k + kvh * g.head_bytes + static_cast<uint64_t>(span.jb) * g.row_bytes;
  const uint8_t* v_base = g.v + kvh * g.head_bytes + static_cast<uint64_t>(span.jb) * g.row_bytes;
  int new_j = -1;  // kPrep: the new position's index in the chunk (-1: not in it)
  if constexpr (kPrep) {
    const uint32_t pos = n_kv - 1;  // the token's position (one token)
    const bool has_new = pos >= span.jb && pos < span.jb + static_cast<uint32_t>(span.len);
    new_j = has_new ? static_cast<int>(pos - span.jb) : -1;
    prep_in_launch<KV, D>(pa, theta_scale, early, h, kvh, pos, has_new, has_new && h % g.group == 0, q_prep, kv_new[0],
                          kv_new[1], head_sh, scratch_d);
    q_row = q_prep;
  }
  // Row j of the chunk (kPrep: the new position's from shared memory).
  auto k_row = [&](int j) -> const uint8_t* {
    return kPrep && j == new_j ? kv_new[0] : k_base + static_cast<uint64_t>(j) * g.row_bytes;
  };
  auto v_row = [&](int j) -> const uint8_t* {
    return kPrep && j == new_j ? kv_new[1] : v_base + static_cast<uint64_t>(j) * g.row_bytes;
  };

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
    for (int jr = warp * 32; jr < span.len; jr += kWarps * 32) {
      const int j = jr + lane;
      const bool live = j < span.len;
      const float s = live ? lane_score<KV, D>(k_row(j), q_sh4) * g.scale : -INFINITY;
      const float mx = fmaxf(m, warp_max(s));  // finite: lane 0's position is in the chunk
      const float corr = expf(m - mx);         // m = -inf at the first round: 0
      const float p = live ? expf(s - mx) : 0.0f;
      l = __fmaf_rn(l, corr, warp_sum(p));
#pragma unroll
      for (int k = 0; k < EPL; ++k) o[k] *= corr;
      const int n = min(32, span.len - jr);  // uniform over the warp
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
  } else {
    float q[EPL];
    kv_load_n<QuantType::F32, EPL>(reinterpret_cast<const uint8_t*>(q_row), lane * EPL, q);
#pragma unroll 2
    for (int j0 = warp * kWarpGroup; j0 < span.len; j0 += kWarps * kWarpGroup) {
      float s[kWarpGroup];
      float vx[kWarpGroup][EPL];
#pragma unroll
      for (int i = 0; i < kWarpGroup; ++i) {
        s[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < EPL; ++k) vx[i][k] = 0.0f;
        if (j0 + i < span.len) {  // uniform over the warp
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
        s[i] = j0 + i < span.len ? warp_sum(s[i]) * g.scale : -INFINITY;
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
  if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h, 1);
}

template <QuantType KV, int EPL, bool kLanes>
void launch_form(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, const InLaunchPrep& prep,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(g.n_head), static_cast<unsigned>(g.n_tokens));
  const AttnPrepArgs pa = prep.a != nullptr ? *prep.a : AttnPrepArgs{};
  if constexpr (32 * EPL <= kThreads) {  // the prep forms: a thread per element
    if (prep.a != nullptr) {
      launch_dependent(attn_decode_warps<KV, EPL, kLanes, true>, grid, dim3(kThreads), 0, stream, g, chunk_len, n_chunks,
                       ml, acc, pa, prep.theta_scale, prep.early);
      return;
    }
  }
  MT_CHECK_MSG(prep.a == nullptr, "attention: no in-launch prep for this head_dim");
  launch_dependent(attn_decode_warps<KV, EPL, kLanes, false>, grid, dim3(kThreads), 0, stream, g, chunk_len, n_chunks, ml,
                   acc, pa, prep.theta_scale, prep.early);
}

template <QuantType KV, int EPL>
void launch_lanes(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, const InLaunchPrep& prep,
                  cudaStream_t stream) {
  if (g.warp_lanes) {
    launch_form<KV, EPL, true>(g, chunk_len, n_chunks, ml, acc, prep, stream);
  } else {
    launch_form<KV, EPL, false>(g, chunk_len, n_chunks, ml, acc, prep, stream);
  }
}

}  // namespace

template <QuantType KV>
void launch_warps(const AttnGeom& g, int chunk_len, int n_chunks, float2* ml, float* acc, const InLaunchPrep& prep,
                  cudaStream_t stream) {
  switch (g.D) {
    case 64: launch_lanes<KV, 2>(g, chunk_len, n_chunks, ml, acc, prep, stream); break;
    case 128: launch_lanes<KV, 4>(g, chunk_len, n_chunks, ml, acc, prep, stream); break;
    case 256: launch_lanes<KV, 8>(g, chunk_len, n_chunks, ml, acc, prep, stream); break;
    default: MT_CHECK_MSG(false, "attention: no warps kernel for this head_dim");
  }
  MT_CUDA_CHECK_LAUNCH();
}

template void launch_warps<QuantType::F16>(const AttnGeom&, int, int, float2*, float*, const InLaunchPrep&, cudaStream_t);
template void launch_warps<QuantType::Q8_0>(const AttnGeom&, int, int, float2*, float*, const InLaunchPrep&, cudaStream_t);
template void launch_warps<QuantType::F32>(const AttnGeom&, int, int, float2*, float*, const InLaunchPrep&, cudaStream_t);

}  // namespace mt::cuda::detail::decode
