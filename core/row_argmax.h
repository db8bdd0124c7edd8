// Greedy decoding's pick from one row of logits: the id of the greatest value, the lowest
// id among equal maxima; -inf masks a token and NaN is never picked. -1 when no token is
// left (every value -inf or NaN). The scalar reference of the device reduction
// (cuda/kernels/ops.h rows_argmax) and what Sampler::sample returns at temperature 0
// without bias or penalties.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace mt {

inline int32_t row_argmax(std::span<const float> row) {
  int32_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] > best_value) {  // strict: the first of equal maxima stays; NaN compares false
      best_value = row[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// *ids = row_argmax of each of the n rows of logits (n x n_vocab). DataLoss where a row has
// no token left: logits that are -inf or NaN throughout come from broken weights.
inline Status argmax_rows(std::span<const float> logits, size_t n, std::vector<int32_t>* ids) {
  ids->clear();
  if (n == 0) return {};
  const size_t V = logits.size() / n;
  for (size_t r = 0; r < n; ++r) {
    const int32_t id = row_argmax(logits.subspan(r * V, V));
    if (id < 0) return data_loss("logits row " + std::to_string(r) + " is -inf or NaN throughout (broken weights?)");
    ids->push_back(id);
  }
  return {};
}

}  // namespace mt
