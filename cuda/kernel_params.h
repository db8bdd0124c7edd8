// The model's hyperparameters turned into the kernels' plain parameter structs: the
// kernels (cuda/kernels/) take numbers and never a model/ type, so each conversion from
// HParams lives here, above them.
#pragma once

#include "cuda/kernels/ops_mla.h"
#include "model/hparams.h"

namespace mt::cuda {

// The RoPE angles of a latent-attention layer's n_rot dims (even, > 0) as mla_prep takes
// them: the CPU's float expressions (model/attention.cpp rope_angles, model/hparams.h
// rope_yarn).
MlaRope mla_rope(const HParams& hp, int n_rot);

}  // namespace mt::cuda
