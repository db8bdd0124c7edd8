// Batched decode graphs: the step of T sequences' one decode token each (2 <= T <=
// kMaxTokens, resident experts, attention layers only) captured once per T and span of
// positions and replayed, instead of ~550 launches per step from the host (an H100 spent
// ~1.6 ms of a batch-8 step of qwen3-30b-a3b between its kernels: docs/PERFORMANCE.md).
// What changes from step to step is read by the graph's first nodes from pinned memory
// the host fills before each replay: the T token ids and the (n_layer, T) KV table (each
// row's cache and positions seen, ops.h SeqKvRow). The attention split is sized for the
// span's end (every row's n_kv is at most that); the logits rows stay in the workspace and
// are copied to the host after each replay. A graph holds the workspace's addresses: all
// are dropped when it moves. On unless MOETIER_CUDA_BATCH_GRAPHS=0: an H100 ran `bench --batch 8`
// 1.11x faster with them (1069.9 vs 963.0 t/s, step 7.48 vs 8.29 ms; docs/PERFORMANCE.md).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>

#include "cuda/kernels/ops.h"

namespace mt::cuda {

class BatchGraphs {
 public:
  // The most sequences a batch graph takes: products up to 8 tokens are mmvq launches
  // only (no host-side routing sort, no cuBLAS), every one of them capturable.
  static constexpr uint32_t kMaxTokens = 8;

  explicit BatchGraphs(uint32_t n_layer);
  ~BatchGraphs();
  BatchGraphs(const BatchGraphs&) = delete;
  BatchGraphs& operator=(const BatchGraphs&) = delete;

  // Unless MOETIER_CUDA_BATCH_GRAPHS=0, read once; set_wanted overrides it for the process.
  static bool wanted();
  static void set_wanted(bool on);
  // Batch graph replays in this process (tests: that a batch took the graph).
  static uint64_t replays_total();
  bool ok() const { return ids_ != nullptr && kv_rows_ != nullptr && argmax_dev_ != nullptr; }  // buffers allocated
  int32_t* ids() { return ids_; }            // (kMaxTokens) the next replay's token ids
  SeqKvRow* kv_rows() { return kv_rows_; }  // (n_layer, T) at [l * T + t], for the next replay

  // Makes T's executable the capture of enqueue (the step's launches on `stream`, returning
  // the device buffer its logits rows end in) for span end `cap` over workspace generation
  // `gen`, unless it is that already.
  void ensure(uint32_t T, uint32_t cap, uint64_t gen, cudaStream_t stream, const std::function<const float*()>& enqueue);
  // Replays T's graph, copies its T logits rows (n_vocab each) to host_logits, waits.
  void replay(uint32_t T, float* host_logits, size_t n_vocab, cudaStream_t stream);
  // Replays T's graph and reduces each logits row to its argmax on the device (rows_argmax,
  // cuda/kernels/ops.h): only the T ids are copied, to host_ids; waits. An H100 copied a
  // verification's 5 rows of a 151,936-token vocabulary (3 MB) to pageable memory and
  // scanned them on the host, for ids alone.
  void replay_argmax(uint32_t T, int32_t* host_ids, size_t n_vocab, cudaStream_t stream);

 private:
  void free_buffers();
  struct Entry {
    cudaGraphExec_t exec = nullptr;
    uint32_t cap = 0;
    uint64_t gen = 0;
    const float* logits_dev = nullptr;
  };
  std::array<Entry, kMaxTokens + 1> entries_{};
  int32_t* ids_ = nullptr;
  SeqKvRow* kv_rows_ = nullptr;
  int32_t* argmax_dev_ = nullptr;     // (kMaxTokens) replay_argmax's picks on the device
  int32_t* argmax_pinned_ = nullptr;  // (kMaxTokens) and copied here
};

}  // namespace mt::cuda
