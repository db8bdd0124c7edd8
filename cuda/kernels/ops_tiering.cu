// Device side of the tiered MoE step (cuda/tiering_device.h): the CPU's expert rows put in place.
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_reduce.cuh"

namespace mt::cuda {
namespace {

// Row idx[r] of d (n floats) = row r of rows; one CTA per row.
__global__ void scatter_rows_kernel(float* d, const float* rows, const int32_t* idx, int n) {
  const int r = static_cast<int>(blockIdx.x);
  if (idx[r] < 0) return;
  float* dst = d + static_cast<int64_t>(idx[r]) * n;
  const float* src = rows + static_cast<int64_t>(r) * n;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dst[i] = src[i];
}

}  // namespace

void scatter_rows(float* d, const float* rows, const int32_t* idx, int n_rows, int n, cudaStream_t stream) {
  if (n_rows <= 0) return;
  scatter_rows_kernel<<<n_rows, 256, 0, stream>>>(d, rows, idx, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
