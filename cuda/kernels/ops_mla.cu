// Multi-head latent attention (cuda/kernels/ops_mla.h mla_attention): the MQA of every head over
// the latent rows (the rows' preparation: ops_mla_prep.cu).
//
// mla_attention: one CTA of 8 warps per (chunk of positions, 8 heads, token); warp w owns
// head h0 + w. The CTA's queries are staged once in shared memory, rounded as the CPU
// rounds q before its K dots. The positions stream in tiles of 32: the tile's rows are
// dequantized (kv_load: the reference dequantizer's values) into shared memory once for
// all 8 heads; lane j of warp w scores position j0 + j against head w (the row padded to
// an odd stride: the 32 lanes read 32 banks), an online softmax (running max m and sum l
// per head, the accumulators rescaled by e^(m_old - m_new)); then thread i accumulates the
// latent dims i, i + 256, ... of every head from the same shared rows. No score matrix
// outlives its 32 x 8 tile. Prompt batches take one chunk per (token, head group), the
// output normalised in place; decode batches (<= kMlaDecodeMaxTokens) split the
// positions into chunks so about kTargetBlocks CTAs run, each writing (m, l) and its
// unnormalised accumulators, merged by mla_combine_kernel:
// out = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M).
// F16 caches: the CPU rounds each probability to F16 after the softmax, before the V sum
// (as llama.cpp), which needs the final max and sum first: a stats pass (the same CTAs
// computing only (m, l) per chunk), mla_stats_kernel merging them to (M, 1 / L) per
// (token, head), then the accumulation pass with p = f16(e^(s - M) / L) and no rescaling
// (its chunks' partial sums simply added). Measured on the CPU (tiny deepseek2): leaving
// this rounding out moves the logits by 2.9e-2 relative at Q4_K.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/ops_attention.cuh"
#include "cuda/kernels/ops_mla.cuh"
#include "cuda/kernels/ops_mla.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

using mla_detail::kMaxP;
using mla_detail::kMaxR;
using mla_detail::kThreads;
using mla_detail::kWarps;
using mla_detail::q8_0_code;
constexpr int kHB = kWarps;  // heads per attention CTA (warp w scores head h0 + w)
constexpr int kBk = 32;      // positions per tile (lane j scores position j0 + j)
constexpr int64_t kTargetBlocks = 264;  // decode split: about two CTAs per SM of an H200 (132 SMs)

// The attention call with its split resolved on the host.
struct MlaGeom {
  MlaAttentionArgs a;
  uint32_t chunk_len = 0;  // positions per chunk
  int n_chunks = 1;
  bool direct = true;      // one chunk: out written (normalised) here; else the partials
  float2* ml = nullptr;    // (T, H, n_chunks) (m, l)
  float* acc = nullptr;    // (T, H, n_chunks, R)
  float2* stats = nullptr; // F16 rounding: (T, H) (M, 1 / L) from the stats pass
};

// The attention kernel's passes: the online softmax (F32 / Q8_0 caches); for F16 caches
// the stats pass then the rounded accumulation.
enum class MlaPass { kOnline, kStats, kRounded };

// Shared memory floats of the attention CTA: q (kHB, L), the tile's rows (kBk, L + 1),
// the tile's probabilities (kHB, kBk).
size_t attn_smem_bytes(int L) {
  return (static_cast<size_t>(kHB) * L + static_cast<size_t>(kBk) * (L + 1) + kHB * kBk) * sizeof(float);
}

