// The MMQ route (cuda/kernels/mmq_kernels.h launch_mmq_route): one CTA of 1024 threads sorts a
// routed batch's slots by expert and writes the column-tile table, all on the device.
//   1. counts: shared-memory atomics over the ids (a strided loop: 32 ids per thread at
//      32768 slots);
//   2. each thread owns a contiguous run of ceil(n_expert / 1024) experts: the block's
//      exclusive scan (warp shuffles, then the 32 warp totals) of the runs' slot and tile
//      counts gives every expert its first sorted position and first tile; the owner
//      writes the expert's tiles and turns its count into a cursor; the last thread's end
//      is the table's length;
//   3. scatter: perm[cursor[e]++] = s. The order within an expert is whatever the atomics
//      give, which changes no result: each column of the GEMM is computed alone.
#include <cstdio>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/mmq_kernels.h"

namespace mt::cuda {
namespace {

constexpr int kRouteThreads = 1024;
constexpr int kRouteWarps = kRouteThreads / 32;

__global__ void __launch_bounds__(kRouteThreads) mmq_route_kernel(const int32_t* ids, int n_slots, int n_expert,
                                                                   int bn, int32_t* perm, MmqTile* tiles,
                                                                   int32_t* n_tiles) {
  extern __shared__ int32_t count[];  // (n_expert): slots per expert, then cursors
  __shared__ int32_t warp_slots[kRouteWarps], warp_tiles[kRouteWarps];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < n_expert; e += kRouteThreads) count[e] = 0;
  __syncthreads();
  for (int s = tid; s < n_slots; s += kRouteThreads) {
    const int e = ids[s];
    if (e >= n_expert) {
      printf("mmq_experts: slot %d has expert id %d >= n_expert %d\n", s, e, n_expert);
      __trap();
    }
    if (e >= 0) atomicAdd(&count[e], 1);
  }
  __syncthreads();

  const int per = (n_expert + kRouteThreads - 1) / kRouteThreads;
  const int e0 = min(tid * per, n_expert), e1 = min(e0 + per, n_expert);
  int my_slots = 0, my_tiles = 0;
  for (int e = e0; e < e1; ++e) {
    my_slots += count[e];
    my_tiles += (count[e] + bn - 1) / bn;
  }
  int inc_slots = my_slots, inc_tiles = my_tiles;  // inclusive scans inside the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int vs = __shfl_up_sync(0xffffffffu, inc_slots, o);
    const int vt = __shfl_up_sync(0xffffffffu, inc_tiles, o);
    if (lane >= o) {
      inc_slots += vs;
      inc_tiles += vt;
    }
  }
  if (lane == 31) {
    warp_slots[warp] = inc_slots;
    warp_tiles[warp] = inc_tiles;
  }
  __syncthreads();
  if (warp == 0) {  // the warp totals -> exclusive prefixes
    const int ws = warp_slots[lane], wt = warp_tiles[lane];
    int is = ws, it = wt;
    for (int o = 1; o < 32; o <<= 1) {
      const int vs = __shfl_up_sync(0xffffffffu, is, o);
      const int vt = __shfl_up_sync(0xffffffffu, it, o);
      if (lane >= o) {
        is += vs;
        it += vt;
      }
    }
    warp_slots[lane] = is - ws;
    warp_tiles[lane] = it - wt;
  }
  __syncthreads();
  int slot_pos = warp_slots[warp] + inc_slots - my_slots;
  int tile_pos = warp_tiles[warp] + inc_tiles - my_tiles;
  for (int e = e0; e < e1; ++e) {
    const int c = count[e];
    for (int j = 0; j * bn < c; ++j) {
      reinterpret_cast<int4*>(tiles)[tile_pos++] = make_int4(e, slot_pos + j * bn, min(bn, c - j * bn), 0);
    }
    count[e] = slot_pos;
    slot_pos += c;
  }
  if (tid == kRouteThreads - 1) *n_tiles = tile_pos;
  __syncthreads();

  for (int s = tid; s < n_slots; s += kRouteThreads) {
    const int e = ids[s];
    if (e >= 0) perm[atomicAdd(&count[e], 1)] = s;
  }
}

}  // namespace

void launch_mmq_route(const int32_t* ids, int n_slots, int n_expert, int bn, int32_t* perm, MmqTile* tiles,
                      int32_t* n_tiles, cudaStream_t stream) {
  MT_CHECK(n_slots >= 0 && n_expert >= 1 && n_expert <= kMmqMaxExperts && bn >= 1);
  const size_t smem = static_cast<size_t>(n_expert) * sizeof(int32_t);
  mmq_route_kernel<<<1, kRouteThreads, smem, stream>>>(ids, n_slots, n_expert, bn, perm, tiles, n_tiles);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
