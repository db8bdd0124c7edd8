// The gated delta rule of a Gated DeltaNet value head over a run of tokens
// (../shared/reference/moe_arch_facts_hybrid.md §1.7, §1.9).
//
// Per token t, with the state S (dk x dv, key index i, value index j):
//   S <- exp(g_t) S;  delta = beta_t (v_t - S^T k_t);  S <- S + k_t delta^T;  o_t = scale S^T q_t.
// The state is stored transposed, m[j * dk + i] = S[i][j], so every product above runs over
// contiguous memory. Two forms give the same numbers up to float rounding:
//   * recurrent: the update token after token (decode, short runs);
//   * chunked: chunks of up to kDeltaChunk tokens. Within a chunk, with G the running sum of
//     g and S0 the state at its start, the deltas solve the unit lower-triangular system
//     delta_t + sum_{s<t} beta_t (k_t.k_s) e^{G_t - G_s} delta_s = beta_t (v_t - e^{G_t} S0^T k_t)
//     by forward substitution; then o_t = scale (e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t - G_s}
//     (q_t.k_s) delta_s) and S <- e^{G_last} S0 + sum_s e^{G_last - G_s} k_s delta_s^T: the
//     state is read and written once per chunk instead of four times per token, and the
//     chunk's products are independent of each other (prefill).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mt {

inline constexpr uint32_t kDeltaChunk = 64;

// One head's inputs for n tokens: row t of q / k (dk floats) at q + t * qk_stride, of v
// (dv floats) at v + t * v_stride, g and beta at g[t * gb_stride], beta[t * gb_stride];
// output row t (dv floats) at out + t * out_stride.
struct DeltaRun {
  uint32_t n = 0, dk = 0, dv = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  size_t qk_stride = 0;
  const float* v = nullptr;
  size_t v_stride = 0;
  const float* g = nullptr;
  const float* beta = nullptr;
  size_t gb_stride = 0;
  float scale = 1.0f;
  float* out = nullptr;
  size_t out_stride = 0;
};

// state: dv x dk floats (transposed, see above), updated in place.
void delta_rule_recurrent(const DeltaRun& run, float* state);
void delta_rule_chunked(const DeltaRun& run, float* state);

}  // namespace mt
