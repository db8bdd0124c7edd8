// The shared machinery of the MMVQ kernels: a warp (or 16 / 8 lanes) per pair of weight
// rows, lanes walking the rows in tasks of 32 or 64 weights, every token accumulated from
// one read of the rows, a shuffle reduction at the end.
//
// A weight type plugs in through MmvqType<Block> (cuda/kernels/mmvq_simple.cuh, mmvq_kquants.cuh):
// kBytes, kElems, kTasks (tasks per block, 32 or 64 weights each) and three steps of a
// task `sub` of a block: decode<A>(block, sub) -> Codes (the weights as int8 codes and
// scales), load(x, q0, sub) -> Act (the activation quants it meets and their scales, q0 =
// the first 32-element activation block under the weight block) and dot(Codes, Act) ->
// float. The activations are in the format the CPU pairs with the weight type (Q8_0,
// Q8_1 or Q8_K: cuda/kernels/mmvq_kernels.h ActQuant), so a task's integer sums are the CPU's.
// Each lane decodes R = 2 rows' blocks and loads each token's activations once for
// both: half the L1 traffic of one row.
// Consecutive lanes take consecutive tasks, so a warp reads contiguous stretches of its
// rows. Rows with fewer tasks than a warp has lanes (MoE down projections: 768 inputs)
// share a warp: L = 16 or 8 lanes per row group, the reduction staying inside each
// group of L lanes (one token only).
//
// Alignment: A is a power of two (1..16) known to divide every block's address; a field
// at offset o is then aligned to align_at(A, o) and read with the widest load that
// allows (16/8/4-byte vector loads, else aligned 32-bit words joined with a funnel
// shift, never a misaligned access). The host picks A once per call from the matrix
// base, row and matrix strides (cuda/kernels/mmvq.cpp).
//
// Every per-task helper is __host__ __device__, with portable twins of the SIMD
// intrinsics, so the index math of every type can also run on a CPU (rows_partial).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/fp16.h"

#define MT_HD __host__ __device__ __forceinline__

namespace mt::cuda::mmvq_detail {

inline constexpr int kWarps = 4;  // warps per CTA
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kRows = 2;   // rows per lane group: their activation loads shared

// Alignment of (an A-aligned address) + offset.
constexpr int align_at(int a, int offset) {
  int r = a;
  while (r > 1 && offset % r != 0) r /= 2;
  return r;
}

template <class T> struct MmvqType;  // specialised per weight type

// ---- SIMD-within-a-word primitives and their portable twins

MT_HD int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int>(static_cast<int8_t>(a >> (8 * k))) * static_cast<int>(static_cast<int8_t>(b >> (8 * k)));
  }
  return c;
#endif
}

// Per-byte a - b modulo 256 (codes with an offset become signed int8).
MT_HD uint32_t vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __vsub4(a, b);
#else
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xFFu) << (8 * k);
  return r;
#endif
}

// Byte k of the result = byte (s >> 4k) & 7 of the 8 bytes (y:x): as __byte_perm
// documents, bit 3 of each selector nibble and the high 16 bits of s are ignored.
MT_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = x | (static_cast<uint64_t>(y) << 32);
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k);
  return r;
#endif
}

// The low 32 bits of (hi:lo) >> sh, sh in 0..31.
MT_HD uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, sh);
#else
  return sh == 0 ? lo : (lo >> sh) | (hi << (32 - sh));
#endif
}

MT_HD float h2f(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
#else
  const uint32_t sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1Fu, mant = bits & 0x3FFu;
  uint32_t f = 0;
  if (exp == 0x1F) {
    f = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    f = sign | ((exp + 112u) << 23) | (mant << 13);
  } else {
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign != 0 ? -mag : mag;
  }
  float r;
  std::memcpy(&r, &f, sizeof(r));
  return r;
#endif
}

MT_HD float bits_to_float(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float r;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
#endif
}

