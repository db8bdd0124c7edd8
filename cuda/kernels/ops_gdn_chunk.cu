// The delta rule's chunked form on the device, for prefill: the twin of model/delta_rule.h's
// delta_rule_chunked (same algebra, same order of sums where it is cheap to keep) and of the
// recurrent kernel of cuda/kernels/ops_gdn.cu (same arguments, state layout, eps handling).
//
// The state's value columns evolve independently (delta_j reads column j alone), so a value
// head's dv = dk columns are cut into kSlices slices of J = dk / kSlices, one CTA each: grid
// (kSlices, nv). A CTA keeps its slice of the state (m[j * dk + i] for its J values of j) in
// shared memory across the sequence's chunks of kChunk tokens. Per chunk of n tokens, with G
// the running sum of g from the chunk's start and S0 the state at its start:
//   load   Ks, Qs (C, dk): the L2-normalised k and q rows, rows >= n zero, with g = beta = 0,
//          so they add nothing. The next chunk's raw rows arrive by cp.async while this one
//          is computed: q and k into the other half of the Ks / Qs pair, v, g and beta into
//          staging buffers;
//   pairs  L[t][s] = beta_t (k_t.k_s) e^{G_t - G_s} (s < t), M[t][s] = (q_t.k_s) e^{G_t - G_s}
//          (s <= t), zero above; SK = S0^T k_t, SQ = S0^T q_t on the slice;
//          D = R = beta (v - e^G SK);
//   solve  forward substitution D_t = R_t - sum_{s<t} L[t][s] D_s (one warp, a column a lane,
//          the column in registers);
//   emit   o_t = scale (e^{G_t} SQ_t + sum_{s<=t} M[t][s] D_s);
//          S <- e^{G_last} S0 + sum_s e^{G_last - G_s} k_s D_s^T.
// Every CTA of a head computes L and M itself (they do not depend on the state): kSlices
// times the heads' parallelism without a workspace. (Sharing them through a cluster's
// distributed shared memory measured 1.8x slower on an H200: fewer clusters of four 210 KiB
// CTAs than heads ran at once.)
#include "cuda/kernels/ops_gdn_chunk.h"

#include <cuda_pipeline_primitives.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kChunk = 64;  // tokens per chunk (model/delta_rule.h's kDeltaChunk)
constexpr int kSlices = 4;  // CTAs per value head (4 x nv CTAs: about one wave for nv = 32)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;  // the (row, column) tiles: thread (tid / 16, tid % 16), rows 16 apart

// Shared memory of one CTA, in floats; every row starts 16 bytes aligned (float4 reads,
// cp.async), and row strides of 4 mod 32 floats put 8 consecutive rows' float4 on distinct
// banks.
template <int DK>
struct Smem {
  static constexpr int J = DK / kSlices;  // value columns of the slice
  static constexpr int KS = DK + 4;       // Ks, Qs, Ss row stride
  static constexpr int LS = kChunk + 4;   // L, M row stride
  static constexpr int JS = J + 4;        // D, SQ row stride
  static constexpr int ks = 0;                    // Ks (2, kChunk, DK): this chunk's and the next's
  static constexpr int qs = ks + 2 * kChunk * KS;  // Qs (2, kChunk, DK)
  static constexpr int ss = qs + 2 * kChunk * KS;  // Ss (J, DK): the state slice
  static constexpr int l = ss + J * KS;            // L (kChunk, kChunk)
  static constexpr int m = l + kChunk * LS;        // M (kChunk, kChunk)
  static constexpr int d = m + kChunk * LS;        // D (kChunk, J): v, then R, then the deltas
  static constexpr int sq = d + kChunk * JS;       // SQ (kChunk, J): e^G S0^T q
  static constexpr int vraw = sq + kChunk * JS;    // (kChunk, J): the next chunk's v
  static constexpr int graw = vraw + kChunk * J;   // (kChunk): the next chunk's g
  static constexpr int braw = graw + kChunk;       // (kChunk): the next chunk's beta
  static constexpr int g = braw + kChunk;          // G (kChunk): g, then its running sum
  static constexpr int eg = g + kChunk;            // e^G (kChunk)
  static constexpr int wl = eg + kChunk;           // e^{G_last - G} (kChunk)
  static constexpr int beta = wl + kChunk;         // beta (kChunk)
  static constexpr int floats = beta + kChunk;
  static constexpr size_t bytes = sizeof(float) * floats;
  static_assert(J % kTile == 0 && J <= 32, "a slice's columns: whole tiles, one warp's lanes");
  static_assert(bytes <= 227 * 1024, "sm_90's opt-in shared memory per block");
};

