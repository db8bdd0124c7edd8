// Decode attention (n_tokens <= kAttnDecodeMaxTokens): split-K flash decoding.
//
// The KV range [0, n_kv) is cut into chunks of chunk_len positions. A partial kernel
// computes, per (chunk, query head, token), the chunk's scores, their max m, the sum l of
// exp(s - m) and the unnormalised accumulator sum_j exp(s_j - m) v_j, in f32, into the
// workspace; a combine kernel merges the chunks of each (token, head) by rescaling to the
// global max: out = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M). With counters
// (AttnGeom::counters) the merge is fused into the partial launch instead: each CTA counts
// itself done on its (token, head group)'s counter after a fence, and the CTA that counts
// last merges the group's heads with the combine kernel's code and resets the counter.
//
// Partial kernels:
//  * grouped (head_dim 64, 128, 256): one block per (chunk, KV head, up to kGB query
//    heads of its group, token), so each K and V row is read once for the query heads
//    sharing it. Scores: one thread per position, the row read in 8-element vectors and
//    dotted with the group's queries (broadcast from shared memory); softmax: one warp per
//    head; accumulators: warp w takes positions w, w + 4, ..., lane l holds elements
//    [l * EPL, (l + 1) * EPL) of every head, the four warps' sums added through shared
//    memory at the end.
//  * per head (any head_dim <= 256): one block per (chunk, head, token), a warp per
//    position for the scores, a thread per element for the accumulator.
//  * warps (head_dim 64, 128, 256; AttnGeom::warp_max, short contexts): one block per
//    (chunk, head, token) and every warp a flash decoder of its own: warp w takes the
//    chunk's positions in groups of kWarpGroup (w, w + kWarps, ... as groups), lane l holds
//    elements [l * EPL, (l + 1) * EPL) of q, of each K and V row it loads and of its
//    accumulator, a group's scores are warp sums, the softmax is online (running max and
//    sum), and the four warps merge in shared memory. No phase waits on another warp
//    until that merge, and a group's loads are independent of the previous group's
//    arithmetic, so its latency is about one pass over the chunk's rows: a short context
//    at one token is latency, not bytes (the grouped kernel's serial phases took ~10 us
//    at 7 positions on the H200). One chunk (n_kv <= kMaxChunk) writes the normalised
//    output itself: no merge launch. Its lanes form (AttnGeom::warp_lanes) scores 32
//    positions per warp at once, a lane per position (see the kernel).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/act_quant.cuh"
#include "cuda/ops.h"
#include "cuda/ops_attention.cuh"
#include "cuda/ops_device.cuh"
#include "cuda/pdl.h"
#include "cuda/ops_reduce.cuh"

namespace mt::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunk = 256;                 // positions per chunk at most (score buffers)
constexpr int kMinChunk = 32;
constexpr int64_t kTargetBlocks = 256;         // enough blocks to fill an H200 twice
constexpr int kGB = 8;                         // query heads per grouped block
constexpr int kWarpGroup = 4;                  // positions a warp of the warps kernel scores together

struct DecodeSplit {
  int chunk_len;  // positions per chunk, a multiple of 32, <= kMaxChunk
  int n_chunks;   // ceil(n_kv / chunk_len)
  int64_t bound;  // chunks the workspace holds: >= n_chunks, non-decreasing in n_kv
  bool warps = false;  // the warps kernel (chunks of kMaxChunk, or one)
};

// Chunks for n_kv positions: at least n_kv / kMaxChunk, more (down to kMinChunk positions
// each) while the grid has fewer than kTargetBlocks blocks. Rows per chunk are counted as
// n_tokens * ceil(n_head / kGB), a lower bound of either kernel's blocks per chunk, so the
// split depends on the call's shapes only through n_tokens, n_head and n_kv.
DecodeSplit decode_split(int n_tokens, int n_head, uint32_t n_kv) {
  const int64_t kv = n_kv > 0 ? n_kv : 1;
  const int64_t fewest = (kv + kMaxChunk - 1) / kMaxChunk;
  const int64_t most = (kv + kMinChunk - 1) / kMinChunk;
  const int64_t rows = static_cast<int64_t>(n_tokens) * ((n_head + kGB - 1) / kGB);
  const int64_t want = (kTargetBlocks + rows - 1) / rows;
  const int64_t bound = std::max(fewest, std::min(most, want));
  const int64_t len = ((kv + bound - 1) / bound + 31) / 32 * 32;  // <= kMaxChunk as bound >= fewest
  return {static_cast<int>(len), static_cast<int>((kv + len - 1) / len), bound};
}

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
// is zero; -inf: no sink). Partials are read past L1: in the fused merge other CTAs wrote
// them.
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

