// Host side of MMQ (cuda/kernels/mmq.h): shape checks, the activation quantization and the route
// scratch in the workspace, the column-tile width, and the one switch that turns the
// runtime weight type into a launcher template argument. Only launches: no host sync.
#include "cuda/kernels/mmq.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/mmq_kernels.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/types.h"

namespace mt::cuda {
namespace {

using LaunchFn = void (*)(const MmqArgs&, dim3, cudaStream_t);

template <class Block>
LaunchFn by_width(int bn) {
  switch (bn) {
    case 16: return launch_mmq<Block, 16>;
    case 32: return launch_mmq<Block, 32>;
    case 64: return launch_mmq<Block, 64>;
    default: return nullptr;
  }
}

LaunchFn launcher(QuantType type, int bn) {
  switch (type) {
    case QuantType::Q4_0: return by_width<BlockQ4_0>(bn);
    case QuantType::Q5_0: return by_width<BlockQ5_0>(bn);
    case QuantType::Q8_0: return by_width<BlockQ8_0>(bn);
    case QuantType::IQ4_NL: return by_width<BlockIQ4_NL>(bn);
    case QuantType::MXFP4: return by_width<BlockMXFP4>(bn);
    case QuantType::Q4_K: return by_width<BlockQ4_K>(bn);
    case QuantType::Q5_K: return by_width<BlockQ5_K>(bn);
    case QuantType::Q6_K: return by_width<BlockQ6_K>(bn);
    default: return nullptr;
  }
}

constexpr int64_t kMaxN = int64_t{1} << 30;  // n_in, n_out and element offsets of a row stay in int
constexpr int kMaxGridY = 65535;
constexpr int64_t kMaxQuantRows = 65535;  // launch_quantize_act's grid.y
constexpr int kMinWidth = 16;

void check_matrix(const DeviceMatrix& w) {
  MT_CHECK_MSG(mmq_supports(w.type), "mmq: unsupported weight type");
  const TypeTraits& tr = type_traits(w.type);
  MT_CHECK(w.n_in > 0 && w.n_in <= kMaxN && w.n_in % tr.block_elems == 0 && w.n_in % 32 == 0);
  MT_CHECK(w.n_out >= 0 && w.n_out <= kMaxN && w.n_mat >= 1);
  MT_CHECK(w.row_bytes >= static_cast<uint64_t>(w.n_in) / tr.block_elems * tr.block_bytes);
  MT_CHECK(w.n_mat == 1 || w.matrix_bytes >= static_cast<uint64_t>(w.n_out) * w.row_bytes);
  MT_CHECK(w.data != nullptr || w.n_out == 0);
}

// Column-tile width for `per_tile` columns expected per matrix: 16, 32 or 64.
int width_for(int64_t per_tile) { return per_tile <= 8 ? 16 : per_tile <= 20 ? 32 : 64; }
// The routed default: the average slots per expert.
int routed_width(int64_t n_slots, int64_t n_expert) { return width_for((n_slots + n_expert - 1) / n_expert); }

uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

uint64_t qs_bytes(int64_t rows, int64_t n_in) { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(n_in); }
uint64_t meta_bytes(int64_t rows, int64_t n_in) { return qs_bytes(rows, n_in) / 32 * sizeof(uint2); }
int64_t max_tiles(int64_t n_slots, int64_t n_expert, int bn) {
  return (n_slots + bn - 1) / bn + std::min(n_expert, n_slots);
}

MmqArgs base_args(const DeviceMatrix& w, float* y) {
  MmqArgs a;
  a.w = w.data;
  a.row_bytes = w.row_bytes;
  a.matrix_bytes = w.matrix_bytes;
  a.n_in = static_cast<int>(w.n_in);
  a.n_out = w.n_out;
  a.y = y;
  return a;
}

// X rows -> int8 quants and metas in the workspace, in the weight type's activation mode.
void quantize(MmqArgs& a, QuantType type, const float* x, int rows, Workspace& ws, cudaStream_t stream) {
  Q8_1Rows q;
  q.qs = static_cast<int8_t*>(ws.take(qs_bytes(rows, a.n_in), 256));
  q.meta = static_cast<uint2*>(ws.take(meta_bytes(rows, a.n_in), 256));
  launch_quantize_act(x, rows, a.n_in, act_quant_for(type), q, stream);
  a.xq = q.qs;
  a.xmeta = q.meta;
}

unsigned row_tiles(const DeviceMatrix& w) {
  return static_cast<unsigned>((w.n_out + kMmqRowsPerCta - 1) / kMmqRowsPerCta);
}

}  // namespace

bool mmq_supports(QuantType type) { return launcher(type, 64) != nullptr; }

bool mmq_fits(const DeviceMatrix& w, int n_tokens) {
  return mmq_supports(w.type) && n_tokens >= 0 && n_tokens <= kMaxQuantRows;
}

bool mmq_experts_fits(const DeviceMatrix& w, int n_tokens, int K) {
  if (!mmq_supports(w.type) || n_tokens < 0 || K < 1 || w.n_mat > kMmqMaxExperts) return false;
  const int64_t n_slots = static_cast<int64_t>(n_tokens) * K;
  return n_slots <= kMaxQuantRows && max_tiles(n_slots, w.n_mat, routed_width(n_slots, w.n_mat)) <= kMaxGridY;
}

size_t mmq_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K) {
  if (!mmq_supports(w.type) || n_tokens <= 0) return 0;
  const int64_t rows = static_cast<int64_t>(n_tokens) * std::max(K, 1);
  uint64_t bytes = 256;  // the first take's alignment
  bytes += round_up(qs_bytes(rows, w.n_in), 256) + round_up(meta_bytes(rows, w.n_in), 256);
  bytes += round_up(static_cast<uint64_t>(rows) * sizeof(int32_t), 256);                               // perm
  bytes += round_up(static_cast<uint64_t>(max_tiles(rows, w.n_mat, kMinWidth)) * sizeof(MmqTile), 256);  // tiles
  bytes += 256;                                                                                         // n_tiles
  return bytes;
}

