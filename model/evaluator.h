// Evaluator: whatever turns one sequence's tokens into logits: the CPU Session
// (model/model.h) or a device backend's sequence (cuda/cuda_model.h). Callers (run,
// logits, bench, later the server) hold an Evaluator and do not care where it runs.
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
