// Device side of the tiered MoE step (cuda/tiering.h): the CPU's expert rows put in place.
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

// One thread reads the host's flag over the link until it reaches the next count
// (compared as a sequence number: the difference, so the count may wrap).
// A host that never raises it is a broken invariant: after kFlagTimeoutNs the kernel traps
// (the stream's next synchronisation then fails with file:line) instead of hanging.
constexpr uint64_t kFlagTimeoutNs = 20'000'000'000ull;
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void wait_host_flag_kernel(const volatile uint32_t* flag, uint32_t* count) {
  const uint32_t value = *count + 1;
  const uint64_t t0 = global_ns();
  while (static_cast<int32_t>(*flag - value) < 0) {
    __nanosleep(200);
    if (global_ns() - t0 > kFlagTimeoutNs) __trap();
  }
  *count = value;
}

}  // namespace

void wait_host_flag(const volatile uint32_t* flag, uint32_t* count, cudaStream_t stream) {
  wait_host_flag_kernel<<<1, 1, 0, stream>>>(flag, count);
  MT_CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* d, const float* rows, const int32_t* idx, int n_rows, int n, cudaStream_t stream) {
  if (n_rows <= 0) return;
  scatter_rows_kernel<<<n_rows, 256, 0, stream>>>(d, rows, idx, n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