// This chunk's buffers; ks / qs point at the half of the pair that holds it.
struct Views {
  float *ks, *qs, *ss, *l, *m, *d, *sq, *vraw, *graw, *braw, *g, *eg, *wl, *beta;
};

template <int DK>
__device__ __forceinline__ Views views(float* base, int half) {
  using S = Smem<DK>;
  const int off = half * kChunk * S::KS;
  return {base + S::ks + off, base + S::qs + off, base + S::ss,   base + S::l,    base + S::m,
          base + S::d,        base + S::sq,       base + S::vraw, base + S::graw, base + S::braw,
          base + S::g,        base + S::eg,       base + S::wl,   base + S::beta};
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// stage: cp.async of rows t < n of the chunk at token t0, raw, into v's halves of Ks / Qs and
// into vraw, graw, braw; one commit group per thread.
template <int DK>
__device__ __forceinline__ void stage_chunk(const DeltaRuleArgs& a, const Views& v, int h, int kh, int j0, int t0,
                                            int n) {
  using S = Smem<DK>;
  constexpr int P = DK / 4, PV = S::J / 4;  // 16-byte pieces of a q / k row, of a v row
  for (int e = threadIdx.x; e < n * P; e += kThreads) {
    const int t = e / P, p = 4 * (e % P);
    const float* row = a.u + static_cast<int64_t>(t0 + t) * a.conv_dim + kh * DK + p;
    __pipeline_memcpy_async(v.qs + t * S::KS + p, row, 16);
    __pipeline_memcpy_async(v.ks + t * S::KS + p, row + a.key_dim, 16);
  }
  for (int e = threadIdx.x; e < n * PV; e += kThreads) {
    const int t = e / PV, p = 4 * (e % PV);
    const float* row = a.u + static_cast<int64_t>(t0 + t) * a.conv_dim + 2 * a.key_dim + h * DK + j0 + p;
    __pipeline_memcpy_async(v.vraw + t * S::J + p, row, 16);
  }
  for (int t = threadIdx.x; t < n; t += kThreads) {
    const int64_t i = static_cast<int64_t>(t0 + t) * a.nv + h;
    __pipeline_memcpy_async(v.graw + t, a.g + i, 4);
    __pipeline_memcpy_async(v.braw + t, a.beta + i, 4);
  }
  __pipeline_commit();
}

// load: the staged rows t < n normalised in place as the CPU's l2_normalize (x times 1 /
// max(|x|, eps), the recurrent kernel's eps), the sum of squares in f32, rows n.. zero (a
// warp's rows all read into registers first, so their loads and shuffle sums overlap); v
// into D; warp 0 forms G (a scan: the order of the sums, not their terms, differs from the
// CPU's), e^G, e^{G_last - G} and beta from the staged g and beta.
template <int DK>
__device__ __forceinline__ void load_chunk(const DeltaRuleArgs& a, const Views& v, int n) {
  using S = Smem<DK>;
  constexpr int E = DK / 32, R = kChunk / kWarps;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float q[R][E], k[R][E], qn[R], kn[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = warp + r * kWarps;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[r][e] = t < n ? v.qs[t * S::KS + e * 32 + lane] : 0.0f;
      k[r][e] = t < n ? v.ks[t * S::KS + e * 32 + lane] : 0.0f;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float qq = 0.0f, kk = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qq = fmaf(q[r][e], q[r][e], qq);
      kk = fmaf(k[r][e], k[r][e], kk);
    }
    qn[r] = detail::warp_sum(qq);
    kn[r] = detail::warp_sum(kk);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = warp + r * kWarps;
    const float qs = 1.0f / fmaxf(sqrtf(qn[r]), a.eps), ks = 1.0f / fmaxf(sqrtf(kn[r]), a.eps);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      v.qs[t * S::KS + e * 32 + lane] = q[r][e] * qs;
      v.ks[t * S::KS + e * 32 + lane] = k[r][e] * ks;
    }
  }
  for (int e = threadIdx.x; e < kChunk * S::J; e += kThreads) {
    const int t = e / S::J, jj = e % S::J;
    v.d[t * S::JS + jj] = t < n ? v.vraw[e] : 0.0f;
  }
  if (warp == 0) {  // lane l holds tokens l and l + 32; inclusive scans over the lanes
    float G0 = lane < n ? v.graw[lane] : 0.0f, G1 = lane + 32 < n ? v.graw[lane + 32] : 0.0f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float p0 = __shfl_up_sync(0xffffffffu, G0, o), p1 = __shfl_up_sync(0xffffffffu, G1, o);
      if (lane >= o) G0 += p0, G1 += p1;
    }
    G1 += __shfl_sync(0xffffffffu, G0, 31);
    const float glast = __shfl_sync(0xffffffffu, n - 1 < 32 ? G0 : G1, (n - 1) & 31);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int t = lane + 32 * u;
      const float G = u == 0 ? G0 : G1;
      v.g[t] = G;
      v.eg[t] = expf(G);
      v.wl[t] = expf(glast - G);
      v.beta[t] = t < n ? v.braw[t] : 0.0f;
    }
  }
}

