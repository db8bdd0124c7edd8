// CudaSequence: the tiered MoE layers (cuda/tiering.h): hybrid placement, the CPU's share,
// prefill streaming's staging, telemetry (see sequence.h).
#include "cuda/sequence.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "cuda/check.h"
#include "cuda/host_memory.h"

namespace mt::cuda::detail {

// Routing to the host (ids and the normed rows: a few KB, the step's one wait per
// layer), the scheduler's placement, admissions queued on the copy stream, and the slot
// ids (-1: the CPU's) uploaded for the grouped products.
CudaSequence::HybridPart CudaSequence::place_hybrid(Pass& p, uint32_t l, uint32_t T, const int32_t* sel, const float* h, const float* wts) {
  CudaTiering& tier = *m_.tiering;
  cudaStream_t s = m_.stream;
  const uint32_t K = m_.hp.n_expert_used, E = m_.hp.n_embd;
  MT_CHECK(T <= static_cast<uint32_t>(kMmvqMaxTokens));
  if (!p.replay) {  // (a replayed segment's graph holds these copies)
    MT_CUDA_CHECK(cudaMemcpyAsync(pin_sel_, sel, sizeof(int32_t) * T * K, cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(pin_h_, h, sizeof(float) * T * E, cudaMemcpyDeviceToHost, s));
  }
  segment_end(p);
  // (hybrid_ahead(): these copies wait behind the previous layer-step's flag, so its CPU
  // rows are computed from pin_h_ before it is overwritten.)
  flush_cpu_part();
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  (void)wts;
  std::vector<uint32_t> count(m_.hp.n_expert, 0);
  for (uint32_t i = 0; i < T * K; ++i) ++count[static_cast<uint32_t>(pin_sel_[i])];
  tasks_.clear();
  for (uint32_t e = 0; e < m_.hp.n_expert; ++e) {
    if (count[e] > 0) tasks_.push_back({e, count[e]});
  }
  placed_.clear();
  tier.scheduler->place(l, tasks_, placed_);
  slot_of_.assign(m_.hp.n_expert, -1);
  // The copy stream is first in, first out: the copies of experts the device computes now
  // (admitted into a slot, or staged) go first, then admissions for later steps. The
  // compute stream waits for the copies into this layer's slots queued so far (earlier
  // steps' are usually done long ago) but not for the later admissions.
  staged_.clear();
  staged_of_.assign(m_.hp.n_expert, false);
  for (const Placement& p : placed_) {
    if (p.on_device && p.copy && p.slot >= 0) tier.cache->admit(l, p.expert, p.slot);
    if (p.on_device && p.slot >= 0) slot_of_[p.expert] = p.slot;
    if (p.on_device && p.slot < 0) {  // refused by the policy: through staging
      staged_.push_back(p.expert);
      staged_of_[p.expert] = true;
    }
  }
  tier.cache->wait_layer(l, s);
  HybridPart part;
  if (!staged_.empty()) part.staged_buf = tier.cache->stage_experts(l, staged_);
  for (const Placement& p : placed_) {
    if (!p.on_device && p.copy && p.slot >= 0) tier.cache->admit(l, p.expert, p.slot);
  }
  for (uint32_t i = 0; i < T * K; ++i) {
    const auto e = static_cast<uint32_t>(pin_sel_[i]);
    const int32_t slot = slot_of_[e];
    pin_slot_ids_[i] = slot;
    pin_stage_ids_[i] = staged_of_[e] ? static_cast<int32_t>(e) : -1;
    if (slot >= 0) {
      ++part.n_device;
    } else if (staged_of_[e]) {
      // computed from the staging buffer
    } else {
      part.jobs.push_back({static_cast<uint32_t>(pin_sel_[i]), i / K});
      part.rows.push_back(static_cast<int32_t>(i));
    }
  }
  MT_CUDA_CHECK(cudaMemcpyAsync(slot_ids_dev_.get(), pin_slot_ids_, sizeof(int32_t) * T * K, cudaMemcpyHostToDevice, s));
  if (!staged_.empty()) {
    MT_CUDA_CHECK(
        cudaMemcpyAsync(stage_ids_dev_.get(), pin_stage_ids_, sizeof(int32_t) * T * K, cudaMemcpyHostToDevice, s));
  }
  if (part.n_device > 0 || part.staged_buf >= 0) {
    MT_CUDA_CHECK(cudaEventRecord(dev_begin_[l], s));
    dev_timed_[l] = true;
  }
  return part;
}

// The CPU computes its experts while the device runs the hot ones (queued before this
// call), then their rows go into d (T*K, n_embd) at their slots. hybrid_ahead(): the copy
// and the scatter are queued first, behind a wait on the host flag, and the rows computed
// at the next flush. A segment-graph step (p.hgraph) always waits and copies T*K rows (ids
// -1 past the CPU's), so its launches are the same at every step; they open the segment.
void CudaSequence::finish_hybrid(Pass& p, uint32_t l, uint32_t T, HybridPart& part, float* d) {
  cudaStream_t s = m_.stream;
  const uint32_t E = m_.hp.n_embd, S = T * m_.hp.n_expert_used;
  if (dev_timed_[l]) MT_CUDA_CHECK(cudaEventRecord(dev_end_[l], s));
  if (part.jobs.empty() && !p.hgraph) return;
  const size_t n = p.hgraph ? S : part.jobs.size();
  std::copy(part.rows.begin(), part.rows.end(), pin_row_ids_);
  std::fill(pin_row_ids_ + part.rows.size(), pin_row_ids_ + n, -1);
  const bool wait = hybrid_ahead();
  if (wait) {
    MT_CHECK(!pending_.active);
    pending_.active = true;
    pending_.l = l, pending_.T = T, pending_.seq = ++flag_seq_;
    pending_.part = std::move(part);
  } else {
    compute_cpu_part(l, T, part);
  }
  segment_begin(p, static_cast<int>(l));
  if (p.replay) return;
  if (wait) wait_host_flag(flag_dev_, flag_count_dev_.as<uint32_t>(), s);
  MT_CUDA_CHECK(cudaMemcpyAsync(rows_dev_.get(), pin_rows_, sizeof(float) * n * E, cudaMemcpyHostToDevice, s));
  MT_CUDA_CHECK(cudaMemcpyAsync(row_ids_dev_.get(), pin_row_ids_, sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
  scatter_rows(d, rows_dev_.as<float>(), row_ids_dev_.as<int32_t>(), static_cast<int>(n), static_cast<int>(E), s);
}

void CudaSequence::compute_cpu_part(uint32_t l, uint32_t T, const HybridPart& part) {
  const auto t0 = std::chrono::steady_clock::now();
  expert_outputs(m_.host->weights().layers[l], pin_h_, T, m_.hp.n_embd, part.jobs, pin_rows_, m_.host->pool());
  m_.tiering->timing[l].cpu_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CudaSequence::flush_cpu_part() {
  if (!pending_.active) return;
  if (!pending_.part.jobs.empty()) compute_cpu_part(pending_.l, pending_.T, pending_.part);
  // The rows are written before the flag is seen: the device's wait, then the copy engine,
  // read them after it.
  std::atomic_ref<uint32_t>(*pin_flag_).store(pending_.seq, std::memory_order_release);
  pending_.active = false;
}

// Prefill streaming: queues the bank of the first MoE layer after `after` (-1: the
// first MoE layer) into the free staging buffer; staged_buf_ names it.
void CudaSequence::stage_next_layer(int64_t after) {
  for (uint32_t l = static_cast<uint32_t>(after + 1); l < m_.hp.n_layer; ++l) {
    if (!m_.w.layers[l].moe) continue;
    staged_buf_ = m_.tiering->cache->stage_layer(l);
    return;
  }
}


// Device time of this step's hybrid expert products per layer (events read after the
// step's final synchronisation).
void CudaSequence::collect_device_times() {
  if (m_.tiering == nullptr) return;
  for (uint32_t l = 0; l < m_.hp.n_layer; ++l) {
    if (!dev_timed_[l]) continue;
    float ms = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, dev_begin_[l], dev_end_[l]));
    m_.tiering->timing[l].device_s += ms * 1e-3;
    dev_timed_[l] = false;
  }
}

// Pinned and device buffers of the hybrid step (tiered models only).
void CudaSequence::alloc_tiering_buffers() {
  const size_t K = m_.hp.n_expert_used, E = m_.hp.n_embd, S = kMmvqMaxTokens * K;
  auto pinned = [](size_t bytes) {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return p;
  };
  pin_sel_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  pin_slot_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  pin_row_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  pin_stage_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  stage_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  pin_h_ = static_cast<float*>(pinned(sizeof(float) * kMmvqMaxTokens * E));
  pin_rows_ = static_cast<float*>(pinned(sizeof(float) * S * E));
  slot_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  row_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  rows_dev_ = DeviceBuffer(sizeof(float) * S * E);
  dev_begin_.resize(m_.hp.n_layer);
  dev_end_.resize(m_.hp.n_layer);
  dev_timed_.assign(m_.hp.n_layer, false);
  seg_exec_.assign(m_.hp.n_layer + 1, nullptr);
  seg_cap_.assign(m_.hp.n_layer + 1, 0);
  for (uint32_t l = 0; l < m_.hp.n_layer; ++l) {
    MT_CUDA_CHECK(cudaEventCreate(&dev_begin_[l]));
    MT_CUDA_CHECK(cudaEventCreate(&dev_end_[l]));
  }
  auto env_on = [](const char* name) { return std::getenv(name) != nullptr && std::string(std::getenv(name)) == "1"; };
  const bool want_graphs = env_on("MOETIER_CUDA_HYBRID_GRAPHS") && graphs_ && !timer_.on();
  if (env_on("MOETIER_CUDA_HYBRID_AHEAD") || want_graphs) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, sizeof(uint32_t), cudaHostAllocMapped) == cudaSuccess) {
      pin_flag_ = static_cast<uint32_t*>(p);
      *pin_flag_ = 0;
      void* dev = nullptr;
      MT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, p, 0));
      flag_dev_ = static_cast<uint32_t*>(dev);
      flag_count_dev_ = DeviceBuffer(sizeof(uint32_t));
      MT_CUDA_CHECK(cudaMemset(flag_count_dev_.get(), 0, sizeof(uint32_t)));
      hybrid_graphs_ = want_graphs;
    } else {
      cudaGetLastError();
      log_warn("MOETIER_CUDA_HYBRID_AHEAD: no mapped pinned flag; the CPU rows are computed in place");
    }
  }
}

void CudaSequence::free_tiering_buffers() {
  for (void* p : {static_cast<void*>(pin_sel_), static_cast<void*>(pin_slot_ids_), static_cast<void*>(pin_row_ids_),
                  static_cast<void*>(pin_stage_ids_),
                  static_cast<void*>(pin_h_), static_cast<void*>(pin_rows_), static_cast<void*>(pin_flag_)}) {
    if (p != nullptr) cudaFreeHost(p);
  }
  drop_segment_graphs();
  for (cudaEvent_t e : dev_begin_) cudaEventDestroy(e);
  for (cudaEvent_t e : dev_end_) cudaEventDestroy(e);
}

}  // namespace mt::cuda::detail
