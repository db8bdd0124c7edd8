// ParallelSampler (server/parallel_sampling.h).
#include "server/parallel_sampling.h"

namespace mt {

ParallelSampler::ParallelSampler(uint32_t threads) {
  if (threads > 1) pool_ = std::make_unique<ThreadPool>(static_cast<int>(threads));
}

void ParallelSampler::sample(std::span<const Job> jobs) {
  auto pick = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Job& j = jobs[static_cast<size_t>(i)];
      *j.out = j.sampler->sample(j.logits);
    }
  };
  if (pool_ == nullptr || jobs.size() < 2) {
    pick(0, static_cast<int64_t>(jobs.size()));
    return;
  }
  pool_->parallel_for(static_cast<int64_t>(jobs.size()), pick, 1);
}

}  // namespace mt