// The CTA's queries [q_lat | q_pe] of heads slot0 .. slot0 + Hb - 1 into q_sh (Hb, R + P),
// rounded to the cache's activation type as the CPU rounds them (F16: to half; Q8_0:
// quantized per 32, L % 32 == 0). Every thread of the CTA calls it.
template <QuantType KV>
__device__ __forceinline__ void load_queries(const MlaAttentionArgs& a, int64_t slot0, int Hb, float* q_sh) {
  const int R = a.R, P = a.P, L = R + P;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < Hb * L; i += kThreads) {
    const int h = i / L, e = i % L;
    float v = e < R ? a.q_lat[(slot0 + h) * R + e] : a.q_pe[(slot0 + h) * P + (e - R)];
    if constexpr (KV == QuantType::F16) v = __half2float(__float2half_rn(v));
    q_sh[i] = v;
  }
  if constexpr (KV == QuantType::Q8_0) {  // L % 32 == 0: the blocks of each head's row
    __syncthreads();
    for (int b = warp; b < Hb * L / 32; b += kWarps) {
      float* x = q_sh + b * 32 + lane;
      float d;
      const int code = q8_0_code(*x, &d);
      *x = __fmul_rn(static_cast<float>(code), __half2float(__float2half_rn(d)));
    }
  }
}

// Chunk c's results of heads slot0 .. + Hb - 1 (m_sh, l_sh: their max and sum): the stats
// pass writes (m, l) only; the others the output (direct: normalised; the rounded pass's
// probabilities already are) or the chunk's partials (and, online, its (m, l)).
template <int NE, MlaPass kPass>
__device__ __forceinline__ void write_chunk(const MlaGeom& g, int64_t slot0, int Hb, int c, const float (&acc)[kHB][NE],
                                            const float* m_sh, const float* l_sh) {
  const MlaAttentionArgs& a = g.a;
  const int R = a.R, tid = threadIdx.x;
  if constexpr (kPass == MlaPass::kStats) {  // (m, l) of every chunk, the direct case too
    if (tid < Hb) g.ml[(slot0 + tid) * g.n_chunks + c] = make_float2(m_sh[tid], l_sh[tid]);
  } else {
#pragma unroll
    for (int h = 0; h < kHB; ++h) {
      if (h >= Hb) continue;
#pragma unroll
      for (int i = 0; i < NE; ++i) {
        const int e = tid + i * kThreads;
        if (e >= R) continue;
        if (g.direct) {
          a.out[(slot0 + h) * R + e] = kPass == MlaPass::kRounded ? acc[h][i] : acc[h][i] / l_sh[h];
        } else {
          g.acc[((slot0 + h) * g.n_chunks + c) * R + e] = acc[h][i];
        }
      }
    }
    // (The rounded pass keeps the stats pass's (m, l): the combine skips the same chunks.)
    if (kPass == MlaPass::kOnline && !g.direct && tid < Hb) {
      g.ml[(slot0 + tid) * g.n_chunks + c] = make_float2(m_sh[tid], l_sh[tid]);
    }
  }
}

