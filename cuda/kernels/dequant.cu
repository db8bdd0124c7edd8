#include "cuda/kernels/dequant.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cuda/kernels/check.h"
#include "cuda/kernels/dequant.cuh"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridRows = 65535;  // grid.y limit; rows beyond it are looped over
constexpr int kVec = 8;              // elements per thread on the vector path

// Where row R of the output comes from: matrix m = R / rows_per_matrix (ids[m] when ids
// is given), row R % rows_per_matrix of it.
struct RowSource {
  const uint8_t* data;
  uint64_t row_bytes, matrix_bytes;
  int64_t rows_per_matrix;
  const int32_t* ids;  // device, or null

  __device__ const uint8_t* row(int64_t R) const {
    const int64_t m = R / rows_per_matrix, r = R % rows_per_matrix;
    const int64_t mat = ids != nullptr ? ids[m] : m;
    return data + static_cast<uint64_t>(mat) * matrix_bytes + static_cast<uint64_t>(r) * row_bytes;
  }
};

__device__ __forceinline__ void store(float v, float* p) { *p = v; }
__device__ __forceinline__ void store(float v, __half* p) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }

// 8 values to a 16-byte-aligned p (two 16-byte stores for float).
__device__ __forceinline__ void store8(const float* v, float* p) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <class T>
__device__ __forceinline__ void store8(const float* v, T* p) {
  __align__(16) T h[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) store(v[k], &h[k]);
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(h);
}

// One thread per element: grid.x covers the columns, grid.y strides over the rows.
template <class Q, class T>
__global__ void dequantize_kernel(RowSource src, int64_t n_rows, int64_t n, T* out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  for (int64_t R = blockIdx.y; R < n_rows; R += gridDim.y) {
    store(dequant_row_elem<Q>(src.row(R), col), out + R * n + col);
  }
}

// kVec consecutive elements per thread (n % kVec == 0, out 16-byte aligned). A quantized
// block holds a multiple of kVec elements, so a thread's elements share one block.
template <class Q, class T>
__global__ void dequantize_vec_kernel(RowSource src, int64_t n_rows, int64_t n, T* out) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c0 >= n) return;
  for (int64_t R = blockIdx.y; R < n_rows; R += gridDim.y) {
    const uint8_t* row = src.row(R);
    float v[kVec];
    if constexpr (Q::kElems == 1) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = Q::get(row + (c0 + k) * Q::kBytes, 0);
    } else {
      static_assert(Q::kElems % kVec == 0);
      dequant_eight<Q>(row + (c0 / Q::kElems) * Q::kBytes, static_cast<int>(c0 % Q::kElems), v);
    }
    store8(v, out + R * n + c0);
  }
}

[[noreturn]] void fail(const char* file, int line, const char* what, QuantType type) {
  std::fprintf(stderr, "%s:%d: dequantize: %s (%s)\n", file, line, what, type_name(type));
  std::abort();
}

template <class T>
void launch(QuantType type, const RowSource& src, int64_t n_rows, int64_t n, T* out, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  if (!dequant_supported(type)) fail(__FILE__, __LINE__, "unsupported type", type);
  const TypeTraits& tr = type_traits(type);
  if (n % tr.block_elems != 0 || src.row_bytes < static_cast<uint64_t>(n / tr.block_elems) * tr.block_bytes) {
    fail(__FILE__, __LINE__, "n is not a whole number of blocks within row_bytes", type);
  }
  const bool vec = n % kVec == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t per_thread = vec ? kVec : 1;
  const dim3 grid(static_cast<unsigned>((n / per_thread + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(n_rows, kMaxGridRows)));
  dispatch_type(type, [&](auto q) {
    using Q = decltype(q);
    if (vec) {
      dequantize_vec_kernel<Q, T><<<grid, kThreads, 0, stream>>>(src, n_rows, n, out);
    } else {
      dequantize_kernel<Q, T><<<grid, kThreads, 0, stream>>>(src, n_rows, n, out);
    }
  });
  MT_CUDA_CHECK(cudaGetLastError());
}

RowSource one_matrix(const uint8_t* src, uint64_t row_bytes, int64_t n_rows) {
  return {src, row_bytes, row_bytes * static_cast<uint64_t>(n_rows), std::max<int64_t>(n_rows, 1), nullptr};
}

}  // namespace

void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n, float* out,
                     cudaStream_t stream) {
  launch(type, one_matrix(src, row_bytes, n_rows), n_rows, n, out, stream);
}
void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n, __half* out,
                     cudaStream_t stream) {
  launch(type, one_matrix(src, row_bytes, n_rows), n_rows, n, out, stream);
}
void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n,
                     __nv_bfloat16* out, cudaStream_t stream) {
  launch(type, one_matrix(src, row_bytes, n_rows), n_rows, n, out, stream);
}

void dequantize_matrices(const DeviceMatrix& w, const int32_t* ids, int n_ids, __half* out, cudaStream_t stream) {
  const RowSource src{w.data, w.row_bytes, w.matrix_bytes, w.n_out, ids};
  launch(w.type, src, w.n_out * n_ids, w.n_in, out, stream);
}

}  // namespace mt::cuda
