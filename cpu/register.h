// How the kernel families fill the per-ISA tables of cpu/kernels.h. Each family has one
// translation unit per ISA (compiled with that ISA's flags) that defines its register_*
// function; cpu/kernels.cpp builds each table by calling the families in order.
#pragma once

#include "cpu/kernels.h"

namespace mt::cpu {

// Activation quantizers (Q8_0, Q8_1, Q8_K, F16, BF16, F32) and the dots of the 32-element
// types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) and the float types (F32, F16, BF16).
void register_simple_scalar(KernelTable& t);
void register_simple_avx2(KernelTable& t);
void register_simple_avx512(KernelTable& t);  // uses VNNI when t.isa == kAvx512Vnni

// The dots of the 256-element types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against Q8_K.
void register_k_quants_scalar(KernelTable& t);
void register_k_quants_avx2(KernelTable& t);
void register_k_quants_avx512(KernelTable& t);

// The prefill tile dots (KernelTable::gemm) of Q4_K, Q5_K, Q6_K and Q8_0.
void register_gemm_avx2(KernelTable& t);
void register_gemm_avx512(KernelTable& t);  // uses VNNI when t.isa == kAvx512Vnni; calls the next
void register_gemm_q32_avx512(KernelTable& t);  // Q8_0, Q4_0, Q5_0, IQ4_NL (from register_gemm_avx512)

// Kernels over the interleaved weight layouts of cpu/repack.h.
void register_repack_avx512(KernelTable& t);  // VNNI only

}  // namespace mt::cpu
