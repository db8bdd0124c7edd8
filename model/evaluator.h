// Evaluator: one sequence turning its tokens into logits, a device model's per-sequence
// object: the CPU Session (model/model.h) and the CUDA model's sequences
// (cuda/cuda_model.h), which the CUDA backend (cuda/cuda_backend.h) drives. Commands and
// the server do not use it: they evaluate through the batched Backend (backend/backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace mt {

class Trace;

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Appends tokens at position() and returns their logits: n x n_vocab when all_logits,
  // else the last token's n_vocab.
  virtual Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits,
                      Trace* trace = nullptr) = 0;
  virtual uint32_t position() const = 0;
  virtual uint32_t n_ctx() const = 0;
};

}  // namespace mt
