// CudaSequence: a hybrid decode step as segment graphs (MOETIER_CUDA_HYBRID_GRAPHS=1; see
// sequence.h): the launches between one MoE layer's device products and the next MoE
// layer's routing copies captured once per span of positions and replayed; the products
// and the host's decisions between segments stay direct.
#include "core/check.h"
#include "cuda/check.h"
#include "cuda/sequence.h"

namespace mt::cuda::detail {

// Segment graphs of a hybrid decode step (see sequence.h).
void CudaSequence::segment_begin(Pass& p, int idx) {
  if (!p.hgraph) return;
  MT_CHECK(seg_capturing_ == kNoSegment && !p.replay);
  const auto at = static_cast<size_t>(idx + 1);
  cudaStream_t s = m_.stream;
  if (seg_exec_[at] != nullptr && seg_cap_[at] == p.st->graph_n_kv_cap) {
    MT_CUDA_CHECK(cudaGraphLaunch(seg_exec_[at], s));
    p.replay = true;
    return;
  }
  MT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  seg_capturing_ = idx;
}

void CudaSequence::segment_end(Pass& p) {
  if (!p.hgraph) return;
  if (p.replay) {
    p.replay = false;
    return;
  }
  MT_CHECK(seg_capturing_ != kNoSegment);
  const auto at = static_cast<size_t>(seg_capturing_ + 1);
  seg_capturing_ = kNoSegment;
  cudaStream_t s = m_.stream;
  cudaGraph_t graph = nullptr;
  MT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  bool updated = false;
  if (seg_exec_[at] != nullptr) {  // a new span of positions: the same nodes, new parameters
    cudaGraphExecUpdateResultInfo info{};
    updated = cudaGraphExecUpdate(seg_exec_[at], graph, &info) == cudaSuccess;
    if (!updated) {
      cudaGetLastError();
      MT_CUDA_CHECK(cudaGraphExecDestroy(seg_exec_[at]));
      seg_exec_[at] = nullptr;
    }
  }
  if (!updated) MT_CUDA_CHECK(cudaGraphInstantiate(&seg_exec_[at], graph, 0));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  seg_cap_[at] = p.st->graph_n_kv_cap;
  MT_CUDA_CHECK(cudaGraphLaunch(seg_exec_[at], s));
}

void CudaSequence::drop_segment_graphs() {
  for (cudaGraphExec_t& e : seg_exec_) {
    if (e != nullptr) cudaGraphExecDestroy(e);
    e = nullptr;
  }
}

// One hybrid decode token through the segment graphs (token id and position read on the
// device from step_dev_, as eval_token_graph's). False (nothing done) when they are off.
bool CudaSequence::eval_token_hybrid_graph(int32_t token, std::vector<float>* logits) {
  if (!hybrid_graphs_) return false;
  const uint32_t cap = graph_cap();
  ensure_workspace(1);
  Step step;
  step.T = 1;
  step.rows = 1;
  step.host_logits = pinned_logits_;
  step.graph_n_kv_cap = cap;
  pinned_step_[0] = static_cast<uint32_t>(token);
  pinned_step_[1] = pos_;
  enqueue(step);
  MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  collect_device_times();
  timer_.step_done(1);
  logits->assign(pinned_logits_, pinned_logits_ + m_.hp.n_vocab);
  return true;
}

}  // namespace mt::cuda::detail
