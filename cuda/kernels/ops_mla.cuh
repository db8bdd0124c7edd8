// Internal to cuda/kernels/ops_mla*.cu: what the latent prep and attention kernels share (the
// CTA size, the supported latent / rope widths, the warp's Q8_0 block quantizer).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/kernels/ops_device.cuh"

namespace mt::cuda::mla_detail {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kMaxR = 1024, kMaxP = 256;

using detail::q8_0_code;  // cuda/kernels/ops_device.cuh

}  // namespace mt::cuda::mla_detail
