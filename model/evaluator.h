// Evaluator: one sequence turning its tokens into logits, a device model's per-sequence
// object: the CPU Session (model/model.h) and the CUDA model's sequences
// (cuda/cuda_model.h), which the CUDA backend (cuda/cuda_backend.h) drives. Commands and
// the server do not use it: they evaluate through the batched Backend (backend/backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/row_argmax.h"
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
  // The same evaluation, returning only each row's row_argmax (core/row_argmax.h: greedy
  // decoding's pick) into *ids instead of its logits. The default evaluates the logits and
  // scans them here; a device sequence reduces the rows where they are, so only the ids
  // cross to the host. A row with no token left (all -inf or NaN) is DataLoss.
  virtual Status feed_argmax(std::span<const int32_t> tokens, bool all_logits, std::vector<int32_t>* ids,
                             Trace* trace = nullptr) {
    MT_RETURN_IF_ERROR(feed(tokens, all_logits, &argmax_scratch_, trace));
    return argmax_rows(argmax_scratch_, all_logits ? tokens.size() : 1, ids);
  }
  virtual uint32_t position() const = 0;
  virtual uint32_t n_ctx() const = 0;

 protected:
  std::vector<float> argmax_scratch_;  // feed_argmax's logits
};

}  // namespace mt
