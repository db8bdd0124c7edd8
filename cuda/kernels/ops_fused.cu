// Fused forms of ops the decode step runs back to back (cuda/kernels/ops.h): each kernel computes
// exactly what its unfused sequence computes (the same float operations in the same
// order: rms_norm_kernel's double square sum, rope_kernel's angle and rotation,
// kv_store's roundings), in one launch instead of several, because a decode step is
// bound by launches, not by these kernels' bytes. The row kernels run wider CTAs for a
// decode step's few rows (more warps loading each row) with their sums in the narrow
// CTA's order, so the width never changes a byte.
#include <cuda_fp16.h>

#include <cmath>

#include "core/check.h"
#include "cuda/kernels/act_quant.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_device.cuh"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kMaxHead = 256;  // head_dim the prep kernel takes (one thread per element)
constexpr int kMaxFusedRow = 12288;  // floats of a row add_rms_norm_quant keeps in shared memory (48 KiB)
constexpr int kRowThreads = 256;     // a row's CTA, and the order of its sums, at any width
constexpr int kWideThreads = 1024;   // a row's CTA for few rows (decode)
constexpr int kWideMaxRows = 8;      // up to this many rows the row kernels may go wide
constexpr int kWideElems = 4;        // elements per thread a wide CTA aims at
constexpr int kMaxWideRow = 8192;    // floats of a row a wide CTA stages in shared memory (32 KiB)

using act_detail::silu;  // the one SwiGLU definition (cuda/kernels/act_quant.cuh)

// One block per row: x += y, then out = rms_norm(x) * w as rms_norm_kernel computes it.
__global__ void add_rms_norm_kernel(float* x, const float* y, const float* w, float eps, int n, float* out) {
  __shared__ double scratch[32];
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  const float* yr = y != nullptr ? y + static_cast<int64_t>(blockIdx.x) * n : nullptr;
  float* orow = out + static_cast<int64_t>(blockIdx.x) * n;
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = yr != nullptr ? xr[i] + yr[i] : xr[i];
    xr[i] = v;
    const double vd = v;
    sum += vd * vd;
  }
  sum = detail::block_sum(sum, scratch);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * scale;  // this thread's own write above
    orow[i] = w != nullptr ? v * w[i] : v;
  }
}

// add_rms_norm_quant_kernel's first pass when wide (below): x += (the MoE combine of
// the row's experts, or y) for this thread's elements tid + j * blockDim.x (j < kPer),
// into x and row_sh; the loads of kGroup experts' rows (and weights) for all its elements
// issued before their sums, which are the kernel's loop's operations in its order.
template <int kPer>
__device__ __forceinline__ void combine_wide_batched(float* __restrict__ xw, const float* __restrict__ ya,
                                                     const MoeCombineIn& c, const float* __restrict__ dd,
                                                     const float* __restrict__ dsh, const float* cw, float gate,
                                                     int64_t r, int n, float* row_sh) {
  constexpr int kGroup = kPer >= 8 ? 2 : 4;  // experts whose rows load together (registers)
  const int tid = threadIdx.x, bd = blockDim.x;
  float xv[kPer], yv[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = tid + j * bd;
    xv[j] = i < n ? xw[i] : 0.0f;
    yv[j] = i < n && dd == nullptr && ya != nullptr ? ya[i] : 0.0f;
  }
  for (int k0 = 0; dd != nullptr && k0 < c.K; k0 += kGroup) {
    float dv[kGroup][kPer], wk[kGroup];
#pragma unroll
    for (int kk = 0; kk < kGroup; ++kk) {
      const bool live = k0 + kk < c.K;
      wk[kk] = live ? cw[k0 + kk] : 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = tid + j * bd;
        dv[kk][j] = live && i < n ? dd[(r * c.K + k0 + kk) * n + i] : 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kGroup; ++kk) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (k0 + kk < c.K) yv[j] = __fadd_rn(yv[j], __fmul_rn(dv[kk][j], wk[kk]));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = tid + j * bd;
    if (i >= n) continue;
    if (dd != nullptr && dsh != nullptr) yv[j] = __fadd_rn(yv[j], __fmul_rn(dsh[r * n + i], gate));
    const float v = dd != nullptr || ya != nullptr ? xv[j] + yv[j] : xv[j];  // x + the combine, x + y, or x
    xw[i] = v;
    row_sh[i] = v;
  }
}