// A 16-entry int8 table (a type with static constexpr words w0..w3, entry i in byte i % 4
// of word i / 4, so device code reads them as immediates) looked up by the 8 nibbles of
// w in the Q4_0 layout: lo = the entries of the 4 low nibbles (elements 4i..4i+3 of the
// block), hi = those of the 4 high nibbles (16 + 4i..). Byte permutes read only selector
// bits 0..2 of the low 16 bits: entries 0..7 and 8..15 are permuted apart and merged by
// bit 3 of each nibble.
template <class Table>
MT_HD void lookup_word(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t merge = 0x32103210u | ((w & 0x88888888u) >> 1);  // byte k of low (k) or high (4 + k)
  const uint32_t n03 = byte_perm(byte_perm(Table::w0, Table::w1, w), byte_perm(Table::w2, Table::w3, w), merge);
  const uint32_t n47 =
      byte_perm(byte_perm(Table::w0, Table::w1, w >> 16), byte_perm(Table::w2, Table::w3, w >> 16), merge >> 16);
  lo = byte_perm(n03, n47, 0x6420);  // nibbles 0, 2, 4, 6
  hi = byte_perm(n03, n47, 0x7531);  // nibbles 1, 3, 5, 7
}
constexpr uint32_t pack4(const int8_t* t, int first) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(static_cast<uint8_t>(t[first + i])) << (8 * i);
  return w;
}

// ---- loads

template <class T>
MT_HD T ldg(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}

// Weights are read once per call: loaded evict-first, so they pass through L1 without
// pushing out the activations every row reads again.
template <class T>
MT_HD T ldw(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldcs(p);
#else
  return ldg(p);
#endif
}

// A 16-bit little-endian weight field at p (p aligned to A).
template <int A>
MT_HD uint32_t ld_u16(const uint8_t* p) {
  if constexpr (A >= 2) {
    return ldw(reinterpret_cast<const unsigned short*>(p));
  } else {
    return static_cast<uint32_t>(ldw(p)) | (static_cast<uint32_t>(ldw(p + 1)) << 8);
  }
}

