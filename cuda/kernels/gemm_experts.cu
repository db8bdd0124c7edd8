// gemm_experts (cuda/kernels/matmul.h): the routed prefill product.
//  1. The slots are sorted by expert on the device (a stable counting sort in one warp);
//     the per-expert offsets come back to the host: one small sync per call.
//  2. X rows are gathered expert-major in the operand type (cuda/kernels/gemm_common.h).
//  3. The experts with slots are dequantized a tile of whole matrices per launch, and
//     multiplied in batches by cublasGemmBatchedEx: one call for many experts, each with n
//     = the batch's largest slot count (B reads past an expert's rows into the next ones'
//     or the slack; those extra columns land in the expert's own padded Y rows and are
//     never read). A batch's padded rows fit the n_slots rows of Y scratch. Every pointer
//     of a batch is 16-byte aligned (cuBLAS cannot see device pointer arrays); when the
//     weights or X rows cannot be, each expert is its own cublasGemmEx.
//  4. Each batch's rows are scattered back to slot order.
// A slot whose id is negative is skipped (its Y row untouched), as in mmvq_experts.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/cublas_check.h"
#include "cuda/kernels/dequant.h"
#include "cuda/kernels/gemm_common.h"

namespace mt::cuda {
namespace {

using namespace gemm_detail;

// One warp: a stable counting sort of the slots by expert. offsets (n_expert + 1):
// offsets[e] = first sorted position of expert e, offsets[n_expert] = slots sorted;
// perm[offsets[e] + r] = the r-th slot (in slot order) whose id is e. Slots with a
// negative id are left out; an id >= n_expert is a broken invariant (trap). used: the
// experts with slots, ascending (n_expert entries, the rest untouched).
__global__ void sort_slots_kernel(const int32_t* ids, int n_slots, int n_expert, int32_t* offsets, int32_t* perm,
                                  int32_t* used) {
  extern __shared__ int32_t cursor[];  // (n_expert)
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < n_expert; e += 32) cursor[e] = 0;
  __syncwarp();
  for (int s = lane; s < n_slots; s += 32) {
    const int e = ids[s];
    if (e >= n_expert) {
      printf("gemm_experts: slot %d has expert id %d >= n_expert %d\n", s, e, n_expert);
      __trap();
    }
    if (e >= 0) atomicAdd(&cursor[e], 1);
  }
  __syncwarp();
  if (lane == 0) {
    int sum = 0, n_used = 0;
    for (int e = 0; e < n_expert; ++e) {
      const int count = cursor[e];
      offsets[e] = sum;
      cursor[e] = sum;
      sum += count;
      if (count > 0) used[n_used++] = e;
    }
    offsets[n_expert] = sum;
  }
  __syncwarp();
  for (int base = 0; base < n_slots; base += 32) {
    const int s = base + lane;
    const int e = s < n_slots ? ids[s] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);  // lanes with the same id
    if (e >= 0) perm[cursor[e] + __popc(same & ((1u << lane) - 1u))] = s;
    __syncwarp();
    if (e >= 0 && (same >> lane) == 1u) cursor[e] += __popc(same);  // highest lane of the group
    __syncwarp();
  }
}

// Batch pointer arrays for the experts used[0 .. nb): A = a_base + (by_expert ? e : u) *
// a_stride bytes, B = the expert's first gathered X row, C = ypad + u * c_stride floats.
struct BatchPointers {
  const void** a;
  const void** b;
  void** c;
};

__global__ void batch_pointers_kernel(const int32_t* offsets, const int32_t* used, int nb, const uint8_t* a_base,
                                      uint64_t a_stride, bool by_expert, const uint8_t* xg, uint64_t x_row_bytes,
                                      float* ypad, int64_t c_stride, BatchPointers p) {
  const int u = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (u >= nb) return;
  const int e = used[u];
  p.a[u] = a_base + static_cast<uint64_t>(by_expert ? e : u) * a_stride;
  p.b[u] = xg + static_cast<uint64_t>(offsets[e]) * x_row_bytes;
  p.c[u] = ypad + static_cast<int64_t>(u) * c_stride;
}

