// The MMQ GEMM (cuda/kernels/mmq.h) shared by every weight type: a CTA computes a 128-row x BN-
// column tile of Y^T (weight rows x tokens / slots), K stepped 256 elements at a time.
//
// Per stage each of the 256 threads decodes half a weight row's 256 elements (128 int8
// codes, the sub-block scales and mins) into shared memory, and the CTA copies the BN
// activation rows' 256 int8 quants and their 8 block metas (d, d * sum of quants); then
// 8 warps (4 along the rows x 2 along the columns, a warp 32 rows x BN / 2 columns) take
// the 8 32-element sub-blocks one at a time: per m16 x n8 tile one
// mma.sync.m16n8k32.s8 (Q6_K: two m16n8k16, one per 16-scale) gives the exact int32 dot
// of the sub-block, and
//   acc += (scale_w * d_x) * dot   (- min_w * d_x * sum_x for Q4_K / Q5_K).
// The int32 -> f32 conversion is folded into the mma: its accumulator input is the bit
// pattern of 1.5 * 2^23, so the result's bits are the float 1.5 * 2^23 + dot exactly
// (|dot| <= 32 * 128 * 128 < 2^22) and one subtraction recovers dot.
//
// Shared rows are 272 bytes (256 + 16): the fragment loads (lane = 4g + t reads row g,
// bytes 4t.. of a sub-block) hit 32 distinct banks. Shared memory per CTA: 52 KB (BN 16),
// 58 KB (32), 69 KB (64); at most 128 registers (launch bounds: 2 CTAs per SM). No
// register prefetch or cp.async: the 2-3 CTAs on an SM overlap one's loads with
// another's math.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k32" / "m16n8k16", integer
// types), g = lane >> 2, t = lane & 3:
//   A (16 x 32 s8, row-major), 4 regs of 4 bytes (lowest k in the low byte):
//     a0 = row g, k 4t..4t+3      a1 = row g + 8, k 4t..4t+3
//     a2 = row g, k 16+4t..       a3 = row g + 8, k 16+4t..
//   B (32 x 8 s8, "col": column n's k contiguous), 2 regs: b0 = col g, k 4t..4t+3;
//     b1 = col g, k 16+4t..
//   C/D (16 x 8 s32): c0, c1 = row g, cols 2t, 2t+1; c2, c3 = row g + 8, cols 2t, 2t+1.
//   m16n8k16: A = {a0, a1} of its 16 k, B = {b0}; C/D as above.
//
// A weight type plugs in through a traits struct Tr: kMin (Q4_K / Q5_K min terms),
// kHalf16 (per-16 scales: Q6_K) and decode(row, stage, h, nb, q, sc, mn): half h of the
// stage's 256 elements of one weight row (elements 128h + 4i .. +3 as the int8 bytes of
// q[i]), their scales (4 per 32, or 8 per 16) and mins (4); nb = the stage's valid
// 32-element blocks (< 8 only in a 32-element type's last stage).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/check.h"
#include "cuda/kernels/mmq_kernels.h"

