// Flash attention on tensor cores for prompt batches over an F16 KV cache, head_dim D in
// {64, 128, 256} (cuda/kernels/ops.h attention; which calls it takes: cuda/kernels/ops_attention_tc.cuh).
//
// Rows. The G = n_head / n_head_kv query heads of a group read the same K and V, so the
// kernel works on the flat rows R = t * G + j (token t, head kvh * G + j) of one KV head;
// row R attends to cache positions [0, pos0 + R / G]. A block of W warps (4 or 8) takes
// 16 W consecutive rows (warp w: rows 16w .. 16w + 15, one m16 tile): every K/V tile it
// loads serves all heads of the group and all W warps.
//
// Loop. The block streams the K/V tiles of kBk positions up to its last row's position,
// cp.async into shared memory, double-buffered (tile j + 1 loads while tile j is used).
// Per tile each warp computes S = Q K^T (mma m16n8k16, f16 in, f32 accumulate), masks the
// positions past each row's own, and updates an online softmax in f32 and base 2 (scores
// times scale * log2(e); per row a running max m and sum l; O rescaled by 2^(m_old -
// m_new)). The numerators p = 2^(s - m) are rounded to f16 and feed O += P V straight from
// registers (the C layout of two n8 score tiles is the A layout of one k16 step); l sums
// the rounded p, so the weights applied are exactly normalised. Output O / l.
//
// Shared memory (f16 rows of D + 8 halfs: the 16 padding bytes put the 8 rows one
// ldmatrix phase reads on distinct banks): per stage a K and a V tile (kBk, D); Q (16 W,
// D) converted from f32 once. For D <= 128 each warp then keeps its Q fragments in
// registers (Q is staged in stage 1's buffers before the loop); for D = 256 Q stays in
// shared memory (the registers go to the 16 x 256 accumulator).
//
// Accuracy. q is rounded to f16 as given (not pre-scaled: the CPU's F16-cache attention
// rounds the same q, model/attention.cpp); K and V are the cache's halves; the only other
// rounding is p to f16 (relative 2^-11). tests/cuda/attention_tc_test.cpp measures it.
//
// Work. Blocks start heaviest first (the last rows see the most positions); a warp skips
// the tiles wholly past its rows' positions, and only tiles reaching past its first row's
// position are masked.
#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops_attention.cuh"
#include "cuda/kernels/ops_attention_tc.cuh"
#include "cuda/kernels/ops_attention_tc_ptx.cuh"

