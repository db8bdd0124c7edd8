// The launch interface between cuda/kernels/mmvq.cpp (host dispatch, C++20) and the kernel files
// cuda/kernels/mmvq_*.cu (CUDA C++20).
//
// One MmvqArgs describes either a dense product (ids == nullptr: matrix `mat`, n_tokens
// activation rows, Y rows 0..n_tokens-1, each weight row read once for all tokens) or a
// routed batch (ids != nullptr: grid.y over n_slots slots, slot s reads matrix ids[s] on
// the device, activation row x_per_slot ? s : s / K, writes Y row s; one token per slot).
// The runtime weight type becomes the template argument of launch_mmvq exactly once, in
// cuda/kernels/mmvq.cpp; every instantiation lives in one family file (simple, k, float).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/types.h"

namespace mt::cuda {

// Tags for the float weight types (the quantized ones use their quant/blocks.h struct).
struct WeightF32 {};
struct WeightF16 {};
struct WeightBF16 {};

// Activations quantized to int8, stored as two arrays per row (structure of arrays, so
// the int8 quants of every row are 16-byte aligned for vector loads):
//   qs:   (rows, n_in) int8, row r at qs + r * n_in
//   meta: (rows, n_in / 32) uint2 per 32-element block:
//         x = the f32 bits of the block's scale d (the value = d * q),
//         y = the exact int16 sums of quants 0..15 | 16..31 << 16.
// The quants and d are bit-exact with the activation type the CPU pairs with the weight
// type (cpu/kernels.h), so the integer dot products equal the CPU's:
//   kQ8_0 (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): per 32, d = float(fp16(amax / 127)),
//          q = roundf(x * (1 / (amax / 127))) clamped to +-127, i.e. from the f32 d
//          before its rounding (quant/ quantize_block(BlockQ8_0)); NaN counts as 0;
//   kQ8_1 (Q4_1, Q5_1): the same quants and d; a kernel that wants the block's s uses
//          float(fp16(d * sum)), sum = the two int16 halves added, as BlockQ8_1 stores
//          it. Not bit-exact: BlockQ8_1 multiplies the f32 d before its rounding to
//          half, so this s is off by d's rounding (relative <= 2^-11, more once d is
//          a half subnormal, amax < 127 * 2^-14), usually zero or one half ulp;
//   kQ8_K (Q2_K..Q6_K, IQ4_XS): per 256, iscale = -127 / (the signed value of largest
//          magnitude), q = nearest_int(iscale * x) clamped to -128..127, d = 1 / iscale
//          (f32), the same d in the 8 entries of the 256 block (BlockQ8_K).
// A float weight type (F32, F16, BF16) reads f32 activations instead.
enum class ActQuant { kQ8_0, kQ8_1, kQ8_K };
struct Q8_1Rows {
  int8_t* qs = nullptr;
  uint2* meta = nullptr;
};

struct MmvqArgs {
  const uint8_t* w = nullptr;  // matrix 0 (device)
  uint64_t row_bytes = 0, matrix_bytes = 0;
  int64_t n_mat = 1;
  int64_t mat = 0;               // dense: the matrix
  const int32_t* ids = nullptr;  // routed: (n_slots) matrix per slot, device; < 0 = skip the slot
  int K = 1;                     // routed: slots per token
  bool x_per_slot = false;
  int n_in = 0;
  int64_t n_out = 0;
  int n_tokens = 1;  // dense: activation rows (1..kMmvqMaxTokens); routed: 1
  int n_slots = 1;   // grid.y: dense 1, routed n_tokens * K
  const float* x = nullptr;  // float weights: activation rows (rows, n_in) f32
  const int8_t* xq = nullptr;  // quantized weights: Q8_1Rows of the activation rows
  const uint2* xmeta = nullptr;
  float* y = nullptr;  // dense (n_tokens, n_out); routed (n_slots, n_out)
  int align = 1;       // largest power of two <= 16 dividing every block's address
  int lanes = 32;      // lanes per weight row: 32, or 16 / 8 for short rows, 64 / 128 split (1 token only)
  bool x_aligned16 = false;  // x is 16-byte aligned (float weights' vector path)
  // One token, rows of fewer than 32 tasks (MoE down projections): lanes per row group the
  // next power of two >= the tasks (every lane one task) instead of the largest <= them,
  // where that is at most wide_lanes lanes (0: never, MOETIER_CUDA_MMVQ_WIDE16=0; 16: the
  // default).
  int wide_lanes = 0;
  // One token, rows of more than 32 tasks (Q4_0 at 2048 / 4096 inputs, K-quants at 4096):
  // a row group's lanes spread over up to this many warps (2 or 4; 0 / 1: one warp), so
  // each lane walks fewer tasks one after the other; the warps' sums are added in shared
  // memory (MOETIER_CUDA_MMVQ_SPLIT, default 4; the sums in another order than one warp's).
  int split_warps = 0;
  // Rows per lane group of a dense product of 2-8 tokens: 4 (mmvq.cpp's default) or 2
  // (MOETIER_CUDA_MMVQ_ROWS_MULTI=2), so that each activation load serves four weight rows
  // (at 5 tokens the output product cost 4.6x its one-token time, the activation loads
  // from L1 growing with the tokens; docs/PERFORMANCE.md 2026-12-07).
  int multi_rows = 4;
  // Routed, grouped by expert (cuda/kernels/mmvq_groups.cu): grid.y over the groups of
  // `groups` (expert_groups layout below) instead of the slots; each group's matrix rows
  // are read once for its 1..kGroupTokens slots, every slot's sums exactly those of its
  // own per-slot launch with the same lanes. nullptr: one slot per grid.y.
  const int32_t* groups = nullptr;
  int group_grid = 0;  // grid.y of the grouped form: expert_groups_max(n_slots, n_mat)
};

// Slots grouped by expert, built on the device from a routed batch's ids (no host sync):
//   groups[0] = the number of groups; group g at groups + kGroupHeader + g * kGroupStride:
//   {matrix id, n slots (1..kGroupTokens), slot 0, .., slot n - 1}.
// The slots of one matrix fill groups of kGroupTokens (the last holds the rest); ids < 0
// are left out (their Y rows untouched), ids >= n_mat form groups of their own whose Y
// rows are written as NaN. The order of slots within a matrix's groups is not fixed: no
// slot's result depends on it.
inline constexpr int kGroupTokens = 8;
inline constexpr int kGroupHeader = 4;
inline constexpr int kGroupStride = 2 + kGroupTokens;
inline constexpr int64_t kMaxGroupedMatrices = 4000;  // the build's counters live in shared memory
// Groups a batch of n_slots slots over n_mat matrices can form at most (the grid's y).
inline int expert_groups_max(int n_slots, int64_t n_mat) {
  const int64_t bound = n_mat + 1 + n_slots / kGroupTokens;
  return static_cast<int>(bound < n_slots ? bound : n_slots);
}
inline size_t expert_groups_bytes(int n_slots, int64_t n_mat) {
  return sizeof(int32_t) * (kGroupHeader + static_cast<size_t>(expert_groups_max(n_slots, n_mat)) * kGroupStride);
}
// ids (n_slots, device) -> groups (expert_groups_bytes, device); n_mat <= kMaxGroupedMatrices.
void launch_expert_groups(const int32_t* ids, int n_slots, int64_t n_mat, int32_t* groups, cudaStream_t stream);

// Defined (explicitly specialised) in cuda/kernels/mmvq_float.cu, mmvq_simple.cu, mmvq_k.cu.
template <class W>
void launch_mmvq(const MmvqArgs& a, cudaStream_t stream);
template <> void launch_mmvq<WeightF32>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<WeightF16>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<WeightBF16>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ4_0>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ4_1>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ5_0>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ5_1>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ8_0>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockIQ4_NL>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockMXFP4>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ2_K>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ3_K>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ4_K>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ5_K>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockQ6_K>(const MmvqArgs&, cudaStream_t);
template <> void launch_mmvq<BlockIQ4_XS>(const MmvqArgs&, cudaStream_t);

// The activation quantization paired with a quantized weight type (cpu/kernels.h).
ActQuant act_quant_for(QuantType weight);
// x (rows, n_in) f32 -> Q8_1Rows in `mode`; n_in a multiple of 32 (kQ8_K: of 256); any
// number of rows; qs and meta 8-byte aligned.
void launch_quantize_act(const float* x, int rows, int n_in, ActQuant mode, Q8_1Rows out, cudaStream_t stream);

}  // namespace mt::cuda
