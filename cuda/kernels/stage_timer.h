// Where a forward step's device time goes, without a profiler: with MOETIER_CUDA_PROFILE=1
// the executor marks the start of each stage (an event on its stream); after the step's
// synchronisation the time between consecutive marks is added to the stage that began
// there; the totals print at exit (stderr), per token kind (prefill micro-batch tokens,
// decode tokens). Off (no events) otherwise. In a captured decode graph the marks are
// event-record nodes, read after every replay (a separate timer: 'graph' lines).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cuda/kernels/check.h"

namespace mt::cuda {

class StageTimer {
 public:
  explicit StageTimer(const char* title = "cuda stage times") : title_(title) {
    const char* env = std::getenv("MOETIER_CUDA_PROFILE");
    on_ = env != nullptr && std::string(env) == "1";
  }
  ~StageTimer() {
    if (on_ && !total_ms_.empty()) {
      std::fprintf(stderr, "%s (MOETIER_CUDA_PROFILE=1), %llu tokens in %llu steps:\n", title_,
                   static_cast<unsigned long long>(tokens_), static_cast<unsigned long long>(steps_));
      double all = 0;
      for (const auto& [name, ms] : total_ms_) all += ms;
      for (const auto& [name, ms] : total_ms_) {
        std::fprintf(stderr, "  %-14s %10.3f ms  %5.1f%%\n", name.c_str(), ms, 100.0 * ms / all);
      }
      std::fprintf(stderr, "  %-14s %10.3f ms\n", "total", all);
    }
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  bool on() const { return on_; }
  // The stage starting now on `stream`.
  void mark(const char* stage, cudaStream_t stream) {
    if (!on_) return;
    if (used_ == pool_.size()) {
      cudaEvent_t e = nullptr;
      MT_CUDA_CHECK(cudaEventCreate(&e));
      pool_.push_back(e);
    }
    // External: inside a stream capture this adds an event-record node (a plain record
    // would only order the graph's nodes and never record the event).
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    MT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (capturing == cudaStreamCaptureStatusActive) {
      MT_CUDA_CHECK(cudaEventRecordWithFlags(pool_[used_], stream, cudaEventRecordExternal));
    } else {
      MT_CUDA_CHECK(cudaEventRecord(pool_[used_], stream));
    }
    names_.push_back(stage);
    ++used_;
  }
  // After the stream was synchronised: attribute the marks of this step.
  void step_done(uint64_t tokens) {
    replayed(tokens);
    forget_marks();
  }
  // A captured graph's marks are event-record nodes: after each replay (synchronised)
  // the same events hold that replay's times; forget_marks() before a new capture.
  void replayed(uint64_t tokens) {
    if (!on_) return;
    for (size_t i = 0; i + 1 < used_; ++i) {
      float ms = 0;
      MT_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]));
      total_ms_[names_[i]] += ms;
    }
    tokens_ += tokens;
    ++steps_;
  }
  void forget_marks() {
    used_ = 0;
    names_.clear();
  }

 private:
  const char* title_;
  bool on_ = false;
  std::vector<cudaEvent_t> pool_;
  std::vector<std::string> names_;
  size_t used_ = 0;
  std::map<std::string, double> total_ms_;
  uint64_t tokens_ = 0, steps_ = 0;
};

}  // namespace mt::cuda
