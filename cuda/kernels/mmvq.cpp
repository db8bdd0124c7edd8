// Host side of MMVQ (cuda/kernels/mmvq.h): shape checks, the activation quantization into the
// workspace, the alignment the kernels may assume, and the one switch that turns the
// runtime weight type into a launcher template argument.
#include "cuda/kernels/mmvq.h"

#include <cstdint>

#include "core/check.h"
#include "cuda/kernels/env_switch.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/types.h"

namespace mt::cuda {
namespace {

using LaunchFn = void (*)(const MmvqArgs&, cudaStream_t);

LaunchFn launcher(QuantType type) {
  switch (type) {
    case QuantType::F32: return launch_mmvq<WeightF32>;
    case QuantType::F16: return launch_mmvq<WeightF16>;
    case QuantType::BF16: return launch_mmvq<WeightBF16>;
    case QuantType::Q4_0: return launch_mmvq<BlockQ4_0>;
    case QuantType::Q4_1: return launch_mmvq<BlockQ4_1>;
    case QuantType::Q5_0: return launch_mmvq<BlockQ5_0>;
    case QuantType::Q5_1: return launch_mmvq<BlockQ5_1>;
    case QuantType::Q8_0: return launch_mmvq<BlockQ8_0>;
    case QuantType::IQ4_NL: return launch_mmvq<BlockIQ4_NL>;
    case QuantType::MXFP4: return launch_mmvq<BlockMXFP4>;
    case QuantType::Q2_K: return launch_mmvq<BlockQ2_K>;
    case QuantType::Q3_K: return launch_mmvq<BlockQ3_K>;
    case QuantType::Q4_K: return launch_mmvq<BlockQ4_K>;
    case QuantType::Q5_K: return launch_mmvq<BlockQ5_K>;
    case QuantType::Q6_K: return launch_mmvq<BlockQ6_K>;
    case QuantType::IQ4_XS: return launch_mmvq<BlockIQ4_XS>;
    default: return nullptr;
  }
}

bool is_float(QuantType type) {
  return type == QuantType::F32 || type == QuantType::F16 || type == QuantType::BF16;
}

constexpr int kMaxGridY = 65535;
constexpr int64_t kMaxN = int64_t{1} << 30;  // n_in and element offsets stay in int

void check_matrix(const DeviceMatrix& w) {
  MT_CHECK_MSG(launcher(w.type) != nullptr, "mmvq: unsupported weight type");
  const TypeTraits& tr = type_traits(w.type);
  MT_CHECK(w.n_in > 0 && w.n_in <= kMaxN && w.n_in % tr.block_elems == 0);
  MT_CHECK(w.n_out >= 0 && w.n_out <= kMaxN && w.n_mat >= 1);
  MT_CHECK(w.row_bytes >= static_cast<uint64_t>(w.n_in) / tr.block_elems * tr.block_bytes);
  MT_CHECK(w.n_mat == 1 || w.matrix_bytes >= static_cast<uint64_t>(w.n_out) * w.row_bytes);
  MT_CHECK(w.data != nullptr || w.n_out == 0);
}

// The largest power of two <= 16 dividing the address of every block of every matrix.
// Float weights are read 8 elements (16 or 32 bytes) at a time from 8-element boundaries,
// so their element size does not cap it (it did: F32's 4 sent every F32 matrix, routers
// included, down the one-element-per-lane path).
int block_alignment(const DeviceMatrix& w) {
  const uint64_t unit = is_float(w.type) ? 16 : type_traits(w.type).block_bytes;
  const uint64_t bits = reinterpret_cast<uintptr_t>(w.data) | w.row_bytes | (w.n_mat > 1 ? w.matrix_bytes : 0) | unit;
  int a = 16;
  while (a > 1 && bits % static_cast<uint64_t>(a) != 0) a /= 2;
  return a;
}

uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

// The quantized activation rows (any ActQuant): qs (rows, n_in) int8, meta (rows, n_in / 32) uint2.
uint64_t q8_1_qs_bytes(int rows, int64_t n_in) { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(n_in); }
uint64_t q8_1_meta_bytes(int rows, int64_t n_in) { return q8_1_qs_bytes(rows, n_in) / 32 * sizeof(uint2); }

// MOETIER_CUDA_MMVQ_WIDE16 (default on; =0 off): the same up to 16 lanes, so the K-quant
// down rows of a 768-wide expert (12 tasks) get 16 lanes instead of 8 and Q4_0's 24-task
// rows keep 16. qwen3-30b-a3b q4_k_m tg128 on the H200: 303.08 / 302.94 vs 297.28 / 299.03
// t/s; every CUDA test passes with it (2026-12-03). (Up to 32 lanes, MOETIER_CUDA_MMVQ_WIDE,
// measured the same on q4_k_m and nothing on q4_0, and was removed; docs/PERFORMANCE.md.)
EnvSwitch g_wide16("MOETIER_CUDA_MMVQ_WIDE16", true);
// MOETIER_CUDA_MMVQ_SPLIT=2|4: one-token rows of more than 32 tasks over up to that many
// warps (MmvqArgs::split_warps); 0 / 1: one warp per row group. Default 4: qwen3-30b-a3b
// tg128 on the H200 (with the lanes attention) q4_k_m 352.6 / 355.8 t/s vs 346.1 / 347.3
// without either, q4_0 391.2 / 383.2 vs 374.3 / 373.4 (split 2: 353.5 / 356.2, 384.8 /
// 385.0); docs/PERFORMANCE.md.
EnvInt g_split("MOETIER_CUDA_MMVQ_SPLIT", 4);
// MOETIER_CUDA_MMVQ_GROUPED=N: routed products of at least N tokens group their slots by
// expert on the device (cuda/kernels/mmvq_groups.cu) so each selected matrix is read once
// for all its slots; 0: one slot per grid row always. Default 24: on an H100 (bench
// --device cuda --batch, qwen3-30b-a3b q4_k_m, 2026-12-06) grouping from 2 tokens ran 8
// sequences at 957.5 t/s against 1070.7 per slot (a layer's 64 slots mostly in groups of
// one, plus the grouping launch), 16 at 925.5 vs 914.8, and 32 (mmvq to 64 tokens) at
// 1254.9 against the per-slot mmq's 1140.1; docs/PERFORMANCE.md.
EnvInt g_grouped("MOETIER_CUDA_MMVQ_GROUPED", 24);
// MOETIER_CUDA_MMVQ_ROWS_MULTI=4 (the default; =2 the old two): four rows per lane group in
// dense products of 2-8 tokens (MmvqArgs::multi_rows). qwen3-30b-a3b q4_k_m on an H100
// (bench --batch 1,4,8 -p 0 -n 32, two alternating rounds, 2026-12-07): step 4.37-4.44 vs
// 4.42-4.59 ms at 4 sequences, 6.63-6.78 vs 6.80-7.09 at 8, 1 unchanged; the logits of a
// 6-token prefill bit-identical (each row's sum is the same products in the same order);
// docs/PERFORMANCE.md. Other weight types not yet measured.
EnvInt g_multi_rows("MOETIER_CUDA_MMVQ_ROWS_MULTI", 4);

MmvqArgs base_args(const DeviceMatrix& w, float* y) {
  MmvqArgs a;
  a.wide_lanes = g_wide16.on() ? 16 : 0;
  a.split_warps = g_split.value();
  a.multi_rows = g_multi_rows.value() == 4 ? 4 : 2;
  a.w = w.data;
  a.row_bytes = w.row_bytes;
  a.matrix_bytes = w.matrix_bytes;
  a.n_mat = w.n_mat;
  a.n_in = static_cast<int>(w.n_in);
  a.n_out = w.n_out;
  a.y = y;
  a.align = block_alignment(w);
  return a;
}

// A routed batch's arguments: slot s = t * K + k reads matrix ids[s], one token per slot.
MmvqArgs routed_args(const DeviceMatrix& w, const int32_t* ids, int n_tokens, int K, bool x_per_slot, float* y) {
  MmvqArgs a = base_args(w, y);
  a.ids = ids;
  a.K = K;
  a.x_per_slot = x_per_slot;
  a.n_tokens = 1;
  a.n_slots = n_tokens * K;
  return a;
}

// The activation rows as the kernels read them: f32 as given, or quantized in the
// workspace to the format the CPU pairs with the weight type (act_quant_for).
void set_activations(MmvqArgs& a, QuantType type, const float* x, int rows, Workspace& ws, cudaStream_t stream) {
  a.x = x;
  a.x_aligned16 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (is_float(type)) return;
  Q8_1Rows q;
  q.qs = static_cast<int8_t*>(ws.take(q8_1_qs_bytes(rows, a.n_in), 256));
  q.meta = static_cast<uint2*>(ws.take(q8_1_meta_bytes(rows, a.n_in), 256));
  launch_quantize_act(x, rows, a.n_in, act_quant_for(type), q, stream);
  a.xq = q.qs;
  a.xmeta = q.meta;
}

}  // namespace

bool mmvq_groups_slots(const DeviceMatrix& w, int n_tokens);

namespace {
// The routed batch's slots grouped by expert in the workspace where that applies
// (mmvq_groups_slots): one small launch, the product's grid.y then over the groups.
void group_slots(MmvqArgs& a, const DeviceMatrix& w, const RoutedSlots& r, Workspace& ws, cudaStream_t stream) {
  if (!mmvq_groups_slots(w, r.n_tokens)) return;
  a.groups = r.groups;
  if (a.groups == nullptr) {
    auto* built = static_cast<int32_t*>(ws.take(expert_groups_bytes(a.n_slots, w.n_mat), 256));
    launch_expert_groups(a.ids, a.n_slots, w.n_mat, built, stream);
    a.groups = built;
  }
  a.group_grid = expert_groups_max(a.n_slots, w.n_mat);
}
}  // namespace

bool supports(QuantType type) { return launcher(type) != nullptr; }

void set_mmvq_wide16(bool on) { g_wide16.set(on); }
void set_mmvq_grouped(int min_tokens) { g_grouped.set(min_tokens); }
int mmvq_grouped_from() { return g_grouped.value(); }

bool mmvq_groups_slots(const DeviceMatrix& w, int n_tokens) {
  const int min_tokens = g_grouped.value();
  return min_tokens > 0 && n_tokens >= min_tokens && quantizes_activations(w.type) && w.n_mat <= kMaxGroupedMatrices;
}
void set_mmvq_split(int warps) { g_split.set(warps); }

bool quantizes_activations(QuantType type) { return supports(type) && !is_float(type); }

size_t mmvq_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K) {
  if (is_float(w.type) || n_tokens <= 0) return 0;
  const int rows = n_tokens * (K > 1 ? K : 1);
  const size_t groups = K >= 1 && mmvq_groups_slots(w, n_tokens) ? round_up(expert_groups_bytes(rows, w.n_mat), 256) : 0;
  return round_up(q8_1_qs_bytes(rows, w.n_in), 256) + round_up(q8_1_meta_bytes(rows, w.n_in), 256) + groups + 256;
}

