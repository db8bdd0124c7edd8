// Internal to model/: the attention pieces shared by the grouped-query block
// (attention.cpp) and the latent (MLA) block (attention_mla.cpp).
//
// attend_all: causal attention of every row of a batch against its sequence's cache,
// per head, in tiles of consecutive queries (attention.cpp's header says how); the shape
// says how a query head maps onto the cache row: hd_k dims dotted with the K part of
// kv head h / group at byte k_head_bytes * (h / group), hd_v value dims read at
// v_head_bytes * (h / group) of the V row (for a latent cache the V row is the K row and
// the value its leading hd_v dims).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/layers.h"

namespace mt {

struct AttendShape {
  uint32_t hd_k = 0, hd_v = 0;   // query/key dims and value dims per head
  uint32_t group = 1;            // query heads per cache head
  size_t k_head_bytes = 0, v_head_bytes = 0;
  float kq_scale = 1.0f;
  uint32_t window = 0;           // sliding window: position p sees (p - window, p] (0: all)
  const float* sinks = nullptr;  // per query head: a logit in the softmax's denominator only
};

// q: (n_tokens, q_row) with head h at h * hd_k; out: (n_tokens, out_row), head h at h * hd_v.
void attend_all(const BlockArgs& a, const AttendShape& shape, const float* q, size_t q_row, float* out, size_t out_row);

// cos and sin of the n_rot / 2 rotation angles of position pos: theta_k = pos * scale *
// base^(-2k / n_rot), or YaRN's mix (HParams), each times the rope's attention factor.
void rope_angles(const HParams& hp, uint32_t n_rot, uint32_t pos, float* cos_out, float* sin_out);
// Rotates the first n_rot dims of each of n_heads heads of head_dim floats.
void rope_apply(float* x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, RopeStyle style, const float* c,
                const float* s);

inline void trace_rows(Trace* trace, const char* name, const BlockArgs& a, const float* rows, size_t n) {
  if (trace == nullptr) return;
  for (uint32_t t = 0; t < a.n_tokens; ++t) trace->tensor(name, a.layer, a.pos(t), {rows + t * n, n});
}

}  // namespace mt
