#include "cuda/host_memory.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/check.h"

namespace mt::cuda {

StatusOr<PinMode> pin_mode_from_env() {
  const char* v = std::getenv("MOETIER_PIN_MODE");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "register") return PinMode::kRegister;
  if (std::string_view(v) == "alloc") return PinMode::kAlloc;
  return invalid_argument(std::string("MOETIER_PIN_MODE='") + v + "' is not alloc or register");
}

CudaPinnedAllocator::~CudaPinnedAllocator() {
  // Whatever is still mapped was leaked by a caller; unmap it rather than keep it.
  for (auto& [p, m] : mapped_) {
    if (m.registered) cudaHostUnregister(p);
    munmap(p, m.bytes);
  }
}

bool CudaPinnedAllocator::take(uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > limit_ || allocated_ > limit_ - bytes) {
    if (why != nullptr) *why = "refused: the pin limit of " + std::to_string(limit_) + " bytes would be exceeded";
    return false;
  }
  allocated_ += bytes;
  return true;
}

uint64_t CudaPinnedAllocator::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

void* CudaPinnedAllocator::allocate_pinned(uint64_t bytes, std::string* why) {
  if (!take(bytes, why)) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    if (why != nullptr) *why = std::string("cudaHostAlloc: ") + cudaGetErrorString(err);
    std::lock_guard<std::mutex> lock(mu_);
    allocated_ -= bytes;
    return nullptr;
  }
  return p;
}

void* CudaPinnedAllocator::reserve(uint64_t bytes, std::string* why) {
  if (mode_ == PinMode::kAlloc) return allocate_pinned(bytes, why);
  if (!take(bytes, why)) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    if (why != nullptr) *why = std::string("mmap of ") + std::to_string(bytes) + " bytes: " + std::strerror(errno);
    std::lock_guard<std::mutex> lock(mu_);
    allocated_ -= bytes;
    return nullptr;
  }
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: fewer pages to fault and lock where THP allows
  std::lock_guard<std::mutex> lock(mu_);
  mapped_[p] = {bytes, false};
  return p;
}

Status CudaPinnedAllocator::lock_filled(void* p, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mapped_.find(p);
    if (it == mapped_.end()) return {};  // from cudaHostAlloc: locked already
    MT_CHECK_MSG(!it->second.registered, "a bank locked twice");
  }
  const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return io_error(std::string("cudaHostRegister of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorString(err));
  }
  std::lock_guard<std::mutex> lock(mu_);
  mapped_[p].registered = true;
  return {};
}

void CudaPinnedAllocator::free_pinned(void* p, uint64_t bytes) {
  if (p == nullptr) return;
  bool mapped = false, registered = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mapped_.find(p);
    if (it != mapped_.end()) {
      mapped = true;
      registered = it->second.registered;
      mapped_.erase(it);
    }
    allocated_ -= bytes;
  }
  if (!mapped) {
    cudaFreeHost(p);
    return;
  }
  if (registered) cudaHostUnregister(p);
  munmap(p, bytes);
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
