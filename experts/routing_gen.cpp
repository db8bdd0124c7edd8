// Routing streams: the generator, trace replay, the spec parser and the locality measure
// (routing_gen.h).
#include "experts/routing_gen.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/check.h"

namespace mt {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from 53 random bits (the same numbers on every standard library).
double gen_uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// floor(x), plus one with probability frac(x): the mean is x.
uint32_t round_stochastic(double x, std::mt19937_64& rng) {
  const double f = std::floor(x);
  return static_cast<uint32_t>(f) + (gen_uniform01(rng) < x - f ? 1u : 0u);
}

// One expert among those with mark[e] == 0 and (when `only` is set) only[e], drawn with
// probability weight[e] / their sum; -1 when there is none.
int32_t draw_weighted(std::mt19937_64& rng, const std::vector<double>& weight, const std::vector<uint8_t>& mark,
                      const std::vector<uint8_t>* only) {
  double total = 0;
  for (size_t e = 0; e < weight.size(); ++e) {
    if (mark[e] == 0 && (!only || (*only)[e])) total += weight[e];
  }
  if (total <= 0) return -1;
  double u = gen_uniform01(rng) * total;
  int32_t last = -1;
  for (size_t e = 0; e < weight.size(); ++e) {
    if (mark[e] != 0 || (only && !(*only)[e])) continue;
    last = static_cast<int32_t>(e);
    if (u < weight[e]) return last;
    u -= weight[e];
  }
  return last;  // rounding left u at the very top: the last candidate
}

struct GenPreset {
  const char* name;
  uint32_t n_expert, top_k;
  double reuse;
  uint32_t window;
  double within, skew;
};
// Calibrated against the published figures quoted in issue 28 (docs/PERFORMANCE.md,
// "Routing with temporal locality"): the measured values are in that section.
constexpr GenPreset kGenPresets[] = {
    {"qwen3-30b", 128, 8, 0.45, 8, 0.80, 1.6},
    {"256", 256, 8, 0.12, 8, 0.14, 0.0},
    {"512", 512, 10, 0.45, 24, 0.78, 0.15},
};

StatusOr<double> spec_double(std::string_view key, std::string_view v) {
  double x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(x)) {
    return invalid_argument("synth: " + std::string(key) + "='" + std::string(v) + "' is not a number");
  }
  return x;
}

StatusOr<uint64_t> spec_uint(std::string_view key, std::string_view v) {
  uint64_t x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || ptr != v.data() + v.size()) {
    return invalid_argument("synth: " + std::string(key) + "='" + std::string(v) + "' is not a non-negative integer");
  }
  return x;
}

Status apply_spec_key(RoutingGenSpec& s, std::string_view key, std::string_view v) {
  RoutingGenParams& p = s.params;
  if (key == "preset") {
    for (const GenPreset& q : kGenPresets) {
      if (v != q.name) continue;
      s.preset = q.name;
      s.geometry_given = true;
      p.n_expert = q.n_expert, p.top_k = q.top_k, p.reuse = q.reuse, p.window = q.window, p.within = q.within;
      p.skew = q.skew;
      return {};
    }
    return invalid_argument("synth: preset='" + std::string(v) + "' is not qwen3-30b, 256 or 512");
  }
  if (key == "reuse" || key == "within" || key == "skew") {
    MT_ASSIGN_OR_RETURN(double x, spec_double(key, v));
    (key == "reuse" ? p.reuse : key == "within" ? p.within : p.skew) = x;
    return {};
  }
  if (key == "window" || key == "seed" || key == "experts" || key == "top-k" || key == "tokens") {
    MT_ASSIGN_OR_RETURN(uint64_t x, spec_uint(key, v));
    if (key != "seed" && key != "tokens" && x > 65536) {
      return invalid_argument("synth: " + std::string(key) + "=" + std::string(v) + " is above 65536");
    }
    if (key == "window") p.window = static_cast<uint32_t>(x);
    else if (key == "seed") p.seed = x;
    else if (key == "tokens") s.tokens = x;
    else {
      (key == "experts" ? p.n_expert : p.top_k) = static_cast<uint32_t>(x);
      s.geometry_given = true;
    }
    return {};
  }
  return invalid_argument("synth: unknown key '" + std::string(key) +
                          "' (known: preset, reuse, window, within, skew, seed, experts, top-k, tokens)");
}

}  // namespace

