// Block-scale lookup tables for the SIMD dots: a block's fp16 scale (or MXFP4's E8M0
// exponent) becomes a float32 with one load instead of a conversion on the vector pipes.
// The entries are exactly quant/fp16.h's fp16_to_fp32 and quant/blocks.h's
// e8m0_half_bits, so a table scale equals the scalar kernels' scale bit for bit.
//
// Invariant: data only (computed at compile time in cpu/scale_tables.cpp), no inline
// functions: every ISA's translation unit reads it without sharing compiled code.
#pragma once

namespace mt::cpu {

// fp16 bits -> float32, all 65536 patterns (256 KiB; one row's scales touch few lines).
struct Fp16Table {
  float v[65536];
};
extern const Fp16Table kFp16ToFp32;

// E8M0 exponent e -> 2^(e - 128), MXFP4's half scale.
struct E8m0Table {
  float v[256];
};
extern const E8m0Table kE8m0HalfToFp32;

}  // namespace mt::cpu