// add_rms_norm_kernel, then the normed row (kept in shared memory, n floats) quantized
// in `mode` as cuda/kernels/mmvq_quantize.cu does; n >= 256.
// With c.d set, y is the MoE combine of the row's experts (moe_combine_kernel's math: the
// shared expert's gate from the FFN input row, which is `out`'s row, read before any
// write), computed here instead of read; qs null: no quantization.
// Sums (the gate's dot, the square sum) are always those of a kRowThreads block: thread
// t adds elements t, t + kRowThreads, ... in order, then block_sum. kWide (decode: a few
// rows, blockDim up to kWideThreads so more warps load each row): the row's sums are
// staged in shared memory and added by the first kRowThreads threads in that order (the
// other warps contribute +0), so both widths write the same bytes.
// kPer (wide): a thread's elements at most (tid + j * blockDim.x, j < kPer). Wide, the
// first pass is combine_wide_batched: the combine's loads of four (kPer 8: two) experts'
// rows for all of a thread's elements issued together before their sums (a plain loop
// waits on one element's experts before the next element's loads: eight L2 round trips
// in a row for eight experts at four elements per thread; measured 2-3% slower in the
// decode step, docs/PERFORMANCE.md); the same bytes.
template <bool kWide, int kPer>
__global__ void __launch_bounds__(kWide ? kWideThreads : kRowThreads)
    add_rms_norm_quant_kernel(float* x, const float* y, MoeCombineIn c, const float* w, float eps, int n, float* out,
                              ActQuant mode, int8_t* qs, uint2* meta) {
  extern __shared__ float row_sh[];  // (n)
  __shared__ double scratch[32];
  __shared__ float scratch_f[32];
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  float* xr = x + r * n;
  const float* yr = y != nullptr ? y + r * n : nullptr;
  float* orow = out + r * n;
  // Wide: the norm weights this thread scales by, loaded first. In a decode step
  // they come from HBM (the step's weight stream evicts them from L2); read after the
  // square sum, that latency followed the reduction, read here it hides behind the
  // combine's loads. The same values either way.
  constexpr int kEarly = kWide ? kPer : 1;  // elements per wide thread at most
  float w_early[kEarly];
  if constexpr (kWide) {
    if (w != nullptr) {
#pragma unroll
      for (int k = 0; k < kEarly; ++k) {
        const int i = tid + k * static_cast<int>(blockDim.x);
        w_early[k] = i < n ? w[i] : 0.0f;
      }
    }
  }
  float gate = 1.0f;
  if (c.d != nullptr && c.d_sh != nullptr && c.gate_inp != nullptr) {  // uniform over the block
    float z = 0.0f;
    if (tid < kRowThreads) {
      for (int j = tid; j < n; j += kRowThreads) z += c.gate_inp[j] * orow[j];
    }
    z = detail::block_sum(z, scratch_f);  // its barriers: every read of orow is done
    gate = 1.0f / (1.0f + expf(-z));
  }
  const float* cw = c.d != nullptr ? c.weights + r * c.K : nullptr;
  // Restrict-qualified views: the loads of later elements may be issued before this
  // element's store (one CTA per row walks it in n / blockDim steps; decode is latency-bound).
  const float* __restrict__ dd = c.d;
  const float* __restrict__ dsh = c.d_sh;
  const float* __restrict__ ya = yr;
  float* __restrict__ xw = xr;
  double sum = 0.0;
  if constexpr (kWide) {
    combine_wide_batched<kPer>(xw, ya, c, dd, dsh, cw, gate, r, n, row_sh);
  } else {
#pragma unroll 4
    for (int i = tid; i < n; i += blockDim.x) {
      float yv = 0.0f;
      if (dd != nullptr) {
        for (int k = 0; k < c.K; ++k) yv = __fadd_rn(yv, __fmul_rn(dd[(r * c.K + k) * n + i], cw[k]));
        if (dsh != nullptr) yv = __fadd_rn(yv, __fmul_rn(dsh[r * n + i], gate));
      }
      const float v = dd != nullptr ? xw[i] + yv : (ya != nullptr ? xw[i] + ya[i] : xw[i]);
      xw[i] = v;
      const double vd = v;
      sum += vd * vd;
    }
  }
  if constexpr (kWide) {
    __syncthreads();
    if (tid < kRowThreads) {
      for (int i = tid; i < n; i += kRowThreads) {
        const double vd = row_sh[i];
        sum = __fma_rn(vd, vd, sum);  // the narrow loop's sum += vd * vd (contracted to this fma)
      }
    }
  }
  sum = detail::block_sum(sum, scratch);  // its barriers: every read of row_sh above is done
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  if (kWide && w != nullptr) {
#pragma unroll
    for (int k = 0; k < kEarly; ++k) {
      const int i = tid + k * static_cast<int>(blockDim.x);
      if (i < n) {
        const float o = row_sh[i] * scale * w_early[k];  // the loop below's v * w[i]
        orow[i] = o;
        row_sh[i] = o;
      }
    }
  } else {
    for (int i = tid; i < n; i += blockDim.x) {
      // This thread's own write above (wide: its staged copy, no round trip to L2).
      const float v = (kWide ? row_sh[i] : xr[i]) * scale;
      const float o = w != nullptr ? v * w[i] : v;
      orow[i] = o;
      row_sh[i] = o;
    }
  }
  if (qs == nullptr) return;
  __syncthreads();
  const int lane = tid & 31, warp = tid >> 5, n_warps = blockDim.x >> 5;
  int8_t* qrow = qs + r * n;
  uint2* mrow = meta + r * (n / 32);
  if (mode == ActQuant::kQ8_K) {
    for (int b = warp; b < n / 256; b += n_warps) {
      float v[8];
      for (int i = 0; i < 8; ++i) v[i] = row_sh[b * 256 + 8 * lane + i];
      act_detail::quantize_q8_k_warp(v, lane, qrow + b * 256, mrow + b * 8);
    }
  } else {
    for (int e = tid; e < n; e += blockDim.x) {  // n % 32 == 0: whole warps
      act_detail::quantize_q8_0_warp(row_sh[e], lane, qrow + e, mrow + e / 32);
    }
  }
}

