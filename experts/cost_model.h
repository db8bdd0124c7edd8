// Cost model: predicted decode time per token for each way of running the experts, from
// per-token traffic and a hardware profile. The planner feeds it traffic it expects (from
// a popularity profile or an assumed hit rate); `simulate` feeds it traffic it counted.
//
// Per token (all bytes per generated token):
//   cpu:    everything on the CPU: t = (dense + shared + all selected experts) / cpu_bw
//   stream: dense, shared and hit experts read on the GPU at device bandwidth; misses copied
//           host-to-device first (they are on the critical path): t = gpu_reads/dev_bw +
//           copied/h2d_bw + n_moe_layers * layer_sync
//   hybrid: GPU part (dense + shared + hit experts, at device bandwidth, plus async copies
//           for admissions, which share the link but not the compute) in parallel with
//           the CPU part (missed experts at cpu_bw): t = max(gpu, cpu, copies/h2d_bw) +
//           n_moe_layers * layer_sync (the ids to the host and the partial sums back).
//           With split_misses (the scheduler's split, the GPU's default) cpu_expert_bytes
//           are the misses before the split: the CPU and the link share them, so that term
//           becomes max(misses / (cpu_bw + h2d_bw), (misses + copies) / host_read_bw): the
//           two read host memory side by side, and together no faster than it reads.
// The bottleneck named is the term that sets t (the largest, in a sum). cpu_bw is the CPU
// expert decode figure of expert_type (hw.cpu_decode_gbps), dev_bw hw.device_gbps(), h2d_bw
// hw.h2d_gbps(copy_bytes, pinned). In stream mode the staged misses' device read (copied
// bytes at dev_bw, ~1% of their copy time) is not counted, as the formula says. Stream
// and hybrid without a GPU predict nothing: tokens_per_s = seconds_per_token = 0,
// bottleneck "no gpu".
#pragma once

#include <cstdint>
#include <string>

#include "experts/hw_profile.h"

namespace mt {

enum class MoeMode { kCpu, kStream, kHybrid };
const char* moe_mode_name(MoeMode m);  // "cpu", "stream", "hybrid"

struct DecodeTraffic {
  double dense_bytes = 0;        // attention, norms, router, output head row reads
  double shared_bytes = 0;       // shared experts
  double expert_bytes = 0;       // all selected routed experts (hits + misses)
  double hit_bytes = 0;          // of those, resident in the device cache
  double copied_bytes = 0;       // host-to-device copies (admissions, staging)
  double cpu_expert_bytes = 0;   // routed experts computed on the CPU (hybrid)
  uint32_t n_moe_layers = 0;
  QuantType expert_type = QuantType::Q4_K;  // the dominant expert type (CPU speed lookup)
  bool pinned = true;            // copies from pinned host memory
  double copy_bytes = 0;         // size of one copy (an expert), for the link's speed; 0: large
  bool split_misses = false;     // hybrid: cpu_expert_bytes shared with the link (above)
};

struct ModePrediction {
  MoeMode mode = MoeMode::kCpu;
  double tokens_per_s = 0;
  double seconds_per_token = 0;
  std::string bottleneck;        // "cpu memory bandwidth", "host-to-device copies", ...
};

// Per-layer fixed cost of a hybrid/stream step (launches, id download, combine).
constexpr double kLayerSyncSeconds = 20e-6;

ModePrediction predict_decode(MoeMode mode, const DecodeTraffic& t, const HwProfile& hw);

// Per expert choice for a miss in hybrid mode: true when copying the expert to the device
// and computing it there beats computing it on the CPU for n_tokens tokens.
bool device_beats_cpu(uint64_t expert_bytes, uint64_t n_tokens, uint64_t flops_per_token, QuantType type,
                      bool pinned, const HwProfile& hw);

}  // namespace mt
