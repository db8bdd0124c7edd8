// Quantized dot products for the CPU: the weight row stays in its GGUF block format, the
// activation row is quantized once to the type the weight pairs with, and the dot is an
// integer dot per block scaled by the two block scales.
//
// Pairing (as llama.cpp's CPU backend): Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 -> Q8_0; Q4_1, Q5_1
// -> Q8_1; Q2_K..Q6_K, IQ4_XS -> Q8_K; F16 -> F16; BF16 -> BF16; F32 -> F32.
// Every ISA's table computes the same function as the scalar table up to float summation
// order; tests/unit/cpu_simple_test.cpp and cpu_k_quants_test.cpp compare each against it
// over types x shapes, and the scalar table against the dequantize-then-dot reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/isa.h"
#include "quant/types.h"

namespace mt::cpu {

// dot(weight row of n elements, activation row of n elements in the paired type)
using VecDotFn = float (*)(int64_t n, const void* weight_row, const void* act_row);
// x (n floats) -> activation blocks
using QuantizeRowFn = void (*)(const float* x, void* dst, int64_t n);
// A tile of dots: y[t * y_stride + r] = vec_dot(n, weight row r, activation row t) for
// r < n_rows, t < n_tok. Weight row r starts at w + r * w_stride bytes, activation row t at
// act + t * act_stride bytes. The same numbers as vec_dot up to float summation order; a
// tile kernel unpacks each weight block once for several tokens (prefill).
using GemmFn = void (*)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, size_t act_stride,
                        int64_t n_tok, float* y, int64_t y_stride);
// y[i] += a * x[i], x in F16 (attention's V rows of an F16 KV cache).
using AxpyF16Fn = void (*)(int64_t n, float a, const void* x_f16, float* y);

struct KernelTable {
  Isa isa;
  VecDotFn vec_dot[64];          // indexed by QuantType id; null: not supported
  QuantizeRowFn quantize[64];    // indexed by the activation QuantType id (Q8_0, Q8_1, Q8_K, F16, BF16, F32)
  GemmFn gemm[64];               // indexed by QuantType id; null: a loop over vec_dot
  // Tiles over weights in the interleaved layout of cpu/repack.h (w_stride = bytes of one
  // 8-row group, n_rows a multiple of 8); null: no such layout on this level.
  GemmFn gemm_x8[64];
  // The fewest tokens for which gemm beats gemm_by_vec_dot (0: 2). AVX2's K-quant tiles
  // stream weights slower than the one-token dot at 2-3 tokens (bench/kernels_tokens.cpp).
  uint8_t gemm_min_tokens[64];
  AxpyF16Fn axpy_f16;
};

// The tile dots through `dot` one pair at a time (what a null gemm entry means).
void gemm_by_vec_dot(VecDotFn dot, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                     size_t act_stride, int64_t n_tok, float* y, int64_t y_stride);

// The table of the active ISA (cpu/isa.h), or of a given one (tests).
const KernelTable& kernels();
const KernelTable& kernels_for(Isa isa);

// The activation type paired with `weight` and the bytes of an activation row of n.
QuantType activation_type(QuantType weight);
size_t activation_row_bytes(QuantType weight, int64_t n);

}  // namespace mt::cpu
