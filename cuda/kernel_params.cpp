// HParams -> the kernels' parameter structs (cuda/kernel_params.h).
#include "cuda/kernel_params.h"

#include <cmath>

#include "core/check.h"

namespace mt::cuda {

MlaRope mla_rope(const HParams& hp, int n_rot) {
  MT_CHECK(n_rot > 0 && n_rot % 2 == 0);
  MlaRope r;
  r.theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(n_rot));
  r.freq_scale = hp.rope_freq_scale;
  r.attn_factor = hp.rope_attn_factor;
  if (hp.yarn_ext != 0.0f) {
    const RopeYarn y = rope_yarn(hp, static_cast<uint32_t>(n_rot));
    r.yarn_ext = hp.yarn_ext, r.yarn_lo = y.lo, r.yarn_hi = y.hi, r.yarn_mscale = y.mscale;
  }
  return r;
}

}  // namespace mt::cuda
