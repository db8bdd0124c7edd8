// get_rows on the device (cuda/kernels/ops.h): gathering token embeddings from a GGUF-typed
// table, each element through cuda/kernels/dequant.cuh (bit-exact with quant/'s reference
// dequantize_row). One thread per output element: grid.x over the columns, grid.y over
// the ids (looped past the grid limit). And rows_argmax: one block per row, each thread
// the first of its strided elements' maxima, then warp and block arg-max (ties to the
// lower index), so the pick is core/row_argmax.h's.
#include <algorithm>
#include <climits>

#include "core/check.h"
#include "cuda/kernels/dequant.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridRows = 65535;

// table rows row_bytes apart; ids (n_ids); out (n_ids, n).
template <class Q>
__global__ void get_rows_kernel(const uint8_t* table, uint64_t row_bytes, const int32_t* ids, int n_ids, int n,
                                float* out) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  for (int i = blockIdx.y; i < n_ids; i += gridDim.y) {
    const uint8_t* row = table + static_cast<int64_t>(ids[i]) * static_cast<int64_t>(row_bytes);
    out[static_cast<int64_t>(i) * n + col] = dequant_row_elem<Q>(row, col);
  }
}

constexpr int kArgmaxThreads = 1024;

// x (rows, n), out (rows); grid.x over the rows.
__global__ void rows_argmax_kernel(const float* x, int n, int32_t* out) {
  __shared__ float warp_v[32];
  __shared__ int warp_i[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  float v = -INFINITY;
  int i = INT_MAX;  // no candidate (v stays -inf: never the answer)
  for (int j = static_cast<int>(threadIdx.x); j < n; j += blockDim.x) {
    const float e = row[j];
    if (e > v) {  // strict, as row_argmax: this thread's first of equal maxima; NaN never
      v = e;
      i = j;
    }
  }
  detail::warp_argmax(v, i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_v[warp] = v, warp_i[warp] = i;
  __syncthreads();
  if (warp != 0) return;
  const int n_warps = blockDim.x >> 5;
  v = lane < n_warps ? warp_v[lane] : -INFINITY;
  i = lane < n_warps ? warp_i[lane] : INT_MAX;
  detail::warp_argmax(v, i);
  if (lane == 0) out[blockIdx.x] = v > -INFINITY ? i : -1;
}

}  // namespace

void rows_argmax(const float* x, int rows, int n, int32_t* out, cudaStream_t stream) {
  MT_CHECK(rows >= 0 && n > 0);
  if (rows == 0) return;
  rows_argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(x, n, out);
  MT_CUDA_CHECK_LAUNCH();
}

void get_rows(QuantType type, const uint8_t* table, uint64_t row_bytes, const int32_t* ids, int n_ids, int n,
              float* out, cudaStream_t stream) {
  MT_CHECK_MSG(dequant_supported(type), "get_rows: no CUDA dequantizer for the table's type");
  const auto rb = mt::row_bytes(type, static_cast<uint64_t>(n));
  MT_CHECK(n > 0 && rb && *rb <= row_bytes);
  if (n_ids <= 0) return;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min(n_ids, kMaxGridRows)));
  dispatch_type(type, [&](auto q) {
    using Q = decltype(q);
    get_rows_kernel<Q><<<grid, kThreads, 0, stream>>>(table, row_bytes, ids, n_ids, n, out);
  });
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
