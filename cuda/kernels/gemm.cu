// gemm (dense, cuda/kernels/matmul.h) and the helpers of cuda/kernels/gemm_common.h. Row-major
// Y (T, n_out) = X (T, n_in) . W^T is, to column-major cuBLAS,
//   C = Y^T (n_out x T, ldc n_out) = op_T(A) . B, A = W as (n_in x n_out, lda n_in),
//   B = X as (n_in x T, ldb n_in).
// Quantized W goes through F16 row tiles of at most kTileBytes; X is converted once.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/cublas_check.h"
#include "cuda/kernels/dequant.cuh"
#include "cuda/kernels/dequant.h"
#include "cuda/kernels/dispatch.h"
#include "cuda/kernels/gemm_common.h"

namespace mt::cuda {
namespace gemm_detail {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;  // per handle (cuBLAS's Hopper advice)

[[noreturn]] void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what);
  std::abort();
}
#define GEMM_REQUIRE(cond) \
  do {                     \
    if (!(cond)) fail(__FILE__, __LINE__, "gemm: " #cond); \
  } while (0)

// Weight rows that fit kTileBytes as F16 (a multiple of 64, at least 64).
int64_t fit_rows(const DeviceMatrix& w) {
  return std::max<int64_t>(64, static_cast<int64_t>(kTileBytes / (2 * static_cast<size_t>(w.n_in)))) / 64 * 64;
}

__device__ __forceinline__ void store(float v, float* p) { *p = v; }
__device__ __forceinline__ void store(float v, __half* p) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }

// out row p (n values) = x row src(p) converted (see operand_rows).
template <class T>
__global__ void gather_rows_kernel(const float* x, const int32_t* perm, int div, int64_t n_rows, int64_t n, T* out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  for (int64_t p = blockIdx.y; p < n_rows; p += gridDim.y) {
    const int64_t src = perm != nullptr ? perm[p] / div : p;
    store(x[src * n + col], out + p * n + col);
  }
}

struct HandleEntry {
  int device;
  cudaStream_t stream;
  cublasHandle_t handle;
};

}  // namespace

Operand operand_for(QuantType t) {
  if (t == QuantType::F32) return Operand::kF32;
  if (t == QuantType::BF16) return Operand::kBF16;
  return Operand::kF16;
}
size_t operand_bytes(Operand o) { return o == Operand::kF32 ? 4 : 2; }
cudaDataType_t cuda_type(Operand o) {
  return o == Operand::kF32 ? CUDA_R_32F : (o == Operand::kBF16 ? CUDA_R_16BF : CUDA_R_16F);
}
bool in_place(QuantType t) { return t == QuantType::F32 || t == QuantType::F16 || t == QuantType::BF16; }

int64_t tile_rows(const DeviceMatrix& w) { return in_place(w.type) ? 0 : std::min(w.n_out, fit_rows(w)); }
int64_t experts_per_tile(const DeviceMatrix& w) {
  return in_place(w.type) ? 0 : std::min(w.n_mat, fit_rows(w) / w.n_out);
}
int64_t experts_tile_rows(const DeviceMatrix& w) {
  const int64_t per_tile = experts_per_tile(w);
  return per_tile > 0 ? per_tile * w.n_out : tile_rows(w);
}

void check_matrix(const DeviceMatrix& w) {
  GEMM_REQUIRE(w.data != nullptr && w.n_in > 0 && w.n_out > 0 && w.n_mat > 0);
  GEMM_REQUIRE(dequant_supported(w.type));
  const TypeTraits& tr = type_traits(w.type);
  GEMM_REQUIRE(w.n_in % tr.block_elems == 0);
  GEMM_REQUIRE(w.row_bytes == static_cast<uint64_t>(w.n_in / tr.block_elems) * tr.block_bytes);
  GEMM_REQUIRE(w.matrix_bytes >= w.row_bytes * static_cast<uint64_t>(w.n_out));
}

__half* take_tile(int64_t rows, int64_t n_in, Workspace& ws) {
  return rows > 0 ? ws.take_n<__half>(static_cast<size_t>(rows * n_in)) : nullptr;
}

// Entries live until the process ends (never destroyed: the CUDA context may be gone by
// static destruction time).
cublasHandle_t handle_for(cudaStream_t stream) {
  static std::mutex mu;
  static auto* entries = new std::vector<HandleEntry>();
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  for (const HandleEntry& e : *entries) {
    if (e.device == device && e.stream == stream) return e.handle;
  }
  HandleEntry e{device, stream, nullptr};
  MT_CUBLAS_CHECK(cublasCreate(&e.handle));
  MT_CUBLAS_CHECK(cublasSetStream(e.handle, stream));  // resets the workspace: set it after
  void* workspace = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&workspace, kCublasWorkspace));
  MT_CUBLAS_CHECK(cublasSetWorkspace(e.handle, workspace, kCublasWorkspace));
  MT_CUBLAS_CHECK(cublasSetMathMode(e.handle, CUBLAS_DEFAULT_MATH));  // no TF32 for F32 operands
  entries->push_back(e);
  return e.handle;
}

