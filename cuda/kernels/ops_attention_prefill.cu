// Prompt batches (cuda/kernels/ops.h attention, n_tokens above the decode limit): the choice
// between the two prefill kernels (cuda/kernels/ops_attention_tc.cuh: tensor cores where they
// fit, ops_attention_tc.cu) and the f32 tiled flash attention on the CUDA cores, which
// takes the rest (F32 and Q8_0 caches, other head dims).
//
// The f32 kernel: one block of 4 warps per (tile of kBq = 32 queries, head); warp w owns
// queries 8w .. 8w + 7 of the tile. The block streams over the KV positions the tile's last
// query sees, kBk = 32 at a time: the K and V tiles are dequantized into shared memory
// (f32, the head padded with zeros to Dp = 32 * NE), each lane scores one key against
// the warp's 8 queries, the causal mask and an online softmax (running max m, sum l,
// accumulator rescaled by e^(m_old - m_new)) update per-query state kept in registers
// (lane l holds elements l, l + 32, ... of each accumulator). The score matrix exists
// only as one 32 x 32 tile per warp; the output is acc / l.
#include <cmath>

#include "core/check.h"
#include "cuda/kernels/ops_attention.cuh"
#include "cuda/kernels/ops_attention_tc.cuh"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda::detail {
namespace {

constexpr int kBq = 32;      // queries per block
constexpr int kBk = 32;      // keys per tile (one per lane)
constexpr int kWarps = 4;
constexpr int kRows = kBq / kWarps;  // queries per warp

// Shared memory (floats): q (kBq, Dp), k (kBk, Dp + 4: rows 16-byte aligned and the
// lanes' float4 reads on distinct banks), v (kBk, Dp), p (kWarps, kRows, kBk).
template <int NE>
constexpr size_t prefill_smem_floats() {
  constexpr size_t Dp = NE * 32;
  return kBq * Dp + kBk * (Dp + 4) + kBk * Dp + kWarps * kRows * kBk;
}

template <QuantType KV, int NE>
__global__ void __launch_bounds__(kWarps * 32) attn_prefill_kernel(AttnGeom g) {
  constexpr int Dp = NE * 32, KS = Dp + 4;
  extern __shared__ float4 smem4[];
  float* q_sh = reinterpret_cast<float*>(smem4);
  float* k_sh = q_sh + kBq * Dp;
  float* v_sh = k_sh + kBk * KS;
  float* p_sh = v_sh + kBk * Dp;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, t0 = blockIdx.x * kBq;
  const int D = g.D;
  const int t_end = min(t0 + kBq, g.n_tokens);
  const uint32_t kv_end = g.pos0 + static_cast<uint32_t>(t_end);  // keys [0, kv_end) for the tile
  const int kvh = h / g.group;
  const uint8_t* k_base = g.k + kvh * g.head_bytes;
  const uint8_t* v_base = g.v + kvh * g.head_bytes;

  for (int i = tid; i < kBq * Dp; i += blockDim.x) {
    const int r = i / Dp, e = i % Dp, t = t0 + r;
    q_sh[i] = (t < g.n_tokens && e < D) ? g.q[(static_cast<int64_t>(t) * g.n_head + h) * D + e] : 0.0f;
  }

  const int r0 = warp * kRows;  // the warp's first query row in the tile
  float* p_w = p_sh + warp * kRows * kBk;
  float m[kRows], l[kRows], acc[kRows][NE];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < NE; ++i) acc[r][i] = 0.0f;
  }

  // With a window the tile's first query sees nothing before its first key.
  const uint32_t kv_start = first_key(g.window, g.pos0 + static_cast<uint32_t>(t0)) / kBk * kBk;
  for (uint32_t kv0 = kv_start; kv0 < kv_end; kv0 += kBk) {
    __syncthreads();  // every warp is done with the previous K/V tile
    for (int i = tid; i < kBk * Dp; i += blockDim.x) {
      const int j = i / Dp, e = i % Dp;
      const uint32_t pos = kv0 + static_cast<uint32_t>(j);
      float kx = 0.0f, vx = 0.0f;
      if (pos < kv_end && e < D) {
        kx = kv_load<KV>(k_base + pos * g.row_bytes, e);
        vx = kv_load<KV>(v_base + pos * g.row_bytes, e);
      }
      k_sh[j * KS + e] = kx;
      v_sh[j * Dp + e] = vx;
    }
    __syncthreads();  // the tile (and, first time, q) is in shared memory

    // Scores of key kv0 + lane against the warp's queries.
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
    const float4* k4 = reinterpret_cast<const float4*>(k_sh + lane * KS);
#pragma unroll 4
    for (int e4 = 0; e4 < Dp / 4; ++e4) {
      const float4 kx = k4[e4];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 qx = reinterpret_cast<const float4*>(q_sh + (r0 + r) * Dp)[e4];
        s[r] += qx.x * kx.x + qx.y * kx.y + qx.z * kx.z + qx.w * kx.w;
      }
    }

    // Causal mask and online softmax; m, l are the same in every lane of the warp.
    const uint32_t kpos = kv0 + static_cast<uint32_t>(lane);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = t0 + r0 + r;
      const uint32_t qpos = g.pos0 + static_cast<uint32_t>(t);
      const bool seen = t < g.n_tokens && kpos <= qpos && kpos >= first_key(g.window, qpos);
      const float sv = seen ? s[r] * g.scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(sv));
      float p = 0.0f, alpha = 1.0f;
      if (m_new != -INFINITY) {  // nothing seen yet (a padding query): state stays empty
        p = seen ? expf(sv - m_new) : 0.0f;
        alpha = expf(m[r] - m_new);
      }
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < NE; ++i) acc[r][i] *= alpha;
      p_w[r * kBk + lane] = p;
    }
    __syncwarp();  // p_w written by every lane, read by every lane below

