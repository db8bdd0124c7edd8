// Decode attention (n_tokens <= kAttnDecodeMaxTokens): split-K flash decoding.
//
// The KV range [0, n_kv) is cut into chunks of chunk_len positions. A partial kernel
// computes, per (chunk, query head, token), the chunk's scores, their max m, the sum l of
// exp(s - m) and the unnormalised accumulator sum_j exp(s_j - m) v_j, in f32, into the
// workspace; a combine kernel merges the chunks of each (token, head) by rescaling to the
// global max: out = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M).
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
//    positions per warp at once, a lane per position. It lives in ops_attention_warps.cu
//    (its wo-row quantization too), the shared pieces in
//    ops_attention_decode.cuh.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_attention.cuh"
#include "cuda/kernels/ops_attention_decode.cuh"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda::detail {
namespace {

using namespace decode;  // (ops_attention_decode.cuh)

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

// Grid (n_chunks, n_head_kv * n_gb, n_tokens), n_gb = ceil(group / kGB). Partial
// p = (t * n_head + h) * n_chunks + c: ml[p] = (m, l), acc (p, D). A chunk past the
// query's causal end writes l = 0 (the combine skips it).
template <QuantType KV, int EPL>
__global__ void __launch_bounds__(kThreads)
    attn_decode_grouped(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc) {
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
    return;
  }
  const uint32_t j0 = span.jb;
  const int len = span.len;
  for (int i = tid; i < Gb * D; i += kThreads) {
    q_sh[i] = g.q[(static_cast<int64_t>(t) * g.n_head + h0 + i / D) * D + i % D];
  }
  __syncthreads();

  // Scores: thread j dots position j0 + j with the Gb queries.
  const uint8_t* k_base = token_k(g, t) + kvh * g.head_bytes;
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
  const uint8_t* v_base = token_v(g, t) + kvh * g.head_bytes;
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
}

// Grid (n_chunks, n_head, n_tokens); the partial layout of attn_decode_grouped.
template <QuantType KV>
__global__ void __launch_bounds__(kThreads)
    attn_decode_per_head(AttnGeom g, int chunk_len, int n_chunks, float2* ml, float* acc) {
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
    return;
  }
  const uint32_t j0 = span.jb;
  const int len = span.len;
  const int kvh = h / g.group;
  const float* q = g.q + (static_cast<int64_t>(t) * g.n_head + h) * D;
  for (int e = tid; e < D; e += kThreads) q_sh[e] = q[e];
  __syncthreads();

  // Scores: one warp per position, the lanes over the head's elements.
  const uint8_t* k_base = token_k(g, t) + kvh * g.head_bytes;
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
  const uint8_t* v_base = token_v(g, t) + kvh * g.head_bytes;
  for (int e = tid; e < D; e += kThreads) {
    float a = 0.0f;
    for (int j = 0; j < len; ++j) a += s_sh[j] * kv_load<KV>(v_base + (j0 + j) * g.row_bytes, e);
    acc[part * D + e] = a;
  }
  if (tid == 0) ml[part] = make_float2(m, l);
}

// Grid (n_head, n_tokens): block (h, t) merges that head's chunks (merge_stats, merge_element).
__global__ void __launch_bounds__(kThreads) attn_decode_combine(const float2* ml, const float* acc, int n_chunks,
                                                                int n_head, int D, const float* sinks, float* out) {
  const int h = blockIdx.x, t = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * n_head + h) * n_chunks;
  const float2 st = merge_stats(ml, base, n_chunks, sinks != nullptr ? sinks[h] : -INFINITY);
  for (int e = threadIdx.x; e < D; e += kThreads) {
    out[(static_cast<int64_t>(t) * n_head + h) * D + e] = merge_element(ml, acc, base, n_chunks, D, e, st);
  }
}

