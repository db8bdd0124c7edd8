// Slots of a routed batch grouped by expert (cuda/kernels/mmvq_kernels.h expert_groups), so
// the grouped MMVQ reads each selected matrix's rows once for all the slots that chose it.
// One CTA: counts per matrix in shared memory, the groups each matrix needs scanned into
// its first group, then every slot placed by a second count (its rank among its matrix's
// slots). Ids >= n_mat share one bucket past the last matrix (NaN rows); ids < 0 are
// left out.
#include <cuda_runtime.h>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/mmvq_kernels.h"

namespace mt::cuda {
namespace {

constexpr int kThreads = 1024;

// Exclusive prefix sum of v over the CTA's threads (thread order), and the total.
__device__ int cta_exclusive_scan(int v, int& total) {
  __shared__ int warp_sums[kThreads / 32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  total = warp_sums[kThreads / 32 - 1];
  const int before = warp == 0 ? 0 : warp_sums[warp - 1];
  return before + incl - v;
}

__global__ void __launch_bounds__(kThreads)
    expert_groups_kernel(const int32_t* __restrict__ ids, int n_slots, int n_mat, int32_t* __restrict__ groups) {
  extern __shared__ int sh[];
  const int buckets = n_mat + 1;  // the last: ids >= n_mat
  int* count = sh;                // slots per bucket
  int* first = sh + buckets;      // the bucket's first group
  int* fill = sh + 2 * buckets;   // slots placed so far
  const int tid = static_cast<int>(threadIdx.x);
  for (int b = tid; b < buckets; b += kThreads) count[b] = 0, fill[b] = 0;
  __syncthreads();
  for (int s = tid; s < n_slots; s += kThreads) {
    const int id = ids[s];
    if (id >= 0) atomicAdd(&count[id < n_mat ? id : n_mat], 1);
  }
  __syncthreads();
  // Each thread scans a contiguous run of buckets: its groups, then the CTA's prefix.
  const int per = (buckets + kThreads - 1) / kThreads;
  const int b0 = tid * per, b1 = min(buckets, b0 + per);
  int mine = 0;
  for (int b = b0; b < b1; ++b) mine += (count[b] + kGroupTokens - 1) / kGroupTokens;
  int total = 0;
  int at = cta_exclusive_scan(mine, total);
  for (int b = b0; b < b1; ++b) {
    first[b] = at;
    at += (count[b] + kGroupTokens - 1) / kGroupTokens;
  }
  if (tid == 0) groups[0] = total;
  __syncthreads();
  for (int s = tid; s < n_slots; s += kThreads) {
    const int id = ids[s];
    if (id < 0) continue;
    const int b = id < n_mat ? id : n_mat;
    const int rank = atomicAdd(&fill[b], 1);
    const int g = first[b] + rank / kGroupTokens, j = rank % kGroupTokens;
    int32_t* e = groups + kGroupHeader + static_cast<int64_t>(g) * kGroupStride;
    e[2 + j] = s;
    if (j == 0) {
      e[0] = b;  // n_mat for the out-of-range bucket: the kernel writes NaN
      e[1] = min(kGroupTokens, count[b] - rank);
    }
  }
}

}  // namespace

void launch_expert_groups(const int32_t* ids, int n_slots, int64_t n_mat, int32_t* groups, cudaStream_t stream) {
  MT_CHECK(n_slots >= 0 && n_mat >= 1 && n_mat <= kMaxGroupedMatrices && groups != nullptr);
  const size_t shared = 3 * sizeof(int) * static_cast<size_t>(n_mat + 1);
  expert_groups_kernel<<<1, kThreads, shared, stream>>>(ids, n_slots, static_cast<int>(n_mat), groups);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
