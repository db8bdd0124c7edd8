// Granule trade curve over a routing trace (granule.h).
#include "experts/granule.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/log.h"
#include "experts/popularity.h"

namespace mt {
namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;
constexpr Packing kPackings[] = {Packing::kArbitrary, Packing::kHotness};

// One layer under one (E, packing): which chunk each expert is in and what each chunk costs.
struct LayerChunks {
  std::vector<uint32_t> chunk_of;     // [expert]
  std::vector<uint64_t> committed;    // [chunk] granule-rounded bytes
  std::vector<uint64_t> expert_bytes; // [chunk] m * expert bytes
};

LayerChunks chunk_layer(const std::vector<uint32_t>& order, uint32_t E, uint64_t bytes, uint64_t granule) {
  const auto n = static_cast<uint32_t>(order.size());
  LayerChunks c;
  c.chunk_of.resize(n);
  for (uint32_t slot = 0; slot < n; ++slot) c.chunk_of[order[slot]] = slot / E;
  for (uint32_t first = 0; first < n; first += E) {
    const uint64_t logical = static_cast<uint64_t>(std::min(E, n - first)) * bytes;
    c.committed.push_back((logical + granule - 1) / granule * granule);
    c.expert_bytes.push_back(logical);
  }
  return c;
}

}  // namespace

const char* packing_name(Packing p) { return p == Packing::kArbitrary ? "arbitrary" : "hotness-sorted"; }

std::vector<uint32_t> default_chunk_sizes(uint32_t n_expert, uint64_t granule_bytes,
                                          const std::vector<uint64_t>& expert_sizes) {
  std::vector<uint32_t> e;
  for (uint64_t v = 1; v <= n_expert; v *= 2) e.push_back(static_cast<uint32_t>(v));
  for (uint64_t b : expert_sizes) {
    if (b == 0) continue;
    const uint64_t fit = granule_bytes / b;
    if (fit >= 1 && fit <= n_expert) e.push_back(static_cast<uint32_t>(fit));
  }
  if (n_expert > 0) e.push_back(n_expert);
  std::sort(e.begin(), e.end());
  e.erase(std::unique(e.begin(), e.end()), e.end());
  return e;
}

StatusOr<GranuleCurve> granule_curve(const RoutingTrace& trace, const GranuleParams& params) {
  if (trace.events.empty()) return invalid_argument("the routing trace is empty");
  if (params.granule_bytes == 0) return invalid_argument("the granule size must be positive");
  const uint32_t n_expert = params.n_expert ? params.n_expert : trace.n_expert;
  if (trace.n_expert > n_expert) {
    return invalid_argument("the trace selects expert " + std::to_string(trace.n_expert - 1) + " but layers have " +
                            std::to_string(n_expert) + " experts");
  }
  // Expert bytes of each trace layer (indexed like trace.layers).
  std::vector<uint64_t> bytes;
  for (uint32_t l : trace.layers) {
    const std::vector<uint64_t>& by_layer = params.expert_bytes_by_layer;
    uint64_t b = params.expert_bytes;
    if (!by_layer.empty()) b = l < by_layer.size() ? by_layer[l] : 0;
    if (b == 0) return invalid_argument("no expert size for layer " + std::to_string(l) + " (not a MoE layer?)");
    if (b > (uint64_t{1} << 60) / std::max(n_expert, 1u)) return out_of_range("expert size too large");
    bytes.push_back(b);
  }
  std::vector<uint64_t> distinct = bytes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<uint32_t> sizes = params.experts_per_chunk;
  if (sizes.empty()) sizes = default_chunk_sizes(n_expert, params.granule_bytes, distinct);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (uint32_t E : sizes) {
    if (E == 0 || E > n_expert) {
      return invalid_argument("experts per chunk " + std::to_string(E) + " outside [1, " + std::to_string(n_expert) +
                              "]");
    }
  }

  // Packing orders per layer: id order, and the trace's own popularity.
  const PopularityProfile pop = popularity_from_trace(trace, 0, n_expert);
  const size_t n_layers = trace.layers.size();
  std::vector<int32_t> layer_index(trace.layers.back() + 1, -1);
  std::vector<std::vector<uint32_t>> order[2];
  for (size_t li = 0; li < n_layers; ++li) {
    layer_index[trace.layers[li]] = static_cast<int32_t>(li);
    std::vector<uint32_t> ids(n_expert);
    std::iota(ids.begin(), ids.end(), 0u);
    order[0].push_back(ids);
    order[1].push_back(pop.ranked(trace.layers[li]));
  }

  // The layer-steps: event indices grouped by (step, layer).
  std::vector<size_t> idx(trace.events.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const RoutingEvent &x = trace.events[a], &y = trace.events[b];
    return x.step != y.step ? x.step < y.step : x.layer < y.layer;
  });

  GranuleCurve c;
  c.granule_bytes = params.granule_bytes;
  c.expert_bytes = distinct.size() == 1 ? distinct[0] : 0;
  c.n_expert = n_expert;
  c.top_k = trace.top_k;
  c.n_layers = static_cast<uint32_t>(n_layers);
  c.n_steps = trace.n_steps;
  c.n_tokens = trace.n_tokens;

  uint64_t all_logical = 0;
  for (uint64_t b : bytes) all_logical += b * n_expert;
  std::vector<uint64_t> mark(n_expert, 0), chunk_mark(n_expert, 0);
  uint64_t generation = 0;
  for (uint32_t E : sizes) {
    for (Packing p : kPackings) {
      std::vector<LayerChunks> chunks;
      uint64_t all_committed = 0;
      for (size_t li = 0; li < n_layers; ++li) {
        chunks.push_back(chunk_layer(order[static_cast<int>(p)][li], E, bytes[li], params.granule_bytes));
        for (uint64_t b : chunks.back().committed) all_committed += b;
      }
      uint64_t resident = 0, transfer = 0, needed = 0, layer_steps = 0;
      for (size_t i = 0; i < idx.size();) {
        const RoutingEvent& head = trace.events[idx[i]];
        MT_CHECK_MSG(head.layer < layer_index.size() && layer_index[head.layer] >= 0, "event layer not in trace.layers");
        const auto li = static_cast<size_t>(layer_index[head.layer]);
        const LayerChunks& lc = chunks[li];
        ++generation;
        ++layer_steps;
        for (; i < idx.size(); ++i) {
          const RoutingEvent& ev = trace.events[idx[i]];
          if (ev.step != head.step || ev.layer != head.layer) break;
          for (int32_t e : ev.experts) {
            const auto ue = static_cast<size_t>(e);
            MT_CHECK_MSG(e >= 0 && ue < n_expert, "expert id beyond trace.n_expert");
            if (mark[ue] == generation) continue;
            mark[ue] = generation;
            needed += bytes[li];
            const uint32_t ch = lc.chunk_of[ue];
            if (chunk_mark[ch] == generation) continue;
            chunk_mark[ch] = generation;
            resident += lc.committed[ch];
            transfer += lc.expert_bytes[ch];
          }
        }
      }
      GranuleRow r;
      r.experts_per_chunk = E;
      r.packing = p;
      r.waste = static_cast<double>(all_committed) / static_cast<double>(all_logical);
      const double n = static_cast<double>(layer_steps);
      r.resident_mib = static_cast<double>(resident) / n / kBytesPerMiB;
      r.transfer_mib = static_cast<double>(transfer) / n / kBytesPerMiB;
      r.needed_mib = static_cast<double>(needed) / n / kBytesPerMiB;
      r.selectivity = static_cast<double>(needed) / static_cast<double>(transfer);
      r.overfetch = static_cast<double>(transfer) / static_cast<double>(needed);
      c.layer_steps = layer_steps;
      c.rows.push_back(r);
    }
  }
  for (size_t i = 1; i < c.rows.size(); ++i) {
    if (c.rows[i].resident_mib < c.rows[c.min_row].resident_mib) c.min_row = i;
  }
  return c;
}