namespace mt::cuda::detail {
namespace {

constexpr int kWarpRows = 16;  // one m16 tile per warp
constexpr float kLog2e = 1.44269504088896341f;

// head_dim D, W warps per block.
template <int D, int W>
struct TcShape {
  static constexpr int kThreads = W * 32;
  static constexpr int kBr = W * kWarpRows;       // rows per block
  static constexpr int kBk = D <= 128 ? 64 : 32;  // positions per K/V tile
  static constexpr int kStride = D + 8;           // halfs per shared row
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kTileHalfs = kBk * kStride;  // one K or V tile
  static constexpr int kQHalfs = kBr * kStride;
  // [stage 0: K, V][stage 1: K, V][Q, unless staged in stage 1]
  static constexpr size_t kSmemBytes = (4 * kTileHalfs + (kQInRegs ? 0 : kQHalfs)) * sizeof(__half);
  static_assert(D % 16 == 0 && kBk % 16 == 0);
  static_assert(!kQInRegs || kQHalfs <= 2 * kTileHalfs, "Q is staged in stage 1's K and V");
  static_assert((kBk * D / 8) % kThreads == 0 && (kBr * D / 4) % kThreads == 0, "whole loads per thread");
};

// The block's rows: flat rows [row0, row0 + kBr) of KV head kvh, n_rows in all.
struct BlockRows {
  int kvh, row0, n_rows, group;
  // The token of row R; the padding rows past the last are given the last token (their
  // output is never stored, their state stays finite).
  __device__ int token(int R) const { return min(R, n_rows - 1) / group; }
};

// K and V tile of positions kv0 .. kv0 + kBk - 1 into shared (kBk, kStride) buffers,
// 16-byte cp.async per thread and chunk; positions >= kv_end are zero-filled (never read
// from the cache: they may lie past it).
template <int D, int W>
__device__ __forceinline__ void load_kv_tile(const uint8_t* k_head, const uint8_t* v_head, uint64_t row_bytes,
                                             uint32_t kv0, uint32_t kv_end, __half* k_sh, __half* v_sh, int tid) {
  using Sh = TcShape<D, W>;
  constexpr int kChunksPerRow = D / 8;  // 16 bytes each
  constexpr int kIters = Sh::kBk * kChunksPerRow / Sh::kThreads;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = it * Sh::kThreads + tid;
    const int r = i / kChunksPerRow, c = i % kChunksPerRow;
    const uint32_t pos = kv0 + static_cast<uint32_t>(r);
    const bool valid = pos < kv_end;
    const uint64_t off = valid ? pos * row_bytes + static_cast<uint64_t>(c) * 16 : 0;
    const int sh = r * Sh::kStride + c * 8;
    cp_async_16(smem_addr(k_sh + sh), k_head + off, valid);
    cp_async_16(smem_addr(v_sh + sh), v_head + off, valid);
  }
}

// Q rows of the block, f32 -> f16 (round to nearest even), into shared (kBr, kStride);
// padding rows are zeros.
template <int D, int W>
__device__ __forceinline__ void stage_q(const AttnGeom& g, const BlockRows& b, __half* q_sh, int tid) {
  using Sh = TcShape<D, W>;
  constexpr int kF4PerRow = D / 4;
  constexpr int kIters = Sh::kBr * kF4PerRow / Sh::kThreads;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = it * Sh::kThreads + tid;
    const int r = i / kF4PerRow, c4 = i % kF4PerRow;
    const int R = b.row0 + r;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (R < b.n_rows) {
      const int t = R / b.group, j = R - t * b.group;
      const int64_t head_row = static_cast<int64_t>(t) * g.n_head + b.kvh * b.group + j;
      x = *reinterpret_cast<const float4*>(g.q + head_row * D + c4 * 4);
    }
    const uint2 packed = make_uint2(pack_half2(x.x, x.y), pack_half2(x.z, x.w));
    *reinterpret_cast<uint2*>(q_sh + r * Sh::kStride + c4 * 4) = packed;
  }
}

// A fragments of the warp's Q rows, k16 step kk: held in registers, or read from shared
// memory at every use. `addr` is this lane's ldmatrix row address for kk = 0.
template <int D, bool InRegs>
struct QFrags;

template <int D>
struct QFrags<D, true> {
  uint32_t f[D / 16][4];
  __device__ __forceinline__ void init(uint32_t addr) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(f[kk], addr + kk * 16 * sizeof(__half));
  }
  __device__ __forceinline__ void get(uint32_t (&a)[4], int kk) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = f[kk][i];
  }
};

template <int D>
struct QFrags<D, false> {
  uint32_t base;
  __device__ __forceinline__ void init(uint32_t addr) { base = addr; }
  __device__ __forceinline__ void get(uint32_t (&a)[4], int kk) const {
    ldmatrix_x4(a, base + kk * 16 * sizeof(__half));
  }
};

// One warp's flash-attention state for its 16 rows; this lane holds rows g and g + 8.
template <int D>
struct WarpState {
  float o[D / 8][4];  // O (16, D): n8 tile nt holds (row g: dims 8nt + 2t, +1; row g + 8: same)
  float m[2];         // running max of the rows, scaled scores (log2 units)
  float l[2];         // this lane's part of the rows' sums of rounded numerators
};

