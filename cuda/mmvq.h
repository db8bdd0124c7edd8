// Decode matrix-vector products (MMVQ): Y (n_tokens, n_out) = X (n_tokens, n_in) . W^T for
// n_tokens <= kMmvqMaxTokens, every weight row read from memory once for all tokens.
//
// Quantized weights: the X rows are quantized once per call to Q8_1 (per 32 elements
// d = amax / 127 and s = d * sum(q) as half, 32 int8 quants: quant/'s reference Q8_1,
// bit for bit) in the workspace, and each weight block is dotted in int8 (__dp4a) as
// cpu/'s scalar kernels define it, the only differences from the CPU being the
// activation format (the CPU pairs K-quants with Q8_K and Q4_0 & co. with Q8_0, whose
// quants equal Q8_1's) and float summation order. F32 / F16 / BF16 weights read X in
// f32. A warp per pair of weight rows (cuda/mmvq_common.cuh); the routed form reads each
// slot's expert id on the device, so a decode step's K experts are one launch and no
// host sync.
//
// supports(), mmvq() and mmvq_experts() are declared in cuda/matmul.h. Extension of the
// routed form: an id < 0 skips its slot (Y row untouched); an id >= n_mat writes NaN.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/matmul.h"

namespace mt::cuda {

// Workspace bytes mmvq() (K <= 1) or mmvq_experts() (K slots per token, either
// x_per_slot) take for these shapes: the Q8_1 activation rows; 0 for float weights.
size_t mmvq_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K);

// X (rows, n_in) f32 -> Q8_1 rows in structure-of-arrays form: qs (rows, n_in) int8 and
// meta (rows, n_in / 32) pairs of uint32: word 0 = half d | half s << 16, word 1 = the
// int16 sums of quants 0..15 | 16..31 << 16. Block b of row r equals quant/'s
// quantize_row(Q8_1) block b: {d, s, qs[r * n_in + 32b, +32)}. n_in a multiple of 32;
// qs 16-byte aligned, meta 8-byte aligned.
void quantize_q8_1(const float* x, int rows, int n_in, int8_t* qs, uint32_t* meta, cudaStream_t stream);

}  // namespace mt::cuda