Status check_routing_gen_params(const RoutingGenParams& p) {
  if (p.n_layers == 0) return invalid_argument("synth: need at least one layer");
  if (p.n_expert == 0 || p.top_k == 0 || p.top_k > p.n_expert) {
    return invalid_argument("synth: top-k=" + std::to_string(p.top_k) + " must be in 1..experts (" +
                            std::to_string(p.n_expert) + ")");
  }
  if (!(p.reuse >= 0 && p.reuse <= 1)) return invalid_argument("synth: reuse=" + std::to_string(p.reuse) + " is not in [0, 1]");
  if (!(p.within >= 0 && p.within <= 1)) return invalid_argument("synth: within=" + std::to_string(p.within) + " is not in [0, 1]");
  if (p.within < p.reuse) return invalid_argument("synth: within (" + std::to_string(p.within) + ") is below reuse");
  if (p.window == 0) return invalid_argument("synth: window must be at least 1");
  if (p.window == 1 && p.within != p.reuse) return invalid_argument("synth: within must equal reuse when window=1");
  if (!(p.skew >= 0 && p.skew <= 16)) return invalid_argument("synth: skew=" + std::to_string(p.skew) + " is not in [0, 16]");
  return {};
}

StatusOr<RoutingGenSpec> parse_routing_gen_spec(std::string_view spec) {
  if (spec.substr(0, 6) == "synth:") spec.remove_prefix(6);
  RoutingGenSpec s;
  bool within_given = false;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return invalid_argument("synth: '" + std::string(item) + "' is not KEY=VALUE");
    const std::string_view key = item.substr(0, eq);
    within_given |= key == "within";
    MT_RETURN_IF_ERROR(apply_spec_key(s, key, item.substr(eq + 1)));
  }
  // window=1 without within: the window holds the previous token only.
  if (s.params.window == 1 && !within_given) s.params.within = s.params.reuse;
  if (s.tokens == 0) return invalid_argument("synth: tokens must be at least 1");
  MT_RETURN_IF_ERROR(check_routing_gen_params(s.params));
  return s;
}

std::string routing_gen_spec_string(const RoutingGenSpec& s) {
  const RoutingGenParams& p = s.params;
  char buf[256];
  std::snprintf(buf, sizeof buf, "synth:%s%s%sexperts=%u,top-k=%u,reuse=%.3g,window=%u,within=%.3g,skew=%.3g,seed=%llu",
                s.preset.empty() ? "" : "preset=", s.preset.c_str(), s.preset.empty() ? "" : ",", p.n_expert, p.top_k,
                p.reuse, p.window, p.within, p.skew, static_cast<unsigned long long>(p.seed));
  return buf;
}

StatusOr<RoutingSource> parse_routing_source(std::string_view value) {
  RoutingSource r;
  if (value.substr(0, 6) == "synth:") {
    r.synthetic = true;
    MT_ASSIGN_OR_RETURN(r.gen, parse_routing_gen_spec(value));
    return r;
  }
  if (value.substr(0, 6) == "trace:") value.remove_prefix(6);
  if (value.empty()) return invalid_argument("--routing: give synth:KEY=VALUE,... or trace:FILE");
  r.path = std::string(value);
  return r;
}

RoutingGenerator::RoutingGenerator(const RoutingGenParams& params) : p_(params), layers_(params.n_layers) {
  const Status st = check_routing_gen_params(p_);
  MT_CHECK_MSG(st.ok(), st.message().c_str());
  mark_.assign(p_.n_expert, 0);
  for (uint32_t l = 0; l < p_.n_layers; ++l) {
    Layer& L = layers_[l];
    L.rng.seed(splitmix64(splitmix64(p_.seed) ^ (0x100000001B3ull * (l + 1))));
    std::vector<uint32_t> perm(p_.n_expert);
    std::iota(perm.begin(), perm.end(), 0u);
    for (uint32_t i = p_.n_expert - 1; i > 0; --i) std::swap(perm[i], perm[L.rng() % (i + 1)]);
    L.weight.resize(p_.n_expert);
    for (uint32_t r = 0; r < p_.n_expert; ++r) L.weight[perm[r]] = 1.0 / std::pow(static_cast<double>(r + 1), p_.skew);
  }
}

