// Reference (scalar) quantizers and dequantizers: the ground truth every fast kernel,
// CPU or CUDA, is tested against.
//
// Invariant: dequantize_row reproduces ggml's dequantize_row_<type> bit for bit
// (float32, one rounding per operation, no FMA contraction); quantize_row follows
// ggml's quantize_row_<type>_ref. n is always a multiple of the type's block size
// (MT_CHECK): callers validate shapes from files before they get here.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace mt {

bool has_dequantize(QuantType type);
// src: n / block_elems blocks; dst: n floats.
void dequantize_row(QuantType type, const void* src, float* dst, int64_t n);

bool has_quantize(QuantType type);
// src: n floats; dst: row_bytes(type, n) bytes.
void quantize_row(QuantType type, const float* src, void* dst, int64_t n);

}  // namespace mt