// The fused merge, called by every thread of a partial CTA after its partials are
// written: the CTA's count on counters[blockIdx.z * gridDim.y + blockIdx.y] (its token and
// head group) after a fence; the CTA that counts the group's n_chunks-th merges heads h0
// .. h0 + n_heads - 1 (n_heads <= kGB) of token t into g.out and resets the counter.
__device__ __forceinline__ void merge_if_last(const AttnGeom& g, const float2* ml, const float* acc, int n_chunks,
                                              int t, int h0, int n_heads) {
  __shared__ bool last;
  __shared__ float2 stats[kGB];
  // One chunk (single_chunk_max): this CTA is the group's only one; the barrier makes its
  // partials visible to its own threads, no fence or count needed.
  const bool alone = n_chunks == 1;
  if (!alone) __threadfence();  // this thread's partials are visible device-wide before the CTA is counted
  __syncthreads();
  uint32_t* counter = g.counters + static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = alone || atomicAdd(counter, 1u) == static_cast<uint32_t>(n_chunks - 1);
  __syncthreads();
  if (!last) return;  // uniform over the CTA
  if (!alone) __threadfence();  // the other CTAs' partials are seen after their counts
  const int64_t base0 = (static_cast<int64_t>(t) * g.n_head + h0) * n_chunks;
  if (threadIdx.x < n_heads) {
    const float sink = g.sinks != nullptr ? g.sinks[h0 + threadIdx.x] : -INFINITY;
    stats[threadIdx.x] = merge_stats(ml, base0 + static_cast<int64_t>(threadIdx.x) * n_chunks, n_chunks, sink);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < n_heads * g.D; idx += kThreads) {
    const int i = idx / g.D, e = idx % g.D;
    g.out[(static_cast<int64_t>(t) * g.n_head + h0 + i) * g.D + e] =
        merge_element(ml, acc, base0 + static_cast<int64_t>(i) * n_chunks, n_chunks, g.D, e, stats[i]);
  }
  if (threadIdx.x == 0 && !alone) *counter = 0;
}