const std::vector<int32_t>& RoutingGenerator::next(uint32_t layer) {
  MT_CHECK(layer < layers_.size());
  Layer& L = layers_[layer];
  const uint32_t k = p_.top_k;
  std::vector<int32_t>& out = L.out;
  out.clear();
  std::fill(mark_.begin(), mark_.end(), uint8_t{0});
  // Counts first (one stochastic rounding each, whatever the candidates).
  uint32_t n_prev = std::min(k, round_stochastic(p_.reuse * k, L.rng));
  uint32_t n_window = std::min(k - n_prev, round_stochastic((p_.within - p_.reuse) * k, L.rng));
  // Reused: a uniform subset of the previous token's experts (partial Fisher-Yates).
  if (!L.history.empty()) {
    std::vector<int32_t> prev = L.history.front();
    n_prev = std::min<uint32_t>(n_prev, static_cast<uint32_t>(prev.size()));
    for (uint32_t i = 0; i < n_prev; ++i) {
      std::swap(prev[i], prev[i + L.rng() % (prev.size() - i)]);
      out.push_back(prev[i]);
      mark_[static_cast<size_t>(prev[i])] = 1;
    }
    for (int32_t e : L.history.front()) {
      if (mark_[static_cast<size_t>(e)] == 0) mark_[static_cast<size_t>(e)] = 2;
    }
  } else {
    n_prev = 0;
  }
  // The window's repeats, by popularity, among the experts of tokens t-2 .. t-w that the
  // previous token did not select.
  std::vector<uint8_t> older(p_.n_expert, 0);
  for (size_t h = 1; h < L.history.size(); ++h) {
    for (int32_t e : L.history[h]) older[static_cast<size_t>(e)] = 1;
  }
  for (uint32_t i = 0; i < n_window; ++i) {
    const int32_t e = draw_weighted(L.rng, L.weight, mark_, &older);
    if (e < 0) break;
    out.push_back(e);
    mark_[static_cast<size_t>(e)] = 1;
  }
  // Fresh picks: outside the whole window when possible (mark 3: tokens t-2 .. t-w); when
  // the window holds every expert left, from t-2 .. t-w; then from the previous token's.
  for (size_t e = 0; e < older.size(); ++e) {
    if (older[e] && mark_[e] == 0) mark_[e] = 3;
  }
  while (out.size() < k) {
    int32_t e = draw_weighted(L.rng, L.weight, mark_, nullptr);
    for (uint8_t relax : {uint8_t{3}, uint8_t{2}}) {
      if (e >= 0) break;
      for (uint8_t& m : mark_) m = m == relax ? 0 : m;
      e = draw_weighted(L.rng, L.weight, mark_, nullptr);
    }
    MT_CHECK(e >= 0);
    out.push_back(e);
    mark_[static_cast<size_t>(e)] = 1;
  }
  L.history.insert(L.history.begin(), out);
  if (L.history.size() > p_.window) L.history.pop_back();
  return out;
}

TraceStream::TraceStream(const RoutingTrace& trace)
    : trace_(&trace), n_expert_(trace.n_expert), top_k_(trace.top_k) {
  const uint32_t n = trace.layers.empty() ? 0 : trace.layers.back() + 1;
  by_layer_.resize(n);
  cursor_.assign(n, 0);
  for (size_t i = 0; i < trace.events.size(); ++i) by_layer_[trace.events[i].layer].push_back(static_cast<uint32_t>(i));
}

const RoutingEvent* TraceStream::next_event(uint32_t layer) {
  if (layer >= by_layer_.size() || cursor_[layer] >= by_layer_[layer].size()) return nullptr;
  return &trace_->events[by_layer_[layer][cursor_[layer]++]];
}