namespace mt::cuda::mmq_detail {

inline constexpr int kThreads = 256;
inline constexpr int kBM = kMmqRowsPerCta;        // weight rows per CTA
inline constexpr int kStage = 256;                // K elements per stage
inline constexpr int kStageBlocks = kStage / 32;  // 32-element sub-blocks per stage
inline constexpr int kRowBytes = kStage + 16;     // shared row stride (bank-conflict-free fragments)
inline constexpr int kWarpsM = 4, kWarpsN = 2;
inline constexpr int kMI = kBM / (16 * kWarpsM);  // m16 tiles per warp
static_assert(kWarpsM * kWarpsN * 32 == kThreads && kBM * 2 == kThreads, "a thread per half weight row");

// 1.5 * 2^23: the accumulator input whose result bits are the float kBias + dot.
inline constexpr int kBiasBits = 0x4B400000;
inline constexpr float kBias = 12582912.0f;

template <int BN>
struct SharedTile {
  int8_t w[kBM * kRowBytes];            // weight codes: row r at r * kRowBytes, stage element k at byte k
  int8_t x[BN * kRowBytes];             // activation quants: column j likewise
  float scale[2 * kStageBlocks][kBM];   // weight scales per 32 (entries 0..7) or per 16 (0..15)
  float min[kStageBlocks][kBM];         // dmin * m per 32 (kMin types)
  float xd[kStageBlocks][BN];           // activation block d
  float xs[kStageBlocks][BN];           // d * (sum of the block's quants)
  int64_t xrow[BN];                     // element offset of column j's X row, -1: no column
  int32_t yrow[BN];                     // Y row of column j, -1: no column
};

// ---- small device helpers

__device__ __forceinline__ float h2f(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
}

// The N little-endian 32-bit words at p (any alignment). A whole range (len == 4N) at a
// 16- or 8-byte aligned p is read with vector loads; otherwise aligned 4-byte loads
// joined by funnel shifts, reading only the aligned words overlapping [p, p + len) (never
// a word wholly past len); the bytes past len are unspecified.
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, int len, uint32_t (&w)[N]) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  if constexpr (N % 4 == 0) {
    if (len == 4 * N && (addr & 15) == 0) {
#pragma unroll
      for (int i = 0; i < N / 4; ++i) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
      }
      return;
    }
  }
  if constexpr (N % 2 == 0) {
    if (len == 4 * N && (addr & 7) == 0) {
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
        w[2 * i] = v.x, w[2 * i + 1] = v.y;
      }
      return;
    }
  }
  const auto* base = reinterpret_cast<const uint32_t*>(addr & ~static_cast<uintptr_t>(3));
  const int off = static_cast<int>(addr & 3);
  const int n_load = len > 0 ? (off + len + 3) >> 2 : 0;
  uint32_t a[N + 1];
#pragma unroll
  for (int i = 0; i <= N; ++i) a[i] = i < n_load ? __ldg(base + i) : 0u;
  const uint32_t sh = static_cast<uint32_t>(off) * 8;
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = __funnelshift_r(a[i], a[i + 1], sh);
}

// The little-endian word at byte offset OFF of the words w.
template <int OFF, int N>
__device__ __forceinline__ uint32_t word_at(const uint32_t (&w)[N]) {
  static_assert(OFF >= 0 && OFF + 4 <= 4 * N, "word inside the array");
  if constexpr (OFF % 4 == 0) {
    return w[OFF / 4];
  } else {
    return __funnelshift_r(w[OFF / 4], w[OFF / 4 + 1], 8 * (OFF % 4));
  }
}

// f(std::integral_constant<int, I>) for I = B .. E - 1.
template <int B, int E, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (B < E) {
    f(std::integral_constant<int, B>{});
    static_for<B + 1, E>(f);
  }
}

__device__ __forceinline__ uint32_t lds32(const int8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// d = a (16 x 32 s8) . b (32 x 8 s8) + kBiasBits, as floats kBias + dot.
__device__ __forceinline__ void mma_k32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  int r0, r1, r2, r3;
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(kBiasBits));
  d[0] = __int_as_float(r0) - kBias;
  d[1] = __int_as_float(r1) - kBias;
  d[2] = __int_as_float(r2) - kBias;
  d[3] = __int_as_float(r3) - kBias;
}

// The same for a 16-deep k: a (16 x 16 s8) = {a0, a1}, b (16 x 8 s8) = b0.
__device__ __forceinline__ void mma_k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  int r0, r1, r2, r3;
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};\n"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(a0), "r"(a1), "r"(b0), "r"(kBiasBits));
  d[0] = __int_as_float(r0) - kBias;
  d[1] = __int_as_float(r1) - kBias;
  d[2] = __int_as_float(r2) - kBias;
  d[3] = __int_as_float(r3) - kBias;
}

// ---- the kernel

