// Batched decode graphs (cuda/batch_graph.h).
#include "cuda/batch_graph.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/check.h"
#include "core/log.h"
#include "cuda/decode_graph.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/env_switch.h"

namespace mt::cuda {

namespace {
EnvSwitch g_wanted("MOETIER_CUDA_BATCH_GRAPHS", true);
std::atomic<uint64_t> g_replays{0};
}  // namespace

bool BatchGraphs::wanted() { return g_wanted.on(); }
void BatchGraphs::set_wanted(bool on) { g_wanted.set(on); }
uint64_t BatchGraphs::replays_total() { return g_replays.load(std::memory_order_relaxed); }

BatchGraphs::BatchGraphs(uint32_t n_layer) {
  if (cudaHostAlloc(reinterpret_cast<void**>(&ids_), kMaxTokens * sizeof(int32_t), cudaHostAllocDefault) != cudaSuccess ||
      cudaHostAlloc(reinterpret_cast<void**>(&kv_rows_), size_t{n_layer} * kMaxTokens * sizeof(SeqKvRow),
                    cudaHostAllocDefault) != cudaSuccess ||
      cudaHostAlloc(reinterpret_cast<void**>(&argmax_pinned_), kMaxTokens * sizeof(int32_t), cudaHostAllocDefault) !=
          cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&argmax_dev_), kMaxTokens * sizeof(int32_t)) != cudaSuccess) {
    cudaGetLastError();
    log_warn("batched decode graphs off: cannot allocate their buffers");
    free_buffers();
  }
}

void BatchGraphs::free_buffers() {
  if (ids_ != nullptr) cudaFreeHost(ids_);
  if (kv_rows_ != nullptr) cudaFreeHost(kv_rows_);
  if (argmax_pinned_ != nullptr) cudaFreeHost(argmax_pinned_);
  if (argmax_dev_ != nullptr) cudaFree(argmax_dev_);
  ids_ = nullptr, kv_rows_ = nullptr, argmax_pinned_ = nullptr, argmax_dev_ = nullptr;
}

BatchGraphs::~BatchGraphs() {
  for (Entry& e : entries_) {
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
  free_buffers();
}

void BatchGraphs::ensure(uint32_t T, uint32_t cap, uint64_t gen, cudaStream_t stream,
                         const std::function<const float*()>& enqueue) {
  MT_CHECK(ok() && T >= 1 && T <= kMaxTokens);
  Entry& e = entries_[T];
  if (e.exec != nullptr && e.cap == cap && e.gen == gen) return;
  const float* logits_dev = nullptr;
  capture_graph(&e.exec, stream, [&] { logits_dev = enqueue(); });
  MT_CHECK_MSG(logits_dev != nullptr, "a batch graph's step named no logits buffer");
  e.cap = cap, e.gen = gen, e.logits_dev = logits_dev;
}

void BatchGraphs::replay(uint32_t T, float* host_logits, size_t n_vocab, cudaStream_t stream) {
  const Entry& e = entries_[T];
  MT_CHECK(e.exec != nullptr);
  MT_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
  MT_CUDA_CHECK(cudaMemcpyAsync(host_logits, e.logits_dev, T * n_vocab * sizeof(float), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  g_replays.fetch_add(1, std::memory_order_relaxed);
}

void BatchGraphs::replay_argmax(uint32_t T, int32_t* host_ids, size_t n_vocab, cudaStream_t stream) {
  const Entry& e = entries_[T];
  MT_CHECK(e.exec != nullptr && n_vocab <= static_cast<size_t>(INT32_MAX));
  MT_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
  rows_argmax(e.logits_dev, static_cast<int>(T), static_cast<int>(n_vocab), argmax_dev_, stream);
  MT_CUDA_CHECK(cudaMemcpyAsync(argmax_pinned_, argmax_dev_, T * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::copy(argmax_pinned_, argmax_pinned_ + T, host_ids);
  g_replays.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace mt::cuda
