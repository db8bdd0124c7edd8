#include "cuda/kernels/memory.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace mt::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) MT_CUDA_CHECK(cudaMalloc(&p_, bytes));
}

DeviceBuffer DeviceBuffer::try_allocate(size_t bytes, cudaError_t* error) {
  DeviceBuffer b;
  *error = cudaSuccess;
  if (bytes == 0) return b;
  *error = cudaMalloc(&b.p_, bytes);
  if (*error != cudaSuccess) {
    cudaGetLastError();  // clear it so later calls are not blamed
    b.p_ = nullptr;
    return b;
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (p_ != nullptr) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void* Workspace::take(size_t bytes, size_t align) {
  const size_t at = (used_ + align - 1) / align * align;
  if (at + bytes > buf_.bytes()) {
    std::fprintf(stderr, "%s:%d: CUDA workspace exhausted: %zu + %zu bytes > %zu\n", __FILE__, __LINE__, at, bytes,
                 buf_.bytes());
    std::abort();
  }
  used_ = at + bytes;
  return static_cast<char*>(buf_.get()) + at;
}

}  // namespace mt::cuda