// For the batch's experts used[u] (grid.y = u): Y row perm[offsets[e] + j] = row j of
// ypad + u * c_stride, for j < the expert's slot count.
__global__ void scatter_batch_kernel(const float* ypad, const int32_t* offsets, const int32_t* used,
                                     const int32_t* perm, int64_t c_stride, int64_t n_out, float* y) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n_out) return;
  const int u = static_cast<int>(blockIdx.y);
  const int e = used[u];
  const int first = offsets[e], count = offsets[e + 1] - offsets[e];
  for (int j = 0; j < count; ++j) {
    y[static_cast<int64_t>(perm[first + j]) * n_out + col] = ypad[u * c_stride + j * n_out + col];
  }
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "%s:%d: gemm_experts: %s\n", __FILE__, __LINE__, what);
  std::abort();
}

// State of one gemm_experts call after the sort.
struct Routed {
  const DeviceMatrix& w;
  std::vector<int32_t> off;   // host copy of offsets (n_expert + 1)
  std::vector<int32_t> used;  // host: experts with slots, ascending
  const int32_t* offsets;     // device (n_expert + 1)
  const int32_t* perm;        // device (n_sorted) sorted row -> slot
  const int32_t* used_d;      // device (n_used)
  const uint8_t* xg;          // (n_sorted + slack, n_in) gathered X, operand type
  uint64_t x_row_bytes;
  float* ypad;                // (n_slots, n_out) + slack: padded Y rows of one batch
  int64_t ypad_rows;
  bool aligned;               // batched products allowed (16-byte aligned A, B and X rows)
  BatchPointers ptrs;         // device arrays of n_expert pointers each
  cublasHandle_t handle;
  cudaStream_t stream;

  int count(size_t u) const { return off[used[u] + 1] - off[used[u]]; }

  // Padded Y floats of one expert of a batch with c_rows columns (16-byte multiples).
  int64_t c_stride(int64_t c_rows) const { return (c_rows * w.n_out + 3) / 4 * 4; }

  // Experts used[u0 .. u1) in one product each of c_rows columns, their A matrices at
  // a_base (see batch_pointers_kernel), then scattered to y.
  void batch(size_t u0, size_t u1, int64_t c_rows, const uint8_t* a_base, uint64_t a_stride, bool by_expert,
             float* y) const {
    const int nb = static_cast<int>(u1 - u0);
    const cudaDataType_t dt = cuda_type(operand_for(w.type));
    if (nb == 1) {
      const uint8_t* a = a_base + (by_expert ? static_cast<uint64_t>(used[u0]) : 0) * a_stride;
      gemm_call(handle, dt, a, w.n_out, w.n_in, xg + off[used[u0]] * x_row_bytes, count(u0), ypad, w.n_out);
      scatter(u0, 1, c_stride(count(u0)), y);
      return;
    }
    batch_pointers_kernel<<<(nb + 127) / 128, 128, 0, stream>>>(offsets, used_d + u0, nb, a_base, a_stride, by_expert,
                                                                xg, x_row_bytes, ypad, c_stride(c_rows), ptrs);
    MT_CUDA_CHECK(cudaGetLastError());
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(w.n_out), n = static_cast<int>(c_rows), k = static_cast<int>(w.n_in);
    MT_CUBLAS_CHECK(cublasGemmBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, ptrs.a, dt, k, ptrs.b, dt, k,
                                        &beta, ptrs.c, CUDA_R_32F, m, nb, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    scatter(u0, nb, c_stride(c_rows), y);
  }

  void scatter(size_t u0, int nb, int64_t stride, float* y) const {
    const dim3 grid(static_cast<unsigned>((w.n_out + kThreads - 1) / kThreads), static_cast<unsigned>(nb));
    scatter_batch_kernel<<<grid, kThreads, 0, stream>>>(ypad, offsets, used_d + u0, perm, stride, w.n_out, y);
    MT_CUDA_CHECK(cudaGetLastError());
  }

  // Experts used[g0 .. g1) in batches whose padded rows fit ypad.
  void batches(size_t g0, size_t g1, const uint8_t* a_base, uint64_t a_stride, bool by_expert, float* y) const {
    for (size_t u0 = g0; u0 < g1;) {
      int64_t c_rows = count(u0);
      size_t u1 = u0 + 1;
      while (aligned && u1 < g1) {
        const int64_t grown = std::max<int64_t>(c_rows, count(u1));
        if (grown * static_cast<int64_t>(u1 + 1 - u0) > ypad_rows) break;
        c_rows = grown;
        ++u1;
      }
      const uint64_t a_skip = by_expert ? 0 : (u0 - g0) * a_stride;
      batch(u0, u1, c_rows, a_base + a_skip, a_stride, by_expert, y);
      u0 = u1;
    }
  }
};

}  // namespace