void quantize_act(const float* x, int rows, int n_in, ActQuant mode, int8_t* qs, uint2* meta, cudaStream_t stream) {
  MT_CHECK(rows >= 0 && n_in > 0 && n_in % (mode == ActQuant::kQ8_K ? 256 : 32) == 0);
  MT_CHECK(reinterpret_cast<uintptr_t>(qs) % 16 == 0 && reinterpret_cast<uintptr_t>(meta) % 8 == 0);
  launch_quantize_act(x, rows, n_in, mode, {qs, meta}, stream);
}

void mmvq(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
          cudaStream_t stream) {
  check_matrix(w);
  MT_CHECK(n_tokens >= 0 && n_tokens <= kMmvqMaxTokens);
  MT_CHECK(mat >= 0 && mat < w.n_mat);
  if (n_tokens == 0 || w.n_out == 0) return;
  MmvqArgs a = base_args(w, y);
  a.mat = mat;
  a.n_tokens = n_tokens;
  a.n_slots = 1;
  set_activations(a, w.type, x, n_tokens, ws, stream);
  launcher(w.type)(a, stream);
}

void mmvq_quantized(const DeviceMatrix& w, int64_t mat, const int8_t* qs, const uint2* meta, int n_tokens, float* y,
                    cudaStream_t stream) {
  check_matrix(w);
  MT_CHECK(!is_float(w.type) && n_tokens >= 0 && n_tokens <= kMmvqMaxTokens && mat >= 0 && mat < w.n_mat);
  if (n_tokens == 0 || w.n_out == 0) return;
  MmvqArgs a = base_args(w, y);
  a.mat = mat;
  a.n_tokens = n_tokens;
  a.n_slots = 1;
  a.xq = qs;
  a.xmeta = meta;
  launcher(w.type)(a, stream);
}