void mmq(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
         cudaStream_t stream) {
  check_matrix(w);
  MT_CHECK(mat >= 0 && mat < w.n_mat);
  MT_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.n_out == 0) return;
  const int bn = width_for(n_tokens);
  const int64_t col_tiles = (n_tokens + bn - 1) / bn;
  MT_CHECK(col_tiles <= kMaxGridY);
  MmqArgs a = base_args(w, y);
  a.mat = mat;
  a.n_tokens = n_tokens;
  quantize(a, w.type, x, n_tokens, ws, stream);
  launcher(w.type, bn)(a, dim3(row_tiles(w), static_cast<unsigned>(col_tiles)), stream);
}

void mmq_experts_tiled(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                       cudaStream_t stream, int tile_cols) {
  const int32_t* ids = r.ids;
  const int n_tokens = r.n_tokens, K = r.K;
  const bool x_per_slot = r.x_per_slot;
  check_matrix(w);
  MT_CHECK(n_tokens >= 0 && K >= 1 && static_cast<int64_t>(n_tokens) * K <= kMaxN);
  MT_CHECK(w.n_mat <= kMmqMaxExperts);
  MT_CHECK(tile_cols == 0 || tile_cols == 16 || tile_cols == 32 || tile_cols == 64);
  if (n_tokens == 0 || w.n_out == 0) return;
  const int n_slots = n_tokens * K;
  const int n_expert = static_cast<int>(w.n_mat);
  const int bn = tile_cols != 0 ? tile_cols : routed_width(n_slots, n_expert);
  const int64_t col_tiles = max_tiles(n_slots, n_expert, bn);
  MT_CHECK(col_tiles <= kMaxGridY);

  MmqArgs a = base_args(w, y);
  a.K = K;
  a.x_per_slot = x_per_slot;
  quantize(a, w.type, x, x_per_slot ? n_slots : n_tokens, ws, stream);
  auto* perm = ws.take_n<int32_t>(static_cast<size_t>(n_slots));             // (n_slots) sorted -> slot
  auto* tiles = ws.take_n<MmqTile>(static_cast<size_t>(col_tiles));          // (col_tiles) upper bound
  auto* n_tiles = ws.take_n<int32_t>(1);                                      // (1)
  launch_mmq_route(ids, n_slots, n_expert, bn, perm, tiles, n_tiles, stream);
  a.tiles = tiles;
  a.n_tiles = n_tiles;
  a.perm = perm;
  launcher(w.type, bn)(a, dim3(row_tiles(w), static_cast<unsigned>(col_tiles)), stream);
}

void mmq_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                 cudaStream_t stream) {
  mmq_experts_tiled(w, r, x, y, ws, stream, 0);
}

}  // namespace mt::cuda