// pairs: L and M from the (16 x 16) threads' (4 x 4) tiles of rows ty + 16 r and columns
// tx + 16 c (c <= r: the others are above the diagonal, zero); SK and SQ on (4 x J / 16)
// tiles of the slice; D <- R, SQ <- e^G SQ.
template <int DK>
__device__ __forceinline__ void chunk_pairs(const Views& v) {
  using S = Smem<DK>;
  constexpr int CT = S::J / kTile;
  const int ty = threadIdx.x / kTile, tx = threadIdx.x % kTile;
  float kk[4][4] = {}, qk[4][4] = {}, sk[4][CT] = {}, sq[4][CT] = {};
#pragma unroll 2
  for (int i = 0; i < DK; i += 4) {
    float4 kt[4], qt[4], kc[4], sc[CT];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      kt[r] = ld4(v.ks + (ty + kTile * r) * S::KS + i);
      qt[r] = ld4(v.qs + (ty + kTile * r) * S::KS + i);
      kc[r] = ld4(v.ks + (tx + kTile * r) * S::KS + i);
    }
#pragma unroll
    for (int c = 0; c < CT; ++c) sc[c] = ld4(v.ss + (tx + kTile * c) * S::KS + i);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int c = 0; c <= r; ++c) {  // c > r: columns past every row of the tile
        kk[r][c] = dot4(kt[r], kc[c], kk[r][c]);
        qk[r][c] = dot4(qt[r], kc[c], qk[r][c]);
      }
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        sk[r][c] = dot4(kt[r], sc[c], sk[r][c]);
        sq[r][c] = dot4(qt[r], sc[c], sq[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int t = ty + kTile * r;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int s = tx + kTile * c;
      const float decay = s <= t ? expf(v.g[t] - v.g[s]) : 0.0f;
      v.l[t * S::LS + s] = s < t ? v.beta[t] * kk[r][c] * decay : 0.0f;
      v.m[t * S::LS + s] = qk[r][c] * decay;
    }
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int jj = tx + kTile * c;
      float* dt = v.d + t * S::JS + jj;
      *dt = v.beta[t] * (*dt - v.eg[t] * sk[r][c]);
      v.sq[t * S::JS + jj] = v.eg[t] * sq[r][c];
    }
  }
}