// One K/V tile for one warp: scores, mask, online softmax update, O += P V. k_addr and
// v_addr are this lane's ldmatrix addresses in the tile for the first fragment; lim[r]
// is the last position row r (g, g + 8) sees; `masked`: some position of the tile lies
// past some row's; c = scale * log2(e).
template <int D, int W, class Q>
__device__ __forceinline__ void attend_tile(WarpState<D>& st, const Q& q, uint32_t k_addr, uint32_t v_addr,
                                            uint32_t kv0, bool masked, const uint32_t (&lim)[2], int t4, float c) {
  using Sh = TcShape<D, W>;
  constexpr int kNB = Sh::kBk / 8;  // n8 score tiles
  constexpr uint32_t kRowBytes = Sh::kStride * sizeof(__half);

  // S (16, kBk) = Q K^T: K rows are positions, so a plain ldmatrix of K gives B = K^T;
  // matrices (positions 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) are b0, b1
  // of n8 tile 2np and b0, b1 of tile 2np + 1.
  float s[kNB][4];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[nb][i] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    q.get(a, kk);
#pragma unroll
    for (int np = 0; np < kNB / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, k_addr + np * 16 * kRowBytes + kk * 16 * sizeof(__half));
      mma_16816(s[2 * np], a, b[0], b[1]);
      mma_16816(s[2 * np + 1], a, b[2], b[3]);
    }
  }

  // Causal mask: s[nb][0..1] are row g at positions kv0 + 8nb + 2t, +1; [2..3] row g + 8.
  if (masked) {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      const uint32_t pos = kv0 + static_cast<uint32_t>(nb * 8 + 2 * t4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (pos + static_cast<uint32_t>(i & 1) > lim[i >> 1]) s[nb][i] = -INFINITY;
      }
    }
  }

  // Online softmax; a row's 8 * kNB scores of this tile lie in the 4 lanes of its quad.
  float m_use[2], alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(st.m[r], mx * c);
    // Nothing seen yet (cannot happen: every row sees position 0 in the first tile) keeps
    // the state empty instead of NaN.
    m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = exp2f(st.m[r] - m_use[r]);
    st.m[r] = m_new;
  }
  // The f32 numerators as two f16 terms, p = hi + lo (lo the rounding error of hi): P.V
  // takes both, so the weights applied are the f32 ones to ~2^-22 relative (one f16
  // product alone errs by up to 2^-11 per weight, which the model-level parity with the
  // CPU's f32 softmax could see).
  uint32_t p[kNB][2];     // f16x2 hi: [nb][0] row g, [nb][1] row g + 8
  uint32_t p_lo[kNB][2];  // f16x2 lo
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float p0 = exp2f(fmaf(s[nb][2 * r], c, -m_use[r]));
      const float p1 = exp2f(fmaf(s[nb][2 * r + 1], c, -m_use[r]));
      p[nb][r] = pack_half2(p0, p1);
      const __half2 hi = *reinterpret_cast<const __half2*>(&p[nb][r]);
      p_lo[nb][r] = pack_half2(p0 - __low2float(hi), p1 - __high2float(hi));
      sum[r] += p0 + p1;
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + sum[r];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    st.o[nt][0] *= alpha[0];
    st.o[nt][1] *= alpha[0];
    st.o[nt][2] *= alpha[1];
    st.o[nt][3] *= alpha[1];
  }

  // O (16, D) += P (16, kBk) V (kBk, D). A of k16 step ks = (tile 2ks row g, row g + 8,
  // tile 2ks + 1 row g, row g + 8). V rows are positions, so ldmatrix .trans gives B = V;
  // matrices (positions 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) are b0, b1
  // of n8 dim tile 2dp and b0, b1 of tile 2dp + 1.
#pragma unroll
  for (int ks = 0; ks < kNB / 2; ++ks) {
    const uint32_t a[4] = {p[2 * ks][0], p[2 * ks][1], p[2 * ks + 1][0], p[2 * ks + 1][1]};
    const uint32_t a_lo[4] = {p_lo[2 * ks][0], p_lo[2 * ks][1], p_lo[2 * ks + 1][0], p_lo[2 * ks + 1][1]};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_addr + ks * 16 * kRowBytes + dp * 16 * sizeof(__half));
      mma_16816(st.o[2 * dp], a, b[0], b[1]);
      mma_16816(st.o[2 * dp + 1], a, b[2], b[3]);
      mma_16816(st.o[2 * dp], a_lo, b[0], b[1]);
      mma_16816(st.o[2 * dp + 1], a_lo, b[2], b[3]);
    }
  }
}

