// A Plan as JSON (the keys are a stable interface, docs/CLI.md) and as text.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "core/log.h"
#include "experts/planner.h"

namespace mt {
namespace {

using nlohmann::json;

// "0-4,7,9-12"
std::string layer_ranges(const std::vector<uint32_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

json pools_json(const Plan& p) {
  json pools = json::array();
  for (const ExpertPool& pool : p.pools.pools) {
    pools.push_back({{"expert_bytes", pool.expert_bytes}, {"layers", pool.layers}, {"slots", pool.slots},
                     {"slots_per_layer", pool.slots_per_layer}, {"bytes", pool.bytes()}});
  }
  return pools;
}

json tps(const ModePlan& m) { return m.available ? json(m.predicted.tokens_per_s) : json(nullptr); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(const std::string& s, size_t width) {
  return s + std::string(s.size() < width ? width - s.size() : 1, ' ');
}

}  // namespace

std::string plan_to_json(const Plan& p) {
  json gpu = json::array();
  for (const GpuItem& item : p.gpu) gpu.push_back({{"item", item.name}, {"bytes", item.bytes}});
  json predicted = json::object(), bottleneck = json::object(), modes = json::object();
  for (const ModePlan& m : p.modes) {
    const char* name = moe_mode_name(m.mode);
    predicted[name] = tps(m);
    bottleneck[name] = m.predicted.bottleneck;
    const DecodeTraffic& t = m.traffic;
    modes[name] = {{"available", m.available}, {"fits", m.fits}, {"why", m.why}, {"tokens_per_s", tps(m)},
                   {"bottleneck", m.predicted.bottleneck},
                   {"traffic_per_step", {{"dense_bytes", t.dense_bytes}, {"shared_bytes", t.shared_bytes},
                                         {"expert_bytes", t.expert_bytes}, {"hit_bytes", t.hit_bytes},
                                         {"copied_bytes", t.copied_bytes}, {"cpu_expert_bytes", t.cpu_expert_bytes},
                                         {"expert_type", type_name(t.expert_type)}}}};
  }
  const json j = {
      {"fits", p.fits},
      {"why", p.why},
      {"mode", moe_mode_name(p.mode)},
      {"requested_mode", requested_mode_name(p.requested)},
      {"predicted", predicted},
      {"bottleneck", bottleneck},
      {"modes", modes},
      {"n_moe_layers", p.n_moe_layers},
      {"n_expert", p.n_expert},
      {"top_k", p.top_k},
      {"ctx", p.ctx},
      {"batch", p.batch},
      {"kv_type", kv_type_name(p.kv)},
      {"kv_bytes", p.kv_bytes},
      {"device_bytes", p.device_bytes},
      {"gpu", gpu},
      {"gpu_bytes", p.gpu_bytes},
      {"reserve_bytes", p.reserve_bytes},
      {"expert_cache_bytes", p.expert_cache_bytes},
      {"expert_cache_auto", p.expert_cache_auto},
      {"expert_cache_used_bytes", p.pools.used_bytes()},
      {"pools", pools_json(p)},
      {"host_bytes", p.host_bytes},
      {"host_needed_bytes", p.host_needed_bytes},
      {"pin_budget", p.pin_budget},
      {"pin_budget_rule", p.pin_budget_rule},
      {"pinned_layers", p.pin.pinned},
      {"pageable_layers", p.pin.pageable},
      {"pinned_bytes", p.pin.pinned_bytes},
      {"padded_sizing", {{"layer_bytes", p.pin.padded_layer_bytes}, {"pinned_layers", p.pin.padded_pinned_layers},
                         {"pinned_bytes", p.pin.padded_pinned_bytes}}},
      {"cpu_threads", p.cpu_threads},
      {"hit_rate", p.hit_rate},
      {"hit_rate_assumption", p.hit_rate_assumption},
      {"hw_profile_source", p.hw_profile_source},
      {"notes", p.notes}};
  return j.dump(2);
}

std::string plan_to_text(const Plan& p) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  line("plan: " + std::to_string(p.n_moe_layers) + " MoE layers x " + std::to_string(p.n_expert) + " experts (top-" +
       std::to_string(p.top_k) + "), ctx " + std::to_string(p.ctx) + ", kv " + kv_type_name(p.kv) + ", batch " +
       std::to_string(p.batch));
  line(std::string("mode: ") + moe_mode_name(p.mode) +
       (p.requested != RequestedMode::kAuto ? " (requested)" : p.fits ? " (auto: the fastest that fits)" : " (auto)") +
       (p.fits ? ", fits" : ", DOES NOT FIT"));
  if (!p.fits) line("  why: " + p.why);

  if (p.device_bytes == 0) {
    line("\ndevice memory: none (no GPU)");
  } else {
    line("\ndevice memory " + human_bytes(p.device_bytes) + " (stream and hybrid):");
    for (const GpuItem& item : p.gpu) line("  " + pad(item.name, 36) + human_bytes(item.bytes));
    line("  " + pad("total", 36) + human_bytes(p.gpu_bytes) + (p.gpu_bytes <= p.device_bytes ? "" : "  (over)"));
    line("expert cache: " + human_bytes(p.expert_cache_bytes) + (p.expert_cache_auto ? " (auto: what is left)" : "") +
         ", " + human_bytes(p.pools.used_bytes()) + " in slots:");
    for (const ExpertPool& pool : p.pools.pools) {
      const auto [lo, hi] = std::minmax_element(pool.slots_per_layer.begin(), pool.slots_per_layer.end());
      const std::string per = *lo == *hi ? std::to_string(*lo) : std::to_string(*lo) + "-" + std::to_string(*hi);
      line("  " + std::to_string(pool.slots) + " slots x " + human_bytes(pool.expert_bytes) + " = " +
           human_bytes(pool.bytes()) + " for " + std::to_string(pool.layers.size()) + " layers (" + per +
           " per layer): " + layer_ranges(pool.layers));
    }
  }
  line("expected hit rate " + fmt("%.1f%%", 100 * p.hit_rate) + " (" + p.hit_rate_assumption + ")");

  line("\nhost memory " + human_bytes(p.host_bytes) + ": needs " + human_bytes(p.host_needed_bytes) +
       " for the chosen mode (mapped file" + (p.mode == MoeMode::kCpu ? " + KV cache)" : " + pinned copies)"));
  line("  pin budget " + human_bytes(p.pin_budget) + ": " + p.pin_budget_rule);
  line("  pinned   " + std::to_string(p.pin.pinned.size()) + " layers, " + human_bytes(p.pin.pinned_bytes) + ": " +
       layer_ranges(p.pin.pinned));
  line("  pageable " + std::to_string(p.pin.pageable.size()) + " layers: " + layer_ranges(p.pin.pageable));
  if (p.pin.padded_layer_bytes > 0 && p.pin_budget > 0) {
    line("  (padded sizing, " + human_bytes(p.pin.padded_layer_bytes) + " per layer, would pin " +
         std::to_string(p.pin.padded_pinned_layers) + " layers)");
  }
  line("cpu threads: " + std::to_string(p.cpu_threads));

  line("\npredicted decode (hardware profile: " + p.hw_profile_source + "):");
  for (const ModePlan& m : p.modes) {
    std::string s = "  " + pad(moe_mode_name(m.mode), 8);
    if (!m.available) s += "  n/a (no GPU)";
    else s += fmt("%8.2f tok/s", m.predicted.tokens_per_s) + "  bottleneck: " + m.predicted.bottleneck;
    if (m.available && !m.fits) s += "  (does not fit)";
    if (m.mode == p.mode) s += "  <- chosen";
    line(s);
  }
  for (const ModePlan& m : p.modes) {
    if (m.available && !m.fits && m.why != p.why) line(std::string("  ") + moe_mode_name(m.mode) + ": " + m.why);
  }
  line("\nnotes:");
  for (const std::string& n : p.notes) line("  " + n);
  return o;
}

}  // namespace mt
