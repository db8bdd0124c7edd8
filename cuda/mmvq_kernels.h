// The launch interface between cuda/mmvq.cpp (host dispatch, C++20) and the kernel files
// cuda/mmvq_*.cu (compiled as CUDA C++17, so this header includes nothing newer).
//
// One MmvqArgs describes either a dense product (ids == nullptr: matrix `mat`, n_tokens
// activation rows, Y rows 0..n_tokens-1, each weight row read once for all tokens) or a
// routed batch (ids != nullptr: grid.y over n_slots slots, slot s reads matrix ids[s] on
// the device, activation row x_per_slot ? s : s / K, writes Y row s; one token per slot).
// The runtime weight type becomes the template argument of launch_mmvq exactly once, in
// cuda/mmvq.cpp; every instantiation lives in one family file (simple, k, float).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/blocks.h"

namespace mt::cuda {

// Tags for the float weight types (the quantized ones use their quant/blocks.h struct).
struct WeightF32 {};
struct WeightF16 {};
struct WeightBF16 {};

// Activations quantized to Q8_1, stored as two arrays per row (structure of arrays, so
// the int8 quants of every row are 16-byte aligned for vector loads):
//   qs:   (rows, n_in) int8, row r at qs + r * n_in
//   meta: (rows, n_in / 32) uint2 per 32-element block: x = half d | half s << 16
//         (s = d * sum of the block's quants, exactly quant/'s reference Q8_1 block),
//         y = the exact int16 sums of quants 0..15 | 16..31 << 16 (the K-quant min terms).
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
  int lanes = 32;      // lanes per weight row: 32, or 16 / 8 for short rows (1 token only)
  bool x_aligned16 = false;  // x is 16-byte aligned (float weights' vector path)
};

// Defined (explicitly specialised) in cuda/mmvq_float.cu, mmvq_simple.cu, mmvq_k.cu.
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

// x (rows, n_in) f32 -> Q8_1Rows; n_in a multiple of 32.
void launch_quantize_q8_1(const float* x, int rows, int n_in, Q8_1Rows out, cudaStream_t stream);

}  // namespace mt::cuda
