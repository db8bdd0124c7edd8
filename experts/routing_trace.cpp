// Routing traces: the JSON-lines reader and the synthetic generator (routing_trace.h).
#include "experts/routing_trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>

namespace mt {
namespace {

using nlohmann::json;

// A non-negative integer field that fits `limit`; nullopt otherwise.
std::optional<uint64_t> get_index(const json& j, uint64_t limit) {
  if (!j.is_number_integer()) return std::nullopt;
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    return v <= limit ? std::optional<uint64_t>(v) : std::nullopt;
  }
  const int64_t v = j.get<int64_t>();
  if (v < 0 || static_cast<uint64_t>(v) > limit) return std::nullopt;
  return static_cast<uint64_t>(v);
}

struct ParsedLine {
  RoutingEvent event;
  bool has_step = false;
};

// One line's event, or a message saying what is wrong with it (without the location).
StatusOr<ParsedLine> parse_line(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return data_loss("not valid JSON");
  if (!j.is_object()) return data_loss("not a JSON object");
  constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
  ParsedLine out;
  RoutingEvent& ev = out.event;
  for (const char* key : {"layer", "pos", "experts"}) {
    if (!j.contains(key)) return data_loss(std::string("missing \"") + key + "\"");
  }
  auto layer = get_index(j["layer"], kU32);
  if (!layer) return data_loss("\"layer\" must be a non-negative 32-bit integer");
  auto pos = get_index(j["pos"], kU32);
  if (!pos) return data_loss("\"pos\" must be a non-negative 32-bit integer");
  ev.layer = static_cast<uint32_t>(*layer);
  ev.pos = static_cast<uint32_t>(*pos);
  if (j.contains("step")) {
    auto step = get_index(j["step"], std::numeric_limits<int64_t>::max());
    if (!step) return data_loss("\"step\" must be a non-negative integer");
    ev.step = *step;
    out.has_step = true;
  }
  const json& experts = j["experts"];
  if (!experts.is_array() || experts.empty()) return data_loss("\"experts\" must be a non-empty array");
  for (const json& e : experts) {
    auto id = get_index(e, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()));
    if (!id) return data_loss("expert ids must be non-negative integers (got " + e.dump() + ")");
    const auto v = static_cast<int32_t>(*id);
    if (std::find(ev.experts.begin(), ev.experts.end(), v) != ev.experts.end()) {
      return data_loss("expert " + std::to_string(v) + " selected twice");
    }
    ev.experts.push_back(v);
  }
  if (j.contains("weights")) {
    const json& w = j["weights"];
    if (!w.is_array()) return data_loss("\"weights\" must be an array");
    if (!w.empty() && w.size() != ev.experts.size()) {
      return data_loss("\"weights\" has " + std::to_string(w.size()) + " entries for " +
                       std::to_string(ev.experts.size()) + " experts");
    }
    for (const json& x : w) {
      if (!x.is_number()) return data_loss("\"weights\" must hold numbers");
      ev.weights.push_back(x.get<float>());
    }
  }
  return out;
}

// Uniform in [0, 1) from 53 random bits (the same numbers on every standard library).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Index drawn with probability weight[i] / sum over the entries not yet `taken`.
uint32_t draw(std::mt19937_64& rng, const std::vector<double>& weight, const std::vector<uint8_t>& taken) {
  double total = 0;
  for (size_t i = 0; i < weight.size(); ++i) total += taken[i] ? 0.0 : weight[i];
  double u = uniform01(rng) * total;
  uint32_t last = 0;
  for (size_t i = 0; i < weight.size(); ++i) {
    if (taken[i]) continue;
    last = static_cast<uint32_t>(i);
    if (u < weight[i]) return last;
    u -= weight[i];
  }
  return last;  // rounding left u at the very top: the last free entry
}

}  // namespace

