#include "synth/weights.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mt::synth {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Rng::uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

float Rng::normal() {
  // Sum of four uniforms (variance 4/12), rescaled to unit variance: cheap and bounded.
  float s = uniform() + uniform() + uniform() + uniform() - 2.0f;
  return s * 1.7320508f;
}

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xD6E8FEB86659FD93ull));
  return r.next();
}

uint64_t hash_name(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return mix(seed, h);
}

std::vector<float> shared_direction(uint64_t seed, uint32_t n_embd, bool periodic) {
  // Periodic: entry i repeats entry i % kSharedDirectionPeriod, so rotating a row by whole
  // periods keeps its projection on u (the --fast rows are pool rows rotated by blocks).
  Rng rng(mix(seed, 0x5eed));
  std::vector<float> u(n_embd);
  double norm = 0.0;
  for (uint32_t i = 0; i < n_embd; ++i) {
    u[i] = periodic && i >= kSharedDirectionPeriod ? u[i % kSharedDirectionPeriod] : rng.normal();
    norm += static_cast<double>(u[i]) * u[i];
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(std::max(norm, 1e-30)));
  for (float& x : u) x *= inv;
  return u;
}

void make_row(const RowRecipe& recipe, const std::vector<float>& u, uint64_t tensor_seed, uint64_t r, float* row,
              uint64_t n) {
  Rng rng(mix(tensor_seed, r));
  for (uint64_t i = 0; i < n; ++i) row[i] = recipe.offset + recipe.stddev * rng.normal();
  if (recipe.orthogonal_to_u && u.size() == n) {
    double dot = 0.0;
    for (uint64_t i = 0; i < n; ++i) dot += static_cast<double>(row[i]) * u[i];
    for (uint64_t i = 0; i < n; ++i) row[i] -= static_cast<float>(dot) * u[i];
  }
  float uw = recipe.per_row_u.empty() ? recipe.u_weight : recipe.per_row_u[r % recipe.per_row_u.size()];
  if (uw != 0.0f && u.size() == n) {
    for (uint64_t i = 0; i < n; ++i) row[i] += uw * u[i];
  }
}

std::vector<float> router_biases(uint64_t seed, uint32_t layer, uint32_t n_expert, float skew) {
  std::vector<uint32_t> rank_of(n_expert);
  std::iota(rank_of.begin(), rank_of.end(), 0u);
  Rng rng(mix(seed, 0x7000 + layer));
  for (uint32_t i = n_expert; i > 1; --i) std::swap(rank_of[i - 1], rank_of[rng.next() % i]);
  std::vector<float> bias(n_expert);
  for (uint32_t e = 0; e < n_expert; ++e) bias[e] = -skew * std::log(1.0f + static_cast<float>(rank_of[e]));
  return bias;
}

}  // namespace mt::synth
