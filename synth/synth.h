// write_model: a SynthConfig becomes a GGUF file of its architecture, with the keys and
// tensor names llama.cpp's loader expects (../shared/reference/moe_arch_facts.md).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "synth/config.h"

namespace mt::synth {

struct SynthSummary {
  uint64_t file_bytes = 0;
  uint64_t n_params = 0;
  uint32_t n_vocab = 0;
  uint32_t n_tensors = 0;
};

struct WriteParams {
  std::string path;
  bool progress = false;
};

StatusOr<SynthSummary> write_model(const SynthConfig& config, const WriteParams& params);

}  // namespace mt::synth
