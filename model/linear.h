// Linear layers over quantized weights: the reference path (correct before fast).
//
// Activations are rounded the way llama.cpp's CPU backend rounds them before a dot
// product: each input row is quantized once to the type the weight pairs with
// (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants and
// IQ4_XS, F16 for F16, BF16 for BF16, none for F32) and dequantized back; the dot
// product itself is then exact (double accumulation over dequantized weights). So the
// only difference from llama.cpp's integer dot products is summation order. The fast
// CPU kernels (cpu/) keep the same activation types and are tested against this path.
#pragma once

#include <cstdint>

#include "core/parallel.h"
#include "model/weights.h"
#include "quant/types.h"

namespace mt {

// The activation type llama.cpp's CPU backend pairs with weights of `weight` (the one
// table lives in cpu/kernels.h).
QuantType activation_type(QuantType weight);

// out = x (n elements) rounded through activation_type(weight). In-place allowed.
void round_activation(QuantType weight, const float* x, float* out, int64_t n);

// Y (n_tokens x n_out) = X (n_tokens x n_in, f32) times matrix `matrix` of w (ne0 = n_in,
// ne1 = n_out): each X row is rounded once to w's activation type, rows of w are split
// over the pool. Results do not depend on n_tokens or the thread count.
void matmul(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The reference of matmul: weight rows dequantized once per call, dot products in double.
void matmul_reference(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y,
                      ThreadPool& pool);

}  // namespace mt