const std::vector<int32_t>& TraceStream::next(uint32_t layer) {
  const RoutingEvent* ev = next_event(layer);
  return ev ? ev->experts : empty_;
}

void TraceStream::restart(uint32_t layer) {
  if (layer < cursor_.size()) cursor_[layer] = 0;
}

RoutingTrace generate_trace(const RoutingGenParams& params, uint64_t tokens, const std::vector<uint32_t>& block_of) {
  MT_CHECK(block_of.empty() || block_of.size() == params.n_layers);
  RoutingGenerator gen(params);
  RoutingTrace t;
  t.top_k = params.top_k;
  t.n_steps = t.n_tokens = tokens;
  for (uint32_t l = 0; l < params.n_layers; ++l) t.layers.push_back(block_of.empty() ? l : block_of[l]);
  t.events.reserve(tokens * params.n_layers);
  int32_t max_id = 0;
  for (uint64_t s = 0; s < tokens; ++s) {
    for (uint32_t l = 0; l < params.n_layers; ++l) {
      RoutingEvent ev;
      ev.layer = t.layers[l];
      ev.pos = static_cast<uint32_t>(s);
      ev.step = s;
      ev.experts = gen.next(l);
      for (int32_t e : ev.experts) max_id = std::max(max_id, e);
      t.events.push_back(std::move(ev));
    }
  }
  t.n_expert = static_cast<uint32_t>(max_id) + 1;
  return t;
}

LocalityStats measure_locality(const RoutingTrace& trace, uint32_t window, uint32_t span) {
  struct PerLayer {
    uint64_t token = 0;
    std::vector<uint64_t> last;  // per expert: 1 + the token of its last selection (0: never)
    std::vector<std::vector<int32_t>> since_span;
  };
  std::vector<PerLayer> per(trace.layers.empty() ? 0 : trace.layers.back() + 1);
  uint64_t reused = 0, reuse_base = 0, in_window = 0, rest = 0, rest_in_window = 0, sel = 0;
  uint64_t spans = 0, touched = 0;
  std::vector<uint64_t> distances;
  for (const RoutingEvent& ev : trace.events) {
    PerLayer& p = per[ev.layer];
    if (p.last.empty()) p.last.assign(trace.n_expert, 0);
    const uint64_t t = p.token++;
    for (int32_t e : ev.experts) {
      const uint64_t last = p.last[static_cast<size_t>(e)];
      ++sel;
      if (last > 0) distances.push_back(t + 1 - last);
      const bool prev = last == t && t > 0;  // selected by token t-1
      const bool win = last > 0 && t + 1 - last <= window;
      if (t >= 1) {
        ++reuse_base;
        reused += prev;
      }
      if (t >= window) {
        in_window += win;
        if (!prev) {
          ++rest;
          rest_in_window += win;
        }
      }
    }
    for (int32_t e : ev.experts) p.last[static_cast<size_t>(e)] = t + 1;
    p.since_span.push_back(ev.experts);
    if (p.since_span.size() == span) {
      std::vector<int32_t> all;
      for (const auto& v : p.since_span) all.insert(all.end(), v.begin(), v.end());
      std::sort(all.begin(), all.end());
      touched += static_cast<uint64_t>(std::unique(all.begin(), all.end()) - all.begin());
      ++spans;
      p.since_span.clear();
    }
  }
  LocalityStats s;
  s.selections = sel;
  auto frac = [](uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  s.reuse = frac(reused, reuse_base);
  const uint64_t window_base = rest + (in_window - rest_in_window);  // selections of tokens t >= window
  s.within = frac(in_window, window_base);
  s.window_rest = frac(rest_in_window, rest);
  if (!distances.empty()) {
    std::nth_element(distances.begin(), distances.begin() + static_cast<ptrdiff_t>(distances.size() / 2), distances.end());
    s.median_distance = static_cast<double>(distances[distances.size() / 2]);
  }
  s.touched = frac(touched, spans);
  return s;
}

}  // namespace mt
