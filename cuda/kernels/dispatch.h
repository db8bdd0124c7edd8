// Kernel choice for matmul()/matmul_experts() (cuda/kernels/matmul.h): mmvq serves n_tokens up to
// a limit; above it the routed product takes mmq (int8 tensor cores, cuda/kernels/mmq.h) when it
// supports the weight type, else gemm_experts; the dense product takes mmq up to a second
// limit, then gemm (dequant + cuBLAS). The limits are data, measured per GPU architecture
// (sm = major * 10 + minor), per weight type and per kernel family (dense matrices,
// routed experts) by bench/cuda_tune; an architecture or type that was not measured gets
// kMmvqMaxTokens for mmvq and no limit for dense mmq. mmvq calls are cut into chunks of
// at most kMmvqMaxTokens tokens, so a limit above it is honoured too.
#pragma once

#include <climits>
#include <cstddef>

#include "cuda/kernels/matmul.h"
#include "quant/types.h"

namespace mt::cuda {

// A dense_mmq_max_tokens that never sends a product on to gemm.
inline constexpr int kNoLimit = INT_MAX;

// One row of the threshold table.
struct DispatchRow {
  int sm;
  QuantType type;
  int dense_max_tokens;      // matmul: the largest n_tokens for mmvq
  int experts_max_tokens;    // matmul_experts: the largest n_tokens for mmvq
  int dense_mmq_max_tokens;  // matmul: the largest n_tokens for mmq (above: gemm)
};

// Compute capability of the current device as major * 10 + minor (cached per device).
int current_sm();

// The table's mmvq limit for (sm, type, family); kMmvqMaxTokens when there is no row.
int mmvq_max_tokens(int sm, QuantType type, bool experts);

// The table's dense mmq limit for (sm, type); kNoLimit when there is no row.
int dense_mmq_max_tokens(int sm, QuantType type);

// mmvq / mmvq_experts over any n_tokens, in chunks of at most kMmvqMaxTokens tokens (the
// workspace is rewound between chunks).
void mmvq_chunked(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
                  cudaStream_t stream);
void mmvq_experts_chunked(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                          cudaStream_t stream);

// True when matmul_experts over w takes the grouped mmvq at n_tokens (the table's mmvq
// limit and mmvq_groups_slots): the products a layer's routing table can serve.
bool matmul_experts_grouped(const DeviceMatrix& w, int n_tokens);

// True for the types gemm / gemm_experts take (every type of cuda/kernels/dequant.cuh).
bool gemm_supports(QuantType type);

// Workspace bytes of gemm (w.n_mat == 1) or of gemm_experts and gemm (w.n_mat > 1) for
// n_tokens tokens and K slots per token (cuda/kernels/gemm.cu).
size_t gemm_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K);

}  // namespace mt::cuda