// Positions query t sees: [0, pos0 + t + 1), pos0 read on the device when the step is a
// replayed graph (then the split was sized for n_kv_cap; more positions than its chunks
// cover is a broken invariant).
__device__ __forceinline__ uint32_t query_n_kv(const AttnGeom& g, int t, int chunk_len, int n_chunks) {
  const uint32_t pos0 = g.pos_dev != nullptr ? *g.pos_dev : g.pos0;
  const uint32_t n_kv = pos0 + static_cast<uint32_t>(t) + 1;
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

// Grid (n_chunks, n_head_kv * n_gb, n_tokens), n_gb = ceil(group / kGB). Partial
// p = (t * n_head + h) * n_chunks + c: ml[p] = (m, l), acc (p, D). A chunk past the
// query's causal end writes l = 0 (the combine skips it).
template <QuantType KV, int EPL>
__global__ void __launch_bounds__(kThreads)
    attn_decode_grouped(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc) {
  pdl_start();  // (cuda/pdl.h: launched dependent)
  constexpr int D = 32 * EPL;
  // q (kGB, D) and scores (kGB, kMaxChunk) first; after the last read of both, the
  // warps' accumulators (kWarps, kGB, D) over the same memory.
  constexpr int kSmem = std::max(2 * kGB * kMaxHeadDim, kWarps * kGB * D);
  __shared__ float4 smem4[kSmem / 4];
  __shared__ float2 ml_sh[kGB];
  float* q_sh = reinterpret_cast<float*>(smem4);
  float* s_sh = q_sh + kGB * D;
  float* o_sh = reinterpret_cast<float*>(smem4);

  const int c = blockIdx.x, t = blockIdx.z;
  const int n_gb = (g.group + kGB - 1) / kGB;
  const int kvh = blockIdx.y / n_gb, gb = blockIdx.y % n_gb;
  const int h0 = kvh * g.group + gb * kGB;                 // the block's first query head
  const int Gb = min(kGB, g.group - gb * kGB);             // its query heads
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t part0 = (static_cast<int64_t>(t) * g.n_head + h0) * n_chunks + c;  // head h0 + i: + i * n_chunks
  const uint32_t n_kv = query_n_kv(g, t, chunk_len, n_chunks);
  const ChunkSpan span = chunk_span(g, n_kv, c, chunk_len);
  if (span.len == 0) {  // uniform over the block, before any barrier
    if (tid < Gb) ml[part0 + static_cast<int64_t>(tid) * n_chunks] = make_float2(-INFINITY, 0.0f);
    if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h0, Gb);
    return;
  }
  const uint32_t j0 = span.jb;
  const int len = span.len;
  for (int i = tid; i < Gb * D; i += kThreads) {
    q_sh[i] = g.q[(static_cast<int64_t>(t) * g.n_head + h0 + i / D) * D + i % D];
  }
  __syncthreads();

  // Scores: thread j dots position j0 + j with the Gb queries.
  const uint8_t* k_base = g.k + kvh * g.head_bytes;
  for (int j = tid; j < len; j += kThreads) {
    const uint8_t* row = k_base + (j0 + j) * g.row_bytes;
    float dot[kGB];
#pragma unroll
    for (int i = 0; i < kGB; ++i) dot[i] = 0.0f;
#pragma unroll 2
    for (int e = 0; e < D; e += 8) {
      float kx[8];
      kv_load_n<KV, 8>(row, e, kx);
#pragma unroll
      for (int i = 0; i < kGB; ++i) {
        if (i < Gb) {
          const float4 qa = *reinterpret_cast<const float4*>(q_sh + i * D + e);
          const float4 qb = *reinterpret_cast<const float4*>(q_sh + i * D + e + 4);
          dot[i] += qa.x * kx[0] + qa.y * kx[1] + qa.z * kx[2] + qa.w * kx[3] + qb.x * kx[4] + qb.y * kx[5] +
                    qb.z * kx[6] + qb.w * kx[7];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kGB; ++i) {
      if (i < Gb) s_sh[i * kMaxChunk + j] = dot[i] * g.scale;
    }
  }
  __syncthreads();

  // Softmax statistics: warp w takes heads w, w + kWarps, ...
  for (int i = warp; i < Gb; i += kWarps) {
    float* s = s_sh + i * kMaxChunk;
    float m = -INFINITY;
    for (int j = lane; j < len; j += 32) m = fmaxf(m, s[j]);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < len; j += 32) {
      const float p = expf(s[j] - m);
      s[j] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) ml_sh[i] = make_float2(m, l);
  }
  __syncthreads();

  // Accumulators: warp w over positions w, w + kWarps, ...; lane over its EPL elements.
  float o[kGB][EPL];
#pragma unroll
  for (int i = 0; i < kGB; ++i) {
#pragma unroll
    for (int k = 0; k < EPL; ++k) o[i][k] = 0.0f;
  }
  const uint8_t* v_base = g.v + kvh * g.head_bytes;
#pragma unroll 4
  for (int j = warp; j < len; j += kWarps) {
    float vx[EPL];
    kv_load_n<KV, EPL>(v_base + (j0 + j) * g.row_bytes, lane * EPL, vx);
#pragma unroll
    for (int i = 0; i < kGB; ++i) {
      if (i < Gb) {
        const float p = s_sh[i * kMaxChunk + j];
#pragma unroll
        for (int k = 0; k < EPL; ++k) o[i][k] += p * vx[k];
      }
    }
  }
  __syncthreads();  // every read of q_sh and s_sh is done: o_sh may overwrite them
#pragma unroll
  for (int i = 0; i < kGB; ++i) {
    if (i < Gb) {
#pragma unroll
      for (int k = 0; k < EPL; ++k) o_sh[(warp * kGB + i) * D + lane * EPL + k] = o[i][k];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < Gb * D; idx += kThreads) {
    const int i = idx / D, e = idx % D;
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) a += o_sh[(w * kGB + i) * D + e];
    acc[(part0 + static_cast<int64_t>(i) * n_chunks) * D + e] = a;
  }
  if (tid < Gb) ml[part0 + static_cast<int64_t>(tid) * n_chunks] = ml_sh[tid];
  if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h0, Gb);
}

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

