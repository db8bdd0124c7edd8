#include "cuda/kernels/dispatch.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/env_switch.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/mmvq.h"

namespace mt::cuda {
namespace {

// Largest n_tokens served by mmvq and (dense) by mmq, per architecture and weight type.
// Each architecture's rows come from `moetier_cuda_tune` (bench/cuda_tune.cpp) on that
// GPU: medians of CUDA-event timings after warm-up of mmvq, mmq and gemm on qwen3-30b-a3b
// shapes (dense 2048 -> 4096; experts 128 x (2048 -> 768) and 128 x (768 -> 2048), top-8)
// for n_tokens 1..64 then on to 512. An mmvq limit is the last n_tokens scanned before
// the next kernel (mmq where it supports the type, else gemm) is faster (experts: the
// smaller of the two shapes'); the dense mmq limit the last before gemm is faster. Types
// without a row use kMmvqMaxTokens and kNoLimit.
constexpr DispatchRow kLimits[] = {
#include "cuda/kernels/dispatch_sm90.inc"
};

const DispatchRow* find_row(int sm, QuantType type) {
  for (const DispatchRow& row : kLimits) {
    if (row.sm == sm && row.type == type) return &row;
  }
  return nullptr;
}

constexpr int kMaxDevices = 64;

}  // namespace

int current_sm() {
  static std::array<std::atomic<int>, kMaxDevices> cache{};  // 0 = not asked yet
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) {
    std::fprintf(stderr, "%s:%d: device index %d out of range\n", __FILE__, __LINE__, device);
    std::abort();
  }
  int sm = cache[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (sm == 0) {
    int major = 0, minor = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    sm = major * 10 + minor;
    cache[static_cast<size_t>(device)].store(sm, std::memory_order_relaxed);
  }
  return sm;
}

// MOETIER_CUDA_EXPERTS_MMVQ_MAX=N (N > 0): routed products of up to N tokens take mmvq
// whatever the table says, for every type (measuring a new crossover); 0: the table.
namespace {
EnvInt g_experts_max("MOETIER_CUDA_EXPERTS_MMVQ_MAX", 0);
}  // namespace

int mmvq_max_tokens(int sm, QuantType type, bool experts) {
  if (experts && g_experts_max.value() > 0) return g_experts_max.value();
  const DispatchRow* row = find_row(sm, type);
  if (row == nullptr) return kMmvqMaxTokens;
  return experts ? row->experts_max_tokens : row->dense_max_tokens;
}

int dense_mmq_max_tokens(int sm, QuantType type) {
  const DispatchRow* row = find_row(sm, type);
  return row == nullptr ? kNoLimit : row->dense_mmq_max_tokens;
}

void mmvq_chunked(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
                  cudaStream_t stream) {
  for (int t0 = 0; t0 < n_tokens; t0 += kMmvqMaxTokens) {
    const int n = std::min(kMmvqMaxTokens, n_tokens - t0);
    const size_t mark = ws.mark();
    mmvq(w, mat, x + static_cast<int64_t>(t0) * w.n_in, n, y + static_cast<int64_t>(t0) * w.n_out, ws, stream);
    ws.rewind(mark);
  }
}

void mmvq_experts_chunked(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                          cudaStream_t stream) {
  if (mmvq_groups_slots(w, r.n_tokens)) {  // one launch over every token's slots
    const size_t mark = ws.mark();
    mmvq_experts(w, r, x, y, ws, stream);
    ws.rewind(mark);
    return;
  }
  const int32_t* ids = r.ids;
  const int n_tokens = r.n_tokens, K = r.K;
  const bool x_per_slot = r.x_per_slot;
  for (int t0 = 0; t0 < n_tokens; t0 += kMmvqMaxTokens) {
    const int n = std::min(kMmvqMaxTokens, n_tokens - t0);
    const int64_t slot0 = static_cast<int64_t>(t0) * K;
    const float* xc = x + (x_per_slot ? slot0 : static_cast<int64_t>(t0)) * w.n_in;
    const size_t mark = ws.mark();
    mmvq_experts(w, {ids + slot0, n, K, x_per_slot}, xc, y + slot0 * w.n_out, ws, stream);
    ws.rewind(mark);
  }
}

void matmul(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
            cudaStream_t stream) {
  const int sm = current_sm();
  if (supports(w.type) && n_tokens <= mmvq_max_tokens(sm, w.type, false)) {
    mmvq_chunked(w, mat, x, n_tokens, y, ws, stream);
  } else if (mmq_fits(w, n_tokens) && n_tokens <= dense_mmq_max_tokens(sm, w.type)) {
    mmq(w, mat, x, n_tokens, y, ws, stream);
  } else {
    gemm(w, mat, x, n_tokens, y, ws, stream);
  }
}

bool matmul_experts_grouped(const DeviceMatrix& w, int n_tokens) {
  return supports(w.type) && n_tokens <= mmvq_max_tokens(current_sm(), w.type, true) && mmvq_groups_slots(w, n_tokens);
}

void matmul_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                    cudaStream_t stream) {
  if (supports(w.type) && r.n_tokens <= mmvq_max_tokens(current_sm(), w.type, true)) {
    mmvq_experts_chunked(w, r, x, y, ws, stream);
  } else if (mmq_experts_fits(w, r.n_tokens, r.K)) {
    mmq_experts(w, r, x, y, ws, stream);
  } else {
    gemm_experts(w, r, x, y, ws, stream);
  }
}

