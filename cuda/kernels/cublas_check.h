// MT_CUBLAS_CHECK: every cuBLAS call is checked; a failure aborts with file:line, the call
// and cuBLAS's status name (a broken invariant of the backend, not bad input).
#pragma once

#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>

#define MT_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                         \
    cublasStatus_t mt_st_ = (call);                                                            \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d: cuBLAS call failed: %s: %s\n", __FILE__, __LINE__, #call,   \
                   cublasGetStatusName(mt_st_));                                               \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)
