// Whole rows of a GGUF-typed matrix dequantized on the device: out (n_rows, n) row-major,
// row r read from src + r * row_bytes, element values exactly quant/'s reference
// dequantize_row (then rounded to nearest even when `out` is half or bfloat16). Host
// callable; the kernels live in cuda/kernels/dequant.cu, the per-block code in cuda/kernels/dequant.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/matmul.h"
#include "quant/types.h"

namespace mt::cuda {

// src: device, n_rows rows of row_bytes (n elements of `type` each, n a multiple of the
// block size); out: device, n_rows * n values. Every type of dequant_supported().
void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n, float* out,
                     cudaStream_t stream);
void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n, __half* out,
                     cudaStream_t stream);
void dequantize_rows(QuantType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n,
                     __nv_bfloat16* out, cudaStream_t stream);

// Whole matrices stacked: out (n_ids * w.n_out, w.n_in) holds the rows of matrix ids[i]
// (ids: device) of w for i < n_ids.
void dequantize_matrices(const DeviceMatrix& w, const int32_t* ids, int n_ids, __half* out, cudaStream_t stream);

}  // namespace mt::cuda
