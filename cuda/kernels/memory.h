// Device memory for the CUDA backend: owned buffers (RAII over cudaMalloc) and a bump
// Workspace for per-step scratch (quantized activations, dequantized tiles, attention
// partials), reset at the start of each forward step. A workspace that runs out aborts
// with file:line: its size is the executor's invariant, computed from the shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/check.h"

namespace mt::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // aborts when cudaMalloc refuses
  // The non-aborting form: an empty buffer and the error when cudaMalloc refuses.
  static DeviceBuffer try_allocate(size_t bytes, cudaError_t* error);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class Workspace {
 public:
  explicit Workspace(size_t bytes) : buf_(bytes) {}
  // `bytes` of scratch aligned to `align`, valid until reset().
  void* take(size_t bytes, size_t align = 256);
  template <class T> T* take_n(size_t n) { return static_cast<T*>(take(n * sizeof(T))); }
  void reset() { used_ = 0; }
  // Scratch taken after mark() is given back by rewind(mark): a call's temporaries live
  // only as long as its own launches (same stream), so the caller rewinds after it.
  size_t mark() const { return used_; }
  void rewind(size_t mark) { used_ = mark; }
  size_t used() const { return used_; }
  size_t capacity() const { return buf_.bytes(); }

 private:
  DeviceBuffer buf_;
  size_t used_ = 0;
};

}  // namespace mt::cuda
