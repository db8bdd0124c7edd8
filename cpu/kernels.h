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

struct KernelTable {
  Isa isa;
  VecDotFn vec_dot[64];          // indexed by QuantType id; null: not supported
  QuantizeRowFn quantize[64];    // indexed by the activation QuantType id (Q8_0, Q8_1, Q8_K, F16, BF16, F32)
};

// The table of the active ISA (cpu/isa.h), or of a given one (tests).
const KernelTable& kernels();
const KernelTable& kernels_for(Isa isa);

// The activation type paired with `weight` and the bytes of an activation row of n.
QuantType activation_type(QuantType weight);
size_t activation_row_bytes(QuantType weight, int64_t n);

}  // namespace mt::cpu
