// The model's sizes other than the routed experts (experts/planner.h ModelSizes), from a
// GGUF's tensor table and hyper-parameters alone (a `synth --sparse` file works): the
// planner's and the simulator's picture of the dense weights, the shared experts, the
// token embedding and the KV cache per token.
#pragma once

#include "core/status.h"
#include "experts/planner.h"
#include "gguf/reader.h"

namespace mt::cli {

StatusOr<ModelSizes> read_model_sizes(const gguf::GgufFile& file);

}  // namespace mt::cli