// Grid (n_chunks, ceil(H / kHB), T), token T - 1 - blockIdx.z (the longest rows first).
// NE: latent dims per thread, R <= NE * kThreads.
template <QuantType KV, int NE, MlaPass kPass>
__global__ void __launch_bounds__(kThreads) mla_attn_kernel(MlaGeom g) {
  extern __shared__ float4 smem4[];
  __shared__ float alpha_sh[kHB], m_sh[kHB], l_sh[kHB];
  const MlaAttentionArgs& a = g.a;
  const int R = a.R, P = a.P, L = R + P, KS = L + 1, H = a.n_head;
  float* q_sh = reinterpret_cast<float*>(smem4);  // (kHB, L)
  float* k_sh = q_sh + kHB * L;                    // (kBk, KS)
  float* p_sh = k_sh + kBk * KS;                   // (kHB, kBk)
  const int c = blockIdx.x, h0 = blockIdx.y * kHB, t = a.n_tokens - 1 - static_cast<int>(blockIdx.z);
  const int Hb = min(kHB, H - h0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t slot0 = static_cast<int64_t>(t) * H + h0;  // head h0 + i: slot0 + i
  const uint32_t n_kv = (a.pos_dev != nullptr ? *a.pos_dev : a.pos0) + static_cast<uint32_t>(t) + 1;
  if (a.pos_dev != nullptr && n_kv > static_cast<uint64_t>(g.chunk_len) * static_cast<uint64_t>(g.n_chunks)) __trap();
  const uint32_t begin = static_cast<uint32_t>(c) * g.chunk_len;
  if (begin >= n_kv) {  // a chunk past the query (split only): uniform, before any barrier
    if (tid < Hb) g.ml[(slot0 + tid) * g.n_chunks + c] = make_float2(-INFINITY, 0.0f);
    return;
  }
  const uint32_t end = n_kv - begin > g.chunk_len ? begin + g.chunk_len : n_kv;

  load_queries<KV>(a, slot0, Hb, q_sh);

  float m = -INFINITY, l = 0.0f;  // warp w: head h0 + w's running max and sum (every lane)
  float M = 0.0f, inv = 0.0f;     // kRounded: warp w's head's final max and 1 / sum
  if constexpr (kPass == MlaPass::kRounded) {
    if (warp < Hb) {
      const float2 st = g.stats[slot0 + warp];
      M = st.x, inv = st.y;
    }
  }
  float acc[kHB][NE];
#pragma unroll
  for (int h = 0; h < kHB; ++h) {
#pragma unroll
    for (int i = 0; i < NE; ++i) acc[h][i] = 0.0f;
  }
  for (uint32_t j0 = begin; j0 < end; j0 += kBk) {
    __syncthreads();  // q_sh is written; every thread is done with the last tile
    const int len = static_cast<int>(min(static_cast<uint32_t>(kBk), end - j0));
    for (int i = tid; i < kBk * L; i += kThreads) {
      const int j = i / L, e = i % L;  // rows past the range are zeros (p = 0 times a finite value)
      k_sh[j * KS + e] = j < len ? detail::kv_load<KV>(a.cache + static_cast<uint64_t>(j0 + j) * a.row_bytes, e) : 0.0f;
    }
    __syncthreads();
    if (warp < Hb) {  // scores of head h0 + warp, lane j: position j0 + j; online softmax
      const float* qh = q_sh + warp * L;
      const float* kr = k_sh + lane * KS;
      float dot = 0.0f;
#pragma unroll 4
      for (int e = 0; e < L; ++e) dot += qh[e] * kr[e];
      const bool seen = lane < len;  // lane 0 always: m_new is finite
      const float sv = seen ? dot * a.scale : -INFINITY;
      if constexpr (kPass == MlaPass::kRounded) {  // the CPU's probability, rounded to F16
        p_sh[warp * kBk + lane] = seen ? __half2float(__float2half_rn(expf(sv - M) * inv)) : 0.0f;
        if (lane == 0) alpha_sh[warp] = 1.0f;
      } else {
        const float m_new = fmaxf(m, detail::warp_max(sv));
        const float p = seen ? expf(sv - m_new) : 0.0f;
        const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
        l = l * alpha + detail::warp_sum(p);
        m = m_new;
        p_sh[warp * kBk + lane] = p;
        if (lane == 0) alpha_sh[warp] = alpha;
      }
    }
    __syncthreads();
    if constexpr (kPass != MlaPass::kStats) {  // the stats pass: scores only
#pragma unroll
      for (int h = 0; h < kHB; ++h) {
        if (h < Hb) {
          const float al = alpha_sh[h];
#pragma unroll
          for (int i = 0; i < NE; ++i) acc[h][i] *= al;
        }
      }
      for (int j = 0; j < len; ++j) {
        float v[NE];
#pragma unroll
        for (int i = 0; i < NE; ++i) {
          const int e = tid + i * kThreads;
          v[i] = e < R ? k_sh[j * KS + e] : 0.0f;
        }
#pragma unroll
        for (int h = 0; h < kHB; ++h) {
          if (h < Hb) {
            const float pj = p_sh[h * kBk + j];
#pragma unroll
            for (int i = 0; i < NE; ++i) acc[h][i] += pj * v[i];
          }
        }
      }
    }
  }
  if (warp < Hb && lane == 0) {
    m_sh[warp] = m;
    l_sh[warp] = l;
  }
  __syncthreads();
  write_chunk<NE, kPass>(g, slot0, Hb, c, acc, m_sh, l_sh);
}

// A (token, head)'s chunks merged from ml + base: (M, L), M the largest m of a chunk with
// l > 0, L = sum_c l_c e^(m_c - M) in chunk order (chunks past the query have l = 0).
__device__ __forceinline__ float2 merge_chunks(const float2* ml, int64_t base, int n_chunks) {
  float M = -INFINITY;
  for (int c = 0; c < n_chunks; ++c) {
    if (ml[base + c].y > 0.0f) M = fmaxf(M, ml[base + c].x);
  }
  float L = 0.0f;
  for (int c = 0; c < n_chunks; ++c) {
    const float2 p = ml[base + c];
    if (p.y > 0.0f) L += p.y * expf(p.x - M);
  }
  return make_float2(M, L);
}

// Grid (H * T): per (token, head) the chunks' (m, l) merged to (M, 1 / L), the stats
// the rounded pass normalises with.
__global__ void mla_stats_kernel(const float2* ml, int n_chunks, int64_t n_slots, float2* stats) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (slot >= n_slots) return;
  const float2 ML = merge_chunks(ml, slot * n_chunks, n_chunks);
  stats[slot] = make_float2(ML.x, 1.0f / ML.y);
}