template <QuantType KV>
void launch_partial(const AttnGeom& g, const DecodeSplit& s, float2* ml, float* acc, cudaStream_t stream) {
  const unsigned chunks = static_cast<unsigned>(s.n_chunks), tokens = static_cast<unsigned>(g.n_tokens);
  const int n_gb = (g.group + kGB - 1) / kGB;
  const dim3 grouped(chunks, static_cast<unsigned>(g.n_head / g.group * n_gb), tokens);
  // The grouped kernel's vector loads need 16-byte aligned rows (2-byte for Q8_0).
  const uint64_t align = KV == QuantType::Q8_0 ? 2 : 16;
  const uint64_t bits = reinterpret_cast<uintptr_t>(g.k) | reinterpret_cast<uintptr_t>(g.v) | g.row_bytes;
  const bool aligned = bits % align == 0;
  if (s.warps) {  // (attention_decode chose it: head_dim 64, 128 or 256, vector-aligned)
    launch_warps<KV>(g, s.chunk_len, s.n_chunks, ml, acc, stream);
    return;
  }
  switch (aligned ? g.D : 0) {
    case 64: attn_decode_grouped<KV, 2><<<grouped, kThreads, 0, stream>>>(g, s.chunk_len, s.n_chunks, ml, acc); break;
    case 128: attn_decode_grouped<KV, 4><<<grouped, kThreads, 0, stream>>>(g, s.chunk_len, s.n_chunks, ml, acc); break;
    case 256: attn_decode_grouped<KV, 8><<<grouped, kThreads, 0, stream>>>(g, s.chunk_len, s.n_chunks, ml, acc); break;
    default:
      attn_decode_per_head<KV><<<dim3(chunks, static_cast<unsigned>(g.n_head), tokens), kThreads, 0, stream>>>(
          g, s.chunk_len, s.n_chunks, ml, acc);
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
  const int most = std::min(n_tokens, kAttnDecodeMaxSeqTokens);  // (several sequences' decode tokens)
  for (int t = 1; t <= most; ++t) bytes = std::max(bytes, split_bytes(t, n_head, head_dim, n_kv));
  return bytes;
}

bool attention_decode(QuantType kv_type, const AttnGeom& g, Workspace& ws, cudaStream_t stream) {
  MT_CHECK(g.n_tokens > 0 && g.D > 0 && g.D <= kMaxHeadDim);
  MT_CHECK(g.n_tokens <= (g.rows != nullptr ? kAttnDecodeMaxSeqTokens : kAttnDecodeMaxTokens));
  const uint32_t n_kv = g.pos_dev != nullptr || g.rows != nullptr ? g.n_kv_cap : g.pos0 + static_cast<uint32_t>(g.n_tokens);
  MT_CHECK(n_kv > 0);
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
  const size_t parts = static_cast<size_t>(g.n_tokens) * g.n_head * s.n_chunks;
  auto* ml = static_cast<float2*>(ws.take(parts * sizeof(float2)));
  auto* acc = static_cast<float*>(ws.take(parts * g.D * sizeof(float)));
  switch (kv_type) {
    case QuantType::F16: launch_partial<QuantType::F16>(gq, s, ml, acc, stream); break;
    case QuantType::Q8_0: launch_partial<QuantType::Q8_0>(gq, s, ml, acc, stream); break;
    case QuantType::F32: launch_partial<QuantType::F32>(gq, s, ml, acc, stream); break;
    default: MT_CHECK_MSG(false, "attention: KV cache type must be f16, q8_0 or f32");
  }
  if (s.warps && s.n_chunks == 1) return quantize;  // the output written by the partial launch
  attn_decode_combine<<<dim3(static_cast<unsigned>(g.n_head), static_cast<unsigned>(g.n_tokens)), kThreads, 0, stream>>>(
      ml, acc, s.n_chunks, g.n_head, g.D, g.sinks, g.out);
  MT_CUDA_CHECK_LAUNCH();
  return false;
}

}  // namespace mt::cuda::detail