// N little-endian 32-bit weight words from p (p aligned to A).
template <int N, int A>
MT_HD void ld_words(const uint8_t* p, uint32_t (&w)[N]) {
  if constexpr (A >= 16 && N % 4 == 0) {
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = ldw(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (A >= 8 && N % 2 == 0) {
    for (int i = 0; i < N / 2; ++i) {
      const uint2 v = ldw(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else if constexpr (A >= 4) {
    for (int i = 0; i < N; ++i) w[i] = ldw(reinterpret_cast<const unsigned int*>(p) + i);
  } else {
    // The aligned words covering [p, p + 4N), joined pairwise. The extra word is read
    // only when p is misaligned, so no byte beyond the last aligned word of the range.
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    const auto* base = reinterpret_cast<const unsigned int*>(addr & ~static_cast<uintptr_t>(3));
    const uint32_t sh = static_cast<uint32_t>(addr & 3) * 8;
    uint32_t a[N + 1];
    for (int i = 0; i < N; ++i) a[i] = ldw(base + i);
    a[N] = sh != 0 ? ldw(base + N) : 0u;
    for (int i = 0; i < N; ++i) w[i] = funnel_r(a[i], a[i + 1], sh);
  }
}

// ---- activations: one token's quantized row (cuda/kernels/mmvq_kernels.h Q8_1Rows layout), in
// global memory, read through the read-only path.

struct ActRow {
  const int8_t* qs;
  const uint2* meta;
};

// N int8x4 words of activation quants from element e (e a multiple of 4N, N in 4, 8).
template <int N>
MT_HD void act_words(const ActRow& x, int e, uint32_t (&a)[N]) {
  static_assert(N == 4 || N == 8, "activation loads are 16 or 32 bytes");
  for (int i = 0; i < N / 4; ++i) {
    const uint4 v = ldg(reinterpret_cast<const uint4*>(x.qs + e) + i);
    a[4 * i] = v.x, a[4 * i + 1] = v.y, a[4 * i + 2] = v.z, a[4 * i + 3] = v.w;
  }
}
// 32-element block q's scale d (Q8_K: its 256-block's) and the exact int sums of its
// quants 0..15 and 16..31.
struct ActMeta {
  float d;
  int sum_lo, sum_hi;
};
MT_HD ActMeta act_meta(const ActRow& x, int q) {
  const uint2 m = ldg(x.meta + q);
  return {bits_to_float(m.x), static_cast<int16_t>(m.y & 0xFFFFu), static_cast<int16_t>(m.y >> 16)};
}
// Block q's scale d alone.
MT_HD float act_d(const ActRow& x, int q) {
  return bits_to_float(ldg(reinterpret_cast<const uint32_t*>(x.meta + q)));
}

// float(fp16(v)), round to nearest even (quant/fp16.h fp32_to_fp16 on the host).
MT_HD float round_to_half(float v) {
#ifdef __CUDA_ARCH__
  return __half2float(__float2half_rn(v));
#else
  return h2f(fp32_to_fp16(v));
#endif
}
// The s = d * sum(q) of a Q8_1 block (Q4_1 / Q5_1 add m_w * s), rounded to half as
// BlockQ8_1 stores it. d here is the meta's half-rounded d, the reference's the f32 d
// before rounding, so the two can differ by d's rounding (cuda/kernels/mmvq_kernels.h).
MT_HD float act_s(float d, int sum) {
#ifdef __CUDA_ARCH__
  return round_to_half(__fmul_rn(static_cast<float>(sum), d));
#else
  return round_to_half(static_cast<float>(sum) * d);
#endif
}

template <int N>
MT_HD int dot_words(const uint32_t* c, const uint32_t* a) {
  int s = 0;
  for (int i = 0; i < N; ++i) s = dp4a(c[i], a[i], s);
  return s;
}

// A 32-element block's codes in the Q4_0 nibble layout: c[i] = elements 4i..4i+3 (low
// nibbles of word i), c[4 + i] = elements 16 + 4i.. (high nibbles).
MT_HD void split_nibbles(const uint32_t (&w)[4], uint32_t (&c)[8]) {
  for (int i = 0; i < 4; ++i) {
    c[i] = w[i] & 0x0F0F0F0Fu;
    c[4 + i] = (w[i] >> 4) & 0x0F0F0F0Fu;
  }
}

// ---- R rows: this lane's tasks first, first + stride, ... of rows w, w + row_bytes, ...

template <class Tr, int A, int NT, int R>
MT_HD void rows_partial(const uint8_t* __restrict__ w, uint64_t row_bytes, int n_tasks, int first, int stride,
                        const ActRow (&x)[NT], float (&acc)[R][NT]) {
  for (int task = first; task < n_tasks; task += stride) {
    const int kb = task / Tr::kTasks, sub = task - kb * Tr::kTasks, q0 = kb * (Tr::kElems / 32);
    const uint8_t* b = w + static_cast<int64_t>(kb) * Tr::kBytes;
    typename Tr::Codes c[R];
    for (int r = 0; r < R; ++r) c[r] = Tr::template decode<A>(b + r * row_bytes, sub);
    for (int t = 0; t < NT; ++t) {
      const typename Tr::Act a = Tr::load(x[t], q0, sub);
      for (int r = 0; r < R; ++r) acc[r][t] += Tr::dot(c[r], a);
    }
  }
}

// ---- kernels

// Sum over the L lanes of each aligned group of L (xor offsets < L stay inside it).
template <int L>
__device__ __forceinline__ float group_sum(float v) {
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// What this CTA's slot reads and writes. False: nothing to do (a skipped slot, or an
// expert id out of range, whose rows are then written as NaN so the error shows).
struct SlotView {
  const uint8_t* wmat;  // the slot's matrix
  int x_row;            // first activation row
  float* y;             // Y row of token 0 (dense) or of the slot (routed)
};
__device__ __forceinline__ bool slot_view(const MmvqArgs& p, int64_t row0, int rows, bool writer, SlotView& v) {
  int64_t mat = p.mat;
  v.x_row = 0;
  v.y = p.y;
  if (p.ids != nullptr) {
    const int s = static_cast<int>(blockIdx.y);
    mat = __ldg(p.ids + s);
    v.x_row = p.x_per_slot ? s : s / p.K;
    v.y = p.y + static_cast<int64_t>(s) * p.n_out;
    if (mat < 0) return false;
    if (mat >= p.n_mat) {
      for (int r = 0; r < rows; ++r) {
        if (writer && row0 + r < p.n_out) v.y[row0 + r] = __int_as_float(0x7FC00000);
      }
      return false;
    }
  }
  v.wmat = p.w + static_cast<uint64_t>(mat) * p.matrix_bytes;
  return true;
}

// Rows row0 .. row0 + R - 1 of the slot's matrix against x, summed over each group of L
// lanes and written by its first lane. L = 64 or 128 (MmvqArgs::split_warps): a group is
// L / 32 consecutive warps, each warp's sum staged in shared memory and added in warp
// order by the group's first lane (every thread of the CTA calls this: a barrier).
template <class Tr, int A, int NT, int L, int R>
__device__ __forceinline__ void rows_out(const MmvqArgs& p, const uint8_t* wmat, float* const (&y)[NT], int64_t row0,
                                         int sub, const ActRow (&x)[NT]) {
  const int64_t left = p.n_out - row0;
  const int rows = left <= 0 ? 0 : left < R ? static_cast<int>(left) : R;
  float acc[R][NT];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  }
  const int n_tasks = rows > 0 ? p.n_in / Tr::kElems * Tr::kTasks : 0;
  const uint8_t* w = wmat + static_cast<uint64_t>(rows > 0 ? row0 : 0) * p.row_bytes;
  rows_partial<Tr, A, NT, R>(w, rows == R ? p.row_bytes : 0, n_tasks, sub, L, x, acc);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) acc[r][t] = group_sum<(L > 32 ? 32 : L)>(acc[r][t]);
  }
  if constexpr (L > 32) {
    constexpr int kSplit = L / 32;  // warps per row group
    __shared__ float part_sh[kWarps][R][NT];
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if ((threadIdx.x & 31) == 0) {
      for (int r = 0; r < R; ++r) {
        for (int t = 0; t < NT; ++t) part_sh[warp][r][t] = acc[r][t];
      }
    }
    __syncthreads();
    if (sub == 0) {  // lane 0 of the group's first warp
      for (int r = 0; r < R; ++r) {
        for (int t = 0; t < NT; ++t) {
          float s = part_sh[warp][r][t];
          for (int w = 1; w < kSplit; ++w) s += part_sh[warp + w][r][t];
          acc[r][t] = s;
        }
      }
    }
  }
  if (sub == 0) {
    for (int r = 0; r < rows; ++r) {
      for (int t = 0; t < NT; ++t) y[t][row0 + r] = acc[r][t];
    }
  }
}

// Each group of L lanes computes rows row0 .. row0 + R - 1; a CTA kWarps * 32 / L * R
// rows. A group past n_out does no work but stays for the shuffles; one whose rows run
// out after row0 re-reads row0 in place of the missing ones (never past the matrix) and
// drops those results. The slot decision is uniform over the CTA (so is the split's
// barrier).
template <class Tr, int A, int NT, int L, int R>
__global__ void __launch_bounds__(kThreads) mmvq_quant_kernel(const MmvqArgs p) {
  constexpr int kSplit = L > 32 ? L / 32 : 1;  // warps per row group
  constexpr int LW = L > 32 ? 32 : L;          // a group's lanes in one warp
  static_assert(kWarps % kSplit == 0, "a row group's warps are in one CTA");
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t row0 =
      ((static_cast<int64_t>(blockIdx.x) * (kWarps / kSplit) + warp / kSplit) * (32 / LW) + lane / LW) * R;
  const int sub = (warp % kSplit) * 32 + lane % LW;
  SlotView v;
  if (!slot_view(p, row0, R, sub == 0, v)) return;
  const int nq = p.n_in / 32;
  ActRow x[NT];
  float* y[NT];
  for (int t = 0; t < NT; ++t) {
    const int64_t r = v.x_row + t;
    x[t] = {p.xq + r * p.n_in, p.xmeta + r * nq};
    y[t] = v.y + static_cast<int64_t>(t) * p.n_out;
  }
  rows_out<Tr, A, NT, L, R>(p, v.wmat, y, row0, sub, x);
}

// One group of NT slots (MmvqArgs::groups): each slot's activation row and Y row.
template <class Tr, int A, int NT, int L, int R>
__device__ __forceinline__ void group_rows(const MmvqArgs& p, const uint8_t* wmat, const int32_t* slot, int64_t row0,
                                           int sub) {
  const int nq = p.n_in / 32;
  ActRow x[NT];
  float* y[NT];
  for (int t = 0; t < NT; ++t) {
    const int s = __ldg(slot + t);
    const int64_t r = p.x_per_slot ? s : s / p.K;
    x[t] = {p.xq + r * p.n_in, p.xmeta + r * nq};
    y[t] = p.y + static_cast<int64_t>(s) * p.n_out;
  }
  rows_out<Tr, A, NT, L, R>(p, wmat, y, row0, sub, x);
}

// The grouped routed form: grid.y over the groups (a CTA past the last group returns),
// each group's rows read once for its 1..kGroupTokens slots. L <= 32 (no split warps).
template <class Tr, int A, int L, int R>
__global__ void __launch_bounds__(kThreads) mmvq_group_kernel(const MmvqArgs p) {
  static_assert(L <= 32 && kGroupTokens == 8, "one warp per row group; the switch below covers 1..8 slots");
  const int g = static_cast<int>(blockIdx.y);
  if (g >= __ldg(p.groups)) return;
  const int32_t* e = p.groups + kGroupHeader + static_cast<int64_t>(g) * kGroupStride;
  const int mat = __ldg(e), n = __ldg(e + 1);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t row0 = ((static_cast<int64_t>(blockIdx.x) * kWarps + warp) * (32 / L) + lane / L) * R;
  const int sub = lane % L;
  if (mat >= p.n_mat) {  // out-of-range ids: their rows NaN so the error shows
    for (int t = 0; t < n; ++t) {
      float* y = p.y + static_cast<int64_t>(__ldg(e + 2 + t)) * p.n_out;
      for (int r = 0; r < R; ++r) {
        if (sub == 0 && row0 + r < p.n_out) y[row0 + r] = __int_as_float(0x7FC00000);
      }
    }
    return;
  }
  const uint8_t* wmat = p.w + static_cast<uint64_t>(mat) * p.matrix_bytes;
  switch (n) {
    case 1: group_rows<Tr, A, 1, L, R>(p, wmat, e + 2, row0, sub); break;
    case 2: group_rows<Tr, A, 2, L, R>(p, wmat, e + 2, row0, sub); break;
    case 3: group_rows<Tr, A, 3, L, R>(p, wmat, e + 2, row0, sub); break;
    case 4: group_rows<Tr, A, 4, L, R>(p, wmat, e + 2, row0, sub); break;
    case 5: group_rows<Tr, A, 5, L, R>(p, wmat, e + 2, row0, sub); break;
    case 6: group_rows<Tr, A, 6, L, R>(p, wmat, e + 2, row0, sub); break;
    case 7: group_rows<Tr, A, 7, L, R>(p, wmat, e + 2, row0, sub); break;
    default: group_rows<Tr, A, 8, L, R>(p, wmat, e + 2, row0, sub); break;
  }
}

// ---- host side

// f(std::integral_constant<int, n>) for n in 1..kMmvqMaxTokens (8).
template <class F>
void with_tokens(int n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default:
      std::fprintf(stderr, "%s:%d: mmvq: %d tokens (1..8)\n", __FILE__, __LINE__, n);
      std::abort();
  }
}

inline dim3 mmvq_grid(const MmvqArgs& a, int lanes, int rows_per_group) {
  const int64_t rows_per_cta = static_cast<int64_t>(kWarps) * 32 / lanes * rows_per_group;  // lanes 8 .. 128
  return dim3(static_cast<unsigned>((a.n_out + rows_per_cta - 1) / rows_per_cta), static_cast<unsigned>(a.n_slots));
}

template <class Tr, int A, int NT>
void launch_quant_lanes(const MmvqArgs& a, cudaStream_t stream) {
  constexpr int R = kRows;
  if constexpr (NT == 1) {
    switch (a.lanes) {
      case 8: mmvq_quant_kernel<Tr, A, 1, 8, R><<<mmvq_grid(a, 8, R), kThreads, 0, stream>>>(a); return;
      case 16: mmvq_quant_kernel<Tr, A, 1, 16, R><<<mmvq_grid(a, 16, R), kThreads, 0, stream>>>(a); return;
      case 64: mmvq_quant_kernel<Tr, A, 1, 64, R><<<mmvq_grid(a, 64, R), kThreads, 0, stream>>>(a); return;
      case 128: mmvq_quant_kernel<Tr, A, 1, 128, R><<<mmvq_grid(a, 128, R), kThreads, 0, stream>>>(a); return;
      default: break;
    }
  }
  if constexpr (NT > 1) {
    // MmvqArgs::multi_rows: each activation load for four rows; whole groups only (a
    // short last group re-reads its first row for the missing ones, right for R = 2 only)
    if (a.multi_rows == 4 && a.n_out % 4 == 0) {
      mmvq_quant_kernel<Tr, A, NT, 32, 4><<<mmvq_grid(a, 32, 4), kThreads, 0, stream>>>(a);
      return;
    }
  }
  mmvq_quant_kernel<Tr, A, NT, 32, R><<<mmvq_grid(a, 32, R), kThreads, 0, stream>>>(a);
}

// The quantized-weight launcher: Tr::kAlign where the matrix allows it, else byte-safe
// loads; 16 or 8 lanes per row group when a row has too few tasks for a warp.
template <class Tr>
void launch_quant(const MmvqArgs& args, cudaStream_t stream) {
  MmvqArgs a = args;
  const int n_tasks = a.n_in / Tr::kElems * Tr::kTasks;
  const int narrow = a.n_tokens > 1 || n_tasks >= 32 ? 32 : n_tasks >= 16 ? 16 : 8;
  const int wide = a.n_tokens > 1 || n_tasks > 16 ? 32 : n_tasks > 8 ? 16 : 8;
  a.lanes = wide <= a.wide_lanes ? wide : narrow;
  // Long rows of one token over 2 or 4 warps (MmvqArgs::split_warps): at most one task per
  // lane where the split allows, so a lane's loads are one round trip instead of several.
  if (a.n_tokens == 1 && a.lanes == 32) {
    if (a.split_warps >= 4 && n_tasks > 64) {
      a.lanes = 128;
    } else if (a.split_warps >= 2 && n_tasks > 32) {
      a.lanes = 64;
    }
  }
  const bool natural = a.align >= Tr::kAlign;
  if (a.groups != nullptr && natural) {
    // Grouped by expert: the lanes one slot takes without the split (the same sums where
    // no split applies), grid.y over the groups' bound.
    constexpr int R = kRows;
    const int lanes = a.lanes > 32 ? 32 : a.lanes;
    dim3 grid = mmvq_grid(a, lanes, R);
    grid.y = static_cast<unsigned>(a.group_grid);
    switch (lanes) {
      case 8: mmvq_group_kernel<Tr, Tr::kAlign, 8, R><<<grid, kThreads, 0, stream>>>(a); break;
      case 16: mmvq_group_kernel<Tr, Tr::kAlign, 16, R><<<grid, kThreads, 0, stream>>>(a); break;
      default: mmvq_group_kernel<Tr, Tr::kAlign, 32, R><<<grid, kThreads, 0, stream>>>(a); break;
    }
    MT_CUDA_CHECK(cudaGetLastError());
    return;
  }
  a.groups = nullptr;  // misaligned matrices: one slot per grid.y
  with_tokens(a.n_tokens, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    if (natural) {
      launch_quant_lanes<Tr, Tr::kAlign, NT>(a, stream);
    } else {
      launch_quant_lanes<Tr, 1, NT>(a, stream);
    }
  });
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda::mmvq_detail
