#include "experts/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace mt {

const char* moe_mode_name(MoeMode m) {
  switch (m) {
    case MoeMode::kCpu: return "cpu";
    case MoeMode::kStream: return "stream";
    case MoeMode::kHybrid: return "hybrid";
  }
  return "?";
}

namespace {

constexpr double kGB = 1e9;  // the profile's GB/s and GFLOP/s

// Seconds to move `bytes` at `gbps`; nothing to move takes no time, something at no
// bandwidth never finishes.
double seconds(double bytes, double gbps) {
  if (bytes <= 0) return 0;
  return gbps > 0 ? bytes / (gbps * kGB) : std::numeric_limits<double>::infinity();
}

struct Term {
  const char* name;
  double s;
};

// The largest term (the first of equals) is the bottleneck.
Term largest(std::initializer_list<Term> terms) {
  Term best = *terms.begin();
  for (const Term& t : terms) {
    if (t.s > best.s) best = t;
  }
  return best;
}

ModePrediction finish(MoeMode mode, double s, const char* bottleneck) {
  ModePrediction p;
  p.mode = mode;
  p.seconds_per_token = s;
  p.tokens_per_s = s > 0 && std::isfinite(s) ? 1 / s : 0;
  p.bottleneck = bottleneck;
  return p;
}

}  // namespace

ModePrediction predict_decode(MoeMode mode, const DecodeTraffic& t, const HwProfile& hw) {
  const double cpu_bw = hw.cpu_decode_gbps(t.expert_type);
  if (mode == MoeMode::kCpu) {
    return finish(mode, seconds(t.dense_bytes + t.shared_bytes + t.expert_bytes, cpu_bw), "cpu memory bandwidth");
  }
  if (!hw.has_gpu) {
    ModePrediction p;
    p.mode = mode;
    p.bottleneck = "no gpu";
    return p;
  }
  // copy_bytes 0: large copies, the last (fastest) point of the size curve.
  const uint64_t copy = t.copy_bytes > 0 ? static_cast<uint64_t>(t.copy_bytes) : std::numeric_limits<uint64_t>::max();
  const double gpu = seconds(t.dense_bytes + t.shared_bytes + t.hit_bytes, hw.device_gbps());
  const double copies = seconds(t.copied_bytes, hw.h2d_gbps(copy, t.pinned));
  const double sync = t.n_moe_layers * kLayerSyncSeconds;
  const Term gpu_term{"gpu memory bandwidth", gpu}, copy_term{"host-to-device copies", copies},
      sync_term{"per-layer synchronisation", sync};
  if (mode == MoeMode::kStream) {
    return finish(mode, gpu + copies + sync, largest({gpu_term, copy_term, sync_term}).name);
  }
  Term cpu_term{"cpu memory bandwidth", seconds(t.cpu_expert_bytes, cpu_bw)};
  if (t.split_misses && t.cpu_expert_bytes > 0) {
    const double shared = seconds(t.cpu_expert_bytes, cpu_bw + hw.h2d_gbps(copy, t.pinned));
    const double host = seconds(t.cpu_expert_bytes + t.copied_bytes, hw.host_read_gbps(hw.threads));
    cpu_term = host > shared ? Term{"host memory bandwidth", host} : Term{"cpu + host-to-device copies", shared};
  }
  const Term parallel = largest({gpu_term, cpu_term, copy_term});
  return finish(mode, parallel.s + sync, largest({parallel, sync_term}).name);
}

bool device_beats_cpu(uint64_t expert_bytes, uint64_t n_tokens, uint64_t flops_per_token, QuantType type, bool pinned,
                      const HwProfile& hw) {
  if (!hw.has_gpu) return false;
  const auto bytes = static_cast<double>(expert_bytes);
  const double flops = static_cast<double>(n_tokens) * static_cast<double>(flops_per_token);
  const double cpu = std::max(seconds(bytes, hw.cpu_decode_gbps(type)), seconds(flops, hw.cpu_prefill_gflops(type)));
  // The device reads the copied expert once at its memory bandwidth for all n_tokens
  // (its compute is not the limit at these sizes).
  const double device = seconds(bytes, hw.h2d_gbps(expert_bytes, pinned)) + seconds(bytes, hw.device_gbps());
  return device < cpu;
}

}  // namespace mt