// out rows of the warp: O / l, row g and g + 8 of the lane, padding rows skipped.
template <int D>
__device__ __forceinline__ void store_rows(const AttnGeom& g, const BlockRows& b, WarpState<D>& st, int w_row0,
                                           int g4, int t4) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int R = w_row0 + g4 + 8 * r;
    if (R >= b.n_rows) continue;
    const float inv = 1.0f / l;
    const int t = R / b.group, j = R - t * b.group;
    const int64_t head_row = static_cast<int64_t>(t) * g.n_head + b.kvh * b.group + j;
    float* out = g.out + head_row * D + 2 * t4;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      *reinterpret_cast<float2*>(out + nt * 8) = make_float2(st.o[nt][2 * r] * inv, st.o[nt][2 * r + 1] * inv);
    }
  }
}

// Grid: one block per (row tile, KV head), 1-D, the last row tiles first.
template <int D, int W>
__global__ void __launch_bounds__(W * 32, 8 / W) attn_prefill_tc_kernel(AttnGeom g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  (void)g;
  __trap();  // the host never launches it without sm_80 code (attention_prefill_tc_fits)
#else
  using Sh = TcShape<D, W>;
  constexpr int kBr = Sh::kBr;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* const smem = reinterpret_cast<__half*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g4 = lane >> 2, t4 = lane & 3;  // mma groupID, threadID_in_group
  const int n_head_kv = g.n_head / g.group;
  const int n_rows = g.n_tokens * g.group;
  const int n_tiles = (n_rows + kBr - 1) / kBr;
  const int block = static_cast<int>(blockIdx.x);
  const BlockRows b{block % n_head_kv, (n_tiles - 1 - block / n_head_kv) * kBr, n_rows, g.group};
  const uint32_t kv_end = g.pos0 + static_cast<uint32_t>(b.token(b.row0 + kBr - 1)) + 1;  // positions read
  const int n_kt = static_cast<int>((kv_end + Sh::kBk - 1) / Sh::kBk);
  const uint8_t* k_head = g.k + b.kvh * g.head_bytes;
  const uint8_t* v_head = g.v + b.kvh * g.head_bytes;
  __half* const q_sh = Sh::kQInRegs ? smem + 2 * Sh::kTileHalfs : smem + 4 * Sh::kTileHalfs;

  load_kv_tile<D, W>(k_head, v_head, g.row_bytes, 0, kv_end, smem, smem + Sh::kTileHalfs, tid);
  cp_async_commit();
  stage_q<D, W>(g, b, q_sh, tid);
  __syncthreads();  // q_sh written

  // Per-lane ldmatrix row addresses (matrix mi = lane / 8, its row ri = lane % 8), as
  // offsets in halfs: Q (A: rows, dims) matrices (0-7, lo), (8-15, lo), (0-7, hi),
  // (8-15, hi); K and V as in attend_tile.
  const int mi = lane >> 3, ri = lane & 7;
  const int q_lane = (warp * kWarpRows + (mi & 1) * 8 + ri) * Sh::kStride + (mi >> 1) * 8;
  const int k_lane = ((mi >> 1) * 8 + ri) * Sh::kStride + (mi & 1) * 8;
  const int v_lane = ((mi & 1) * 8 + ri) * Sh::kStride + (mi >> 1) * 8;
  QFrags<D, Sh::kQInRegs> q;
  q.init(smem_addr(q_sh + q_lane));
  if constexpr (Sh::kQInRegs) __syncthreads();  // every warp holds its Q: stage 1 is free

  const int w_row0 = b.row0 + warp * kWarpRows;
  const bool live = w_row0 < n_rows;  // a warp of padding rows only does no work
  const uint32_t first_lim = g.pos0 + static_cast<uint32_t>(b.token(w_row0));
  const uint32_t last_lim = g.pos0 + static_cast<uint32_t>(b.token(w_row0 + kWarpRows - 1));
  const uint32_t lim[2] = {g.pos0 + static_cast<uint32_t>(b.token(w_row0 + g4)),
                           g.pos0 + static_cast<uint32_t>(b.token(w_row0 + g4 + 8))};
  const float c = g.scale * kLog2e;

  WarpState<D> st;
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[nt][i] = 0.0f;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.m[r] = -INFINITY;
    st.l[r] = 0.0f;
  }

  for (int kt = 0; kt < n_kt; ++kt) {
    if (kt + 1 < n_kt) {
      __half* next = smem + ((kt + 1) & 1) * 2 * Sh::kTileHalfs;
      load_kv_tile<D, W>(k_head, v_head, g.row_bytes, static_cast<uint32_t>((kt + 1) * Sh::kBk), kv_end, next,
                         next + Sh::kTileHalfs, tid);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed (this thread's part)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile kt has landed (every thread's part)
    const uint32_t kv0 = static_cast<uint32_t>(kt * Sh::kBk);
    if (live && kv0 <= last_lim) {
      const __half* k_sh = smem + (kt & 1) * 2 * Sh::kTileHalfs;
      const __half* v_sh = k_sh + Sh::kTileHalfs;
      const bool masked = kv0 + static_cast<uint32_t>(Sh::kBk - 1) > first_lim;
      attend_tile<D, W>(st, q, smem_addr(k_sh + k_lane), smem_addr(v_sh + v_lane), kv0, masked, lim, t4, c);
    }
    __syncthreads();  // every warp is done with tile kt's buffers before they reload
  }
  if (live) store_rows<D>(g, b, st, w_row0, g4, t4);
#endif
}

