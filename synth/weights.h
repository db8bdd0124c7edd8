// Deterministic synthetic weights with realistic magnitudes.
//
// Every value is a pure function of (seed, tensor name, row index), so a tensor can be
// produced in any chunking and two runs with one seed write identical files.
// Scales: a matrix with n_in inputs gets N(0, 1/n_in) entries (outputs keep the input's
// scale); the matrices that write into the residual stream (attn_output, ffn_down*)
// are further scaled by 1/sqrt(2 n_layer) so the stream grows at most ~sqrt(2) over the
// stack; norm weights are 1 +- 5%. Router skew: every token embedding carries a shared
// component along one unit direction u, which RMSNorm turns into a near-constant
// projection h.u; router row e gets bias_e * u / (h.u), so expert e's logit is shifted
// by bias_e = -skew * ln(1 + rank_e), rank_e a per-layer permutation of the experts:
// popularity then falls off like a Zipf law with exponent ~skew.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::synth {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();        // splitmix64
  float uniform();        // [0, 1)
  float normal();         // approximately N(0, 1)
 private:
  uint64_t state_;
};

uint64_t hash_name(uint64_t seed, const std::string& name);
uint64_t mix(uint64_t a, uint64_t b);

// What one float row of a tensor looks like.
struct RowRecipe {
  float stddev = 0.0f;          // of the random part
  float offset = 0.0f;          // added to every entry (norm weights: 1)
  float u_weight = 0.0f;        // multiple of the shared direction u added to the row
  std::vector<float> per_row_u; // if non-empty: u multiple per row (router rows)
  bool orthogonal_to_u = false; // remove the random part's u component first (routers:
                                // no accidental per-expert bias at skew 0)
};

// The shared unit direction of a model (length n_embd). Periodic (the --fast files): the
// first kSharedDirectionPeriod entries repeat, so a row rotated by a multiple of them keeps
// its projection on u and the fast embeddings (pool rows rotated by whole blocks) carry the
// shared component, hence the router skew.
inline constexpr uint32_t kSharedDirectionPeriod = 32;
std::vector<float> shared_direction(uint64_t seed, uint32_t n_embd, bool periodic = false);

// Fills `row` (length n) for row index r of a tensor seeded with `tensor_seed`.
void make_row(const RowRecipe& recipe, const std::vector<float>& u, uint64_t tensor_seed, uint64_t r,
              float* row, uint64_t n);

// The per-expert router logit shifts of one layer: -skew * ln(1 + rank_e), where rank is a
// permutation drawn from (seed, layer).
std::vector<float> router_biases(uint64_t seed, uint32_t layer, uint32_t n_expert, float skew);

}  // namespace mt::synth
