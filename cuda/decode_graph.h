// A sequence's decode graph: one decode step's launches captured once per span of
// positions and replayed at every position of the span. The token id and position are
// read on the device (step_dev, copied there from pinned_step by the graph's first node),
// the logits row written to pinned_logits and its argmax (rows_argmax, a few microseconds:
// greedy decoding then scans nothing on the host) to pinned_argmax, so a replay needs no
// new parameters; a new
// span (attention's split is sized for its last position) is captured again and the
// executable updated in place where CUDA allows. Off (MOETIER_CUDA_GRAPHS=0, a tiered
// model, or pinned memory refused): every decode step is launched plainly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "cuda/kernels/memory.h"
#include "cuda/kernels/stage_timer.h"

namespace mt::cuda {

// Captures enqueue's launches on `stream` into *exec: an existing executable is updated in
// place where CUDA allows (same topology), else destroyed and instantiated anew.
void capture_graph(cudaGraphExec_t* exec, cudaStream_t stream, const std::function<void()>& enqueue);
// Captures so far in this process (every caller of capture_graph): CudaBackend::setups.
uint64_t graph_captures_total();

class DecodeGraph {
 public:
  // want: graphs asked for; n_vocab: the logits row.
  DecodeGraph(bool want, uint32_t n_vocab);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  bool on() const { return on_; }
  // The executable dropped (the workspace it reads moved): the next step captures again.
  void drop(cudaStream_t stream);
  // Makes the executable the capture of enqueue() (the step's launches on `stream`) for
  // the span ending at cap, unless it is that already.
  void capture(uint32_t cap, cudaStream_t stream, const std::function<void()>& enqueue);
  // Replays it for `token` at `pos` and waits for it; the logits are in pinned_logits().
  void replay(int32_t token, uint32_t pos, cudaStream_t stream, StageTimer& outer);

  const uint32_t* pinned_step() const { return pinned_step_; }  // (2) token id, position
  const DeviceBuffer& step_dev() const { return step_dev_; }    // (2) the graph's copy
  const float* pinned_logits() const { return pinned_logits_; }  // (n_vocab)
  float* logits_out() { return pinned_logits_; }
  int32_t pinned_argmax() const { return *pinned_argmax_; }
  int32_t* argmax_out() { return pinned_argmax_; }
  StageTimer& timer() { return timer_; }  // stage times inside the graph (MOETIER_CUDA_PROFILE=1)

 private:
  bool on_ = false;
  uint32_t* pinned_step_ = nullptr;
  float* pinned_logits_ = nullptr;
  int32_t* pinned_argmax_ = nullptr;
  DeviceBuffer step_dev_;
  cudaGraphExec_t exec_ = nullptr;
  uint32_t cap_ = 0;  // the span end exec_ was captured for
  StageTimer timer_{"cuda stage times in the decode graph"};
};

}  // namespace mt::cuda