void gemm_experts(const DeviceMatrix& w, const RoutedSlots& slots, const float* x, float* y, Workspace& ws,
                  cudaStream_t stream) {
  const int32_t* ids = slots.ids;
  const int n_tokens = slots.n_tokens, K = slots.K;
  const bool x_per_slot = slots.x_per_slot;
  check_matrix(w);
  if (n_tokens <= 0 || K <= 0) return;
  const int n_slots = n_tokens * K;
  const int n_expert = static_cast<int>(w.n_mat);
  if (static_cast<size_t>(n_expert) * sizeof(int32_t) > 48 * 1024) fail("too many experts for the sort");
  int32_t* offsets = ws.take_n<int32_t>(static_cast<size_t>(n_expert) + 1);  // (n_expert + 1)
  int32_t* perm = ws.take_n<int32_t>(static_cast<size_t>(n_slots));           // (n_slots) sorted -> slot
  int32_t* used_d = ws.take_n<int32_t>(static_cast<size_t>(n_expert));        // (n_used) experts with slots
  sort_slots_kernel<<<1, 32, n_expert * sizeof(int32_t), stream>>>(ids, n_slots, n_expert, offsets, perm, used_d);
  MT_CUDA_CHECK(cudaGetLastError());
  Routed r{w, std::vector<int32_t>(static_cast<size_t>(n_expert) + 1), {}, offsets, perm, used_d, nullptr, 0,
           nullptr, n_slots, false, {}, handle_for(stream), stream};
  MT_CUDA_CHECK(cudaMemcpyAsync(r.off.data(), offsets, r.off.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int n_sorted = r.off[static_cast<size_t>(n_expert)];
  if (n_sorted == 0) return;
  int max_count = 0;
  for (int e = 0; e < n_expert; ++e) {
    const int c = r.off[static_cast<size_t>(e) + 1] - r.off[static_cast<size_t>(e)];
    if (c > 0) r.used.push_back(e);
    max_count = std::max(max_count, c);
  }

  const Operand op = operand_for(w.type);
  r.x_row_bytes = static_cast<uint64_t>(w.n_in) * operand_bytes(op);
  // (n_sorted + max_count, n_in): expert-major X rows, then slack a batch may read past.
  r.xg = static_cast<const uint8_t*>(
      operand_rows(op, x, perm, x_per_slot ? 1 : K, n_sorted, n_sorted + max_count, w.n_in, ws, stream));
  // (n_slots, n_out) and 4 floats per expert of alignment slack
  r.ypad = ws.take_n<float>(static_cast<size_t>(n_slots) * w.n_out + 4 * static_cast<size_t>(n_expert));
  const bool a_aligned =
      !in_place(w.type) || (reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.matrix_bytes % 16 == 0);
  r.aligned = a_aligned && r.x_row_bytes % 16 == 0;
  const auto E = static_cast<size_t>(n_expert);
  r.ptrs = {ws.take_n<const void*>(E), ws.take_n<const void*>(E), ws.take_n<void*>(E)};  // (n_expert) each
  __half* tile = take_tile(experts_tile_rows(w), w.n_in, ws);

  const size_t n_used = r.used.size();
  const int64_t per_tile = experts_per_tile(w);
  if (in_place(w.type)) {
    r.batches(0, n_used, w.data, w.matrix_bytes, true, y);
  } else if (per_tile > 0) {  // per_tile whole experts dequantized per launch, then batched
    const uint64_t tile_stride = static_cast<uint64_t>(w.n_out * w.n_in) * sizeof(__half);
    for (size_t g0 = 0; g0 < n_used; g0 += static_cast<size_t>(per_tile)) {
      const size_t g1 = std::min(n_used, g0 + static_cast<size_t>(per_tile));
      dequantize_matrices(w, used_d + g0, static_cast<int>(g1 - g0), tile, stream);
      r.batches(g0, g1, reinterpret_cast<const uint8_t*>(tile), tile_stride, false, y);
    }
  } else {  // an expert larger than a tile: row tiles, one expert at a time
    for (size_t u = 0; u < n_used; ++u) {
      const int e = r.used[u];
      gemm_matrix(w, w.data + static_cast<uint64_t>(e) * w.matrix_bytes, r.xg + r.off[e] * r.x_row_bytes, r.count(u),
                  r.ypad, w.n_out, tile, r.handle, stream);
      r.scatter(u, 1, r.c_stride(r.count(u)), y);
    }
  }
}

}  // namespace mt::cuda