void mmvq_experts_quantized(const DeviceMatrix& w, const RoutedSlots& r, const int8_t* qs, const uint2* meta,
                            float* y, Workspace& ws, cudaStream_t stream) {
  const int32_t* ids = r.ids;
  const int n_tokens = r.n_tokens, K = r.K;
  const bool x_per_slot = r.x_per_slot;
  check_matrix(w);
  MT_CHECK(!is_float(w.type) && n_tokens >= 0 && K >= 1 && static_cast<int64_t>(n_tokens) * K <= kMaxGridY);
  if (n_tokens == 0 || w.n_out == 0) return;
  MmvqArgs a = routed_args(w, ids, n_tokens, K, x_per_slot, y);
  a.xq = qs;
  a.xmeta = meta;
  group_slots(a, w, r, ws, stream);
  launcher(w.type)(a, stream);
}

void mmvq_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                  cudaStream_t stream) {
  const int32_t* ids = r.ids;
  const int n_tokens = r.n_tokens, K = r.K;
  const bool x_per_slot = r.x_per_slot;
  check_matrix(w);
  MT_CHECK(n_tokens >= 0 && K >= 1 && static_cast<int64_t>(n_tokens) * K <= kMaxGridY);
  if (n_tokens == 0 || w.n_out == 0) return;
  MmvqArgs a = routed_args(w, ids, n_tokens, K, x_per_slot, y);
  set_activations(a, w.type, x, x_per_slot ? a.n_slots : n_tokens, ws, stream);
  group_slots(a, w, r, ws, stream);
  launcher(w.type)(a, stream);
}

}  // namespace mt::cuda