// Grid (H, T): (token, head)'s chunks merged; chunks with l = 0 (past the query) skipped.
// rounded: the chunks' sums are already normalised: added in chunk order.
__global__ void __launch_bounds__(kThreads)
    mla_combine_kernel(const float2* ml, const float* acc, int n_chunks, int H, int R, bool rounded, float* out) {
  const int64_t slot = static_cast<int64_t>(blockIdx.y) * H + blockIdx.x;
  const int64_t base = slot * n_chunks;
  const float2 ML = merge_chunks(ml, base, n_chunks);
  const float M = ML.x, inv = 1.0f / ML.y;
  for (int e = threadIdx.x; e < R; e += blockDim.x) {
    float s = 0.0f;
    for (int c = 0; c < n_chunks; ++c) {
      const float2 p = ml[base + c];
      if (p.y > 0.0f) s += rounded ? acc[(base + c) * R + e] : acc[(base + c) * R + e] * expf(p.x - M);
    }
    out[slot * R + e] = rounded ? s : s * inv;
  }
}

// Decode split: chunks (whole tiles each) so that T * ceil(H / kHB) * chunks is about
// kTargetBlocks, never more chunks than want(T, H): the workspace bound.
int64_t split_want(int n_tokens, int n_head) {
  const int64_t ctas = static_cast<int64_t>(n_tokens) * ((n_head + kHB - 1) / kHB);
  return std::max<int64_t>(1, (kTargetBlocks + ctas - 1) / ctas);
}

void split(MlaGeom& g, uint32_t n_kv) {
  const int64_t kv = std::max<int64_t>(1, n_kv);
  const int64_t n = std::min(split_want(g.a.n_tokens, g.a.n_head), (kv + kBk - 1) / kBk);
  const int64_t len = ((kv + n - 1) / n + kBk - 1) / kBk * kBk;
  g.chunk_len = static_cast<uint32_t>(len);
  g.n_chunks = static_cast<int>((kv + len - 1) / len);
}

template <QuantType KV, int NE, MlaPass kPass>
void launch_pass(const MlaGeom& g, cudaStream_t stream) {
  const int L = g.a.R + g.a.P;
  const size_t smem = attn_smem_bytes(L);
  auto kernel = mla_attn_kernel<KV, NE, kPass>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(g.n_chunks), static_cast<unsigned>((g.a.n_head + kHB - 1) / kHB),
                  static_cast<unsigned>(g.a.n_tokens));
  kernel<<<grid, kThreads, smem, stream>>>(g);
  MT_CUDA_CHECK_LAUNCH();
}

// F16 caches: the stats pass, the merge, the rounded pass; the others: the online pass.
template <QuantType KV, int NE>
void launch_attn(const MlaGeom& g, cudaStream_t stream) {
  if constexpr (KV == QuantType::F16) {
    launch_pass<KV, NE, MlaPass::kStats>(g, stream);
    const int64_t slots = static_cast<int64_t>(g.a.n_tokens) * g.a.n_head;
    mla_stats_kernel<<<static_cast<unsigned>((slots + kThreads - 1) / kThreads), kThreads, 0, stream>>>(g.ml, g.n_chunks,
                                                                                                      slots, g.stats);
    MT_CUDA_CHECK_LAUNCH();
    launch_pass<KV, NE, MlaPass::kRounded>(g, stream);
  } else {
    launch_pass<KV, NE, MlaPass::kOnline>(g, stream);
  }
}

