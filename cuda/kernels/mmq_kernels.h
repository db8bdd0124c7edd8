// The launch interface between cuda/kernels/mmq.cpp (host glue) and the kernel files
// cuda/kernels/mmq_simple.cu, mmq_k.cu (the GEMM, one instantiation per weight type and tile
// width) and mmq_route.cu (the device counting sort and tile table).
//
// One MmqArgs describes either a dense product (tiles == nullptr: matrix `mat`, column
// tile y = tokens [y * bn, +bn)) or a routed one (tiles != nullptr: column tile y =
// tiles[y] if y < *n_tiles, its columns the sorted positions first .. first + count - 1,
// position p being slot perm[p]). The runtime weight type becomes the template argument
// of launch_mmq exactly once, in cuda/kernels/mmq.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/blocks.h"

namespace mt::cuda {

// One column tile of a routed product: `count` (1..bn) slots of `expert`, at sorted
// positions first .. first + count - 1. 16 bytes: one vector load.
struct MmqTile {
  int32_t expert;
  int32_t first;
  int32_t count;
  int32_t pad;
};

inline constexpr int kMmqRowsPerCta = 128;  // weight rows per CTA (grid.x = ceil(n_out / 128))

struct MmqArgs {
  const uint8_t* w = nullptr;  // matrix 0 (device)
  uint64_t row_bytes = 0, matrix_bytes = 0;
  int n_in = 0;  // a multiple of 32 (K-quants: of 256)
  int64_t n_out = 0;
  const int8_t* xq = nullptr;    // (x rows, n_in) int8, 16-byte aligned rows
  const uint2* xmeta = nullptr;  // (x rows, n_in / 32): f32 bits of d | int16 sums of the halves
  float* y = nullptr;            // dense (n_tokens, n_out); routed (n_slots, n_out)
  // dense
  int64_t mat = 0;
  int n_tokens = 0;
  // routed
  const MmqTile* tiles = nullptr;   // (upper bound) column tiles
  const int32_t* n_tiles = nullptr;  // (1) tiles written by the route kernel
  const int32_t* perm = nullptr;     // (n_slots) sorted position -> slot
  int K = 1;
  bool x_per_slot = false;
};

// The GEMM for weight type Block and column-tile width BN (16, 32, 64) on `grid` =
// (ceil(n_out / kMmqRowsPerCta), column tiles). Defined in mmq_simple.cu / mmq_k.cu.
template <class Block, int BN>
void launch_mmq(const MmqArgs& a, dim3 grid, cudaStream_t stream);

#define MT_MMQ_DECLARE(Block)                                                          \
  template <> void launch_mmq<Block, 16>(const MmqArgs&, dim3, cudaStream_t);          \
  template <> void launch_mmq<Block, 32>(const MmqArgs&, dim3, cudaStream_t);          \
  template <> void launch_mmq<Block, 64>(const MmqArgs&, dim3, cudaStream_t);
MT_MMQ_DECLARE(BlockQ4_0)
MT_MMQ_DECLARE(BlockQ5_0)
MT_MMQ_DECLARE(BlockQ8_0)
MT_MMQ_DECLARE(BlockIQ4_NL)
MT_MMQ_DECLARE(BlockMXFP4)
MT_MMQ_DECLARE(BlockQ4_K)
MT_MMQ_DECLARE(BlockQ5_K)
MT_MMQ_DECLARE(BlockQ6_K)
#undef MT_MMQ_DECLARE

// The largest number of experts the route kernel takes (its counters live in shared memory).
inline constexpr int kMmqMaxExperts = 8192;

// Counting sort of the n_slots ids by expert (ids < 0 left out; an id >= n_expert traps)
// and the tile table: for each expert with c > 0 slots, ceil(c / bn) tiles of bn slots
// (the last c % bn), experts ascending. perm (n_slots): sorted position -> slot;
// tiles (ceil(n_slots / bn) + min(n_expert, n_slots)); n_tiles (1): the table's length.
// One CTA; no host synchronization.
void launch_mmq_route(const int32_t* ids, int n_slots, int n_expert, int bn, int32_t* perm, MmqTile* tiles,
                      int32_t* n_tiles, cudaStream_t stream);

}  // namespace mt::cuda
