// The delta rule's chunked form on the device (cuda/kernels/ops_gdn_chunk.cu): the prefill twin of
// model/delta_rule.h's delta_rule_chunked, with the arguments, state layout and results of
// cuda/kernels/ops.h's delta_rule (which hands it the runs of kChunkedMinTokens tokens or more).
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/ops.h"

namespace mt::cuda {

void delta_rule_chunked(const DeltaRuleArgs& a, cudaStream_t stream);

}  // namespace mt::cuda
