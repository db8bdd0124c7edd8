// Routing replay's device side: pinned rows per MoE block, copied over the router's
// selection on the stream (routing_replay_stage.h).
#include "cuda/routing_replay_stage.h"

#include "cuda/kernels/check.h"
#include "experts/routing_replay.h"

namespace mt::cuda {

RoutingReplayStage::~RoutingReplayStage() {
  for (Rows& r : blocks_) {
    if (r.copied != nullptr) cudaEventSynchronize(r.copied);
    if (r.ids != nullptr) cudaFreeHost(r.ids);
    if (r.wts != nullptr) cudaFreeHost(r.wts);
    if (r.copied != nullptr) cudaEventDestroy(r.copied);
  }
}

// The block's rows with room for n entries, their last copy finished (so they may be
// written); grown (reallocated) when smaller.
RoutingReplayStage::Rows& RoutingReplayStage::rows_of(uint32_t block, size_t n) {
  if (blocks_.size() <= block) blocks_.resize(block + 1);
  Rows& r = blocks_[block];
  if (r.copied == nullptr) MT_CUDA_CHECK(cudaEventCreateWithFlags(&r.copied, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventSynchronize(r.copied));  // a never-recorded event is complete
  if (r.cap < n) {
    if (r.ids != nullptr) MT_CUDA_CHECK(cudaFreeHost(r.ids));
    if (r.wts != nullptr) MT_CUDA_CHECK(cudaFreeHost(r.wts));
    MT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&r.ids), n * sizeof(int32_t)));
    MT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&r.wts), n * sizeof(float)));
    r.cap = n;
  }
  return r;
}

void RoutingReplayStage::apply(RoutingReplay& replay, uint32_t block, uint32_t n_rows, int32_t* sel, float* wts,
                               cudaStream_t s) {
  const size_t n = static_cast<size_t>(n_rows) * replay.top_k();
  Rows& r = rows_of(block, n);
  replay.replace(block, n_rows, r.ids, r.wts);
  MT_CUDA_CHECK(cudaMemcpyAsync(sel, r.ids, n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  if (replay.has_weights()) MT_CUDA_CHECK(cudaMemcpyAsync(wts, r.wts, n * sizeof(float), cudaMemcpyHostToDevice, s));
  MT_CUDA_CHECK(cudaEventRecord(r.copied, s));
}

}  // namespace mt::cuda
