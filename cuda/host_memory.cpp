#include "cuda/host_memory.h"

#include <cuda_runtime.h>

#include <string>

namespace mt::cuda {

void* CudaPinnedAllocator::allocate_pinned(uint64_t bytes, std::string* why) {
  if (bytes > limit_ || allocated_ > limit_ - bytes) {
    if (why != nullptr) *why = "refused: the pin limit of " + std::to_string(limit_) + " bytes would be exceeded";
    return nullptr;
  }
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    if (why != nullptr) *why = std::string("cudaHostAlloc: ") + cudaGetErrorString(err);
    return nullptr;
  }
  allocated_ += bytes;
  return p;
}

void CudaPinnedAllocator::free_pinned(void* p, uint64_t bytes) {
  if (p == nullptr) return;
  cudaFreeHost(p);
  allocated_ -= bytes;
}

Status register_host_range(void* p, uint64_t bytes) {
  const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return io_error(std::string("cudaHostRegister of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorString(err));
  }
  return {};
}

void unregister_host_range(void* p) { cudaHostUnregister(p); }

StatusOr<DeviceMemory> device_memory(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    cudaGetLastError();
    return not_found("no CUDA device " + std::to_string(device));
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return not_found("cannot query CUDA device");
  DeviceMemory m;
  m.name = prop.name;
  m.sm = prop.major * 10 + prop.minor;
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
  cudaSetDevice(prev);
  if (err != cudaSuccess) return io_error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(err));
  m.total = total_b;
  m.free = free_b;
  return m;
}

}  // namespace mt::cuda
