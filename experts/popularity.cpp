// Popularity profiles: counting, ranking and the JSON form (popularity.h).
#include "experts/popularity.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

namespace mt {
namespace {

using nlohmann::json;

// Block indices beyond this are refused (a profile names real blocks, not 4 billion).
constexpr uint64_t kMaxLayer = 1u << 16;

bool is_count(const json& j) { return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0); }

}  // namespace

std::vector<uint32_t> PopularityProfile::ranked(uint32_t layer) const {
  if (layer >= counts.size()) return {};
  const std::vector<uint64_t>& c = counts[layer];
  std::vector<uint32_t> order(c.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return c[a] > c[b]; });
  return order;
}

double PopularityProfile::coverage(uint32_t layer, uint32_t n) const {
  if (layer >= counts.size()) return 0.0;
  const std::vector<uint64_t>& c = counts[layer];
  const uint64_t total = std::accumulate(c.begin(), c.end(), uint64_t{0});
  if (total == 0) return 0.0;
  const std::vector<uint32_t> order = ranked(layer);
  uint64_t top = 0;
  for (uint32_t i = 0; i < std::min<size_t>(n, order.size()); ++i) top += c[order[i]];
  return static_cast<double>(top) / static_cast<double>(total);
}

PopularityProfile popularity_from_trace(const RoutingTrace& trace, uint32_t n_layer_blocks, uint32_t n_expert) {
  PopularityProfile p;
  p.n_expert = std::max(n_expert, trace.n_expert);
  p.tokens = trace.n_tokens;
  const uint32_t blocks = trace.layers.empty() ? n_layer_blocks : std::max(n_layer_blocks, trace.layers.back() + 1);
  p.counts.resize(blocks);
  for (uint32_t l : trace.layers) p.counts[l].assign(p.n_expert, 0);
  for (const RoutingEvent& ev : trace.events) {
    for (int32_t e : ev.experts) ++p.counts[ev.layer][static_cast<size_t>(e)];
  }
  return p;
}

std::string popularity_to_json(const PopularityProfile& p) {
  // One layer per line: readable, and diffs line up by layer.
  std::ostringstream o;
  o << "{\n  \"version\": 1,\n  \"model\": " << json(p.model).dump() << ",\n  \"n_expert\": " << p.n_expert
    << ",\n  \"tokens\": " << p.tokens << ",\n  \"layers\": [";
  bool first = true;
  for (size_t l = 0; l < p.counts.size(); ++l) {
    if (p.counts[l].empty()) continue;
    o << (first ? "\n" : ",\n") << "    {\"layer\": " << l << ", \"counts\": [";
    for (size_t e = 0; e < p.counts[l].size(); ++e) o << (e ? ", " : "") << p.counts[l][e];
    o << "]}";
    first = false;
  }
  o << (first ? "]\n}\n" : "\n  ]\n}\n");
  return o.str();
}

StatusOr<PopularityProfile> popularity_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return data_loss("popularity profile: not valid JSON");
  if (!j.is_object()) return data_loss("popularity profile: not a JSON object");
  auto bad = [](const std::string& m) { return data_loss("popularity profile: " + m); };
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1) {
    return bad("\"version\" must be 1");
  }
  PopularityProfile p;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return bad("\"model\" must be a string");
    p.model = j["model"].get<std::string>();
  }
  if (!j.contains("n_expert") || !is_count(j["n_expert"]) || j["n_expert"].get<uint64_t>() == 0 ||
      j["n_expert"].get<uint64_t>() > UINT32_MAX) {
    return bad("\"n_expert\" must be a positive 32-bit integer");
  }
  p.n_expert = j["n_expert"].get<uint32_t>();
  if (!j.contains("tokens") || !is_count(j["tokens"])) return bad("\"tokens\" must be a non-negative integer");
  p.tokens = j["tokens"].get<uint64_t>();
  if (!j.contains("layers") || !j["layers"].is_array()) return bad("\"layers\" must be an array");
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const json& L = j["layers"][i];
    const std::string where = "layers[" + std::to_string(i) + "]: ";
    if (!L.is_object() || !L.contains("layer") || !L.contains("counts")) {
      return bad(where + "needs \"layer\" and \"counts\"");
    }
    if (!is_count(L["layer"]) || L["layer"].get<uint64_t>() >= kMaxLayer) {
      return bad(where + "\"layer\" must be an integer in [0, " + std::to_string(kMaxLayer) + ")");
    }
    const auto layer = L["layer"].get<uint32_t>();
    const json& c = L["counts"];
    if (!c.is_array() || c.size() != p.n_expert) {
      return bad(where + "\"counts\" must be an array of n_expert (" + std::to_string(p.n_expert) + ") counts");
    }
    if (p.counts.size() <= layer) p.counts.resize(layer + 1);
    if (!p.counts[layer].empty()) return bad(where + "layer " + std::to_string(layer) + " appears twice");
    for (const json& x : c) {
      if (!is_count(x)) return bad(where + "counts must be non-negative integers (got " + x.dump() + ")");
      p.counts[layer].push_back(x.get<uint64_t>());
    }
  }
  return p;
}

StatusOr<PopularityProfile> read_popularity(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open popularity profile '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("error reading popularity profile '" + path + "'");
  auto p = popularity_from_json(text.str());
  if (!p.ok()) return Status(p.status().code(), path + ": " + p.status().message());
  return p;
}

}  // namespace mt
