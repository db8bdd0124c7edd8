// The persistent decode kernel (cuda/decode_persistent.h: phases, scope).
//
// Products: the units of a product are R = 2 consecutive rows of one slot (an expert of
// the token's top-k, or the one dense matrix); CTA c takes the contiguous units [U c / G,
// U (c + 1) / G) and its warps stride over them, a warp's 32 / L groups of L lanes one
// unit each, lanes walking the rows' tasks as MMVQ does (L = 16 or 8 when a row has too
// few tasks for a warp). Float weight types: a warp per row, 8 weights per lane per step.
// Data other CTAs wrote in this launch is read with __ldcg (past the SM's L1, which is
// not coherent); a grid barrier is a CTA's arrival count on one device counter after a
// fence, spun on with acquire loads (a trap after 20 s: a barrier never reached is a bug).
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "core/check.h"
#include "cuda/act_quant.cuh"
#include "cuda/check.h"
#include "cuda/decode_persistent.h"
#include "cuda/mmvq_float.cuh"
#include "cuda/mmvq_kquants.cuh"
#include "cuda/mmvq_simple.cuh"
#include "cuda/ops_device.cuh"
#include "cuda/ops_reduce.cuh"
#include "cuda/ops_topk.cuh"

namespace mt::cuda {
namespace {

using mmvq_detail::ActRowT;
using mmvq_detail::group_sum;
using mmvq_detail::kRows;
using mmvq_detail::MmvqType;

constexpr int kWarps = kPersistentThreads / 32;
constexpr int kNormThreads = 256;  // the norms' square sums in add_rms_norm_quant_kernel's order
constexpr int kCombinePer = 4;  // residual elements a thread combines at a time in phase A

template <class B>
struct Tag {
  using type = B;
};
template <class B>
constexpr bool kFloatWeight =
    std::is_same_v<B, WeightF32> || std::is_same_v<B, WeightF16> || std::is_same_v<B, WeightBF16>;

template <class F>
__device__ __forceinline__ void with_weight_type(QuantType t, F&& f) {
  switch (t) {
    case QuantType::F32: f(Tag<WeightF32>{}); return;
    case QuantType::F16: f(Tag<WeightF16>{}); return;
    case QuantType::BF16: f(Tag<WeightBF16>{}); return;
    case QuantType::Q4_0: f(Tag<BlockQ4_0>{}); return;
    case QuantType::Q8_0: f(Tag<BlockQ8_0>{}); return;
    case QuantType::Q4_K: f(Tag<BlockQ4_K>{}); return;
    case QuantType::Q5_K: f(Tag<BlockQ5_K>{}); return;
    case QuantType::Q6_K: f(Tag<BlockQ6_K>{}); return;
    default: __trap();  // persistent_unsupported let an unsupported type through
  }
}

// ---- the grid barrier

__device__ __forceinline__ void grid_sync(unsigned* bar, unsigned& target) {
  target += gridDim.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // the CTA's writes (ordered before this thread by the barrier) first
    atomicAdd(bar, 1u);
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned n = 1;; ++n) {
      unsigned seen;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
      if (seen >= target) break;
      if (n % 4096 == 0) {  // a broken invariant (a CTA that never arrives) traps instead of hanging
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > 20000000000ull) __trap();
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// ---- this CTA's shared activation row

// The product's input: f32 rows (float weights) and their quants (the others), `stride`
// elements per slot (0: every slot reads row 0).
struct ActIn {
  const float* f;
  const int8_t* q;
  const uint2* m;
  int stride;
};

// f (n, shared) quantized in the mode weight type t reads (nothing for float weights);
// every thread calls it, f complete; ends with a barrier.
__device__ __forceinline__ void quantize_row(QuantType t, const float* f, int n, int8_t* q, uint2* m) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) & 31;
  const int mode = persistent_act_mode(t);
  if (mode == 2) {
    for (int b = warp; b < n / 256; b += kWarps) {
      float v[8];
      for (int i = 0; i < 8; ++i) v[i] = f[256 * b + 8 * lane + i];
      act_detail::quantize_q8_k_warp(v, lane, q + 256 * b, m + 8 * b);
    }
  } else if (mode == 1) {
    for (int b = warp; b < n / 32; b += kWarps) {
      act_detail::quantize_q8_0_warp(f[32 * b + lane], lane, q + 32 * b + lane, m + b);
    }
  }
  __syncthreads();
}

// f (n, shared) = rms_norm(f) * w in place, the square sum as add_rms_norm_quant_kernel
// takes it (kNormThreads partial sums in double, then the block's sum). Every thread
// calls it, f complete; ends with a barrier.
__device__ __forceinline__ void rms_norm_row(float* f, int n, const float* w, float eps, double* scratch) {
  const int tid = static_cast<int>(threadIdx.x);
  double sum = 0.0;
  if (tid < kNormThreads) {
    for (int i = tid; i < n; i += kNormThreads) {
      const double vd = f[i];
      sum = __fma_rn(vd, vd, sum);
    }
  }
  sum = detail::block_sum(sum, scratch);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int i = tid; i < n; i += kPersistentThreads) {
    const float v = f[i] * scale;
    f[i] = w != nullptr ? v * w[i] : v;
  }
  __syncthreads();
}