// Column j of this CTA: X row and Y row (dense: token first + j; routed: slot
// perm[first + j]); -1 past count.
template <int BN>
__device__ __forceinline__ void set_columns(const MmqArgs& p, int first, int count, SharedTile<BN>& s) {
  for (int j = static_cast<int>(threadIdx.x); j < BN; j += kThreads) {
    int64_t xr = -1;
    int32_t yr = -1;
    if (j < count) {
      const int pos = first + j;
      const int slot = p.perm != nullptr ? __ldg(p.perm + pos) : pos;
      const int x_row = p.perm == nullptr || p.x_per_slot ? slot : slot / p.K;
      xr = static_cast<int64_t>(x_row) * p.n_in;
      yr = slot;
    }
    s.xrow[j] = xr;
    s.yrow[j] = yr;
  }
}

// One stage into shared memory (every thread of the CTA): the decode role's weight row
// half, its scales (and mins); the copy role's activation chunks and their blocks' d and
// d * sum (zeros past the columns or the row).
template <class Tr, int BN, int kXPasses, int kMetaPasses>
__device__ __forceinline__ void load_stage(const MmqArgs& p, int st, int nb, int n_blocks, const uint8_t* wrow,
                                           int dec_row, int dec_half, int x_chunk, const int64_t (&x_off)[kXPasses],
                                           const int64_t (&meta_off)[kMetaPasses], SharedTile<BN>& s) {
  const int tid = static_cast<int>(threadIdx.x);
  {
    uint32_t q[32];
    float sc[Tr::kHalf16 ? 8 : 4], mn[4];
    Tr::decode(wrow, st, dec_half, nb, q, sc, mn);
    uint4* dst = reinterpret_cast<uint4*>(s.w + dec_row * kRowBytes + 128 * dec_half);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = make_uint4(q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]);
    constexpr int kSc = Tr::kHalf16 ? 8 : 4;
#pragma unroll
    for (int i = 0; i < kSc; ++i) s.scale[kSc * dec_half + i][dec_row] = sc[i];
    if constexpr (Tr::kMin) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s.min[4 * dec_half + i][dec_row] = mn[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kXPasses; ++i) {
    const int e = st * kStage + 16 * x_chunk;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (x_off[i] >= 0 && e < p.n_in) v = __ldg(reinterpret_cast<const uint4*>(p.xq + x_off[i] + e));
    *reinterpret_cast<uint4*>(s.x + ((tid >> 4) + 16 * i) * kRowBytes + 16 * x_chunk) = v;
  }
#pragma unroll
  for (int i = 0; i < kMetaPasses; ++i) {
    const int idx = tid + kThreads * i;
    if (idx < BN * kStageBlocks) {
      const int col = idx >> 3, b = idx & 7, blk = st * kStageBlocks + b;
      float d = 0.f, ds = 0.f;
      if (meta_off[i] >= 0 && blk < n_blocks) {
        const uint2 m = __ldg(p.xmeta + meta_off[i] + blk);
        const int sum =
            static_cast<int>(static_cast<int16_t>(m.y & 0xFFFFu)) + static_cast<int>(static_cast<int16_t>(m.y >> 16));
        d = __uint_as_float(m.x);
        ds = d * static_cast<float>(sum);
      }
      s.xd[b][col] = d;
      s.xs[b][col] = ds;
    }
  }
}

