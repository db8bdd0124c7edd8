// Internals shared by cuda/kernels/gemm.cu (dense) and cuda/kernels/gemm_experts.cu (routed): the operand
// type cuBLAS reads for each weight type, the dequantized-tile geometry, one cuBLAS handle
// per (device, stream), X conversion and the row-tiled product. Not part of the backend
// interface (cuda/kernels/matmul.h is).
//
// Operands: F32 weights stay F32 (f32 accuracy, no TF32), BF16 stays BF16, F16 and every
// quantized type are F16 (quantized ones dequantized into tiles of at most kTileBytes).
// X is converted to the weights' operand type; cuBLAS accumulates and writes f32.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"

namespace mt::cuda::gemm_detail {

inline constexpr size_t kTileBytes = size_t{64} << 20;  // dequantized F16 weight rows
inline constexpr size_t kAlignSlack = 256;              // per Workspace::take
inline constexpr int kThreads = 256;
inline constexpr int kMaxGridRows = 65535;  // grid.y limit; kernels loop over more rows

enum class Operand { kF32, kF16, kBF16 };

Operand operand_for(QuantType t);
size_t operand_bytes(Operand o);
cudaDataType_t cuda_type(Operand o);
// F32 / F16 / BF16 rows are already the operand: no tile.
bool in_place(QuantType t);

// Weight rows dequantized per GEMM by gemm (0 for weights read in place): a multiple of 64
// that fits kTileBytes as F16, at most n_out.
int64_t tile_rows(const DeviceMatrix& w);
// Whole expert matrices dequantized per launch by gemm_experts (0: weights read in place,
// or one matrix is larger than a tile and goes through row tiles), and the tile's rows.
int64_t experts_per_tile(const DeviceMatrix& w);
int64_t experts_tile_rows(const DeviceMatrix& w);

// Aborts with file:line unless w is a matrix gemm can read (type, shape, row bytes).
void check_matrix(const DeviceMatrix& w);
__half* take_tile(int64_t rows, int64_t n_in, Workspace& ws);

// The handle of (current device, stream), created on first use with its own workspace.
cublasHandle_t handle_for(cudaStream_t stream);

// cap_rows rows (>= n_rows) of the operand type, rows 0..n_rows-1 = x row src(p) with
// src(p) = perm ? perm[p] / div : p (the rest left as they are); F32 with no perm and
// cap_rows == n_rows is x itself.
const void* operand_rows(Operand op, const float* x, const int32_t* perm, int div, int64_t n_rows, int64_t cap_rows,
                         int64_t n_in, Workspace& ws, cudaStream_t stream);

// One cuBLAS product: y (n_tok rows, row stride ldy, columns 0..rows-1) = xop (n_tok, k)
// . a^T, a = `rows` weight rows of k elements of the operand type dt.
void gemm_call(cublasHandle_t handle, cudaDataType_t dt, const void* a, int64_t rows, int64_t k, const void* xop,
               int64_t n_tok, float* y, int64_t ldy);

// y (n_tok rows, row stride ldy) = xop (n_tok, n_in) . W^T for matrix wm (n_out rows of
// row_bytes), in row tiles dequantized into `tile` (unused for in-place types).
void gemm_matrix(const DeviceMatrix& w, const uint8_t* wm, const void* xop, int64_t n_tok, float* y, int64_t ldy,
                 __half* tile, cublasHandle_t handle, cudaStream_t stream);

}  // namespace mt::cuda::gemm_detail
