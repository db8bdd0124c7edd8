// Prefill quantized products on int8 tensor cores (MMQ): Y = X . W^T with the weights kept
// in their GGUF blocks and X quantized once to int8 (cuda/kernels/mmvq_kernels.h Q8_1Rows, in
// the activation mode the CPU pairs with the weight type), the integer dot of every
// 32-element sub-block exact (mma.sync m16n8k32 s8), scaled in f32 by the weight
// sub-block's scale and the activation block's d (minus the K-quant min term).
//
// The routed form (mmq_experts) never synchronizes with the host and never loops over
// experts on the host: the slots are counting-sorted by expert on the device into a
// table of column tiles (expert, first sorted position, slot count <= tile width), and
// one GEMM launch with a grid sized by the table's upper bound (n_out / 128 row tiles x
// (ceil(n_slots / tile) + n_expert) column tiles) reads its tile from the table; CTAs
// past the table's real length return. So a routed product is three launches of fixed
// shape (quantize, route, GEMM), capturable in a CUDA graph.
//
// Contract as cuda/kernels/matmul.h: slot s = t * K + k uses matrix ids[s] (device), X row t
// (x_per_slot false) or s (true), writes Y row s; a negative id skips its slot (Y row
// untouched); an id >= n_mat is a broken invariant (the route kernel traps).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "quant/types.h"

namespace mt::cuda {

// Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K.
bool mmq_supports(QuantType type);

// True when mmq() / mmq_experts() (K slots per token) take these shapes: a supported
// type, at most 65535 activation rows, and (routed) at most 8192 matrices and a tile
// table within the grid's 65535 columns. matmul()/matmul_experts() use gemm otherwise.
bool mmq_fits(const DeviceMatrix& w, int n_tokens);
bool mmq_experts_fits(const DeviceMatrix& w, int n_tokens, int K);

// Dense: Y (n_tokens, n_out) = X (n_tokens, n_in) . W[mat]^T.
void mmq(const DeviceMatrix& w, int64_t mat, const float* x, int n_tokens, float* y, Workspace& ws,
         cudaStream_t stream);

// Routed: Y (n_tokens * K, n_out), X (x_per_slot ? n_tokens * K : n_tokens, n_in).
void mmq_experts(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                 cudaStream_t stream);

// The same with a chosen column-tile width (16, 32 or 64 slots; 0 = the default choice
// from the average slots per expert). For bench/cuda_tune.
void mmq_experts_tiled(const DeviceMatrix& w, const RoutedSlots& r, const float* x, float* y, Workspace& ws,
                       cudaStream_t stream, int tile_cols);

// Workspace bytes mmq() (K <= 1) or mmq_experts() (K slots per token, either x_per_slot,
// any tile width) take for these shapes; 0 for an unsupported type.
size_t mmq_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K);

}  // namespace mt::cuda
