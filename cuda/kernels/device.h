// CUDA device discovery. Host-only header: callers outside cuda/ never include CUDA
// headers (the backend interface hides them).
#pragma once

#include <string>

namespace mt::cuda {

// "1 device: NVIDIA H200 (sm_90, 139.8 GiB)" or "no CUDA device (<reason>)".
std::string describe_devices();

}  // namespace mt::cuda
