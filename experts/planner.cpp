// The placement planner's arithmetic (planner.h); its JSON and text forms are in
// planner_report.cpp.
#include "experts/planner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/log.h"

namespace mt {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kMinReserve = 512 * kMiB;   // activations, workspace, allocator slack
constexpr uint64_t kReserveDivisor = 20;       // ... or 5% of the device, whichever is more
constexpr uint32_t kMinSuggestedCtx = 256;

uint64_t kv_per_token(const ModelSizes& m, KvType t) {
  return t == KvType::kF16 ? m.kv_bytes_per_token_f16 : m.kv_bytes_per_token_q8_0;
}

std::string ctx_text(uint32_t ctx, uint32_t batch) {
  return "ctx " + std::to_string(ctx) + (batch > 1 ? " x batch " + std::to_string(batch) : "");
}

// Why the device cannot hold dense weights + KV cache + shared experts + reserve, and what
// would fit instead.
std::string device_shortfall(const PlanInputs& in, uint64_t reserve, uint64_t kv) {
  const uint64_t rest = in.model.dense_bytes + in.model.shared_expert_bytes + reserve + uint64_t{in.batch} * in.model.state_bytes_per_seq;
  const uint64_t need = rest + kv - uint64_t{in.batch} * in.model.state_bytes_per_seq;  // kv counts the states too
  std::string why = "device memory: KV cache for " + ctx_text(in.ctx, in.batch) + " at " + kv_type_name(in.kv) +
                    " needs " + human_bytes(kv) + "; with dense weights " + human_bytes(in.model.dense_bytes) +
                    ", shared experts " + human_bytes(in.model.shared_expert_bytes) + " and the " +
                    human_bytes(reserve) + " reserve that is " + human_bytes(need) + " > " +
                    human_bytes(in.device_bytes);
  std::vector<std::string> fixes;
  const uint64_t q8 = static_cast<uint64_t>(in.ctx) * in.batch * in.model.kv_bytes_per_token_q8_0;
  if (in.kv == KvType::kF16 && rest + q8 <= in.device_bytes) fixes.push_back("--kv-type q8_0");
  const uint64_t per_ctx = static_cast<uint64_t>(in.batch) * kv_per_token(in.model, in.kv);
  if (rest < in.device_bytes && per_ctx > 0) {
    uint64_t ctx = kMinSuggestedCtx;
    if (rest + ctx * per_ctx <= in.device_bytes) {
      while (ctx * 2 < in.ctx && rest + ctx * 2 * per_ctx <= in.device_bytes) ctx *= 2;
      fixes.push_back("--ctx-size " + std::to_string(ctx));
    }
  }
  std::string alternatives;
  for (size_t i = 0; i < fixes.size(); ++i) alternatives += (i ? " or " : "") + fixes[i];
  if (!alternatives.empty()) why += "; " + alternatives + " fits, or it";
  else why += "; it";
  return why + " needs at least " + human_bytes(need) + " of device memory";
}

// Per-step traffic of every routed expert the batch selects, split by where it is.
struct ExpertTraffic {
  double selected = 0, hit = 0, miss_pinned = 0, miss_pageable = 0, experts = 0;
  QuantType dominant = QuantType::Q4_K;
  uint32_t unprofiled_layers = 0;  // MoE layers the popularity profile has no counts for
};

ExpertTraffic expert_traffic(const PlanInputs& in, const PoolPlan& pools, const PinChoice& pin) {
  const ExpertGeometry& g = in.geometry;
  std::map<uint32_t, uint32_t> slots;  // block index -> its cache slots
  for (const ExpertPool& p : pools.pools) {
    for (size_t i = 0; i < p.layers.size(); ++i) slots[p.layers[i]] = p.slots_per_layer[i];
  }
  const double n_expert = g.n_expert, k = in.model.n_expert_used;
  // Distinct experts a layer reads per step: top_k for one sequence; for a batch, the
  // expected size of the union of B uniform top-k draws.
  const double per_layer = in.batch == 1 ? k : n_expert * (1 - std::pow(1 - k / n_expert, in.batch));
  std::map<QuantType, double> by_type;
  ExpertTraffic t;
  for (const LayerExpertGeometry& l : g.layers) {
    const uint32_t s = slots.count(l.layer) ? slots[l.layer] : 0;
    const PopularityProfile* pop = in.popularity;
    const bool profiled = pop != nullptr && l.layer < pop->counts.size() && !pop->counts[l.layer].empty();
    if (pop != nullptr && !profiled) ++t.unprofiled_layers;
    const double hit = profiled ? pop->coverage(l.layer, s) : std::min(1.0, static_cast<double>(s) / n_expert);
    const double bytes = per_layer * static_cast<double>(l.bytes_per_expert());
    t.selected += bytes;
    t.experts += per_layer;
    t.hit += bytes * hit;
    const bool pinned = std::binary_search(pin.pinned.begin(), pin.pinned.end(), l.layer);
    (pinned ? t.miss_pinned : t.miss_pageable) += bytes * (1 - hit);
    for (const ProjGeometry& p : l.proj) {
      if (p.present) by_type[p.type] += per_layer * static_cast<double>(p.bytes_per_expert);
    }
  }
  double most = -1;
  for (const auto& [type, bytes] : by_type) {
    if (bytes > most) {
      most = bytes;
      t.dominant = type;
    }
  }
  return t;
}

// The profile as the planner uses it: a GPU's figures even if the profile has none (the
// assumed ones, said in a note), CPU expert speeds scaled to the threads actually used.
HwProfile effective_hw(const PlanInputs& in, uint32_t threads, std::vector<std::string>* notes) {
  HwProfile hw = in.hw;
  if (in.device_bytes > 0 && !hw.has_gpu) {
    const HwProfile assumed = default_hw_profile();
    hw.has_gpu = true;
    hw.gpu = assumed.gpu;
    notes->push_back("the hardware profile has no GPU figures: GPU modes use the assumed ones (" + hw.gpu.name + ")");
  }
  const double at_profile = hw.host_read_gbps(hw.threads), at_threads = hw.host_read_gbps(threads);
  if (threads < hw.threads && at_profile > 0 && at_threads > 0) {
    for (CpuExpertSpeed& s : hw.cpu_expert) s.decode_gbps *= at_threads / at_profile;
    notes->push_back("CPU expert speeds scaled from the profile's " + std::to_string(hw.threads) + " threads to " +
                     std::to_string(threads) + " by host read bandwidth");
  }
  return hw;
}

// The inputs make_plan refuses, each with why.
Status check_inputs(const PlanInputs& in) {
  const ExpertGeometry& g = in.geometry;
  if (g.layers.empty() || g.n_expert == 0) return invalid_argument("the model has no routed experts: nothing to plan");
  if (in.model.n_expert_used == 0 || in.model.n_expert_used > g.n_expert) {
    return invalid_argument("top-k " + std::to_string(in.model.n_expert_used) + " must be 1.." +
                            std::to_string(g.n_expert));
  }
  if (in.ctx == 0) return invalid_argument("context length must be positive");
  if (in.batch == 0) return invalid_argument("batch must be positive");
  if (in.host_bytes == 0) return invalid_argument("host memory must be positive");
  if (in.popularity != nullptr && in.popularity->n_expert != g.n_expert) {
    return invalid_argument("the popularity profile counts " + std::to_string(in.popularity->n_expert) +
                            " experts per layer, the model has " + std::to_string(g.n_expert));
  }
  return {};
}

// Whether the GPU holds the fixed items (dense weights, KV cache, shared experts, reserve)
// and the expert cache, and why not; p's device items and pools.
struct DevicePlan {
  bool gpu = false, fits = false;
  std::string why;
};

DevicePlan plan_device(const PlanInputs& in, Plan& p) {
  const ExpertGeometry& g = in.geometry;
  DevicePlan d;
  d.gpu = d.fits = in.device_bytes > 0;
  if (!d.gpu) d.why = "no GPU (device memory 0)";
  p.expert_cache_auto = !in.expert_cache_bytes.has_value();
  if (d.gpu) {
    p.reserve_bytes = std::max(kMinReserve, in.device_bytes / kReserveDivisor);
    const uint64_t fixed = in.model.dense_bytes + p.kv_bytes + in.model.shared_expert_bytes + p.reserve_bytes;
    const uint64_t left = fixed <= in.device_bytes ? in.device_bytes - fixed : 0;
    if (fixed > in.device_bytes) {
      d.fits = false;
      d.why = device_shortfall(in, p.reserve_bytes, p.kv_bytes);
    }
    p.expert_cache_bytes = in.expert_cache_bytes.value_or(left);
    if (d.fits && p.expert_cache_bytes > left) {
      d.fits = false;
      d.why = "device memory: an expert cache of " + human_bytes(p.expert_cache_bytes) + " does not fit; " +
              human_bytes(in.device_bytes) + " less dense weights, KV cache, shared experts and reserve leaves " +
              human_bytes(left) + " (--expert-cache auto takes it)";
    }
    p.pools = plan_pools(g, p.expert_cache_bytes);
    p.gpu.push_back({"dense weights", in.model.dense_bytes});
    p.gpu.push_back({"kv cache", p.kv_bytes});
    if (in.model.shared_expert_bytes > 0) p.gpu.push_back({"shared experts", in.model.shared_expert_bytes});
    for (size_t i = 0; i < p.pools.pools.size(); ++i) {
      if (p.pools.pools[i].slots > 0) p.gpu.push_back({"expert pool " + g.groups[i].types, p.pools.pools[i].bytes()});
    }
    p.gpu.push_back({"reserve", p.reserve_bytes});
    for (const GpuItem& item : p.gpu) p.gpu_bytes += item.bytes;
  } else {
    p.pools = plan_pools(g, 0);
    if (in.expert_cache_bytes.value_or(0) > 0) p.notes.push_back("no GPU: the expert cache size is ignored");
  }
  return d;
}

// What each mode may use, and why it cannot.
struct ModeFits {
  bool gpu, gpu_fits;
  const std::string& gpu_why;
  bool file_fits;
  const std::string& file_why;
};

// One mode's traffic, whether it fits and its predicted decode speed.
ModePlan plan_mode(MoeMode m, const PlanInputs& in, const Plan& p, const DecodeTraffic& base, const ExpertTraffic& et,
                   const HwProfile& hw, const ModeFits& f, double pageable_cost) {
  ModePlan mp;
  mp.mode = m;
  mp.traffic = base;
  if (m == MoeMode::kCpu) {
    mp.available = true;
    mp.traffic.cpu_expert_bytes = et.selected;
    const uint64_t need = in.model.file_bytes + p.kv_bytes;
    mp.fits = need <= in.host_bytes;
    if (!f.file_fits) {
      mp.why = f.file_why;
    } else if (!mp.fits) {
      mp.why = "host memory: the file and the KV cache need " + human_bytes(need) + " > " + human_bytes(in.host_bytes);
    }
  } else {
    mp.available = f.gpu;
    mp.fits = f.gpu_fits && f.file_fits;
    mp.why = !f.gpu_fits ? f.gpu_why : (!f.file_fits ? f.file_why : "");
    mp.traffic.hit_bytes = et.hit;
    if (m == MoeMode::kStream) mp.traffic.copied_bytes = et.miss_pinned + et.miss_pageable * pageable_cost;
    else mp.traffic.cpu_expert_bytes = et.miss_pinned + et.miss_pageable;
    mp.traffic.split_misses = m == MoeMode::kHybrid;  // the GPU's default (--split-misses auto)
  }
  if (mp.available) {
    mp.predicted = predict_decode(m, mp.traffic, hw);
    mp.predicted.tokens_per_s *= in.batch;  // a step decodes one token of each sequence
    mp.predicted.seconds_per_token /= in.batch;
  } else {
    mp.predicted.mode = m;
    mp.predicted.bottleneck = "no gpu";
  }
  return mp;
}

}  // namespace

