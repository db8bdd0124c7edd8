// Measuring the kernel-choice table on the GPU at hand (`moetier tune`, and the
// moetier_cuda_tune benchmark): where mmq (int8 tensor cores) and gemm (dequant + cuBLAS)
// overtake mmvq, for dense and routed products on qwen3-30b-a3b's shapes, how close mmq
// and the gemm path come to cuBLAS's own F16 rate, and the rows of
// cuda/dispatch_sm<NN>.inc, printed and optionally written to a file (checked in per GPU
// architecture; cuda/kernels/dispatch.cpp includes it). Host-only header.
#pragma once

#include <string>

namespace mt::cuda {

struct TuneOptions {
  std::string inc_path;           // non-empty: write the table rows there
  bool dense_mmq_always = true;   // dense_mmq_max_tokens = kNoLimit (CPU numerics), else measured
};

// Runs on the current device; returns a process exit status (CUDA failures abort with
// file:line, as every CUDA call here).
int run_tune(const TuneOptions& options);

}  // namespace mt::cuda