// Grid (n_chunks, n_head, n_tokens); the partial layout of attn_decode_grouped.
template <QuantType KV>
__global__ void __launch_bounds__(kThreads)
    attn_decode_per_head(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc) {
  pdl_start();  // (cuda/pdl.h: launched dependent)
  __shared__ float q_sh[kMaxHeadDim];
  __shared__ float s_sh[kMaxChunk];
  __shared__ float scratch[32];
  const int c = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int D = g.D;
  const int64_t part = (static_cast<int64_t>(t) * g.n_head + h) * n_chunks + c;
  const uint32_t n_kv = query_n_kv(g, t, chunk_len, n_chunks);  // this query sees [first key, n_kv)
  const ChunkSpan span = chunk_span(g, n_kv, c, chunk_len);
  if (span.len == 0) {  // uniform over the block, before any barrier
    if (tid == 0) ml[part] = make_float2(-INFINITY, 0.0f);
    if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h, 1);
    return;
  }
  const uint32_t j0 = span.jb;
  const int len = span.len;
  const int kvh = h / g.group;
  const float* q = g.q + (static_cast<int64_t>(t) * g.n_head + h) * D;
  for (int e = tid; e < D; e += kThreads) q_sh[e] = q[e];
  __syncthreads();

  // Scores: one warp per position, the lanes over the head's elements.
  const uint8_t* k_base = g.k + kvh * g.head_bytes;
  for (int j = warp; j < len; j += kWarps) {
    const uint8_t* row = k_base + (j0 + j) * g.row_bytes;
    float dot = 0.0f;
    for (int e = lane; e < D; e += 32) dot += q_sh[e] * kv_load<KV>(row, e);
    dot = warp_sum(dot);
    if (lane == 0) s_sh[j] = dot * g.scale;
  }
  __syncthreads();

  float m = -INFINITY;
  for (int j = tid; j < len; j += kThreads) m = fmaxf(m, s_sh[j]);
  m = block_max(m, scratch);
  float l = 0.0f;
  for (int j = tid; j < len; j += kThreads) {
    const float p = expf(s_sh[j] - m);
    s_sh[j] = p;
    l += p;
  }
  l = block_sum(l, scratch);  // its barriers also publish the s_sh writes above

  // Accumulator: one thread per element, the chunk's positions in order.
  const uint8_t* v_base = g.v + kvh * g.head_bytes;
  for (int e = tid; e < D; e += kThreads) {
    float a = 0.0f;
    for (int j = 0; j < len; ++j) a += s_sh[j] * kv_load<KV>(v_base + (j0 + j) * g.row_bytes, e);
    acc[part * D + e] = a;
  }
  if (tid == 0) ml[part] = make_float2(m, l);
  if (g.counters != nullptr) merge_if_last(g, ml, acc, n_chunks, t, h, 1);
}

// Grid (n_head, n_tokens): block (h, t) merges that head's chunks (merge_stats, merge_element).
__global__ void __launch_bounds__(kThreads) attn_decode_combine(const float2* ml, const float* acc, int n_chunks,
                                                                int n_head, int D, const float* sinks, float* out) {
  pdl_start();  // (cuda/pdl.h: launched dependent)
  const int h = blockIdx.x, t = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * n_head + h) * n_chunks;
  const float2 st = merge_stats(ml, base, n_chunks, sinks != nullptr ? sinks[h] : -INFINITY);
  for (int e = threadIdx.x; e < D; e += kThreads) {
    out[(static_cast<int64_t>(t) * n_head + h) * D + e] = merge_element(ml, acc, base, n_chunks, D, e, st);
  }
}

// The warps kernel's prep in its launch (AttentionArgs::prep): one token, D <= kThreads.
struct InLaunchPrep {
  const AttnPrepArgs* a = nullptr;  // null: none
  float theta_scale = 1.0f;
  bool early = false;
};