// ---- products

// This CTA's share [begin, end) of U units.
__device__ __forceinline__ int2 cta_share(int U) {
  const int64_t c = blockIdx.x, G = gridDim.x;
  return make_int2(static_cast<int>(U * c / G), static_cast<int>(U * (c + 1) / G));
}

// A product's units may be part of a larger space shared with other products of the
// same phase (Q|K|V apart): space = (its first unit, the space's size); the CTA's share
// is taken over the whole space, so the warps stay busy across the products.
template <class B, int L>
__device__ __forceinline__ void quant_product(const PMat& m, const int* mats, int n_slots, const ActIn& x, float* y,
                                              int2 space) {
  using Tr = MmvqType<B>;
  constexpr int R = kRows, GPW = 32 / L;
  const int per_slot = (m.n_out + R - 1) / R;
  const int2 share = cta_share(space.y);
  const int lo = max(share.x, space.x), hi = min(share.y, space.x + n_slots * per_slot);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) & 31, sub = lane % L;
  const int n_tasks = m.n_in / Tr::kElems * Tr::kTasks;
  for (int u0 = share.x + warp * GPW; u0 < hi; u0 += kWarps * GPW) {  // uniform over the warp
    if (u0 + GPW <= lo) continue;
    const int u = u0 + lane / L;
    const bool live = u >= lo && u < hi;
    const int um = live ? u - space.x : 0;  // the unit within this product
    const int slot = um / per_slot;
    const int r0 = (um - slot * per_slot) * R;
    const int rows = live ? min(R, m.n_out - r0) : 0;
    const int mat = mats != nullptr ? mats[slot] : 0;
    const uint8_t* w = m.w + static_cast<uint64_t>(mat) * m.matrix_bytes + static_cast<uint64_t>(r0) * m.row_bytes;
    const ActRowT<true> xr[1] = {{x.q + slot * x.stride, x.m + slot * x.stride / 32}};
    float acc[R][1];
    for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
    mmvq_detail::rows_partial<Tr, Tr::kAlign, 1, R>(w, rows == R ? m.row_bytes : 0, rows > 0 ? n_tasks : 0, sub, L, xr,
                                                    acc);
    for (int r = 0; r < R; ++r) acc[r][0] = group_sum<L>(acc[r][0]);
    if (sub == 0) {
      for (int r = 0; r < rows; ++r) y[static_cast<int64_t>(slot) * m.n_out + r0 + r] = acc[r][0];
    }
  }
}

