// The decode graph (cuda/decode_graph.h).
#include "cuda/decode_graph.h"

#include <atomic>

#include "core/log.h"
#include "cuda/kernels/check.h"

namespace mt::cuda {

DecodeGraph::DecodeGraph(bool want, uint32_t n_vocab) : on_(want) {
  if (on_ && (cudaHostAlloc(reinterpret_cast<void**>(&pinned_step_), 2 * sizeof(uint32_t), cudaHostAllocDefault) !=
                  cudaSuccess ||
              cudaHostAlloc(reinterpret_cast<void**>(&pinned_logits_), sizeof(float) * n_vocab, cudaHostAllocDefault) !=
                  cudaSuccess ||
              cudaHostAlloc(reinterpret_cast<void**>(&pinned_argmax_), sizeof(int32_t), cudaHostAllocDefault) !=
                  cudaSuccess)) {
    cudaGetLastError();
    log_warn("CUDA graphs off: cannot allocate their pinned buffers");
    on_ = false;
  }
  step_dev_ = DeviceBuffer(2 * sizeof(uint32_t));
}

DecodeGraph::~DecodeGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (pinned_step_ != nullptr) cudaFreeHost(pinned_step_);
  if (pinned_logits_ != nullptr) cudaFreeHost(pinned_logits_);
  if (pinned_argmax_ != nullptr) cudaFreeHost(pinned_argmax_);
}

void DecodeGraph::drop(cudaStream_t stream) {
  if (exec_ == nullptr) return;
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec_));
  exec_ = nullptr;
  cap_ = 0;
}

namespace {
std::atomic<uint64_t> g_captures{0};
}  // namespace

uint64_t graph_captures_total() { return g_captures.load(std::memory_order_relaxed); }

void capture_graph(cudaGraphExec_t* exec, cudaStream_t stream, const std::function<void()>& enqueue) {
  g_captures.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  cudaGraph_t graph = nullptr;
  MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  bool updated = false;
  if (*exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    updated = cudaGraphExecUpdate(*exec, graph, &info) == cudaSuccess;
    if (!updated) {
      cudaGetLastError();
      MT_CUDA_CHECK(cudaGraphExecDestroy(*exec));
      *exec = nullptr;
    }
  }
  if (!updated) MT_CUDA_CHECK(cudaGraphInstantiate(exec, graph, 0));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
}

void DecodeGraph::capture(uint32_t cap, cudaStream_t stream, const std::function<void()>& enqueue) {
  if (exec_ != nullptr && cap == cap_) return;
  timer_.forget_marks();
  capture_graph(&exec_, stream, enqueue);
  cap_ = cap;
}

void DecodeGraph::replay(int32_t token, uint32_t pos, cudaStream_t stream, StageTimer& outer) {
  pinned_step_[0] = static_cast<uint32_t>(token);
  pinned_step_[1] = pos;
  outer.mark("decode graph", stream);
  MT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  outer.mark("end", stream);
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  outer.step_done(1);
  timer_.replayed(1);
}

}  // namespace mt::cuda