// One stage's products (every warp its rows wm0.. and columns wn0..): the int8 tiles by
// mma, scaled by the weight rows' and activation columns' scales (minus the mins' part)
// into acc, sub-block by sub-block in order.
template <class Tr, int BN, int kNI>
__device__ __forceinline__ void stage_mma(const SharedTile<BN>& s, int nb, int wm0, int wn0, int g, int t,
                                          float (&acc)[kMI][kNI][4]) {
#pragma unroll
  for (int b = 0; b < kStageBlocks; ++b) {
    if (b >= nb) break;
    uint32_t af[kMI][4], bf[kNI][2];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int8_t* pa = s.w + (wm0 + 16 * mi + g) * kRowBytes + 32 * b + 4 * t;
      af[mi][0] = lds32(pa);
      af[mi][1] = lds32(pa + 8 * kRowBytes);
      af[mi][2] = lds32(pa + 16);
      af[mi][3] = lds32(pa + 8 * kRowBytes + 16);
    }
    float2 xd[kNI], xs[kNI];
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const int8_t* pb = s.x + (wn0 + 8 * ni + g) * kRowBytes + 32 * b + 4 * t;
      bf[ni][0] = lds32(pb);
      bf[ni][1] = lds32(pb + 16);
      xd[ni] = *reinterpret_cast<const float2*>(&s.xd[b][wn0 + 8 * ni + 2 * t]);
      if constexpr (Tr::kMin) xs[ni] = *reinterpret_cast<const float2*>(&s.xs[b][wn0 + 8 * ni + 2 * t]);
    }
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int r = wm0 + 16 * mi + g;  // and r + 8
      if constexpr (!Tr::kHalf16) {
        const float s0 = s.scale[b][r], s1 = s.scale[b][r + 8];
        float n0 = 0.f, n1 = 0.f;
        if constexpr (Tr::kMin) n0 = s.min[b][r], n1 = s.min[b][r + 8];
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) {
          float dot[4];
          mma_k32(dot, af[mi], bf[ni]);
          float* c = acc[mi][ni];
          c[0] = fmaf(s0 * xd[ni].x, dot[0], c[0]);
          c[1] = fmaf(s0 * xd[ni].y, dot[1], c[1]);
          c[2] = fmaf(s1 * xd[ni].x, dot[2], c[2]);
          c[3] = fmaf(s1 * xd[ni].y, dot[3], c[3]);
          if constexpr (Tr::kMin) {
            c[0] = fmaf(-n0, xs[ni].x, c[0]);
            c[1] = fmaf(-n0, xs[ni].y, c[1]);
            c[2] = fmaf(-n1, xs[ni].x, c[2]);
            c[3] = fmaf(-n1, xs[ni].y, c[3]);
          }
        }
      } else {  // scales of k 0..15 and 16..31 of rows r and r + 8
        const float lo0 = s.scale[2 * b][r], lo1 = s.scale[2 * b][r + 8];
        const float hi0 = s.scale[2 * b + 1][r], hi1 = s.scale[2 * b + 1][r + 8];
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) {
          float dlo[4], dhi[4];
          mma_k16(dlo, af[mi][0], af[mi][1], bf[ni][0]);
          mma_k16(dhi, af[mi][2], af[mi][3], bf[ni][1]);
          float* c = acc[mi][ni];
          c[0] = fmaf(xd[ni].x, fmaf(lo0, dlo[0], hi0 * dhi[0]), c[0]);
          c[1] = fmaf(xd[ni].y, fmaf(lo0, dlo[1], hi0 * dhi[1]), c[1]);
          c[2] = fmaf(xd[ni].x, fmaf(lo1, dlo[2], hi1 * dhi[2]), c[2]);
          c[3] = fmaf(xd[ni].y, fmaf(lo1, dlo[3], hi1 * dhi[3]), c[3]);
        }
      }
    }
  }
}