std::string granule_curve_json(const GranuleCurve& c) {
  using json = nlohmann::ordered_json;  // keys in the order written
  json rows = json::array();
  for (const GranuleRow& r : c.rows) {
    rows.push_back({{"experts_per_chunk", r.experts_per_chunk}, {"packing", packing_name(r.packing)},
                    {"waste", r.waste}, {"resident_mib", r.resident_mib}, {"transfer_mib", r.transfer_mib},
                    {"needed_mib", r.needed_mib}, {"selectivity", r.selectivity}, {"overfetch", r.overfetch}});
  }
  json j = {{"granule_bytes", c.granule_bytes}, {"expert_bytes", c.expert_bytes}, {"n_expert", c.n_expert},
            {"top_k", c.top_k}, {"n_layers", c.n_layers}, {"n_steps", c.n_steps}, {"n_tokens", c.n_tokens},
            {"layer_steps", c.layer_steps}, {"rows", rows}};
  if (!c.rows.empty()) {
    const GranuleRow& m = c.rows[c.min_row];
    j["minimum"] = {{"row", c.min_row}, {"experts_per_chunk", m.experts_per_chunk},
                    {"packing", packing_name(m.packing)}, {"resident_mib", m.resident_mib}};
  }
  return j.dump(2) + "\n";
}

std::string granule_curve_table(const GranuleCurve& c) {
  std::string out;
  char line[256];
  const std::string expert = c.expert_bytes
                                 ? human_bytes(c.expert_bytes) + " (" + std::to_string(c.expert_bytes) + " B)"
                                 : std::string("size per layer");
  std::snprintf(line, sizeof line, "granule %s, expert %s, %u experts top-%u, %u layers, %llu steps (%llu tokens)\n",
                human_bytes(c.granule_bytes).c_str(), expert.c_str(), c.n_expert, c.top_k, c.n_layers,
                static_cast<unsigned long long>(c.n_steps), static_cast<unsigned long long>(c.n_tokens));
  out += line;
  out += "MiB per layer-step; selectivity = needed / transfer; sel% = transfer / needed (seed 003)\n";
  std::snprintf(line, sizeof line, "%5s  %-14s %7s %9s %9s %9s %11s %7s\n", "E", "packing", "waste", "resident",
                "transfer", "needed", "selectivity", "sel%");
  out += line;
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const GranuleRow& r = c.rows[i];
    std::snprintf(line, sizeof line, "%5u  %-14s %6.2fx %9.2f %9.2f %9.2f %11.3f %6.0f%%%s\n", r.experts_per_chunk,
                  packing_name(r.packing), r.waste, r.resident_mib, r.transfer_mib, r.needed_mib, r.selectivity,
                  100.0 * r.overfetch, i == c.min_row ? "  <- minimum" : "");
    out += line;
  }
  if (c.rows.empty()) return out;
  const GranuleRow& m = c.rows[c.min_row];
  std::snprintf(line, sizeof line, "minimum resident: E=%u %s, %.2f MiB per layer-step", m.experts_per_chunk,
                packing_name(m.packing), m.resident_mib);
  out += line;
  if (c.rows[0].experts_per_chunk == 1 && m.experts_per_chunk != 1) {
    std::snprintf(line, sizeof line, " (%+.0f%% vs one expert per chunk)",
                  100.0 * (m.resident_mib / c.rows[0].resident_mib - 1.0));
    out += line;
  }
  return out + "\n";
}

}  // namespace mt
