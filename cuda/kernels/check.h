// MT_CUDA_CHECK: every CUDA runtime call is checked; a failure aborts with file:line and
// the CUDA error string (a broken invariant of the backend, not bad input).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define MT_CUDA_CHECK(call)                                                                \
  do {                                                                                     \
    cudaError_t mt_err_ = (call);                                                          \
    if (mt_err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: CUDA call failed: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(mt_err_));                                           \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