// solve: lane j < J of warp 0 substitutes column j forward, the column in registers; four
// partial sums cut the dependent chain of row t to t / 4.
template <int DK>
__device__ __forceinline__ void chunk_solve(const Views& v) {
  using S = Smem<DK>;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32 || lane >= S::J) return;
  float d[kChunk];
#pragma unroll
  for (int t = 0; t < kChunk; ++t) {
    const float* lt = v.l + t * S::LS;
    float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma unroll
    for (int s = 0; s < t; s += 4) {
      const float4 l4 = ld4(lt + s);
      p0 = fmaf(l4.x, d[s], p0);
      if (s + 1 < t) p1 = fmaf(l4.y, d[s + 1], p1);
      if (s + 2 < t) p2 = fmaf(l4.z, d[s + 2], p2);
      if (s + 3 < t) p3 = fmaf(l4.w, d[s + 3], p3);
    }
    float* dt = v.d + t * S::JS + lane;
    d[t] = *dt - ((p0 + p1) + (p2 + p3));
    *dt = d[t];
  }
}

// emit: the outputs of rows t < n on the (4 x J / 16) tiles (s in order, as the CPU), and the
// state slice: thread (jg, iq) owns k indices 4 iq..4 iq + 3 of UC columns jg UC + u.
template <int DK>
__device__ __forceinline__ void chunk_emit(const DeltaRuleArgs& a, const Views& v, int h, int j0, int t0, int n,
                                           float scale) {
  using S = Smem<DK>;
  constexpr int CT = S::J / kTile;
  const int ty = threadIdx.x / kTile, tx = threadIdx.x % kTile;
  float o[4][CT];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int c = 0; c < CT; ++c) o[r][c] = v.sq[(ty + kTile * r) * S::JS + tx + kTile * c];
  }
