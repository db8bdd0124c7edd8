#include "cuda/gpu_measure.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/memory.h"

namespace mt::cuda {
namespace {

// Median seconds of one cudaMemcpyAsync of `bytes` from src to dst.
double time_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int reps, cudaStream_t s) {
  cudaEvent_t a, b;
  MT_CUDA_CHECK(cudaEventCreate(&a));
  MT_CUDA_CHECK(cudaEventCreate(&b));
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MT_CUDA_CHECK(cudaEventRecord(a, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    MT_CUDA_CHECK(cudaEventRecord(b, s));
    MT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  MT_CUDA_CHECK(cudaEventDestroy(a));
  MT_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

StatusOr<GpuProfile> measure_gpu_profile(const GpuMeasureOptions& o) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= o.device) {
    cudaGetLastError();
    return not_found("no CUDA device " + std::to_string(o.device));
  }
  MT_CUDA_CHECK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
  const int reps = o.quick ? 2 : std::max(1, o.reps);
  const size_t max_bytes = o.quick ? (16u << 20) : (256u << 20);
  GpuProfile g;
  g.name = prop.name;
  cudaStream_t s;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer dev(2 * max_bytes);
  void* pinned = nullptr;
  if (cudaHostAlloc(&pinned, max_bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(s);
    return io_error("cudaHostAlloc of " + std::to_string(max_bytes) + " bytes failed: cannot measure pinned copies");
  }
  std::vector<uint8_t> pageable(max_bytes, 1);
  std::memset(pinned, 1, max_bytes);
  for (size_t bytes = 64u << 10; bytes <= max_bytes; bytes *= 4) {
    CopyPoint p;
    p.bytes = bytes;
    p.pinned_gbps = static_cast<double>(bytes) / time_copy(dev.get(), pinned, bytes, cudaMemcpyHostToDevice, reps, s) / 1e9;
    p.pageable_gbps =
        static_cast<double>(bytes) / time_copy(dev.get(), pageable.data(), bytes, cudaMemcpyHostToDevice, reps, s) / 1e9;
    g.h2d.push_back(p);
  }
  uint8_t* d = dev.as<uint8_t>();
  const double t = time_copy(d + max_bytes, d, max_bytes, cudaMemcpyDeviceToDevice, reps, s);
  g.device_gbps = 2.0 * static_cast<double>(max_bytes) / t / 1e9;
  cudaFreeHost(pinned);
  MT_CUDA_CHECK(cudaStreamDestroy(s));
  return g;
}

}  // namespace mt::cuda
