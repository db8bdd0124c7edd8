// Routing streams: the experts each MoE layer selects, one token at a time, either from a
// recorded trace (replayed exactly, in the order it was recorded) or from a generator with
// per-layer popularity and temporal locality (issue 28). A cache study (`simulate`,
// `analyze-routing`) and a timed run can consume the same stream token by token.
//
// The generator, per layer l and token t (S_t: the k distinct experts token t selects;
// k = top_k, E = n_expert):
//   reuse  r   The expected fraction of S_t that S_{t-1} also holds: round(r k) experts
//              (rounded stochastically, so the mean is exactly r k) drawn uniformly from
//              S_{t-1}. "Reuse" measured on any trace means the same: |S_t ∩ S_{t-1}| / k.
//   window w   The number of previous tokens within which the rest of the repeats fall:
//   within q   the expected fraction of S_t that some of S_{t-1} .. S_{t-w} holds is q
//              (q >= r; w = 1 needs q = r): round((q - r) k) more experts are drawn from
//              (S_{t-2} ∪ .. ∪ S_{t-w}) \ S_{t-1} by popularity. Measured on a trace: of the
//              selections that S_{t-1} does not hold, the part the window holds is
//              (q - r) / (1 - r).
//   skew   s   The rest ("fresh" picks: experts none of the last w tokens selected) are drawn
//              without replacement from the layer's power-law popularity: the expert of
//              rank i (0-based, in the layer's own random permutation) has weight
//              1 / (i + 1)^s (0: uniform), restricted to the experts not yet excluded.
//              Measured: the share of the fresh picks that land on the layer's most
//              popular quarter, against its expectation under those conditional draws.
//   seed       Each layer has its own random generator seeded from (seed, layer), so a
//              layer's stream does not depend on how the calls of the layers interleave.
// When the window has too few candidates (the first tokens, or a small E), the missing
// repeats become fresh picks; when the window holds every expert left (E small against
// k x w), fresh picks come from tokens t-2 .. t-w first, the previous token's last: then
// the measured `within` (and at last `reuse`) exceed the parameters.
// Experts come out in draw order: the reused ones, the window's, then the fresh ones.
//
// Spec strings (`--routing synth:KEY=VALUE,...`): preset=qwen3-30b|256|512 (defaults of a
// model family, its geometry included), reuse, window, within, skew, seed, experts (E),
// top-k, tokens (the length of a whole trace); later keys override the preset's.
// `--routing trace:FILE` (or a bare FILE) names a routing record (routing_trace.h).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "experts/routing_trace.h"

namespace mt {

struct RoutingGenParams {
  uint32_t n_layers = 48;
  uint32_t n_expert = 128;
  uint32_t top_k = 8;
  double reuse = 0.45;
  uint32_t window = 8;
  double within = 0.80;
  double skew = 0.6;
  uint64_t seed = 1;
};

// A parsed `synth:` spec: the generator's parameters, whether the spec fixed a geometry
// (a preset or experts= / top-k=) and the trace length.
struct RoutingGenSpec {
  RoutingGenParams params;
  std::string preset;          // empty: none
  bool geometry_given = false;  // a preset, experts= or top-k= set n_expert / top_k
  uint64_t tokens = 512;
};

// "synth:..." (the prefix is optional). Errors name the key: unknown keys, bad numbers,
// values out of range (reuse, within in [0, 1], within >= reuse, window >= 1, top-k <= experts).
StatusOr<RoutingGenSpec> parse_routing_gen_spec(std::string_view spec);
// `--routing` values: "synth:..." (a generator) or "trace:FILE" / "FILE" (a record).
struct RoutingSource {
  bool synthetic = false;
  RoutingGenSpec gen;
  std::string path;
};
StatusOr<RoutingSource> parse_routing_source(std::string_view value);
// The same checks on parameters built in code.
Status check_routing_gen_params(const RoutingGenParams& p);
// "preset=qwen3-30b,reuse=...": the spec's canonical form (every key, for reports).
std::string routing_gen_spec_string(const RoutingGenSpec& s);

// One token at a time per layer. Layers are indexed as the source indexes them: the
// generator's 0 .. n_layers-1 (MoE order), a trace's recorded block indices.
class RoutingStream {
 public:
  virtual ~RoutingStream() = default;
  // The next token's experts of the layer; empty once a trace's layer is exhausted (or a
  // layer the source does not route).
  virtual const std::vector<int32_t>& next(uint32_t layer) = 0;
  virtual uint32_t n_expert() const = 0;
  virtual uint32_t top_k() const = 0;
};

class RoutingGenerator final : public RoutingStream {
 public:
  // params must pass check_routing_gen_params (aborts otherwise).
  explicit RoutingGenerator(const RoutingGenParams& params);
  const std::vector<int32_t>& next(uint32_t layer) override;
  uint32_t n_expert() const override { return p_.n_expert; }
  uint32_t top_k() const override { return p_.top_k; }
  // weight[e] of the layer's popularity (unnormalised; rank i has 1 / (i + 1)^skew).
  const std::vector<double>& popularity(uint32_t layer) const { return layers_[layer].weight; }
  const RoutingGenParams& params() const { return p_; }

 private:
  struct Layer {
    std::mt19937_64 rng;
    std::vector<double> weight;                   // per expert
    std::vector<std::vector<int32_t>> history;    // the last `window` tokens, newest first
    std::vector<int32_t> out;
  };
  RoutingGenParams p_;
  std::vector<Layer> layers_;
  std::vector<uint8_t> mark_;  // scratch per expert: 1 taken; excluded from fresh picks: 2 token t-1's, 3 t-2 .. t-w's
};

// A recorded trace replayed position by position: per layer, its events in (step, pos)
// order, each next() the following one.
class TraceStream final : public RoutingStream {
 public:
  explicit TraceStream(const RoutingTrace& trace);
  const std::vector<int32_t>& next(uint32_t layer) override;
  uint32_t n_expert() const override { return n_expert_; }
  uint32_t top_k() const override { return top_k_; }
  // The layer's next event (its experts and, where recorded, weights); null once exhausted.
  const RoutingEvent* next_event(uint32_t layer);
  // The layer's events from the first again.
  void restart(uint32_t layer);

 private:
  const RoutingTrace* trace_;
  std::vector<std::vector<uint32_t>> by_layer_;  // [block] -> event indices
  std::vector<size_t> cursor_;
  uint32_t n_expert_, top_k_;
  std::vector<int32_t> empty_;
};

// `tokens` decode steps of every generator layer as a trace (step = pos = token; layer:
// block_of[moe index] when given, else the MoE index).
RoutingTrace generate_trace(const RoutingGenParams& params, uint64_t tokens,
                            const std::vector<uint32_t>& block_of = {});

// Locality of a trace, per the definitions above (pooled over layers; each layer's events
// in trace order count as its tokens).
struct LocalityStats {
  uint64_t selections = 0;
  double reuse = 0;            // |S_t ∩ S_{t-1}| / k, over tokens t >= 1
  double within = 0;           // selections some of the last `window` tokens held
  double window_rest = 0;      // of the selections S_{t-1} lacks, those the window holds
  double median_distance = 0;  // tokens since the expert's last selection, over repeats
  double touched = 0;          // mean distinct experts per layer in a run of `span` tokens
};
LocalityStats measure_locality(const RoutingTrace& trace, uint32_t window, uint32_t span = 75);

}  // namespace mt
