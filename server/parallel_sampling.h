// Sampling a step's decoding choices on several threads. Each choice's Sampler is its own
// (its candidates, its PRNG), so sampling them at once picks exactly the tokens one thread
// would; what a token then does (text, stop strings, events, the grammar) stays on the
// scheduler's thread in batch order. With a GPU forward pass the host's sampling is the
// step's serial tail: 32 sequences of a 151,936-token vocabulary cost ~2 ms of a ~20 ms
// step on an H100's host (docs/PERFORMANCE.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/parallel.h"
#include "runtime/sampling.h"

namespace mt {

class ParallelSampler {
 public:
  // threads <= 1: every pick on the calling thread.
  explicit ParallelSampler(uint32_t threads);
  bool threaded() const { return pool_ != nullptr; }

  struct Job {
    Sampler* sampler;
    std::span<const float> logits;  // one row
    int32_t* out;                   // the token sampled from it
  };
  // *job.out = job.sampler->sample(job.logits) for each job, spread over the threads.
  void sample(std::span<const Job> jobs);

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace mt