template <QuantType KV>
void launch_attn_r(const MlaGeom& g, cudaStream_t stream) {
  if (g.a.R <= kThreads) {
    launch_attn<KV, 1>(g, stream);
  } else if (g.a.R <= 2 * kThreads) {
    launch_attn<KV, 2>(g, stream);
  } else {
    launch_attn<KV, 4>(g, stream);
  }
}

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void mla_attention(const MlaAttentionArgs& a, Workspace& ws, cudaStream_t stream) {
  MT_CHECK(a.n_tokens >= 0 && a.n_tokens <= 65535 && a.n_head > 0);
  MT_CHECK(a.R > 0 && a.R <= kMaxR && a.P >= 0 && a.P <= kMaxP);
  const auto rb = mt::row_bytes(a.kv_type, static_cast<uint64_t>(a.R + a.P));
  MT_CHECK_MSG(rb.has_value() && *rb == a.row_bytes, "mla_attention: rows are not kv_lora_rank + n_rot of the cache type");
  MT_CHECK_MSG(a.pos_dev == nullptr || a.n_tokens <= kMlaDecodeMaxTokens,
               "mla_attention: a position read on the device is for decode batches only");
  if (a.n_tokens == 0) return;
  MlaGeom g;
  g.a = a;
  if (a.n_tokens <= kMlaDecodeMaxTokens) {
    const uint32_t n_kv = a.pos_dev != nullptr ? a.n_kv_cap : a.pos0 + static_cast<uint32_t>(a.n_tokens);
    MT_CHECK(n_kv > 0);
    split(g, n_kv);
  } else {
    g.chunk_len = UINT32_MAX;
    g.n_chunks = 1;
  }
  g.direct = g.n_chunks == 1;
  const size_t parts = static_cast<size_t>(a.n_tokens) * a.n_head * g.n_chunks;
  const bool rounded = a.kv_type == QuantType::F16;
  if (!g.direct || rounded) g.ml = static_cast<float2*>(ws.take(parts * sizeof(float2)));
  if (!g.direct) g.acc = static_cast<float*>(ws.take(parts * a.R * sizeof(float)));
  if (rounded) g.stats = static_cast<float2*>(ws.take(static_cast<size_t>(a.n_tokens) * a.n_head * sizeof(float2)));
  switch (a.kv_type) {
    case QuantType::F16: launch_attn_r<QuantType::F16>(g, stream); break;
    case QuantType::Q8_0: launch_attn_r<QuantType::Q8_0>(g, stream); break;
    case QuantType::F32: launch_attn_r<QuantType::F32>(g, stream); break;
    default: MT_CHECK_MSG(false, "mla_attention: the latent cache must be f16, q8_0 or f32");
  }
  if (g.direct) return;
  mla_combine_kernel<<<dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tokens)), kThreads, 0,
                       stream>>>(g.ml, g.acc, g.n_chunks, a.n_head, a.R, rounded, a.out);
  MT_CUDA_CHECK_LAUNCH();
}

size_t mla_attention_workspace_bytes(int n_tokens, int n_head, int R) {
  size_t bytes = 0;
  for (int t = 1; t <= std::min(n_tokens, kMlaDecodeMaxTokens); ++t) {
    const size_t parts = static_cast<size_t>(t) * n_head * split_want(t, n_head);
    bytes = std::max(bytes, round256(parts * sizeof(float2)) + round256(parts * R * sizeof(float)) + 256);
  }
  // F16 caches: a prompt's (m, l) per (token, head) (one chunk), and every call's stats.
  const size_t slots = static_cast<size_t>(std::max(n_tokens, 0)) * n_head;
  return std::max(bytes, round256(slots * sizeof(float2))) + round256(slots * sizeof(float2)) + 512;
}

}  // namespace mt::cuda
