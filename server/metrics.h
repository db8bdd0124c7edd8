// The server's counters in the Prometheus text format (GET /metrics): HTTP requests by
// endpoint and status, tokens, time-to-first-token and per-token latency histograms as
// the clients see them, queue depth, running requests, KV cache use (tokens reserved and
// written, sequences, bytes), the batch size per step (sequences and tokens), and the expert
// tiering counters per geometry group (layers sharing one expert size). Invariant:
// counters only grow and histograms are cumulative, so scrapes can be diffed; observing
// never blocks (atomics), so the scheduler's thread can observe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/scheduler.h"

namespace mt::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double value);
  // # HELP, # TYPE, the _bucket{le=...} lines, _sum and _count.
  void write(std::string* out, std::string_view name, std::string_view help) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // (bounds + 1): per bucket, not cumulative
  std::atomic<uint64_t> sum_ns_{0};                  // observed values are seconds
};

// One geometry group of expert layers, as metric labels.
struct ExpertGroupLabel {
  std::string layers;  // "0-23" or "0-3,8-11"
  std::string types;   // "q4_K/q4_K/q6_K" (gate/up/down)
  std::vector<uint32_t> layer_ids;  // the layers (SchedulerMetrics::expert_layers indices)
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::vector<ExpertGroupLabel> expert_groups);

  void count_request(std::string_view endpoint, int status);
  void observe_time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_token_latency(double seconds) { token_latency_.observe(seconds); }

  std::string render(const SchedulerMetrics& scheduler) const;

 private:
  std::vector<ExpertGroupLabel> expert_groups_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  Histogram ttft_;
  Histogram token_latency_;
};

// "0-3,8-11" for layers {0,1,2,3,8,9,10,11} (ascending input).
std::string layer_ranges(const std::vector<uint32_t>& layers);

}  // namespace mt::server
