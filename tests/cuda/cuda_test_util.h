// Helpers of the CUDA tests: skip without a device, device copies of host vectors.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/memory.h"

namespace mt::cuda::test {

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define MT_SKIP_WITHOUT_DEVICE() \
  do {                           \
    if (!::mt::cuda::test::have_device()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// n normal(0, scale) floats.
inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) MT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  if (n > 0) MT_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace mt::cuda::test