// Float weights: a warp per row, 8 weights per lane per step.
template <class W>
__device__ __forceinline__ void float_product(const PMat& m, const int* mats, int n_slots, const ActIn& x, float* y,
                                              int2 space) {
  using F = mmvq_detail::FloatType<W>;
  const int2 share = cta_share(space.y);
  const int lo = max(share.x, space.x), hi = min(share.y, space.x + n_slots * m.n_out);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) & 31;
  for (int u = share.x + warp; u < hi; u += kWarps) {
    if (u < lo) continue;
    const int um = u - space.x;
    const int slot = um / m.n_out, r = um - slot * m.n_out;
    const int mat = mats != nullptr ? mats[slot] : 0;
    const uint8_t* row = m.w + static_cast<uint64_t>(mat) * m.matrix_bytes + static_cast<uint64_t>(r) * m.row_bytes;
    const float* xs = x.f + slot * x.stride;
    float acc = 0.0f;
#pragma unroll 4
    for (int i = 8 * lane; i < m.n_in; i += 256) {
      float wv[8];
      F::eight(row, i, wv);
      for (int k = 0; k < 8; ++k) acc = fmaf(wv[k], F::act(xs[i + k]), acc);
    }
    acc = group_sum<32>(acc);
    if (lane == 0) y[static_cast<int64_t>(slot) * m.n_out + r] = acc;
  }
}

// A dense float product of at most one row per CTA (the router: 128 rows): the CTA's
// threads split the row (one 8-weight step each), partial sums added through shared memory.
template <class W>
__device__ __forceinline__ void float_product_split(const PMat& m, const ActIn& x, float* y, float* scratch) {
  using F = mmvq_detail::FloatType<W>;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
  for (int r = blockIdx.x; r < m.n_out; r += gridDim.x) {  // uniform over the CTA
    const uint8_t* row = m.w + static_cast<uint64_t>(r) * m.row_bytes;
    float acc = 0.0f;
#pragma unroll 2
    for (int i = 8 * tid; i < m.n_in; i += 8 * kPersistentThreads) {
      float wv[8];
      F::eight(row, i, wv);
      for (int k = 0; k < 8; ++k) acc = fmaf(wv[k], F::act(x.f[i + k]), acc);
    }
    acc = group_sum<32>(acc);
    if (lane == 0) scratch[warp] = acc;
    __syncthreads();
    if (tid == 0) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += scratch[w];
      y[r] = total;
    }
    __syncthreads();
  }
}

// Units of a product in the shared space: R-row units (quantized), rows (float).
__device__ __forceinline__ int rows_per_unit(const PMat& m) { return persistent_act_mode(m.type) > 0 ? kRows : 1; }
__device__ __forceinline__ int units_of(const PMat& m, int n_slots) {
  return n_slots * ((m.n_out + rows_per_unit(m) - 1) / rows_per_unit(m));
}

// y (n_slots, n_out) = W[mats[s]] . x row s (mats null: matrix 0), this CTA's share of
// the space (default: the product alone). Not inlined: its registers are its own (inlined
// into the kernel, the products' loops spilled).
__device__ __noinline__ void product(const PMat& m, const int* mats, int n_slots, const ActIn& x, float* y,
                                        int2 space = make_int2(0, -1)) {
  if (space.y < 0) space = make_int2(0, units_of(m, n_slots));
  with_weight_type(m.type, [&](auto tag) {
    using B = typename decltype(tag)::type;
    if constexpr (kFloatWeight<B>) {
      float_product<B>(m, mats, n_slots, x, y, space);
    } else {
      const int n_tasks = m.n_in / MmvqType<B>::kElems * MmvqType<B>::kTasks;
      if (n_tasks >= 32) {
        quant_product<B, 32>(m, mats, n_slots, x, y, space);
      } else if (n_tasks >= 16) {
        quant_product<B, 16>(m, mats, n_slots, x, y, space);
      } else {
        quant_product<B, 8>(m, mats, n_slots, x, y, space);
      }
    }
  });
}

// The router: split rows when the grid has a CTA per row.
__device__ __forceinline__ void router_product(const PMat& m, const ActIn& x, float* y, float* scratch) {
  const bool split = m.n_out <= static_cast<int>(gridDim.x) && persistent_act_mode(m.type) == 0;
  if (!split) return product(m, nullptr, 1, x, y);
  with_weight_type(m.type, [&](auto tag) {
    using B = typename decltype(tag)::type;
    if constexpr (kFloatWeight<B>) float_product_split<B>(m, x, y, scratch);
  });
}

// ---- attention

