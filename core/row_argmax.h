// Greedy decoding's pick from one row of logits: the id of the greatest value, the lowest
// id among equal maxima; -inf masks a token and NaN is never picked. -1 when no token is
// left (every value -inf or NaN). The scalar reference of the device reduction
// (cuda/kernels/ops.h rows_argmax) and what Sampler::sample returns at temperature 0
// without bias or penalties.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace mt {

inline int32_t row_argmax(std::span<const float> row) {
  // Blocks of kBlock: the block's maximum over independent lanes (vectorizable; NaN never
  // replaces a lane's value), and only a block whose maximum beats the best so far is
  // scanned for its first index of that value (earlier blocks held nothing as large).
  constexpr size_t kBlock = 64, kLanes = 8;
  int32_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t b0 = 0; b0 < row.size(); b0 += kBlock) {
    const size_t n = std::min(kBlock, row.size() - b0);
    const float* x = row.data() + b0;
    float lane[kLanes];
    for (float& l : lane) l = -std::numeric_limits<float>::infinity();
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    }
    for (; i < n; ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    float m = lane[0];
    for (size_t k = 1; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
    if (!(m > best_value)) continue;  // strict: the first of equal maxima stays
    size_t at = 0;
    while (!(x[at] == m)) ++at;  // -0 == +0: the first zero, as a strict scan keeps it
    best_value = m;
    best = static_cast<int32_t>(b0 + at);
  }
  return best;
}

// DataLoss for logits row `row` having no token left (-inf or NaN throughout: broken weights).
inline Status no_token_left(size_t row) {
  return data_loss("logits row " + std::to_string(row) + " is -inf or NaN throughout (broken weights?)");
}

// *ids = row_argmax of each of the n rows of logits (n x n_vocab). DataLoss where a row has
// no token left: logits that are -inf or NaN throughout come from broken weights.
inline Status argmax_rows(std::span<const float> logits, size_t n, std::vector<int32_t>* ids) {
  ids->clear();
  if (n == 0) return {};
  const size_t V = logits.size() / n;
  for (size_t r = 0; r < n; ++r) {
    const int32_t id = row_argmax(logits.subspan(r * V, V));
    if (id < 0) return no_token_left(r);
    ids->push_back(id);
  }
  return {};
}

}  // namespace mt