const void* operand_rows(Operand op, const float* x, const int32_t* perm, int div, int64_t n_rows, int64_t cap_rows,
                         int64_t n_in, Workspace& ws, cudaStream_t stream) {
  if (op == Operand::kF32 && perm == nullptr && cap_rows == n_rows) return x;
  void* out = ws.take(static_cast<size_t>(cap_rows * n_in) * operand_bytes(op));
  const dim3 grid(static_cast<unsigned>((n_in + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(n_rows, 1), kMaxGridRows)));
  switch (op) {
    case Operand::kF32:
      gather_rows_kernel<<<grid, kThreads, 0, stream>>>(x, perm, div, n_rows, n_in, static_cast<float*>(out));
      break;
    case Operand::kF16:
      gather_rows_kernel<<<grid, kThreads, 0, stream>>>(x, perm, div, n_rows, n_in, static_cast<__half*>(out));
      break;
    case Operand::kBF16:
      gather_rows_kernel<<<grid, kThreads, 0, stream>>>(x, perm, div, n_rows, n_in, static_cast<__nv_bfloat16*>(out));
      break;
  }
  MT_CUDA_CHECK(cudaGetLastError());
  return out;
}

// One cuBLAS product: y (n_tok rows, row stride ldy, columns 0..rows-1) = xop (n_tok, k)
// . a^T, a = `rows` weight rows of k elements of the operand type dt.
void gemm_call(cublasHandle_t handle, cudaDataType_t dt, const void* a, int64_t rows, int64_t k, const void* xop,
               int64_t n_tok, float* y, int64_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(rows), n = static_cast<int>(n_tok), ki = static_cast<int>(k);
  MT_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, ki, &alpha, a, dt, ki, xop, dt, ki, &beta, y,
                               CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// y (n_tok rows, row stride ldy) = xop (n_tok, n_in) . W^T for matrix wm (n_out rows of
// row_bytes), in row tiles dequantized into `tile` (unused for in-place types).
void gemm_matrix(const DeviceMatrix& w, const uint8_t* wm, const void* xop, int64_t n_tok, float* y, int64_t ldy,
                 __half* tile, cublasHandle_t handle, cudaStream_t stream) {
  const cudaDataType_t dt = cuda_type(operand_for(w.type));
  if (in_place(w.type)) {
    gemm_call(handle, dt, wm, w.n_out, w.n_in, xop, n_tok, y, ldy);
    return;
  }
  const int64_t step = tile_rows(w);
  for (int64_t r0 = 0; r0 < w.n_out; r0 += step) {
    const int64_t rows = std::min(step, w.n_out - r0);
    dequantize_rows(w.type, wm + r0 * w.row_bytes, w.row_bytes, rows, w.n_in, tile, stream);
    gemm_call(handle, dt, tile, rows, w.n_in, xop, n_tok, y + r0, ldy);
  }
}

}  // namespace gemm_detail

using namespace gemm_detail;

void gemm(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
          cudaStream_t stream) {
  check_matrix(w);
  if (mat < 0 || mat >= w.n_mat) fail(__FILE__, __LINE__, "gemm: matrix index out of range");
  if (n_tokens <= 0) return;
  const void* xop = operand_rows(operand_for(w.type), x, nullptr, 1, n_tokens, n_tokens, w.n_in, ws, stream);
  __half* tile = take_tile(tile_rows(w), w.n_in, ws);
  gemm_matrix(w, w.data + mat * w.matrix_bytes, xop, n_tokens, y, w.n_out, tile, handle_for(stream), stream);
}

bool gemm_supports(QuantType type) { return dequant_supported(type); }

// Dense: X in the operand type and one tile. Experts (cuda/kernels/gemm_experts.cu): offsets,
// perm, used experts, pointer arrays, X gathered with up to n_slots rows of slack, the
// padded Y rows (n_slots) and one tile of whole experts.
size_t gemm_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K) {
  const size_t n_in = static_cast<size_t>(w.n_in), n_out = static_cast<size_t>(w.n_out);
  const size_t ob = operand_bytes(operand_for(w.type));
  const size_t T = static_cast<size_t>(std::max(n_tokens, 0));
  const size_t dense = T * n_in * ob + static_cast<size_t>(tile_rows(w)) * n_in * 2 + 2 * kAlignSlack;
  if (w.n_mat <= 1) return dense;
  const size_t S = T * static_cast<size_t>(std::max(K, 1)), E = static_cast<size_t>(w.n_mat);
  const size_t index_bytes = (E + 1) * 4 + S * 4 + E * 4 + 3 * E * sizeof(void*);
  const size_t experts = index_bytes + 2 * S * n_in * ob + (S * n_out + 4 * E) * 4 +
                         static_cast<size_t>(experts_tile_rows(w)) * n_in * 2 + 10 * kAlignSlack;
  return std::max(dense, experts);
}

}  // namespace mt::cuda