template <class Tr, int BN>
__global__ void __launch_bounds__(kThreads, 2) mmq_kernel(const MmqArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // mma.sync s8 needs sm_80
#else
  constexpr int kNI = BN / (8 * kWarpsN);            // n8 tiles per warp
  constexpr int kXPasses = BN * 16 / kThreads;       // 16-byte activation chunks per thread per stage
  constexpr int kMetaPasses = (BN * kStageBlocks + kThreads - 1) / kThreads;
  static_assert(kNI >= 1 && kXPasses >= 1, "BN in 16, 32, 64");
  extern __shared__ __align__(16) unsigned char mmq_smem[];
  SharedTile<BN>& s = *reinterpret_cast<SharedTile<BN>*>(mmq_smem);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;

  // This CTA's matrix and columns.
  int64_t mat = p.mat;
  int first = 0, count = 0;
  if (p.tiles != nullptr) {
    const int tile = static_cast<int>(blockIdx.y);
    if (tile >= __ldg(p.n_tiles)) return;  // past the table (uniform over the CTA)
    const int4 t = __ldg(reinterpret_cast<const int4*>(p.tiles) + tile);
    mat = t.x;
    first = t.y;
    count = t.z;
  } else {
    first = static_cast<int>(blockIdx.y) * BN;
    count = min(BN, p.n_tokens - first);
  }
  set_columns<BN>(p, first, count, s);
  __syncthreads();

  // Decode role: half dec_half of weight row dec_row (rows past n_out re-read the last
  // row; their results are dropped).
  const int dec_row = 16 * warp + (lane & 15), dec_half = lane >> 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t w_row = min(m0 + dec_row, p.n_out - 1);
  const uint8_t* wrow = p.w + static_cast<uint64_t>(mat) * p.matrix_bytes + static_cast<uint64_t>(w_row) * p.row_bytes;

  // Copy role: 16-byte chunk x_chunk of columns (tid >> 4) + 16 i; metas of (column, block)
  // pairs tid + 256 i.
  const int x_chunk = tid & 15;
  int64_t x_off[kXPasses];
#pragma unroll
  for (int i = 0; i < kXPasses; ++i) x_off[i] = s.xrow[(tid >> 4) + 16 * i];
  int64_t meta_off[kMetaPasses];  // the column's first block, -1: none
#pragma unroll
  for (int i = 0; i < kMetaPasses; ++i) {
    const int idx = tid + kThreads * i;
    const int64_t xr = idx < BN * kStageBlocks ? s.xrow[idx >> 3] : -1;
    meta_off[i] = xr >= 0 ? xr / 32 : -1;
  }

  // Math role: rows wm0 + (0 .. 32), columns wn0 + (0 .. 8 kNI).
  const int g = lane >> 2, t = lane & 3;
  const int wm0 = (warp >> 1) * (16 * kMI);
  const int wn0 = (warp & 1) * (8 * kNI);
  float acc[kMI][kNI][4];
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
    }
  }

  const int n_blocks = p.n_in / 32;
  const int n_stages = (n_blocks + kStageBlocks - 1) / kStageBlocks;
  for (int st = 0; st < n_stages; ++st) {
    const int nb = min(kStageBlocks, n_blocks - st * kStageBlocks);  // valid sub-blocks (uniform)
    load_stage<Tr, BN, kXPasses, kMetaPasses>(p, st, nb, n_blocks, wrow, dec_row, dec_half, x_chunk, x_off, meta_off, s);
    __syncthreads();
    stage_mma<Tr, BN, kNI>(s, nb, wm0, wn0, g, t, acc);
    __syncthreads();  // every warp is done with the stage before the next overwrites it
  }

#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = m0 + wm0 + 16 * mi + g + 8 * (e >> 1);
        const int32_t y_row = s.yrow[wn0 + 8 * ni + 2 * t + (e & 1)];
        if (row < p.n_out && y_row >= 0) p.y[static_cast<int64_t>(y_row) * p.n_out + row] = acc[mi][ni][e];
      }
    }
  }
#endif
}

// The launcher every instantiation shares.
template <class Tr, int BN>
void launch(const MmqArgs& a, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(SharedTile<BN>);
  auto kernel = mmq_kernel<Tr, BN>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  kernel<<<grid, kThreads, kSmem, stream>>>(a);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda::mmq_detail

// The explicit specialisation of launch_mmq for (Block, BN) over mmq_detail's traits Tr;
// used inside namespace mt::cuda by each family file (mmq_simple.cu, mmq_k.cu).
#define MT_MMQ_DEFINE(Block, Tr, BN)                                             \
  template <>                                                                    \
  void launch_mmq<Block, BN>(const MmqArgs& a, dim3 grid, cudaStream_t stream) { \
    mmq_detail::launch<mmq_detail::Tr, BN>(a, grid, stream);                     \
  }