template <QuantType KV>
void launch_partial(const AttnGeom& g, const DecodeSplit& s, float2* ml, float* acc, const InLaunchPrep& prep,
                    cudaStream_t stream) {
  const unsigned chunks = static_cast<unsigned>(s.n_chunks), tokens = static_cast<unsigned>(g.n_tokens);
  const int n_gb = (g.group + kGB - 1) / kGB;
  const dim3 grouped(chunks, static_cast<unsigned>(g.n_head / g.group * n_gb), tokens);
  // The grouped kernel's vector loads need 16-byte aligned rows (2-byte for Q8_0).
  const uint64_t align = KV == QuantType::Q8_0 ? 2 : 16;
  const uint64_t bits = reinterpret_cast<uintptr_t>(g.k) | reinterpret_cast<uintptr_t>(g.v) | g.row_bytes;
  const bool aligned = bits % align == 0;
  if (s.warps) {  // (attention_decode chose it: head_dim 64, 128 or 256, vector-aligned)
    const dim3 per_head(chunks, static_cast<unsigned>(g.n_head), tokens);
    const AttnPrepArgs pa = prep.a != nullptr ? *prep.a : AttnPrepArgs{};
    auto launch = [&](auto kernel) {
      launch_dependent(kernel, per_head, dim3(kThreads), 0, stream, g, s.chunk_len, s.n_chunks, ml, acc, pa,
                       prep.theta_scale, prep.early);
    };
    // (the prep forms: head_dim 64 and 128, one token; attention_decode checked)
    switch (g.D * (g.warp_lanes ? -1 : 1) * (prep.a != nullptr ? 1000 : 1)) {
      case 64: launch(attn_decode_warps<KV, 2, false, false>); break;
      case 128: launch(attn_decode_warps<KV, 4, false, false>); break;
      case 256: launch(attn_decode_warps<KV, 8, false, false>); break;
      case -64: launch(attn_decode_warps<KV, 2, true, false>); break;
      case -128: launch(attn_decode_warps<KV, 4, true, false>); break;
      case -256: launch(attn_decode_warps<KV, 8, true, false>); break;
      case 64000: launch(attn_decode_warps<KV, 2, false, true>); break;
      case 128000: launch(attn_decode_warps<KV, 4, false, true>); break;
      case -64000: launch(attn_decode_warps<KV, 2, true, true>); break;
      case -128000: launch(attn_decode_warps<KV, 4, true, true>); break;
      default: MT_CHECK_MSG(false, "attention: no warps kernel for this head_dim");
    }
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (aligned ? g.D : 0) {
    case 64: launch_dependent(attn_decode_grouped<KV, 2>, grouped, dim3(kThreads), 0, stream, g, s.chunk_len, s.n_chunks, ml, acc); break;
    case 128: launch_dependent(attn_decode_grouped<KV, 4>, grouped, dim3(kThreads), 0, stream, g, s.chunk_len, s.n_chunks, ml, acc); break;
    case 256: launch_dependent(attn_decode_grouped<KV, 8>, grouped, dim3(kThreads), 0, stream, g, s.chunk_len, s.n_chunks, ml, acc); break;
    default:
      launch_dependent(attn_decode_per_head<KV>, dim3(chunks, static_cast<unsigned>(g.n_head), tokens), dim3(kThreads), 0,
                       stream, g, s.chunk_len, s.n_chunks, ml, acc);
  }
  MT_CUDA_CHECK_LAUNCH();
}

size_t split_bytes(int n_tokens, int n_head, int head_dim, uint32_t n_kv) {
  const size_t parts = static_cast<size_t>(n_tokens) * n_head * decode_split(n_tokens, n_head, n_kv).bound;
  const size_t ml = parts * sizeof(float2), acc = parts * head_dim * sizeof(float);
  return (ml + 255) / 256 * 256 + (acc + 255) / 256 * 256 + 256;  // two 256-aligned takes
}

}  // namespace

size_t attention_decode_workspace_bytes(int n_tokens, int n_head, int head_dim, uint32_t n_kv) {
  size_t bytes = 0;
  const int most = std::min(n_tokens, kAttnDecodeMaxTokens);
  for (int t = 1; t <= most; ++t) bytes = std::max(bytes, split_bytes(t, n_head, head_dim, n_kv));
  return bytes;
}

