// Routed expert rows on the CPU, the code every CPU-side expert computation shares
// (internal to model/): the untiered MoE layer (ffn.cpp moe_block), the simulated device
// (offload.cpp) and the CPU's share of a tiered layer (expert_outputs, behind the
// executor's CpuExperts). An expert's rows come out the same bits whichever of them
// computes it: each expert is one run of its tokens' rows in token order, and the
// products are row-wise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/parallel.h"
#include "model/weights.h"

namespace mt {

// u = silu(g) * u (gated) or silu(u) (ungated: g null).
void swiglu(const float* g, float* u, size_t n);

// Expert runs: one active expert's rows [row0, row0 + n) of the gathered input, and the
// tensors its gate, up and down come from (the layer's, or one-matrix views of a slot).
struct ExpertRun {
  const Tensor* gate;
  const Tensor* up;
  const Tensor* down;
  uint64_t matrix;
  uint32_t row0, n;
  uint32_t expert = 0;  // the expert id (matrix is 0 when the run reads a device slot view)
};

// The buffers of one MoE layer-step (rows as in moe_block).
struct ExpertRows {
  const float* in;
  float *g, *u, *d;
  const float* h;
  float *g_sh, *u_sh, *d_sh;
  size_t E, n_ff, n_ff_sh;
  uint32_t T;
};

// Gate and up of the runs (rows [r0, r1), contiguous) and of the shared expert (when
// `shared`) as one pool hand-off, the activation (with gpt-oss's per-expert biases), then
// all their downs as a second.
void expert_rows(const LayerWeights& w, std::span<const ExpertRun> runs, size_t r0, size_t r1, bool shared,
                 const ExpertRows& b, ThreadPool& pool);

}  // namespace mt