const char* kv_type_name(KvType t) { return t == KvType::kF16 ? "f16" : "q8_0"; }

const char* requested_mode_name(RequestedMode m) {
  switch (m) {
    case RequestedMode::kAuto: return "auto";
    case RequestedMode::kCpu: return "cpu";
    case RequestedMode::kStream: return "stream";
    case RequestedMode::kHybrid: return "hybrid";
  }
  return "?";
}

StatusOr<Plan> make_plan(const PlanInputs& in) {
  MT_RETURN_IF_ERROR(check_inputs(in));
  const ExpertGeometry& g = in.geometry;

  Plan p;
  p.requested = in.mode;
  p.device_bytes = in.device_bytes;
  p.host_bytes = in.host_bytes;
  p.ctx = in.ctx;
  p.batch = in.batch;
  p.kv = in.kv;
  p.n_moe_layers = static_cast<uint32_t>(g.layers.size());
  p.n_expert = g.n_expert;
  p.top_k = in.model.n_expert_used;
  p.cpu_threads = in.cpu_threads > 0 ? in.cpu_threads : std::max<uint32_t>(1, in.hw.threads);
  p.hw_profile_source = in.hw.source;
  p.kv_bytes = static_cast<uint64_t>(in.ctx) * in.batch * kv_per_token(in.model, in.kv) + uint64_t{in.batch} * in.model.state_bytes_per_seq;
  const HwProfile hw = effective_hw(in, p.cpu_threads, &p.notes);

  const DevicePlan device = plan_device(in, p);
  const bool gpu = device.gpu;

  // Host memory: the mapped file, then pinned copies within the capped budget.
  const uint64_t asked = in.pin_budget.value_or(in.host_bytes / 2);
  const uint64_t cap = in.host_bytes > in.model.file_bytes ? in.host_bytes - in.model.file_bytes : 0;
  if (gpu) {
    p.pin_budget = std::min(asked, cap);
    p.pin_budget_rule = (in.pin_budget ? "asked " : "auto (50% of host memory) ") + human_bytes(asked) +
                        ", capped at host memory less the mapped file (" + human_bytes(in.host_bytes) + " - " +
                        human_bytes(in.model.file_bytes) + (cap > 0 ? " = " + human_bytes(cap) : ": nothing left") + ")";
  } else {
    p.pin_budget_rule = "no GPU: nothing to pin";
  }
  p.pin = choose_pinned_layers(g, p.pin_budget);
  const bool file_fits = in.model.file_bytes <= in.host_bytes;
  const std::string file_why = "host memory: the model file (" + human_bytes(in.model.file_bytes) +
                               ") is mapped whole, every expert lives on the host, but there is " +
                               human_bytes(in.host_bytes);

  // Predictions.
  const ExpertTraffic et = expert_traffic(in, p.pools, p.pin);
  p.hit_rate = et.selected > 0 ? et.hit / et.selected : 0;
  p.hit_rate_assumption =
      in.popularity != nullptr
          ? "popularity profile (" + std::to_string(in.popularity->tokens) + " tokens): per layer, the share of " +
                "selections falling on its slots-many most popular experts"
          : "uniform routing: per layer, slots / " + std::to_string(g.n_expert) + " experts";
  if (et.unprofiled_layers > 0) {
    p.notes.push_back(std::to_string(et.unprofiled_layers) + " MoE layers have no counts in the popularity profile: "
                      "uniform routing assumed for them");
  }
  DecodeTraffic base;
  base.dense_bytes = static_cast<double>(in.model.dense_bytes) +
                     static_cast<double>(in.model.token_embd_row_bytes) * in.batch;
  base.shared_bytes = static_cast<double>(in.model.shared_expert_bytes);
  base.expert_bytes = et.selected;
  base.n_moe_layers = p.n_moe_layers;
  base.expert_type = et.dominant;
  base.copy_bytes = et.experts > 0 ? et.selected / et.experts : 0;
  // Pageable misses cost pinned_gbps / pageable_gbps pinned bytes each.
  const double pinned_bw = hw.h2d_gbps(static_cast<uint64_t>(base.copy_bytes), true);
  const double pageable_bw = hw.h2d_gbps(static_cast<uint64_t>(base.copy_bytes), false);
  const double pageable_cost = pinned_bw > 0 && pageable_bw > 0 ? pinned_bw / pageable_bw : 1.0;

  const ModeFits fits{gpu, device.fits, device.why, file_fits, file_why};
  for (MoeMode m : {MoeMode::kCpu, MoeMode::kStream, MoeMode::kHybrid}) {
    p.modes.push_back(plan_mode(m, in, p, base, et, hw, fits, pageable_cost));
  }

  // The chosen mode.
  const ModePlan* chosen = nullptr;
  if (in.mode == RequestedMode::kAuto) {
    for (const ModePlan& mp : p.modes) {
      if (mp.fits && (chosen == nullptr || mp.predicted.tokens_per_s > chosen->predicted.tokens_per_s)) chosen = &mp;
    }
    if (chosen == nullptr) chosen = &p.modes[0];
  } else {
    chosen = &p.modes[static_cast<size_t>(in.mode) - 1];
  }
  p.mode = chosen->mode;
  p.fits = chosen->fits;
  p.why = chosen->why;
  if (in.mode == RequestedMode::kAuto && !p.fits && gpu && p.modes[1].why != p.why) {
    p.why = "no mode fits: cpu: " + p.why + "; stream and hybrid: " + p.modes[1].why;
  }
  if (chosen->mode == MoeMode::kCpu) p.host_needed_bytes = in.model.file_bytes + p.kv_bytes;
  else p.host_needed_bytes = in.model.file_bytes + p.pin.pinned_bytes;

  p.notes.push_back("device reserve for activations and workspace: max(512 MiB, 5% of device memory)");
  p.notes.push_back("predicted decode: weight bytes per step over the bandwidth of where they live; KV cache reads "
                    "not counted (short context); CPU speed of the dominant expert type " +
                    std::string(type_name(et.dominant)));
  if (in.batch > 1) {
    p.notes.push_back("batch " + std::to_string(in.batch) + ": per step each layer reads the union of the batch's "
                      "experts (uniform routing), tokens/s counts every sequence");
  }
  return p;
}

}  // namespace mt