#pragma unroll 4
    for (int j = 0; j < kBk; ++j) {
      float vx[NE];
#pragma unroll
      for (int i = 0; i < NE; ++i) vx[i] = v_sh[j * Dp + lane + 32 * i];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float pj = p_w[r * kBk + j];
#pragma unroll
        for (int i = 0; i < NE; ++i) acc[r][i] += pj * vx[i];
      }
    }
    __syncwarp();  // p_w is rewritten by the next tile
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int t = t0 + r0 + r;
    if (t >= g.n_tokens) continue;
    // A sink adds e^(sink - M) to the denominator, M = max(m, sink) (the accumulator and
    // l rescaled to M).
    float alpha = 1.0f, denom = l[r];
    if (g.sinks != nullptr) {
      const float sink = g.sinks[h], M = fmaxf(m[r], sink);
      alpha = expf(m[r] - M);
      denom = l[r] * alpha + expf(sink - M);
    }
    const float inv = 1.0f / denom;
    float* o = g.out + (static_cast<int64_t>(t) * g.n_head + h) * D;
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int e = lane + 32 * i;
      if (e < D) o[e] = acc[r][i] * alpha * inv;
    }
  }
}

template <QuantType KV, int NE>
void launch_prefill(const AttnGeom& g, cudaStream_t stream) {
  const size_t smem = prefill_smem_floats<NE>() * sizeof(float);
  auto kernel = attn_prefill_kernel<KV, NE>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((g.n_tokens + kBq - 1) / kBq), static_cast<unsigned>(g.n_head));
  kernel<<<grid, kWarps * 32, smem, stream>>>(g);
  MT_CUDA_CHECK_LAUNCH();
}

template <QuantType KV>
void launch_prefill_dim(const AttnGeom& g, cudaStream_t stream) {
  if (g.D <= 64) {
    launch_prefill<KV, 2>(g, stream);
  } else if (g.D <= 128) {
    launch_prefill<KV, 4>(g, stream);
  } else {
    launch_prefill<KV, 8>(g, stream);
  }
}

}  // namespace

void attention_prefill_simt(QuantType kv_type, const AttnGeom& g, cudaStream_t stream) {
  MT_CHECK(g.D > 0 && g.D <= kMaxHeadDim);
  switch (kv_type) {
    case QuantType::F16: launch_prefill_dim<QuantType::F16>(g, stream); break;
    case QuantType::Q8_0: launch_prefill_dim<QuantType::Q8_0>(g, stream); break;
    case QuantType::F32: launch_prefill_dim<QuantType::F32>(g, stream); break;
    default: MT_CHECK_MSG(false, "attention: KV cache type must be f16, q8_0 or f32");
  }
}

void attention_prefill(QuantType kv_type, const AttnGeom& g, cudaStream_t stream) {
  if (attention_prefill_tc_fits(kv_type, g)) {
    attention_prefill_tc(g, stream);
  } else {
    attention_prefill_simt(kv_type, g, stream);
  }
}

}  // namespace mt::cuda::detail

namespace mt::cuda {
namespace {

// attention()'s shape checks and per-head byte geometry (cuda/kernels/ops_kv_attention.cu).
detail::AttnGeom prefill_geom(const AttentionArgs& a) {
  MT_CHECK(a.n_tokens > 0 && a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  MT_CHECK(a.head_dim > 0 && a.head_dim <= detail::kMaxHeadDim);
  const auto head_bytes = mt::row_bytes(a.kv_type, static_cast<uint64_t>(a.head_dim));
  MT_CHECK_MSG(head_bytes.has_value(), "attention: head_dim is not a whole number of KV cache blocks");
  MT_CHECK(a.kv_row_bytes >= *head_bytes * static_cast<uint64_t>(a.n_head_kv));
  MT_CHECK_MSG(a.pos_dev == nullptr, "attention: the prefill kernels take pos0 from the host");
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  detail::AttnGeom g{a.q,        a.k_cache, a.v_cache, a.kv_row_bytes, *head_bytes, a.n_tokens, a.n_head,
                     a.n_head / a.n_head_kv, a.head_dim, a.pos0,     scale,       a.out};
  g.window = a.window;
  g.sinks = a.sinks;
  return g;
}

}  // namespace

bool attention_prefill_tc_fits(const AttentionArgs& a) {
  return detail::attention_prefill_tc_fits(a.kv_type, prefill_geom(a));
}

void attention_prefill_with(PrefillKernel kernel, const AttentionArgs& a, cudaStream_t stream) {
  const detail::AttnGeom g = prefill_geom(a);
  if (kernel == PrefillKernel::kSimt) {
    detail::attention_prefill_simt(a.kv_type, g, stream);
    return;
  }
  MT_CHECK_MSG(detail::attention_prefill_tc_fits(a.kv_type, g), "attention: the tensor-core kernel does not fit");
  const int block_rows = kernel == PrefillKernel::kTensorCore64Rows    ? 64
                         : kernel == PrefillKernel::kTensorCore128Rows ? 128
                                                                      : 0;
  detail::attention_prefill_tc(g, stream, block_rows);
}

}  // namespace mt::cuda
