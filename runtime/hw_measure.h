// Hardware measurement: this machine's speeds as a HwProfile (experts/hw_profile.h), the
// numbers `moetier hwprofile` writes and the planner's cost model runs on.
//
// Host read bandwidth: a buffer several times the last-level cache (>= 512 MiB), first
// touched by all threads, summed by a ThreadPool of 1, 2, 4, ... threads (up to the
// thread count); GB/s = buffer bytes / wall time, median of the timed passes.
// CPU expert throughput per quant type: expert-shaped matrices (gate and up n_embd 2048 x
// n_ff 768, down 768 x 2048) of random valid blocks, laid out as the model lays them out
// (interleaved where the ISA has a kernel for it), several times the last-level cache in
// all, run through model/linear.h's matmul_jobs exactly as decode runs them: decode_gbps =
// weight bytes of one token through every expert / wall time; prefill_gflops = 2 x
// weights x 64 tokens / wall time on a few experts (compute-bound, so cache-resident).
// The GPU half is measured by whoever passes MeasureOptions::measure_gpu (the CUDA
// backend); without it has_gpu stays false.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "experts/hw_profile.h"

namespace mt {

inline constexpr int kMaxThreads = 1024;

struct MeasureOptions {
  int threads = 0;                  // expert figures and the largest read point; 0: hardware threads
  uint64_t read_bytes = 0;          // host read buffer; 0: max(512 MiB, 4 x last-level cache)
  uint64_t expert_bytes = 0;        // decode weights per type; 0: max(256 MiB, 4 x last-level cache)
  uint32_t prefill_experts = 4;     // experts a prefill pass runs (each 64 tokens)
  int reps = 5;                     // timed passes after one warm-up; the median is reported
  std::vector<QuantType> types = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_0,
                                  QuantType::IQ4_XS, QuantType::BF16, QuantType::F16};
  std::function<void(const std::string&)> note;          // told what is measured next; may be null
  std::function<StatusOr<GpuProfile>()> measure_gpu;     // the GPU half; null: no GPU
};

// Small buffers and two passes: seconds, for tests (the figures are not meaningful).
MeasureOptions quick_measure_options();

// The whole profile (source "measured", date in UTC, cpu from /proc/cpuinfo). Types the
// CPU kernel table has no kernel for are left out.
StatusOr<HwProfile> measure_hw_profile(const MeasureOptions& options);

// One type's expert figures with `pool`'s threads (options: expert_bytes, prefill_experts,
// reps); unimplemented when the CPU has no kernel for the type.
StatusOr<CpuExpertSpeed> measure_cpu_expert(QuantType type, const MeasureOptions& options, ThreadPool& pool);

// Bytes of the last-level cache from sysfs (0 when unknown).
uint64_t last_level_cache_bytes();

}  // namespace mt