// More than one chunk: the item counts itself done on its head's counter after a fence;
// the head's last item merges its chunks (out = sum_c acc_c e^(m_c - M) / sum_c l_c
// e^(m_c - M)) into att and puts the counter back to zero (the next layer's). Every
// thread of the CTA calls it.
__device__ __forceinline__ void merge_if_last(const PersistentArgs& a, int h, int n_chunks, bool& last) {
  const int D = a.head_dim, tid = static_cast<int>(threadIdx.x);
  __threadfence();  // this thread's partials are visible device-wide before the item is counted
  __syncthreads();
  if (tid == 0) last = atomicAdd(a.head_counters + h, 1u) == static_cast<unsigned>(n_chunks - 1);
  __syncthreads();
  if (!last) return;  // uniform over the CTA
  __threadfence();  // the other items' partials are seen after their counts
  if (tid < D) {
    const float2* ml = a.ml + h * a.max_chunks;
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) M = fmaxf(M, __ldcg(ml + c).x);
    float Ls = 0.0f, o = 0.0f;
#pragma unroll 4
    for (int c = 0; c < n_chunks; ++c) {
      const float2 p = __ldcg(ml + c);
      const float sc = expf(p.x - M);
      Ls = fmaf(p.y, sc, Ls);
      o = fmaf(__ldcg(a.acc + (static_cast<int64_t>(h) * a.max_chunks + c) * D + tid), sc, o);
    }
    a.att[h * D + tid] = o / Ls;
  }
  if (tid == 0) a.head_counters[h] = 0;
}

// Items (query head h, chunk c) over positions [c chunk_len, ...) of the n_kv = pos + 1
// the token sees; the newest position's K and V come from this item's own prep (rounded
// to half as the cache holds them), the older ones from the cache. One chunk: the item
// writes the head's output; more: its partial (max, sum, accumulator) for merge_if_last.
// sh: 4 D + kPersistentChunk + kPersistentThreads floats.
__device__ void attention_items(const PersistentArgs& a, const PLayer& L, uint32_t pos, int chunk_len, int n_chunks,
                                float* sh, double* dscratch, float* fscratch) {
  __shared__ bool last_sh;
  const int D = a.head_dim, H = a.n_head, group = a.n_head / a.n_head_kv;
  const int Q = H * D, KVd = a.n_head_kv * D;
  const uint32_t n_kv = pos + 1;
  float* q_sh = sh;
  float* k_sh = sh + D;
  float* v_sh = sh + 2 * D;
  float* head_sh = sh + 3 * D;
  float* s_sh = sh + 4 * D;
  float* o_sh = s_sh + kPersistentChunk;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid & 31;
  const bool live = tid < D;
  const detail::RopeArgs rope{a.n_rot, a.theta_scale, a.freq_scale, a.attn_factor, a.yarn_ext,
                              a.yarn_lo,  a.yarn_hi,    a.yarn_mscale, a.neox};
  for (int item = blockIdx.x; item < H * n_chunks; item += gridDim.x) {
    const int h = item / n_chunks, c = item - h * n_chunks, g = h / group;
    float qv = live ? __ldcg(a.qkv + h * D + tid) : 0.0f;
    qv = detail::head_norm_rope(qv, tid, D, L.q_norm, a.eps, &rope, pos, head_sh, dscratch);
    if (live) q_sh[tid] = qv;
    const uint32_t j0 = static_cast<uint32_t>(c) * static_cast<uint32_t>(chunk_len);
    const uint32_t j1 = min(j0 + static_cast<uint32_t>(chunk_len), n_kv);
    if (j1 == n_kv) {  // the chunk of the newest position (uniform over the CTA)
      float kv = live ? __ldcg(a.qkv + Q + g * D + tid) : 0.0f;
      kv = detail::head_norm_rope(kv, tid, D, L.k_norm, a.eps, &rope, pos, head_sh, dscratch);
      if (live) {
        const __half kh = __float2half_rn(kv), vh = __float2half_rn(__ldcg(a.qkv + Q + KVd + g * D + tid));
        k_sh[tid] = __half2float(kh);
        v_sh[tid] = __half2float(vh);
        if (h % group == 0) {
          reinterpret_cast<__half*>(L.k_cache + pos * a.kv_row_bytes)[g * D + tid] = kh;
          reinterpret_cast<__half*>(L.v_cache + pos * a.kv_row_bytes)[g * D + tid] = vh;
        }
      }
    }
    __syncthreads();
    const int len = static_cast<int>(j1 - j0);
    for (int j = warp; j < len; j += kWarps) {  // scores: a warp per position
      const uint32_t p = j0 + static_cast<uint32_t>(j);
      const __half* row = reinterpret_cast<const __half*>(L.k_cache + p * a.kv_row_bytes) + g * D;
      float dot = 0.0f;
      for (int e = lane; e < D; e += 32) dot += q_sh[e] * (p == pos ? k_sh[e] : __half2float(row[e]));
      dot = detail::warp_sum(dot);
      if (lane == 0) s_sh[j] = dot * a.attn_scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = tid; j < len; j += kPersistentThreads) mx = fmaxf(mx, s_sh[j]);
    mx = detail::block_max(mx, fscratch);
    float l = 0.0f;
    for (int j = tid; j < len; j += kPersistentThreads) {
      const float p = expf(s_sh[j] - mx);
      s_sh[j] = p;
      l += p;
    }
    l = detail::block_sum(l, fscratch);  // its barriers: s_sh complete
    const int parts = kPersistentThreads / D, part = tid / D, e = tid - part * D;
    float o = 0.0f;
    if (part < parts) {
#pragma unroll 8
      for (int j = part; j < len; j += parts) {
        const uint32_t p = j0 + static_cast<uint32_t>(j);
        const __half* row = reinterpret_cast<const __half*>(L.v_cache + p * a.kv_row_bytes) + g * D;
        o = fmaf(s_sh[j], p == pos ? v_sh[e] : __half2float(row[e]), o);
      }
    }
    o_sh[tid] = o;
    __syncthreads();
    if (live) {
      float sum = 0.0f;
      for (int k = 0; k < parts; ++k) sum += o_sh[k * D + tid];
      if (n_chunks == 1) {
        a.att[h * D + tid] = sum / l;
      } else {
        a.acc[(static_cast<int64_t>(h) * a.max_chunks + c) * D + tid] = sum;
        if (tid == 0) a.ml[h * a.max_chunks + c] = make_float2(mx, l);
      }
    }
    if (n_chunks > 1) merge_if_last(a, h, n_chunks, last_sh);
    __syncthreads();  // the scratch is the next item's
  }
}

