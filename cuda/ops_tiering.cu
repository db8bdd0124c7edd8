// Device side of the tiered MoE step (cuda/tiering.h): the CPU's expert rows put in place.
#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/ops_reduce.cuh"

namespace mt::cuda {
namespace {

// Row idx[r] of d (n floats) = row r of rows; one CTA per row.
__global__ void scatter_rows_kernel(float* d, const float* rows, const int32_t* idx, int n) {
  const int r = static_cast<int>(blockIdx.x);
  float* dst = d + static_cast<int64_t>(idx[r]) * n;
  const float* src = rows + static_cast<int64_t>(r) * n;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dst[i] = src[i];
}

// One thread reads the host's flag over the link until it reaches value (compared as a
// sequence number: the difference, so the count may wrap).
__global__ void wait_host_flag_kernel(const volatile uint32_t* flag, uint32_t value) {
  while (static_cast<int32_t>(*flag - value) < 0) __nanosleep(200);
}

}  // namespace

void wait_host_flag(const volatile uint32_t* flag, uint32_t value, cudaStream_t stream) {
  wait_host_flag_kernel<<<1, 1, 0, stream>>>(flag, value);
  MT_CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* d, const float* rows, const int32_t* idx, int n_rows, int n, cudaStream_t stream) {
  if (n_rows <= 0) return;
  scatter_rows_kernel<<<n_rows, 256, 0, stream>>>(d, rows, idx, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
