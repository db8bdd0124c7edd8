// Routing replay on the device (experts/routing_replay.h): after a MoE layer's router
// top-k, the stream's ids for the layer-step's rows (and a trace's weights, where it has
// them) are written on the host into pinned rows of that block and copied over the step's
// selection (and weights) asynchronously on the model's stream: no stream sync, and the
// tiered hybrid step reads the replaced ids back as it reads the router's. Each block's
// rows have an event recorded after their copy; the next fill of those rows waits for it
// (in practice long done: every step ends with a sync). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt {
class RoutingReplay;
}

namespace mt::cuda {

class RoutingReplayStage {
 public:
  RoutingReplayStage() = default;
  ~RoutingReplayStage();
  RoutingReplayStage(const RoutingReplayStage&) = delete;
  RoutingReplayStage& operator=(const RoutingReplayStage&) = delete;

  // Rows [0, n_rows) of block (n_rows x replay.top_k() each): the replay's next entries into
  // the block's pinned rows, then copied to sel (device, (n_rows, K)) and, where the replay
  // has weights, to wts (device, (n_rows, K)), on stream s.
  void apply(RoutingReplay& replay, uint32_t block, uint32_t n_rows, int32_t* sel, float* wts, cudaStream_t s);

 private:
  struct Rows {
    int32_t* ids = nullptr;  // pinned (cap)
    float* wts = nullptr;    // pinned (cap)
    size_t cap = 0;          // entries (rows x K)
    cudaEvent_t copied = nullptr;
  };
  Rows& rows_of(uint32_t block, size_t n);

  std::vector<Rows> blocks_;  // [block]
};

}  // namespace mt::cuda
