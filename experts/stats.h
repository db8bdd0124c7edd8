// Tiering counters as JSON, one schema for a real run (`run --stats-json`) and for a
// replay (`simulate --json`), so the two can be compared field by field:
//   {"mode", "policy", "budget_bytes", "steps", "tokens",
//    "layers": [{"layer", "hits", "misses", "admissions", "evictions", "bytes_copied",
//                "device_experts", "cpu_experts", "staged", "staged_bytes", "hit_rate",
//                "top_quarter_share"}],
//    "total": {the same sums, "hit_rate", "top_quarter_share", "cpu_experts_per_token",
//              "h2d_bytes_per_token"},
//    with a real run's timing also "timing": {"layers": [{"layer", "copy_ms", "device_ms",
//    "cpu_ms"}], "total": {the sums}}}; a replay has no timing (its counters are the same)
// hit_rate = hits / (hits + misses) (0 when there were no lookups); h2d bytes = admissions'
// bytes copied + staged bytes. top_quarter_share: the share of the selections (token,
// expert) that went to the most selected quarter of a layer's experts (0.25 for uniform
// routing over many steps; the skew a cache of a quarter of the experts could at best hit);
// the total weighs the layers by their selections.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "experts/scheduler.h"

namespace mt {

const char* cache_policy_name(CachePolicy p);  // "lru", "frequency", "static-hot", "lru2"

// Wall time one MoE layer spent, summed over steps: copying experts host-to-device
// (admissions and staging), computing the device's experts, computing the CPU's (the two
// computations overlap in time).
struct LayerTiming {
  double copy_s = 0, device_s = 0, cpu_s = 0;
};

struct StatsTotals {
  CacheCounters cache;
  SchedulerCounters sched;
  double hit_rate = 0, cpu_experts_per_token = 0, h2d_bytes_per_token = 0;
  double top_quarter_share = 0;
};

// Of a layer's selections (tokens per expert), the part taken by the `fraction` most
// selected experts (rounded up to whole experts): {top, all}.
struct TopShare {
  uint64_t top = 0, all = 0;
};
TopShare top_share(std::span<const uint64_t> selections, double fraction);
StatsTotals stats_totals(const ExpertScheduler& s);

// The host memory plus link roofline of tiered decode (issue 28): per token, the bytes of
// the experts the CPU computed and the bytes copied host-to-device, over the host read
// bandwidth (the profile's best) plus the pinned link bandwidth (at the mean expert's
// size): the speed if both streams ran at full rate, in parallel, with nothing else in the
// step (the device's own compute, attention and the dense weights, counts as free).
struct TierRoofline {
  double cpu_bytes_per_token = 0, h2d_bytes_per_token = 0;
  double host_gbps = 0, link_gbps = 0;
  bool host_measured = false, link_measured = false;  // else the assumed profile's
  double tokens_per_s = 0;  // 0 when nothing crossed (everything hit) or no bandwidth known
};
TierRoofline tier_roofline(const ExpertScheduler& s, const HwProfile& hw);
// "roofline (host 116.7 GB/s measured + link 49.1 GB/s measured): 379.8 MB/token (CPU
// experts 223.9 + copied 155.9) = 436.5 tok/s; 103.55 tok/s is 23.7%"
std::string tier_roofline_text(const TierRoofline& r, double achieved_tokens_per_s);
// The same as a JSON object: its fields and "fraction" (achieved / roofline, 0 without one).
std::string tier_roofline_json(const TierRoofline& r, double achieved_tokens_per_s);

// Pretty JSON (2-space indent).
// timing: per layer (indexed as the cache's layers), or null.
std::string stats_json(const ExpertScheduler& s, CachePolicy policy, uint64_t budget_bytes,
                       const std::vector<LayerTiming>* timing = nullptr);
// A short table for humans: overall line (and a time line) and one line per MoE layer.
std::string stats_text(const ExpertScheduler& s, CachePolicy policy, uint64_t budget_bytes,
                       const std::vector<LayerTiming>* timing = nullptr);

}  // namespace mt