template <int D, int W>
void launch_tc(const AttnGeom& g, cudaStream_t stream) {
  using Sh = TcShape<D, W>;
  const int64_t n_rows = static_cast<int64_t>(g.n_tokens) * g.group;
  MT_CHECK(n_rows + Sh::kBr < (int64_t{1} << 31));
  const int64_t blocks = (n_rows + Sh::kBr - 1) / Sh::kBr * (g.n_head / g.group);
  MT_CHECK(blocks < (int64_t{1} << 31));
  auto kernel = attn_prefill_tc_kernel<D, W>;
  MT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Sh::kSmemBytes)));
  kernel<<<static_cast<unsigned>(blocks), Sh::kThreads, Sh::kSmemBytes, stream>>>(g);
  MT_CUDA_CHECK(cudaGetLastError());
}

template <int W>
void launch_tc_dim(const AttnGeom& g, cudaStream_t stream) {
  switch (g.D) {
    case 64: launch_tc<64, W>(g, stream); break;
    case 128: launch_tc<128, W>(g, stream); break;
    case 256: launch_tc<256, W>(g, stream); break;
    default: MT_CHECK_MSG(false, "attention_prefill_tc: head_dim must be 64, 128 or 256");
  }
}

bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

bool attention_prefill_tc_fits(QuantType kv_type, const AttnGeom& g) {
  if (kv_type != QuantType::F16 || (g.D != 64 && g.D != 128 && g.D != 256)) return false;
  if (g.window != 0 || g.sinks != nullptr) return false;  // gpt-oss's windows and sinks: the f32 kernel
  // 16-byte cp.async of K/V rows, float4 reads of q, float2 writes of out.
  if (!aligned(g.k, 16) || !aligned(g.v, 16) || g.row_bytes % 16 != 0 || g.head_bytes % 16 != 0) return false;
  if (!aligned(g.q, 16) || !aligned(g.out, 8)) return false;
  // The code the device runs was built for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async).
  cudaFuncAttributes attr{};
  MT_CUDA_CHECK(cudaFuncGetAttributes(&attr, attn_prefill_tc_kernel<128, 4>));
  return attr.ptxVersion >= 80;
}

void attention_prefill_tc(const AttnGeom& g, cudaStream_t stream, int block_rows) {
  MT_CHECK(g.n_tokens > 0 && g.group > 0 && g.n_head % g.group == 0);
  // Default: 128-row blocks (8 warps) halve the K/V traffic from L2 of 64-row ones at the
  // same residency where registers bound it (D 128, 256: 8 warps per SM either way);
  // for D = 64 three 4-warp blocks fit an SM, one 8-warp block.
  if (block_rows == 0) block_rows = g.D == 64 ? 64 : 128;
  switch (block_rows) {
    case 64: launch_tc_dim<4>(g, stream); break;
    case 128: launch_tc_dim<8>(g, stream); break;
    default: MT_CHECK_MSG(false, "attention_prefill_tc: 64 or 128 rows per block");
  }
}

}  // namespace mt::cuda::detail
