// MMVQ for F32, F16 and BF16 weights: X read as f32, products accumulated in f32 (FMA),
// one warp per kRows rows, X loaded once for them (F32: 2 rows; F16 / BF16: 1, which
// measured faster on the H200: 0.76 vs 0.51 of copy bandwidth for one token, while F32
// gained 0.58 -> 0.96 at two tokens). With 16-byte aligned rows and n_in a multiple of 8
// each lane reads 8 consecutive weights of each row per step (one or two 16-byte loads,
// the warp 256 consecutive weights); otherwise one weight per lane per step, read with
// loads no wider than the row's alignment.
#include "cuda/mmvq_common.cuh"

namespace mt::cuda {
namespace mmvq_detail {
namespace {

template <class W> struct FloatType;

template <>
struct FloatType<WeightF32> {
  static constexpr int kBytes = 4, kRows = 2;
  static __device__ __forceinline__ float act(float x) { return x; }
  template <int A>
  static __device__ __forceinline__ float one(const uint8_t* row, int i) {
    uint32_t w[1];
    ld_words<1, A>(row + 4 * static_cast<int64_t>(i), w);
    return __uint_as_float(w[0]);
  }
  static __device__ __forceinline__ void eight(const uint8_t* row, int i, float (&v)[8]) {
    uint32_t w[8];
    ld_words<8, 16>(row + 4 * static_cast<int64_t>(i), w);
    for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(w[k]);
  }
};

// F16 and BF16: element 2k in the low half of word k, 2k + 1 in the high half.
template <bool kBf16>
struct Float16Type {
  static constexpr int kBytes = 2, kRows = 1;
  static __device__ __forceinline__ float widen(uint32_t h) {
    return kBf16 ? __uint_as_float(h << 16) : h2f(h);
  }
  // X rounded to the weight's type first, as the CPU does (its activation type for F16
  // and BF16 weights is F16 / BF16): the products then match it, not only approach it.
  static __device__ __forceinline__ float act(float x) {
    if constexpr (kBf16) {
      const uint32_t u = __float_as_uint(x);
      if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
      return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
    } else {
      return __half2float(__float2half_rn(x));
    }
  }
  template <int A>
  static __device__ __forceinline__ float one(const uint8_t* row, int i) {
    return widen(ld_u16<A>(row + 2 * static_cast<int64_t>(i)));
  }
  static __device__ __forceinline__ void eight(const uint8_t* row, int i, float (&v)[8]) {
    uint32_t w[4];
    ld_words<4, 16>(row + 2 * static_cast<int64_t>(i), w);
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = widen(w[k] & 0xFFFFu);
      v[2 * k + 1] = widen(w[k] >> 16);
    }
  }
};
template <> struct FloatType<WeightF16> : Float16Type<false> {};
template <> struct FloatType<WeightBF16> : Float16Type<true> {};

template <class W, int A, int NT>
__global__ void __launch_bounds__(kThreads) mmvq_float_kernel(const MmvqArgs p) {
  using F = FloatType<W>;
  constexpr int R = F::kRows;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * R;
  if (row0 >= p.n_out) return;  // whole warps
  SlotView v;
  if (!slot_view(p, row0, R, lane == 0, v)) return;
  const int rows = p.n_out - row0 < R ? static_cast<int>(p.n_out - row0) : R;
  const uint8_t* wrow[R];  // missing rows re-read row0; their results are dropped
  for (int r = 0; r < R; ++r) wrow[r] = v.wmat + static_cast<uint64_t>(row0 + (r < rows ? r : 0)) * p.row_bytes;
  const float* x[NT];
  for (int t = 0; t < NT; ++t) x[t] = p.x + static_cast<int64_t>(v.x_row + t) * p.n_in;
  float acc[R][NT];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  }
  if constexpr (A >= 16) {  // n_in % 8 == 0, rows and x 16-byte aligned
    for (int i = 8 * lane; i < p.n_in; i += 8 * 32) {
      float w[R][8];
      for (int r = 0; r < R; ++r) F::eight(wrow[r], i, w[r]);
      for (int t = 0; t < NT; ++t) {
        float4 x0 = __ldg(reinterpret_cast<const float4*>(x[t] + i));
        float4 x1 = __ldg(reinterpret_cast<const float4*>(x[t] + i) + 1);
        x0 = {F::act(x0.x), F::act(x0.y), F::act(x0.z), F::act(x0.w)};
        x1 = {F::act(x1.x), F::act(x1.y), F::act(x1.z), F::act(x1.w)};
        for (int r = 0; r < R; ++r) {
          float s = acc[r][t];
          s = fmaf(w[r][0], x0.x, s), s = fmaf(w[r][1], x0.y, s), s = fmaf(w[r][2], x0.z, s);
          s = fmaf(w[r][3], x0.w, s), s = fmaf(w[r][4], x1.x, s), s = fmaf(w[r][5], x1.y, s);
          s = fmaf(w[r][6], x1.z, s), s = fmaf(w[r][7], x1.w, s);
          acc[r][t] = s;
        }
      }
    }
  } else {
    for (int i = lane; i < p.n_in; i += 32) {
      float w[R];
      for (int r = 0; r < R; ++r) w[r] = F::template one<A>(wrow[r], i);
      for (int t = 0; t < NT; ++t) {
        const float xi = F::act(__ldg(x[t] + i));
        for (int r = 0; r < R; ++r) acc[r][t] = fmaf(w[r], xi, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) acc[r][t] = group_sum<32>(acc[r][t]);
  }
  if (lane == 0) {
    for (int r = 0; r < rows; ++r) {
      for (int t = 0; t < NT; ++t) v.y[t * p.n_out + row0 + r] = acc[r][t];
    }
  }
}

// Few rows (a router: 128 x 2048 f32): a warp per row would leave most of the GPU idle
// and walk each row in dependent steps, so here a CTA of kSplitThreads takes one row of
// a dense product and each thread 8 consecutive weights per step (16-byte loads), the
// CTA's partial sums added through shared memory. Grid (n_out).
constexpr int kSplitThreads = 256;
constexpr int64_t kSplitMaxRows = 1024;

template <class W, int NT>
__global__ void __launch_bounds__(kSplitThreads) mmvq_float_split_kernel(const MmvqArgs p) {
  using F = FloatType<W>;
  __shared__ float part[NT][kSplitThreads / 32];
  const int64_t row = blockIdx.x;
  const uint8_t* wrow = p.w + static_cast<uint64_t>(p.mat) * p.matrix_bytes + static_cast<uint64_t>(row) * p.row_bytes;
  float acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
#pragma unroll 2
  for (int i = 8 * static_cast<int>(threadIdx.x); i < p.n_in; i += 8 * kSplitThreads) {
    float w[8];
    F::eight(wrow, i, w);
    for (int t = 0; t < NT; ++t) {
      const float* xr = p.x + static_cast<int64_t>(t) * p.n_in + i;
      float4 x0 = __ldg(reinterpret_cast<const float4*>(xr));
      float4 x1 = __ldg(reinterpret_cast<const float4*>(xr) + 1);
      x0 = {F::act(x0.x), F::act(x0.y), F::act(x0.z), F::act(x0.w)};
      x1 = {F::act(x1.x), F::act(x1.y), F::act(x1.z), F::act(x1.w)};
      float sacc = acc[t];
      sacc = fmaf(w[0], x0.x, sacc), sacc = fmaf(w[1], x0.y, sacc), sacc = fmaf(w[2], x0.z, sacc);
      sacc = fmaf(w[3], x0.w, sacc), sacc = fmaf(w[4], x1.x, sacc), sacc = fmaf(w[5], x1.y, sacc);
      sacc = fmaf(w[6], x1.z, sacc), sacc = fmaf(w[7], x1.w, sacc);
      acc[t] = sacc;
    }
  }
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  for (int t = 0; t < NT; ++t) {
    const float v = group_sum<32>(acc[t]);
    if (lane == 0) part[t][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < NT) {
    float total = 0.f;
    for (int w = 0; w < kSplitThreads / 32; ++w) total += part[threadIdx.x][w];
    p.y[static_cast<int64_t>(threadIdx.x) * p.n_out + row] = total;
  }
}

// Vector path (16), element-aligned scalar path (kBytes), or byte loads (1).
template <class W>
void launch_float(const MmvqArgs& a, cudaStream_t stream) {
  constexpr int kNatural = FloatType<W>::kBytes;
  const bool vec = a.align >= 16 && a.n_in % 8 == 0 && a.x_aligned16;
  const bool natural = a.align >= kNatural;
  const bool split = vec && a.ids == nullptr && a.n_slots == 1 && a.n_out <= kSplitMaxRows;
  with_tokens(a.n_tokens, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    if (split) {
      mmvq_float_split_kernel<W, NT><<<static_cast<unsigned>(a.n_out), kSplitThreads, 0, stream>>>(a);
    } else if (vec) {
      mmvq_float_kernel<W, 16, NT><<<mmvq_grid(a, 32, FloatType<W>::kRows), kThreads, 0, stream>>>(a);
    } else if (natural) {
      mmvq_float_kernel<W, kNatural, NT><<<mmvq_grid(a, 32, FloatType<W>::kRows), kThreads, 0, stream>>>(a);
    } else {
      mmvq_float_kernel<W, 1, NT><<<mmvq_grid(a, 32, FloatType<W>::kRows), kThreads, 0, stream>>>(a);
    }
  });
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace mmvq_detail

template <> void launch_mmvq<WeightF32>(const MmvqArgs& a, cudaStream_t s) { mmvq_detail::launch_float<WeightF32>(a, s); }
template <> void launch_mmvq<WeightF16>(const MmvqArgs& a, cudaStream_t s) { mmvq_detail::launch_float<WeightF16>(a, s); }
template <> void launch_mmvq<WeightBF16>(const MmvqArgs& a, cudaStream_t s) { mmvq_detail::launch_float<WeightBF16>(a, s); }

}  // namespace mt::cuda
