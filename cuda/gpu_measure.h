// The GPU half of the hardware profile (experts/hw_profile.h): host-to-device copy
// bandwidth from pinned (cudaHostAlloc) and pageable (malloc) memory for copy sizes from
// 64 KiB to 256 MiB, and the device memory bandwidth (a device-to-device copy: bytes read
// plus bytes written over the time). CUDA events around each copy after a warm-up, the
// median of the timed repetitions. Host-only header.
#pragma once

#include "core/status.h"
#include "experts/hw_profile.h"

namespace mt::cuda {

struct GpuMeasureOptions {
  int device = 0;
  int reps = 5;
  bool quick = false;  // sizes up to 16 MiB, 2 repetitions
};

StatusOr<GpuProfile> measure_gpu_profile(const GpuMeasureOptions& options);

}  // namespace mt::cuda