// ---- weights ahead: L2 prefetches of the rows this CTA's share of a later product reads
// (the same share as product()'s), issued before a phase that leaves the memory idle.
__device__ void prefetch_share(const PMat& m, const int* mats, int n_slots) {
  const int rpu = rows_per_unit(m);
  const int per_slot = units_of(m, 1);
  const int2 share = cta_share(n_slots * per_slot);
  if (share.x >= share.y) return;
  for (int s = share.x / per_slot; s <= (share.y - 1) / per_slot; ++s) {
    const int u0 = max(share.x, s * per_slot) - s * per_slot, u1 = min(share.y, (s + 1) * per_slot) - s * per_slot;
    const int r0 = u0 * rpu, r1 = min(m.n_out, u1 * rpu);
    const int mat = mats != nullptr ? mats[s] : 0;
    const uint8_t* base = m.w + static_cast<uint64_t>(mat) * m.matrix_bytes + static_cast<uint64_t>(r0) * m.row_bytes;
    const uint64_t bytes = static_cast<uint64_t>(r1 - r0) * m.row_bytes;
    for (uint64_t off = static_cast<uint64_t>(threadIdx.x) * 128; off < bytes; off += kPersistentThreads * 128ull) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
    }
  }
}

// ---- the step

__global__ void __launch_bounds__(kPersistentThreads, 1) persistent_decode_kernel(const PersistentArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  __shared__ float probs[kPersistentMaxExperts];
  __shared__ int sel[32];
  __shared__ float wts[32];
  float* f = reinterpret_cast<float*>(smem);        // (fmax) the activation row(s)
  int8_t* q8 = reinterpret_cast<int8_t*>(f + a.fmax);  // (fmax) their quants
  uint2* qm = reinterpret_cast<uint2*>(q8 + a.fmax);   // (fmax / 32) and metas
  float* att_sh = reinterpret_cast<float*>(qm + a.fmax / 32);
  const int tid = static_cast<int>(threadIdx.x);
  const int E = a.E, K = a.K, ff = a.ff;
  const int Q = a.n_head * a.head_dim;
  const uint32_t pos = __ldcg(a.pos);
  // Attention chunks: enough items (n_head * n_chunks) for the grid, chunks of 32 to
  // kPersistentChunk positions (a multiple of 32).
  const int n_kv = static_cast<int>(pos) + 1;
  const int want = max((n_kv + kPersistentChunk - 1) / kPersistentChunk,
                       min((n_kv + 31) / 32, (static_cast<int>(gridDim.x) + a.n_head - 1) / a.n_head));
  const int chunk_len = ((n_kv + want - 1) / want + 31) / 32 * 32;
  const int n_chunks = (n_kv + chunk_len - 1) / chunk_len;
  unsigned target = 0;
  // MOETIER_CUDA_PERSISTENT_PROFILE: CTA 0 stamps the time each phase ends.
  auto stamp = [&](int l, int phase) {
    if (a.prof != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      a.prof[l * kPersistentPhases + phase] = t;
    }
  };
  stamp(0, 0);
  const ActIn row{f, q8, qm, 0};
  for (int l = 0; l <= a.n_layer; ++l) {
    const bool last = l == a.n_layer;
    const PLayer* L = last ? nullptr : a.layers + l;
    // A: x_l, its norm, the Q|K|V product (the logits after the last layer).
    float* xl = a.x[l & 1];
    if (l == 0) {
      for (int i = tid; i < E; i += kPersistentThreads) f[i] = __ldcg(xl + i);
    } else {
      // The combine as moe_combine computes it (in rank order), kCombinePer of a thread's
      // elements i = tid + j * kPersistentThreads at a time in registers, so their loads
      // are in flight together.
      const float* xp = a.x[(l - 1) & 1];
      for (int j0 = 0; j0 * kPersistentThreads < E; j0 += kCombinePer) {
        float yv[kCombinePer];
#pragma unroll
        for (int j = 0; j < kCombinePer; ++j) yv[j] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < K; ++k) {
          const float wk = wts[k];
#pragma unroll
          for (int j = 0; j < kCombinePer; ++j) {
            const int i = tid + (j0 + j) * kPersistentThreads;
            if (i < E) yv[j] = __fadd_rn(yv[j], __fmul_rn(__ldcg(a.d + k * E + i), wk));
          }
        }
#pragma unroll
        for (int j = 0; j < kCombinePer; ++j) {
          const int i = tid + (j0 + j) * kPersistentThreads;
          if (i < E) {
            const float v = (__ldcg(xp + i) + __ldcg(a.y + i)) + yv[j];
            f[i] = v;
            if (blockIdx.x == 0) xl[i] = v;
          }
        }
      }
    }
    __syncthreads();
    rms_norm_row(f, E, last ? a.output_norm : L->attn_norm, a.eps, dscratch);
    if (last) {
      quantize_row(a.output.type, f, E, q8, qm);
      product(a.output, nullptr, 1, row, a.logits);
      stamp(l, 1);
      break;
    }
    quantize_row(L->qkv_act, f, E, q8, qm);
    {  // Q|K|V: one product, or three sharing one space of units
      int units = 0;
      for (int i = 0; i < L->n_qkv; ++i) units += units_of(L->qkv[i], 1);
      for (int i = 0, at = 0, u = 0; i < L->n_qkv; at += L->qkv[i].n_out, u += units_of(L->qkv[i], 1), ++i) {
        product(L->qkv[i], nullptr, 1, row, a.qkv + at, make_int2(u, units));
      }
    }
    grid_sync(a.barrier, target);
    stamp(l, 1);

    // B: attention (a head's chunks merged by its last item), while wo's and the router's
    // rows come into L2.
    prefetch_share(L->wo, nullptr, 1);
    prefetch_share(L->router, nullptr, 1);
    attention_items(a, *L, pos, chunk_len, n_chunks, att_sh, dscratch, fscratch);
    grid_sync(a.barrier, target);
    stamp(l, 2);

    // C: wo.
#pragma unroll 4
    for (int i = tid; i < Q; i += kPersistentThreads) f[i] = __ldcg(a.att + i);
    __syncthreads();
    quantize_row(L->wo.type, f, Q, q8, qm);
    product(L->wo, nullptr, 1, row, a.y);
    grid_sync(a.barrier, target);
    stamp(l, 3);

    // D: x_l + y, the FFN norm (quantized for gate|up), the router.
#pragma unroll 4
    for (int i = tid; i < E; i += kPersistentThreads) f[i] = __ldcg(xl + i) + __ldcg(a.y + i);
    __syncthreads();
    rms_norm_row(f, E, L->ffn_norm, a.eps, dscratch);
    quantize_row(L->gate_up.type, f, E, q8, qm);
    router_product(L->router, row, a.router, fscratch);
    grid_sync(a.barrier, target);
    stamp(l, 4);

    // E: top-k (CTA 0 keeps the routing for a trace), gate|up, the down rows into L2.
    if (tid < 32) detail::topk_warp(a.router, probs, a.n_expert, K, a.renormalize, sel, wts);
    __syncthreads();
    if (blockIdx.x == 0 && tid < K) {
      a.route_ids[l * K + tid] = sel[tid];
      a.route_wts[l * K + tid] = wts[tid];
    }
    prefetch_share(L->down, sel, K);
    product(L->gate_up, sel, K, row, a.gu);
    grid_sync(a.barrier, target);
    stamp(l, 5);

    // F: SwiGLU rows, down.
#pragma unroll 4
    for (int i = tid; i < K * ff; i += kPersistentThreads) {
      const int k = i / ff, j = i - k * ff;
      f[i] = act_detail::swiglu_value(__ldcg(a.gu + k * 2 * ff + j), __ldcg(a.gu + k * 2 * ff + ff + j));
    }
    __syncthreads();
    quantize_row(L->down.type, f, K * ff, q8, qm);
    if (l + 1 < a.n_layer) {  // the next layer's Q|K|V into L2
      for (int i = 0; i < L[1].n_qkv; ++i) prefetch_share(L[1].qkv[i], nullptr, 1);
    }
    product(L->down, sel, K, ActIn{f, q8, qm, ff}, a.d);
    grid_sync(a.barrier, target);
    stamp(l, 6);
  }
}