bool attention_decode(QuantType kv_type, const AttnGeom& g, Workspace& ws, cudaStream_t stream,
                      const AttnPrepArgs* prep) {
  MT_CHECK(g.n_tokens > 0 && g.n_tokens <= kAttnDecodeMaxTokens && g.D > 0 && g.D <= kMaxHeadDim);
  const uint32_t n_kv = g.pos_dev != nullptr ? g.n_kv_cap : g.pos0 + static_cast<uint32_t>(g.n_tokens);
  MT_CHECK(n_kv > 0);
  // A counter per (token, head group): at most one per (token, query head).
  MT_CHECK(g.counters == nullptr || static_cast<int64_t>(g.n_tokens) * g.n_head <= kAttnDecodeCounters);
  DecodeSplit s = decode_split(g.n_tokens, g.n_head, n_kv);
  // The warps kernel's vector loads: 16-byte aligned q and rows (2-byte for Q8_0 rows).
  const uint64_t kv_align = kv_type == QuantType::Q8_0 ? 2 : 16;
  const bool warp_shape = (g.D == 64 || g.D == 128 || g.D == 256) && reinterpret_cast<uintptr_t>(g.q) % 16 == 0 &&
                          (reinterpret_cast<uintptr_t>(g.k) | reinterpret_cast<uintptr_t>(g.v) | g.row_bytes) % kv_align == 0;
  if (g.warp_max > 0 && n_kv <= g.warp_max && warp_shape) {
    // Chunks of kMaxChunk (at most decode_split's bound: its fewest), one up to kMaxChunk
    // positions (that one writes the output: no merge).
    s.chunk_len = n_kv <= static_cast<uint32_t>(kMaxChunk) ? static_cast<int>((n_kv + 31) / 32 * 32) : kMaxChunk;
    s.n_chunks = static_cast<int>((n_kv + s.chunk_len - 1) / s.chunk_len);
    s.warps = true;
  } else if (g.single_chunk_max > 0 && n_kv <= g.single_chunk_max) {  // one chunk: fewer parts than the bound
    MT_CHECK(g.single_chunk_max <= static_cast<uint32_t>(kMaxChunk));
    s.chunk_len = static_cast<int>((n_kv + 31) / 32 * 32);
    s.n_chunks = 1;
  }
  // The output rows quantized in the launch: the warps kernel in one chunk, whole blocks
  // within a head or whole heads within a block, a counter per block of a row.
  AttnGeom gq = g;
  const int qblock = g.qmode == ActQuant::kQ8_K ? 256 : 32;
  const int64_t row_elems = static_cast<int64_t>(g.n_head) * g.D;
  const bool quantize = g.qs != nullptr && g.qmeta != nullptr && s.warps && s.n_chunks == 1 &&
                        (g.D % qblock == 0 || (qblock % g.D == 0 && g.qcounters != nullptr &&
                                               static_cast<int64_t>(g.n_tokens) * (row_elems / qblock) <= kAttnDecodeCounters)) &&
                        row_elems % qblock == 0;
  if (!quantize) gq.qs = nullptr;
  // The prep in the warps kernel's launch where it takes it (one token, a thread per
  // element, the call's cache), else its own launch first.
  InLaunchPrep in_launch;
  if (prep != nullptr) {
    const float theta_scale = attn_prep_theta_scale(*prep);  // (its checks)
    MT_CHECK(prep->n_tokens == g.n_tokens && prep->n_head == g.n_head && prep->head_dim == g.D &&
             prep->n_head_kv * g.group == g.n_head && prep->kv_type == kv_type && prep->row_bytes == g.row_bytes &&
             prep->k_cache == g.k && prep->v_cache == g.v && prep->pos_dev == g.pos_dev &&
             (g.pos_dev != nullptr || prep->pos0 == g.pos0));
    if (s.warps && g.n_tokens == 1 && g.D <= kThreads) {
      in_launch = {prep, theta_scale, early_loads_on()};
    } else {
      attn_prep(*prep, stream);
    }
  }
  const size_t parts = static_cast<size_t>(g.n_tokens) * g.n_head * s.n_chunks;
  auto* ml = static_cast<float2*>(ws.take(parts * sizeof(float2)));
  auto* acc = static_cast<float*>(ws.take(parts * g.D * sizeof(float)));
  switch (kv_type) {
    case QuantType::F16: launch_partial<QuantType::F16>(gq, s, ml, acc, in_launch, stream); break;
    case QuantType::Q8_0: launch_partial<QuantType::Q8_0>(gq, s, ml, acc, in_launch, stream); break;
    case QuantType::F32: launch_partial<QuantType::F32>(gq, s, ml, acc, in_launch, stream); break;
    default: MT_CHECK_MSG(false, "attention: KV cache type must be f16, q8_0 or f32");
  }
  if (g.counters != nullptr || (s.warps && s.n_chunks == 1)) return quantize;  // merged in the partial launch
  launch_dependent(attn_decode_combine, dim3(static_cast<unsigned>(g.n_head), static_cast<unsigned>(g.n_tokens)),
                   dim3(kThreads), 0, stream, ml, acc, s.n_chunks, g.n_head, g.D, g.sinks, g.out);
  MT_CUDA_CHECK_LAUNCH();
  return false;
}

}  // namespace mt::cuda::detail
