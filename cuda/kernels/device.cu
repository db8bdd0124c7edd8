#include <cuda_runtime.h>

#include <cstdio>

#include "cuda/kernels/device.h"

namespace mt::cuda {

std::string describe_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
  if (count == 0) return "no CUDA device";
  std::string out = std::to_string(count) + (count == 1 ? " device:" : " devices:");
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char buf[512];
    std::snprintf(buf, sizeof buf, " %s%s (sm_%d%d, %.1f GiB)", i ? "; " : "", prop.name, prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    out += buf;
  }
  return out;
}

}  // namespace mt::cuda
