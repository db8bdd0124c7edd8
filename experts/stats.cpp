#include "experts/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/log.h"

namespace mt {
namespace {

bool has_experts(const ExpertScheduler& s, uint32_t layer) { return s.expert_bytes(layer) > 0; }

double ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

}  // namespace

const char* cache_policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::kLru: return "lru";
    case CachePolicy::kFrequency: return "frequency";
    case CachePolicy::kStaticHot: return "static-hot";
    case CachePolicy::kLru2: return "lru2";
  }
  return "?";
}

TopShare top_share(std::span<const uint64_t> selections, double fraction) {
  std::vector<uint64_t> sorted(selections.begin(), selections.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const size_t k = std::min(sorted.size(), static_cast<size_t>(std::ceil(fraction * static_cast<double>(sorted.size()))));
  TopShare r;
  for (size_t i = 0; i < sorted.size(); ++i) {
    r.all += sorted[i];
    if (i < k) r.top += sorted[i];
  }
  return r;
}

StatsTotals stats_totals(const ExpertScheduler& s) {
  StatsTotals t;
  TopShare quarter;
  const uint32_t n = static_cast<uint32_t>(s.cache().n_layers());
  for (uint32_t l = 0; l < n; ++l) {
    if (!has_experts(s, l)) continue;
    const CacheCounters& c = s.cache().counters(l);
    const SchedulerCounters& k = s.counters(l);
    t.cache.hits += c.hits;
    t.cache.misses += c.misses;
    t.cache.admissions += c.admissions;
    t.cache.evictions += c.evictions;
    t.cache.bytes_copied += c.bytes_copied;
    t.sched.device_experts += k.device_experts;
    t.sched.cpu_experts += k.cpu_experts;
    t.sched.staged += k.staged;
    t.sched.staged_bytes += k.staged_bytes;
    const TopShare q = top_share(s.selections(l), 0.25);
    quarter.top += q.top;
    quarter.all += q.all;
  }
  t.hit_rate = ratio(t.cache.hits, t.cache.hits + t.cache.misses);
  t.top_quarter_share = ratio(quarter.top, quarter.all);
  t.cpu_experts_per_token = ratio(t.sched.cpu_experts, s.tokens());
  t.h2d_bytes_per_token = ratio(t.cache.bytes_copied + t.sched.staged_bytes, s.tokens());
  return t;
}

TierRoofline tier_roofline(const ExpertScheduler& s, const HwProfile& hw) {
  TierRoofline r;
  if (s.tokens() == 0) return r;
  const uint32_t n = static_cast<uint32_t>(s.cache().n_layers());
  double cpu_bytes = 0, expert_bytes = 0;
  uint32_t moe_layers = 0;
  for (uint32_t l = 0; l < n; ++l) {
    if (!has_experts(s, l)) continue;
    cpu_bytes += static_cast<double>(s.counters(l).cpu_experts) * static_cast<double>(s.expert_bytes(l));
    expert_bytes += static_cast<double>(s.expert_bytes(l));
    ++moe_layers;
  }
  const StatsTotals t = stats_totals(s);
  r.cpu_bytes_per_token = cpu_bytes / static_cast<double>(s.tokens());
  r.h2d_bytes_per_token = t.h2d_bytes_per_token;
  r.host_gbps = hw.host_read_gbps(~0u);
  const uint64_t mean_expert = moe_layers == 0 ? 0 : static_cast<uint64_t>(expert_bytes / moe_layers);
  r.link_gbps = hw.h2d_gbps(mean_expert, true);
  r.host_measured = hw.source == "measured";
  r.link_measured = hw.has_gpu && hw.gpu.name.rfind("assumed", 0) != 0;  // a GPU measured here or in the profile
  const double bytes = r.cpu_bytes_per_token + r.h2d_bytes_per_token;
  const double gbps = r.host_gbps + r.link_gbps;
  if (bytes > 0 && gbps > 0) r.tokens_per_s = 1e9 * gbps / bytes;
  return r;
}

std::string tier_roofline_text(const TierRoofline& r, double achieved_tokens_per_s) {
  auto how = [](bool measured) { return measured ? "measured" : "assumed"; };
  char line[320];
  const double mb = 1e-6;
  if (r.tokens_per_s <= 0) {
    std::snprintf(line, sizeof line, "roofline: none (%.1f MB/token crossed, host %.1f + link %.1f GB/s)",
                  mb * (r.cpu_bytes_per_token + r.h2d_bytes_per_token), r.host_gbps, r.link_gbps);
    return line;
  }
  std::snprintf(line, sizeof line,
                "roofline (host %.1f GB/s %s + link %.1f GB/s %s): %.1f MB/token (CPU experts %.1f + copied %.1f) = "
                "%.1f tok/s; %.2f tok/s is %.1f%%",
                r.host_gbps, how(r.host_measured), r.link_gbps, how(r.link_measured),
                mb * (r.cpu_bytes_per_token + r.h2d_bytes_per_token),
                mb * r.cpu_bytes_per_token, mb * r.h2d_bytes_per_token, r.tokens_per_s, achieved_tokens_per_s,
                100.0 * achieved_tokens_per_s / r.tokens_per_s);
  return line;
}

std::string tier_roofline_json(const TierRoofline& r, double achieved_tokens_per_s) {
  return nlohmann::ordered_json{{"cpu_bytes_per_token", r.cpu_bytes_per_token},
                                {"h2d_bytes_per_token", r.h2d_bytes_per_token},
                                {"host_gbps", r.host_gbps},
                                {"host_measured", r.host_measured},
                                {"link_gbps", r.link_gbps},
                                {"link_measured", r.link_measured},
                                {"tokens_per_s", r.tokens_per_s},
                                {"fraction", r.tokens_per_s > 0 ? achieved_tokens_per_s / r.tokens_per_s : 0.0}}
      .dump();
}

std::string stats_json(const ExpertScheduler& s, CachePolicy policy, uint64_t budget_bytes,
                       const std::vector<LayerTiming>* timing) {
  auto counters = [](const CacheCounters& c, const SchedulerCounters& k) {
    return nlohmann::ordered_json{{"hits", c.hits},
                                  {"misses", c.misses},
                                  {"admissions", c.admissions},
                                  {"evictions", c.evictions},
                                  {"bytes_copied", c.bytes_copied},
                                  {"device_experts", k.device_experts},
                                  {"cpu_experts", k.cpu_experts},
                                  {"staged", k.staged},
                                  {"staged_bytes", k.staged_bytes},
                                  {"hit_rate", ratio(c.hits, c.hits + c.misses)}};
  };
  nlohmann::ordered_json j{{"mode", moe_mode_name(s.options().mode)},
                           {"policy", cache_policy_name(policy)},
                           {"budget_bytes", budget_bytes},
                           {"steps", s.steps()},
                           {"tokens", s.tokens()}};
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  const uint32_t n = static_cast<uint32_t>(s.cache().n_layers());
  for (uint32_t l = 0; l < n; ++l) {
    if (!has_experts(s, l)) continue;
    nlohmann::ordered_json e{{"layer", l}};
    e.update(counters(s.cache().counters(l), s.counters(l)));
    const TopShare q = top_share(s.selections(l), 0.25);
    e["top_quarter_share"] = ratio(q.top, q.all);
    layers.push_back(e);
  }
  j["layers"] = layers;
  const StatsTotals t = stats_totals(s);
  nlohmann::ordered_json total = counters(t.cache, t.sched);
  total["top_quarter_share"] = t.top_quarter_share;
  total["cpu_experts_per_token"] = t.cpu_experts_per_token;
  total["h2d_bytes_per_token"] = t.h2d_bytes_per_token;
  j["total"] = total;
  if (timing != nullptr) {
    nlohmann::ordered_json tl = nlohmann::ordered_json::array();
    LayerTiming sum;
    for (uint32_t l = 0; l < n && l < timing->size(); ++l) {
      if (!has_experts(s, l)) continue;
      const LayerTiming& x = (*timing)[l];
      tl.push_back({{"layer", l}, {"copy_ms", 1e3 * x.copy_s}, {"device_ms", 1e3 * x.device_s}, {"cpu_ms", 1e3 * x.cpu_s}});
      sum.copy_s += x.copy_s, sum.device_s += x.device_s, sum.cpu_s += x.cpu_s;
    }
    j["timing"] = {{"layers", tl},
                   {"total", {{"copy_ms", 1e3 * sum.copy_s}, {"device_ms", 1e3 * sum.device_s}, {"cpu_ms", 1e3 * sum.cpu_s}}}};
  }
  return j.dump(2);
}

std::string stats_text(const ExpertScheduler& s, CachePolicy policy, uint64_t budget_bytes,
                       const std::vector<LayerTiming>* timing) {
  const StatsTotals t = stats_totals(s);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "experts (%s, %s, cache %s): hit rate %.1f%%, %.2f CPU experts/token, %s host-to-device/token, "
                "%llu admissions, %llu evictions\n",
                moe_mode_name(s.options().mode), cache_policy_name(policy), human_bytes(budget_bytes).c_str(),
                100.0 * t.hit_rate, t.cpu_experts_per_token,
                human_bytes(static_cast<uint64_t>(t.h2d_bytes_per_token)).c_str(),
                static_cast<unsigned long long>(t.cache.admissions), static_cast<unsigned long long>(t.cache.evictions));
  out += line;
  std::snprintf(line, sizeof line, "routing: the most selected quarter of each layer's experts took %.1f%% of the selections\n",
                100.0 * t.top_quarter_share);
  out += line;
  const uint32_t n = static_cast<uint32_t>(s.cache().n_layers());
  if (timing != nullptr) {
    LayerTiming sum;
    for (const LayerTiming& x : *timing) sum.copy_s += x.copy_s, sum.device_s += x.device_s, sum.cpu_s += x.cpu_s;
    std::snprintf(line, sizeof line, "experts time: copy %.2f ms, device compute %.2f ms, cpu compute %.2f ms\n",
                  1e3 * sum.copy_s, 1e3 * sum.device_s, 1e3 * sum.cpu_s);
    out += line;
  }
  for (uint32_t l = 0; l < n; ++l) {
    if (!has_experts(s, l)) continue;
    const CacheCounters& c = s.cache().counters(l);
    const SchedulerCounters& k = s.counters(l);
    const TopShare q = top_share(s.selections(l), 0.25);
    std::snprintf(line, sizeof line,
                  "  layer %3u: %3u slots, hits %llu, misses %llu (%.1f%% hit), cpu %llu, copied %s, top quarter %.1f%%\n", l,
                  s.cache().slots(l).count, static_cast<unsigned long long>(c.hits),
                  static_cast<unsigned long long>(c.misses), 100.0 * ratio(c.hits, c.hits + c.misses),
                  static_cast<unsigned long long>(k.cpu_experts),
                  human_bytes(c.bytes_copied + k.staged_bytes).c_str(), 100.0 * ratio(q.top, q.all));
    out += line;
  }
  return out;
}

}  // namespace mt