// Grid (n_head + 2 * n_head_kv, n_tokens), one thread per element of a head (blockDim a
// multiple of 32 >= D). Block y = token t, x = a q head, a k head or a v head.
__global__ void attn_prep_kernel(AttnPrepArgs a, float theta_scale) {
  __shared__ double scratch[32];
  __shared__ float head_sh[kMaxHead];
  const int t = blockIdx.y, e = threadIdx.x, D = a.head_dim;
  const int hb = blockIdx.x;
  const bool is_q = hb < a.n_head, is_k = !is_q && hb < a.n_head + a.n_head_kv;
  const int h = is_q ? hb : (is_k ? hb - a.n_head : hb - a.n_head - a.n_head_kv);
  const float* src = is_q ? a.q_src + t * a.q_stride : (is_k ? a.k_src + t * a.k_stride : a.v_src + t * a.v_stride);
  const float* bias = is_q ? a.bq : (is_k ? a.bk : a.bv);
  const uint32_t pos = a.seq_rows != nullptr ? a.seq_rows[t].n_kv - 1
                                             : (a.pos_dev != nullptr ? *a.pos_dev : a.pos0) + static_cast<uint32_t>(t);
  const bool live = e < D;
  float v = 0.0f;
  if (live) {
    v = src[h * D + e];
    if (bias != nullptr) v += bias[h * D + e];  // add_bias: y += b
  }
  const float* norm_w = is_q ? a.q_norm : (is_k ? a.k_norm : nullptr);
  const detail::RopeArgs rope{a.n_rot, theta_scale, a.freq_scale, a.attn_factor, a.yarn_ext,
                              a.yarn_lo, a.yarn_hi, a.yarn_mscale, a.neox};
  v = detail::head_norm_rope(v, e, D, norm_w, a.eps, is_q || is_k ? &rope : nullptr, pos, head_sh, scratch,
                             /*early=*/true);
  if (is_q) {
    if (live) a.q_out[(static_cast<int64_t>(t) * a.n_head + h) * D + e] = v;
    return;
  }
  uint8_t* cache = a.seq_rows != nullptr ? (is_k ? a.seq_rows[t].k : a.seq_rows[t].v) : (is_k ? a.k_cache : a.v_cache);
  uint8_t* row = cache + static_cast<uint64_t>(pos) * a.row_bytes;
  const int col = h * D + e;  // element of the cache row
  switch (a.kv_type) {
    case QuantType::F16:
      if (live) reinterpret_cast<__half*>(row)[col] = __float2half_rn(v);
      break;
    case QuantType::F32:
      if (live) reinterpret_cast<float*>(row)[col] = v;
      break;
    default: {  // Q8_0: a warp is one 32-element block (D and h * D multiples of 32)
      if (e >= ((D + 31) / 32) * 32) return;  // whole warps past the head
      float d;
      const int q = detail::q8_0_code(v, &d);
      uint8_t* blk = row + (col / 32) * 34;
      if ((e & 31) == 0) *reinterpret_cast<__half*>(blk) = __float2half_rn(d);
      if (live) blk[2 + (e & 31)] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

// rows (n_rows, 2 * ff) = [gate | up] -> out (n_rows, ff) = silu(gate) * up.
__global__ void swiglu_pairs_kernel(const float* gu, int64_t n_rows, int ff, float* out) {
  const int64_t n = n_rows * ff;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / ff, c = i % ff;
    const float* row = gu + r * 2 * ff;
    out[i] = silu(row[c]) * row[ff + c];
  }
}

// swiglu_pairs_kernel's rows, then quantized in `mode` as cuda/kernels/mmvq_quantize.cu does: a
// warp per 256 elements (kQ8_K, lane j: elements 8j..8j+7) or per 32 (kQ8_0 / kQ8_1).
__global__ void swiglu_pairs_quant_kernel(const float* gu, int64_t n_rows, int ff, float* out, ActQuant mode,
                                          int8_t* qs, uint2* meta) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int per = mode == ActQuant::kQ8_K ? 256 : 32;  // elements per warp
  const int64_t blocks_per_row = ff / per;
  if (warp >= n_rows * blocks_per_row) return;  // whole warps
  const int64_t r = warp / blocks_per_row, b = warp % blocks_per_row;
  const float* row = gu + r * 2 * ff;
  const int64_t first = r * ff + b * per;  // element of out / qs
  if (mode == ActQuant::kQ8_K) {
    float v[8];
    for (int i = 0; i < 8; ++i) {
      const int c = static_cast<int>(b * 256) + 8 * lane + i;
      v[i] = silu(row[c]) * row[ff + c];
      out[first + 8 * lane + i] = v[i];
    }
    act_detail::quantize_q8_k_warp(v, lane, qs + first, meta + first / 32);
  } else {
    const int c = static_cast<int>(b * 32) + lane;
    const float v = silu(row[c]) * row[ff + c];
    out[first + lane] = v;
    act_detail::quantize_q8_0_warp(v, lane, qs + first + lane, meta + first / 32);
  }
}

// Threads of a row's CTA in the row kernels: kRowThreads, or for a decode step's few
// rows (n <= kMaxWideRow, staged in shared memory) about n / kWideElems, up to
// kWideThreads, a whole number of warps.
int wide_row_threads(int rows, int n) {
  if (rows > kWideMaxRows || n > kMaxWideRow) return kRowThreads;
  const int t = (n / kWideElems + 31) / 32 * 32;
  return t < kWideThreads ? t : kWideThreads;
}

// add_rms_norm_quant_kernel over a's rows (n >= 256; a.qs null: no quantization), x += the
// combine of c when c.d is set (else a.y), wide where wide_row_threads says.
void launch_row_norm(const RowNormArgs& a, const MoeCombineIn& c, cudaStream_t stream) {
  const int rows = a.rows, n = a.n;
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  const int threads = wide_row_threads(rows, n);
  if (threads > kRowThreads) {
    // elements per thread: <= 4 while n <= 4 * threads (n <= 4096), else <= 8 (n <= kMaxWideRow)
    if (n <= 4 * threads) {
      add_rms_norm_quant_kernel<true, 4><<<rows, threads, smem, stream>>>(a.x, a.y, c, a.w, a.eps, n, a.out, a.mode,
                                                                          a.qs, a.meta);
    } else {
      add_rms_norm_quant_kernel<true, kMaxWideRow / kWideThreads><<<rows, threads, smem, stream>>>(
          a.x, a.y, c, a.w, a.eps, n, a.out, a.mode, a.qs, a.meta);
    }
  } else {
    add_rms_norm_quant_kernel<false, 1><<<rows, kRowThreads, smem, stream>>>(a.x, a.y, c, a.w, a.eps, n, a.out, a.mode,
                                                                             a.qs, a.meta);
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void swiglu_pairs_quant(const float* gu, int64_t n_rows, int ff, float* out, ActQuant mode, int8_t* qs, uint2* meta,
                        cudaStream_t stream) {
  MT_CHECK(swiglu_pairs_quant_supports(ff, mode) && n_rows >= 0);
  MT_CHECK(reinterpret_cast<uintptr_t>(qs) % 8 == 0 && reinterpret_cast<uintptr_t>(meta) % 8 == 0);
  const int per = mode == ActQuant::kQ8_K ? 256 : 32;
  const int64_t warps = n_rows * (ff / per);
  if (warps == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  MT_CHECK(blocks < (int64_t{1} << 31));
  swiglu_pairs_quant_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gu, n_rows, ff, out, mode, qs, meta);
  MT_CUDA_CHECK_LAUNCH();
}

bool swiglu_pairs_quant_supports(int ff, ActQuant mode) { return ff > 0 && ff % (mode == ActQuant::kQ8_K ? 256 : 32) == 0; }

void add_rms_norm(float* x, const float* y, const float* w, float eps, int rows, int n, float* out,
                  cudaStream_t stream) {
  MT_CHECK(n > 0 && rows >= 0);
  if (rows == 0) return;
  if (wide_row_threads(rows, n) > kRowThreads) {  // the same bytes, more warps per row
    RowNormArgs a;
    a.x = x, a.y = y, a.w = w, a.eps = eps, a.rows = rows, a.n = n, a.out = out;
    launch_row_norm(a, MoeCombineIn{}, stream);
    return;
  }
  int threads = (n + 31) / 32 * 32;
  threads = threads < 256 ? threads : 256;
  add_rms_norm_kernel<<<rows, threads, 0, stream>>>(x, y, w, eps, n, out);
  MT_CUDA_CHECK_LAUNCH();
}

void add_rms_norm_quant(const RowNormArgs& a, cudaStream_t stream) {
  MT_CHECK(add_rms_norm_quant_supports(a.n, a.mode) && a.rows >= 0 && a.qs != nullptr && a.meta != nullptr);
  MT_CHECK(reinterpret_cast<uintptr_t>(a.qs) % 8 == 0 && reinterpret_cast<uintptr_t>(a.meta) % 8 == 0);
  if (a.rows == 0) return;
  launch_row_norm(a, MoeCombineIn{}, stream);
}

void moe_combine_add_rms_norm(const MoeCombineIn& c, const RowNormArgs& a, cudaStream_t stream) {
  MT_CHECK(c.d != nullptr && c.weights != nullptr && c.K > 0 && a.rows >= 0);
  MT_CHECK(a.n >= 256 && a.n <= kMaxFusedRow && (a.qs == nullptr || add_rms_norm_quant_supports(a.n, a.mode)));
  MT_CHECK(c.d_sh == nullptr || c.gate_inp == nullptr || c.h == a.out);
  if (a.rows == 0) return;
  RowNormArgs b = a;
  b.y = nullptr;
  if (b.qs == nullptr) b.meta = nullptr;
  launch_row_norm(b, c, stream);
}

bool add_rms_norm_quant_supports(int n, ActQuant mode) {
  return n >= 256 && n <= kMaxFusedRow && n % (mode == ActQuant::kQ8_K ? 256 : 32) == 0;
}

void attn_prep(const AttnPrepArgs& a, cudaStream_t stream) {
  MT_CHECK(a.n_tokens >= 0 && a.n_head > 0 && a.n_head_kv > 0);
  MT_CHECK(a.head_dim > 0 && a.head_dim <= kMaxHead && a.n_rot >= 0 && a.n_rot <= a.head_dim && a.n_rot % 2 == 0);
  MT_CHECK(a.kv_type == QuantType::F16 || a.kv_type == QuantType::F32 ||
           (a.kv_type == QuantType::Q8_0 && a.head_dim % 32 == 0));
  // The CPU's float expression (model/attention.cpp rope_angles), as rope() takes it.
  const float theta_scale = a.n_rot > 0 ? std::pow(a.freq_base, -2.0f / static_cast<float>(a.n_rot)) : 1.0f;
  if (a.n_tokens == 0) return;
  const int threads = (a.head_dim + 31) / 32 * 32;
  const dim3 grid(static_cast<unsigned>(a.n_head + 2 * a.n_head_kv), static_cast<unsigned>(a.n_tokens));
  attn_prep_kernel<<<grid, threads, 0, stream>>>(a, theta_scale);
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu_pairs(const float* gu, int64_t n_rows, int ff, float* out, cudaStream_t stream) {
  MT_CHECK(ff > 0 && n_rows >= 0);
  const int64_t n = n_rows * ff;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t b = (n + kThreads - 1) / kThreads;
  swiglu_pairs_kernel<<<static_cast<int>(b < 65536 ? b : 65536), kThreads, 0, stream>>>(gu, n_rows, ff, out);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