std::atomic<uint64_t> g_launches{0};

}  // namespace

PMat pmat(const DeviceMatrix& m) {
  PMat p;
  p.w = m.data;
  p.row_bytes = m.row_bytes;
  p.matrix_bytes = m.matrix_bytes;
  p.n_in = static_cast<int>(m.n_in);
  p.n_out = static_cast<int>(m.n_out);
  p.type = m.type;
  return p;
}

PersistentLaunch persistent_launch_config(const PersistentArgs& a) {
  PersistentLaunch cfg;
  const size_t att = static_cast<size_t>(4 * a.head_dim + kPersistentChunk + kPersistentThreads) * sizeof(float);
  cfg.smem = static_cast<size_t>(a.fmax) * sizeof(float) + static_cast<size_t>(a.fmax) +
             static_cast<size_t>(a.fmax / 32) * sizeof(uint2) + att;
  int dev = 0, sms = 0, coop = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (coop == 0) return cfg;
  if (cudaFuncSetAttribute(persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(cfg.smem)) != cudaSuccess) {
    cudaGetLastError();
    return cfg;
  }
  int per_sm = 0;
  MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_decode_kernel, kPersistentThreads,
                                                              cfg.smem));
  if (per_sm >= 1) cfg.ctas = sms;
  return cfg;
}

void persistent_decode(const PersistentArgs& a, const PersistentLaunch& cfg, cudaStream_t stream) {
  MT_CHECK(cfg.ctas > 0);
  void* params[] = {const_cast<PersistentArgs*>(&a)};
  MT_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(persistent_decode_kernel), dim3(cfg.ctas),
                                            dim3(kPersistentThreads), params, cfg.smem, stream));
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

uint64_t persistent_decode_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace mt::cuda