namespace {
// x's quantized rows serve w: mmvq is the kernel and the modes agree.
bool reads_quantized(const DeviceMatrix& w, const ActRows& x, int n_tokens, bool experts) {
  if (!x.quantized || n_tokens > kMmvqMaxTokens || !quantizes_activations(w.type)) return false;
  return n_tokens <= mmvq_max_tokens(current_sm(), w.type, experts) && act_quant_for(w.type) == x.mode;
}
}  // namespace

void matmul(const DeviceMatrix& w, const ActRows& x, float* y, Workspace& ws, cudaStream_t stream) {
  if (reads_quantized(w, x, x.rows, false)) {
    mmvq_quantized(w, 0, x.qs, x.meta, x.rows, y, stream);
  } else {
    matmul(w, 0, x.x, x.rows, y, ws, stream);
  }
}

void matmul_experts(const DeviceMatrix& w, const int32_t* ids, int K, const ActRows& x, bool x_per_slot, float* y,
                    Workspace& ws, cudaStream_t stream, const int32_t* groups) {
  MT_CHECK(K > 0 && (!x_per_slot || x.rows % K == 0));
  const int n_tokens = x_per_slot ? x.rows / K : x.rows;
  if (reads_quantized(w, x, n_tokens, true)) {
    mmvq_experts_quantized(w, {ids, n_tokens, K, x_per_slot, groups}, x.qs, x.meta, y, ws, stream);
  } else {
    matmul_experts(w, {ids, n_tokens, K, x_per_slot, groups}, x.x, y, ws, stream);
  }
}

size_t matmul_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K) {
  const bool grouped = mmvq_groups_slots(w, n_tokens) && w.n_mat > 1;  // routed: every token in one launch
  const int chunk = grouped ? n_tokens : std::min(n_tokens, kMmvqMaxTokens);
  const size_t mmvq_bytes = supports(w.type) ? mmvq_workspace_bytes(w, chunk, K) : 0;
  const size_t gemm_bytes = gemm_supports(w.type) ? gemm_workspace_bytes(w, n_tokens, K) : 0;
  const size_t mmq_bytes = mmq_workspace_bytes(w, n_tokens, K);
  return std::max({mmvq_bytes, gemm_bytes, mmq_bytes});
}

}  // namespace mt::cuda
