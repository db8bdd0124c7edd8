// Quantized matrix products on the device. A weight tensor is n_mat matrices of n_out
// rows by n_in columns, each row in its GGUF block layout (row_bytes), matrix m at
// data + m * matrix_bytes: exactly the file's bytes, uploaded unchanged.
//   Y (n_tokens, n_out) = X (n_tokens, n_in, f32) . W[m]^T
// Kernels:
//   mmvq:  decode / small batches: each weight row read once for all tokens; X quantized
//          once per row exactly as the CPU's paired activation type (Q8_0 / Q8_1 / Q8_K,
//          cuda/kernels/mmvq_kernels.h) for the quantized types, dot products in int8 (dp4a);
//          F32, F16 and BF16 weights read X in f32.
//   mmq:   prefill, quantized types it supports: int8 tensor cores on the same activation
//          quantization (cuda/kernels/mmq.h), routed products sorted by expert on the device.
//   gemm:  prefill, the other types: the weights dequantized to F16/BF16 tiles in the
//          workspace, cuBLAS with f32 accumulation.
// The *_experts forms run one launch over the slots of a routed batch: slot s = t * K + k
// uses matrix ids[s] (device memory) and X row t (x_per_slot = false: every expert of a
// token reads the token's row) or row s (true), writing Y row s.
// matmul()/matmul_experts() pick the kernel from the per-architecture threshold table
// (cuda/kernels/dispatch.h), never from a constant in the executor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/memory.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/types.h"

namespace mt::cuda {

struct DeviceMatrix {
  QuantType type = QuantType::F32;
  const uint8_t* data = nullptr;     // device
  int64_t n_in = 0, n_out = 0, n_mat = 1;
  uint64_t row_bytes = 0, matrix_bytes = 0;
};

inline constexpr int kMmvqMaxTokens = 8;

// The slots of a routed batch (the *_experts products): slot s = t * K + k (t < n_tokens,
// k < K) reads matrix ids[s] (device memory) and X row x_per_slot ? s : t, and writes Y
// row s.
struct RoutedSlots {
  const int32_t* ids = nullptr;
  int n_tokens = 0;
  int K = 1;
  bool x_per_slot = false;
  // Optional: ids grouped by expert beforehand (launch_expert_groups over the same ids and
  // w.n_mat, cuda/kernels/mmvq_kernels.h), so products that share a layer's routing share
  // one table; nullptr: the grouped mmvq builds its own where it applies.
  const int32_t* groups = nullptr;
};

// True when the device kernels support the type (every type the CPU computes).
bool supports(QuantType type);
// True when mmvq quantizes the activations for this weight type (every supported type but
// F32, F16 and BF16, which read f32 rows): the types ActRows' quantized rows can serve.
bool quantizes_activations(QuantType type);

void mmvq(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
          cudaStream_t stream);
void mmvq_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                  cudaStream_t stream);

void gemm(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
          cudaStream_t stream);
void gemm_experts(const DeviceMatrix& w, const RoutedSlots& slots, const float* x, float* y, Workspace& ws,
                  cudaStream_t stream);

void matmul(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
            cudaStream_t stream);
void matmul_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                    cudaStream_t stream);

// Activation rows that may already be quantized (by add_rms_norm_quant, cuda/kernels/ops.h): a
// product whose kernel is mmvq and whose weight type pairs with `mode` (act_quant_for)
// reads qs / meta instead of quantizing x again; any other product reads x. Same
// results either way (the quantization is the same function of x).
struct ActRows {
  const float* x = nullptr;  // (rows, n_in) f32
  int rows = 0;
  bool quantized = false;
  ActQuant mode = ActQuant::kQ8_0;
  const int8_t* qs = nullptr;  // (rows, n_in)
  const uint2* meta = nullptr; // (rows, n_in / 32)
};
void matmul(const DeviceMatrix& w, const ActRows& x, float* y, Workspace& ws, cudaStream_t stream);
// Routed: x_per_slot false, every expert of token t reads row t (x.rows = tokens); true,
// slot s reads row s (x.rows = tokens * K).
void matmul_experts(const DeviceMatrix& w, const int32_t* ids, int K, const ActRows& x, bool x_per_slot, float* y,
                    Workspace& ws, cudaStream_t stream, const int32_t* groups = nullptr);

// Workspace bytes the calls above may take for these shapes (the executor sizes its
// workspace with the largest over its matrices).
size_t matmul_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K);

}  // namespace mt::cuda
