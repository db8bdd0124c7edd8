// Programmatic dependent launch (sm_90): a decode step is ~14 launches per layer whose
// weights take 0.3-4 us each at the device's bandwidth, so the gap between one kernel's
// last CTA and the next kernel's first load is a large share of the step. A kernel
// launched by launch_dependent() may start while the kernel before it in the stream still
// runs: its CTAs become resident once every CTA of that kernel has started (pdl_trigger),
// do the work that needs none of its results (a dense product's L2 prefetch of its weight
// rows), then pdl_wait() until that kernel has finished and its writes are visible.
//
// The rule that keeps it correct: a kernel launched with launch_dependent() calls
// pdl_wait() in every CTA before it reads anything an earlier kernel wrote or writes
// anything an earlier kernel reads (so a chain of them is ordered as plain launches are);
// pdl_trigger() may come anywhere. Here every such kernel calls pdl_start() (the wait,
// then the trigger) first, after at most an L2 prefetch of its weights. Off without
// MOETIER_CUDA_PDL=1 or on a device below compute capability 9.0: then the attribute is
// not set and both calls are no-ops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/check.h"

namespace mt::cuda {

// MOETIER_CUDA_PDL (see pdl.cpp for the default) on a device of compute capability >= 9.0.
bool pdl_on();
// Overrides MOETIER_CUDA_PDL for the process (tests, A/B runs); a graph captured before
// keeps the launches it was captured with.
void set_pdl(bool on);
// Launches made with the attribute set since the process began (the tests' check that the
// dependent path ran); count_dependent_launch() counts one.
uint64_t pdl_dependent_launches();
void count_dependent_launch();

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// What every kernel launched dependent here does first (after any prefetch of bytes no
// earlier kernel writes): wait for the kernel before, then let the next one launch.
__device__ __forceinline__ void pdl_start() {
  pdl_wait();
  pdl_trigger();
}
// An L2 prefetch of the bytes [p, p + n) (the lanes of a group of `lanes` take every
// lanes-th 128-byte line from `lane`).
__device__ __forceinline__ void prefetch_l2(const void* p, uint64_t n, int lane, int lanes) {
  const char* c = static_cast<const char*>(p);
  for (uint64_t off = static_cast<uint64_t>(lane) * 128; off < n; off += static_cast<uint64_t>(lanes) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
  }
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// pdl_on(); the kernel must follow the rule above.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_on() ? 1 : 0;
  if (cfg.numAttrs > 0) count_dependent_launch();
  MT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
#endif

}  // namespace mt::cuda