#pragma unroll
  for (int s = 0; s < kChunk; s += 4) {
    float4 mr[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) mr[r] = s < kTile * (r + 1) ? ld4(v.m + (ty + kTile * r) * S::LS + s) : float4{};
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const float* ds = v.d + s * S::JS + tx + kTile * c;
      const float d0 = ds[0], d1 = ds[S::JS], d2 = ds[2 * S::JS], d3 = ds[3 * S::JS];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (s >= kTile * (r + 1)) continue;  // past every row of the tile: M is zero there
        o[r][c] = fmaf(mr[r].x, d0, o[r][c]);
        o[r][c] = fmaf(mr[r].y, d1, o[r][c]);
        o[r][c] = fmaf(mr[r].z, d2, o[r][c]);
        o[r][c] = fmaf(mr[r].w, d3, o[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int t = ty + kTile * r;
    if (t >= n) continue;
    float* out = a.out + static_cast<int64_t>(t0 + t) * a.nv * DK + h * DK + j0;
#pragma unroll
    for (int c = 0; c < CT; ++c) out[tx + kTile * c] = o[r][c] * scale;
  }

  constexpr int IQ = DK / 4, UC = S::J * IQ / kThreads;
  static_assert(UC >= 1 && S::J * IQ == UC * kThreads, "the state slice: whole float4 per thread");
  const int iq = threadIdx.x % IQ, jg = threadIdx.x / IQ;
  const float elast = v.eg[n - 1];
  float4 acc[UC];
#pragma unroll
  for (int u = 0; u < UC; ++u) {
    const float4 s0 = ld4(v.ss + (jg * UC + u) * S::KS + 4 * iq);
    acc[u] = make_float4(elast * s0.x, elast * s0.y, elast * s0.z, elast * s0.w);
  }
  for (int s = 0; s < n; ++s) {
    const float4 k4 = ld4(v.ks + s * S::KS + 4 * iq);
    const float w = v.wl[s];
#pragma unroll
    for (int u = 0; u < UC; ++u) {
      const float wd = w * v.d[s * S::JS + jg * UC + u];
      acc[u].x = fmaf(wd, k4.x, acc[u].x);
      acc[u].y = fmaf(wd, k4.y, acc[u].y);
      acc[u].z = fmaf(wd, k4.z, acc[u].z);
      acc[u].w = fmaf(wd, k4.w, acc[u].w);
    }
  }
#pragma unroll
  for (int u = 0; u < UC; ++u) *reinterpret_cast<float4*>(v.ss + (jg * UC + u) * S::KS + 4 * iq) = acc[u];
}

// One CTA per (slice, value head): the state slice in, the chunks in order (chunk c in half
// c % 2 of the paired buffers, chunk c + 1 staged into the other), the slice out.
template <int DK>
__global__ void __launch_bounds__(kThreads, 1) delta_rule_chunk_kernel(DeltaRuleArgs a) {
  using S = Smem<DK>;
  extern __shared__ float4 smem4[];
  float* base = reinterpret_cast<float*>(smem4);
  const int h = blockIdx.y, j0 = blockIdx.x * S::J;
  const int kh = a.tiled ? h % a.nk : h / (a.nv / a.nk);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  float* state = a.state + static_cast<int64_t>(h) * DK * DK + static_cast<int64_t>(j0) * DK;  // (J, DK)
  Views v = views<DK>(base, 0);
  for (int e = threadIdx.x; e < S::J * DK; e += kThreads) v.ss[e / DK * S::KS + e % DK] = state[e];
  stage_chunk<DK>(a, v, h, kh, j0, 0, min(kChunk, a.T));
  for (int t0 = 0, half = 0; t0 < a.T; t0 += kChunk, half ^= 1) {
    const int n = min(kChunk, a.T - t0);
    v = views<DK>(base, half);
    __pipeline_wait_prior(0);
    __syncthreads();
    load_chunk<DK>(a, v, n);
    __syncthreads();
    if (t0 + kChunk < a.T) {
      stage_chunk<DK>(a, views<DK>(base, half ^ 1), h, kh, j0, t0 + kChunk, min(kChunk, a.T - t0 - kChunk));
    }
    chunk_pairs<DK>(v);
    __syncthreads();
    chunk_solve<DK>(v);
    __syncthreads();
    chunk_emit<DK>(a, v, h, j0, t0, n, scale);
    __syncthreads();  // the next chunk rewrites every buffer but the staged half
  }
  for (int e = threadIdx.x; e < S::J * DK; e += kThreads) state[e] = v.ss[e / DK * S::KS + e % DK];
}

template <int DK>
void launch(const DeltaRuleArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = Smem<DK>::bytes;
  MT_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_chunk_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  delta_rule_chunk_kernel<DK><<<dim3(kSlices, a.nv), kThreads, bytes, stream>>>(a);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void delta_rule_chunked(const DeltaRuleArgs& a, cudaStream_t stream) {
  MT_CHECK(a.nk > 0 && a.nv % a.nk == 0 && a.T > 0);
  // 16-byte cp.async of q, k and v rows: u aligned, row and head offsets multiples of 4 floats.
  MT_CHECK_MSG(reinterpret_cast<uintptr_t>(a.u) % 16 == 0 && a.conv_dim % 4 == 0 && a.key_dim % 4 == 0,
               "delta_rule_chunked: u must be 16-byte aligned");
  switch (a.dk) {
    case 64: launch<64>(a, stream); break;
    case 128: launch<128>(a, stream); break;
    default: MT_CHECK_MSG(false, "delta_rule_chunked: state size must be 64 or 128 (gdn_supports)");
  }
}

}  // namespace mt::cuda
