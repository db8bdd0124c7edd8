// Interleaved ("x8") weight layouts: 8 rows of a matrix stored block by block side by side,
// so one vector load brings the same elements of 8 rows and one integer dot instruction
// works on 8 rows at once. Decode then takes 8 dot products for the price of one pass of
// block overhead (scales, conversions, the final reduction), and prefill reuses each
// unpacked block for a tile of tokens.
//
// Q4_K x8 (BlockQ4_Kx8, 1152 bytes = 8 BlockQ4_K): for super-block i of rows 8g .. 8g + 7:
//   d[m], dmin[m]          the rows' f16 scales (m = row within the group)
//   scales[w][m]           word w (0..2) of row m's 12 packed scale bytes, as uint32
//   qs[c][s][m][b]         row m's qs[32c + 8s + b], c = 64-element chunk (0..3), s = step (0..3)
// A 64-byte step holds 8 bytes of each row: its low nibbles are elements 64c + 8s .. +7
// (sub-block 2c), its high nibbles elements 64c + 32 + 8s .. +7 (sub-block 2c + 1), so the
// int32 lane 2m of a code register holds row m's first 4 of those codes, lane 2m + 1 the
// next 4, and the activations for it are 8 bytes broadcast to every 64-bit lane.
//
// Q6_K x8 (BlockQ6_Kx8, 1680 bytes = 8 BlockQ6_K): for super-block i of rows 8g .. 8g + 7:
//   d[m]                   the rows' f16 scales
//   scales[p][m][k]        row m's scale of sub-block 2p + k (16 elements each)
//   q[n][s][0][m][b]       row m's ql[64n + 8s + b]         (n = 128-element half)
//   q[n][s][1][m][b]       row m's ql[64n + 32 + 8s + b]
//   q[n][s][2][m][b]       row m's qh[32n + 8s + b]
// (the three 64-byte pieces a step reads lie side by side, so a block is read in order).
// A step (n, s) gives four code registers, elements 128n + 32q + 8s .. +7 for q = 0..3:
// the low nibbles of q[n][s][0] and q[n][s][1], then their high nibbles, each with two
// bits of q[n][s][2] (bits 0-1, 2-3, 4-5, 6-7) on top. Lanes as in Q4_K x8.
//
// A repacked matrix has the original's size; groups follow each other, and within a
// group the super-blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/types.h"

namespace mt::cpu {

inline constexpr int kInterleave = 8;  // rows per group

struct BlockQ4_Kx8 {
  half_bits d[kInterleave];
  half_bits dmin[kInterleave];
  uint32_t scales[3][kInterleave];
  uint8_t qs[4][4][kInterleave][8];
};
static_assert(sizeof(BlockQ4_Kx8) == kInterleave * sizeof(BlockQ4_K));

struct BlockQ6_Kx8 {
  half_bits d[kInterleave];
  int8_t scales[8][kInterleave][2];
  uint8_t q[2][4][3][kInterleave][8];
};
static_assert(sizeof(BlockQ6_Kx8) == kInterleave * sizeof(BlockQ6_K));

// Whether `type` has an interleaved layout (independent of the ISA; the kernel table's
// gemm_x8 entry says whether this CPU has a kernel for it).
bool has_interleaved_layout(QuantType type);

// n_rows (a multiple of 8) rows of n_in elements (a multiple of the type's block), each
// row_bytes long at src, -> the interleaved layout at dst (n_rows * row_bytes bytes).
void interleave_rows(QuantType type, const uint8_t* src, size_t row_bytes, int64_t n_in, int64_t n_rows, uint8_t* dst);

// The reference of a gemm_x8 kernel (scalar table's vec_dot on each row rebuilt from the
// interleaved layout): same arguments as GemmFn, w_stride = bytes of one 8-row group.
void gemm_x8_reference(QuantType type, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                       size_t act_stride, int64_t n_tok, float* y, int64_t y_stride);

}  // namespace mt::cpu
