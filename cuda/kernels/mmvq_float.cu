// MMVQ for F32, F16 and BF16 weights: X read as f32, products accumulated in f32 (FMA),
// one warp per kRows rows, X loaded once for them (F32: 2 rows; F16 / BF16: 1, which
// measured faster on the H200: 0.76 vs 0.51 of copy bandwidth for one token, while F32
// gained 0.58 -> 0.96 at two tokens). With 16-byte aligned rows and n_in a multiple of 8
// each lane reads 8 consecutive weights of each row per step (one or two 16-byte loads,
// the warp 256 consecutive weights); otherwise one weight per lane per step, read with
// loads no wider than the row's alignment. Few rows of a dense product take the split
// form instead (a CTA per row; cuda/kernels/mmvq_float.cuh, with the weight readers).
#include "cuda/kernels/mmvq_float.cuh"

namespace mt::cuda {
namespace mmvq_detail {
namespace {

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

// The split form (cuda/kernels/mmvq_float.cuh split_row): grid (n_out), a CTA per row.
template <class W, int NT>
__global__ void __launch_bounds__(kSplitThreads) mmvq_float_split_kernel(const MmvqArgs p) {
  split_row<W, NT>(p, blockIdx.x);
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
    const dim3 grid = mmvq_grid(a, 32, FloatType<W>::kRows), block(kThreads);
    if (split) {
      mmvq_float_split_kernel<W, NT><<<static_cast<unsigned>(a.n_out), kSplitThreads, 0, stream>>>(a);
    } else if (vec) {
      mmvq_float_kernel<W, 16, NT><<<grid, block, 0, stream>>>(a);
    } else if (natural) {
      mmvq_float_kernel<W, kNatural, NT><<<grid, block, 0, stream>>>(a);
    } else {
      mmvq_float_kernel<W, 1, NT><<<grid, block, 0, stream>>>(a);
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