StatusOr<RoutingTrace> read_routing_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open routing trace '" + path + "'");
  struct Numbered {
    RoutingEvent event;
    uint64_t line;
  };
  std::vector<Numbered> parsed;
  std::string line;
  uint64_t line_no = 0, first_line = 0;
  int has_step = -1;  // -1 until the first event decides whether lines carry "step"
  RoutingTrace t;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto p = parse_line(line);
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (!p.ok()) return data_loss(where + p.status().message());
    if (has_step < 0) {
      has_step = p->has_step ? 1 : 0;
      t.top_k = static_cast<uint32_t>(p->event.experts.size());
      first_line = line_no;
    } else if (has_step != (p->has_step ? 1 : 0)) {
      return data_loss(where + (p->has_step ? "has" : "lacks") + " \"step\" but line " + std::to_string(first_line) +
                       (p->has_step ? " does not" : " does"));
    }
    if (p->event.experts.size() != t.top_k) {
      return data_loss(where + std::to_string(p->event.experts.size()) + " experts, but line " +
                       std::to_string(first_line) + " has " + std::to_string(t.top_k));
    }
    if (!p->has_step) p->event.step = p->event.pos;  // each position its own step
    parsed.push_back({std::move(p->event), line_no});
  }
  if (in.bad()) return io_error("error reading routing trace '" + path + "'");
  if (parsed.empty()) return data_loss(path + ": no routing lines");

  // Recorded files are already in this order (a step's layers ascending, each layer's
  // positions ascending); step-less files are layer-major per batch and get reordered.
  auto key = [](const Numbered& n) { return std::tie(n.event.step, n.event.layer, n.event.pos); };
  std::stable_sort(parsed.begin(), parsed.end(), [&](const Numbered& a, const Numbered& b) { return key(a) < key(b); });
  for (size_t i = 1; i < parsed.size(); ++i) {
    if (key(parsed[i]) == key(parsed[i - 1])) {
      const auto& [a, b] = std::minmax(parsed[i].line, parsed[i - 1].line);
      return data_loss(path + ":" + std::to_string(b) + ": layer " + std::to_string(parsed[i].event.layer) +
                       ", pos " + std::to_string(parsed[i].event.pos) + " repeats line " + std::to_string(a));
    }
  }

  int32_t max_id = 0;
  std::vector<std::pair<uint64_t, uint32_t>> tokens;  // (step, pos)
  t.events.reserve(parsed.size());
  for (Numbered& n : parsed) {
    for (int32_t e : n.event.experts) max_id = std::max(max_id, e);
    t.layers.push_back(n.event.layer);
    tokens.emplace_back(n.event.step, n.event.pos);
    if (t.events.empty() || t.events.back().step != n.event.step) ++t.n_steps;
    t.events.push_back(std::move(n.event));
  }
  std::sort(t.layers.begin(), t.layers.end());
  t.layers.erase(std::unique(t.layers.begin(), t.layers.end()), t.layers.end());
  std::sort(tokens.begin(), tokens.end());
  t.n_tokens = static_cast<uint64_t>(std::unique(tokens.begin(), tokens.end()) - tokens.begin());
  t.n_expert = static_cast<uint32_t>(max_id) + 1;
  return t;
}

RoutingTrace synthetic_trace(const SyntheticTraceOptions& o) {
  MT_CHECK_MSG(o.n_layers > 0 && o.top_k > 0 && o.top_k <= o.n_expert, "synthetic_trace: need 1 <= top_k <= n_expert");
  MT_CHECK_MSG(o.skew >= 0 && o.locality >= 0 && o.locality <= 1, "synthetic_trace: skew >= 0, locality in [0, 1]");
  std::mt19937_64 rng(o.seed);
  // weight[l][e]: expert e of layer l is the rank-r expert of its layer's own permutation,
  // with Zipf weight 1 / (r + 1)^skew.
  std::vector<std::vector<double>> weight(o.n_layers, std::vector<double>(o.n_expert));
  for (auto& w : weight) {
    std::vector<uint32_t> perm(o.n_expert);
    std::iota(perm.begin(), perm.end(), 0u);
    for (uint32_t i = o.n_expert - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
    for (uint32_t r = 0; r < o.n_expert; ++r) w[perm[r]] = 1.0 / std::pow(static_cast<double>(r + 1), o.skew);
  }

  RoutingTrace t;
  t.top_k = o.top_k;
  t.n_steps = o.n_tokens;
  t.n_tokens = o.n_tokens;
  t.layers.resize(o.n_layers);
  std::iota(t.layers.begin(), t.layers.end(), 0u);
  t.events.reserve(o.n_tokens * o.n_layers);
  std::vector<std::vector<int32_t>> prev(o.n_layers);  // the previous token's picks per layer
  std::vector<uint8_t> taken(o.n_expert);
  int32_t max_id = 0;
  for (uint64_t s = 0; s < o.n_tokens; ++s) {
    for (uint32_t l = 0; l < o.n_layers; ++l) {
      RoutingEvent ev;
      ev.layer = l;
      ev.pos = static_cast<uint32_t>(s);
      ev.step = s;
      std::fill(taken.begin(), taken.end(), uint8_t{0});
      for (uint32_t r = 0; r < o.top_k; ++r) {
        const bool keep = !prev[l].empty() && uniform01(rng) < o.locality && !taken[static_cast<size_t>(prev[l][r])];
        const auto e = keep ? prev[l][r] : static_cast<int32_t>(draw(rng, weight[l], taken));
        taken[static_cast<size_t>(e)] = 1;
        ev.experts.push_back(e);
        max_id = std::max(max_id, e);
      }
      prev[l] = ev.experts;
      t.events.push_back(std::move(ev));
    }
  }
  t.n_expert = t.events.empty() ? 0 : static_cast<uint32_t>(max_id) + 1;
  return t;
}

}  // namespace mt
