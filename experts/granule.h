// Granule trade curve (seed 003): what packing E experts of a layer into one committed
// chunk costs, measured on a routing trace. A device VMM commits physical memory in
// granules (2 MiB on CUDA); an expert smaller than a granule wastes the rest, and packing
// several experts per chunk trades that waste against selectivity (a chunk is resident
// when any of its experts is needed).
//
// Definitions, exactly those of seed 003's table (its values for granite-3.0-1b-a400m,
// 32 experts top-8, 0.75 MiB experts, 2 MiB granule, reproduce from them):
//   chunk        E experts adjacent in a layer's packing order (never across layers: a
//                chunk spanning layers is hot in every step); a layer's last chunk holds
//                the n_expert mod E rest. Its committed bytes are
//                ceil(m * expert_bytes / granule) * granule for its m experts.
//   packing      arbitrary: expert id order. hotness-sorted: the layer's experts by the
//                trace's own selection counts, most selected first (ties: lower id).
//   layer-step   one MoE layer in one forward step (a decoded token, or a prompt batch):
//                the union of the experts its tokens selected there. Means are over the
//                layer-steps present in the trace.
//   waste        committed bytes of all chunks / bytes of all experts (>= 1; the same
//                for both packings). Seed: E=1 2.67x, E=2 1.33x, E=8 and E=32 1.00x.
//   resident MiB per layer-step
//                mean committed bytes of the chunks holding at least one selected
//                expert (the physical memory a layer-step keeps mapped). Seed: 16.00 at
//                E=1 (8 granules), 13.34 at E=2 (its minimum), 24.00 at E=32.
//   transfer MiB per layer-step
//                mean expert bytes of those chunks (what filling them moves: every
//                expert in a touched chunk, needed or not). Seed: 6.00 at E=1 (8 x 0.75
//                MiB: with one token per step, per layer-step is per layer and token).
//   needed MiB per layer-step
//                mean bytes of the distinct selected experts (= transfer at E=1).
//   selectivity  needed / transfer over the whole trace, in (0, 1]: the fraction of
//                moved bytes that were asked for. The seed prints its inverse as "sel%"
//                (transfer / needed: 100% at E=1, 167% at E=2, 400% for the whole bank);
//                `overfetch` below is that number as a ratio.
// The minimum is the row with the least resident MiB per layer-step (first in row order
// on ties: E ascending, arbitrary before hotness-sorted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "experts/routing_trace.h"

namespace mt {

enum class Packing { kArbitrary, kHotness };
const char* packing_name(Packing p);  // "arbitrary", "hotness-sorted"

struct GranuleParams {
  uint64_t granule_bytes = 2ull << 20;
  uint64_t expert_bytes = 0;                   // bytes of one expert (gate + up + down), every layer
  std::vector<uint64_t> expert_bytes_by_layer;  // [block index], overrides expert_bytes when non-empty
  uint32_t n_expert = 0;                        // experts per layer; 0: the trace's n_expert
  std::vector<uint32_t> experts_per_chunk;      // the E values; empty: default_chunk_sizes()
};

// Powers of two up to n_expert, the most experts of each expert size that fit one
// granule, and n_expert itself (the whole bank): ascending, distinct.
std::vector<uint32_t> default_chunk_sizes(uint32_t n_expert, uint64_t granule_bytes,
                                          const std::vector<uint64_t>& expert_sizes);

struct GranuleRow {
  uint32_t experts_per_chunk = 0;  // E
  Packing packing = Packing::kArbitrary;
  double waste = 0;
  double resident_mib = 0;  // per layer-step
  double transfer_mib = 0;  // per layer-step
  double needed_mib = 0;    // per layer-step
  double selectivity = 0;   // needed / transfer
  double overfetch = 0;     // transfer / needed (the seed's "sel%" / 100)
};

struct GranuleCurve {
  uint64_t granule_bytes = 0;
  uint64_t expert_bytes = 0;  // when every layer agrees, else 0
  uint32_t n_expert = 0, top_k = 0, n_layers = 0;
  uint64_t n_steps = 0, n_tokens = 0, layer_steps = 0;
  std::vector<GranuleRow> rows;  // E ascending, arbitrary then hotness-sorted
  size_t min_row = 0;            // index of the least resident MiB per layer-step
};

// Errors: an empty trace, a zero granule or expert size, a trace layer with no expert
// size, expert ids beyond n_expert, E outside [1, n_expert].
StatusOr<GranuleCurve> granule_curve(const RoutingTrace& trace, const GranuleParams& params);

std::string granule_curve_json(const GranuleCurve& c);   // pretty-printed JSON object
std::string granule_curve_table(const GranuleCurve& c);  // aligned text table + the minimum

}  // namespace mt
