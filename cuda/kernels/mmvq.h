// Decode matrix-vector products (MMVQ): Y (n_tokens, n_out) = X (n_tokens, n_in) . W^T for
// n_tokens <= kMmvqMaxTokens, every weight row read from memory once for all tokens.
//
// Quantized weights: the X rows are quantized once per call, in the workspace, to the
// activation type the CPU pairs with the weight (cpu/kernels.h: Q8_0 for Q4_0, Q5_0,
// Q8_0, IQ4_NL, MXFP4; Q8_1 for Q4_1, Q5_1; Q8_K for the K-quants and IQ4_XS), its quants
// and scales bit for bit quant/'s reference quantizer's (cuda/kernels/mmvq_kernels.h ActQuant),
// and each weight block is dotted in int8 (__dp4a) as cpu/'s scalar kernels define it:
// the integer sums are the CPU's, only float summation order differs (and, for Q4_1 /
// Q5_1, the s = d * sum of each activation block, which the device rounds to half from
// the half-rounded d where the CPU starts from the f32 d: cuda/kernels/mmvq_kernels.h). F32 / F16 / BF16 weights read X in f32. A warp per pair of weight
// rows (cuda/kernels/mmvq_common.cuh); the routed form reads each slot's expert id on the
// device, so a decode step's K experts are one launch and no host sync.
//
// supports(), mmvq() and mmvq_experts() are declared in cuda/kernels/matmul.h. Extension of the
// routed form: an id < 0 skips its slot (Y row untouched); an id >= n_mat writes NaN.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmvq_kernels.h"

namespace mt::cuda {

// Workspace bytes mmvq() (K <= 1) or mmvq_experts() (K slots per token, either
// x_per_slot) take for these shapes: the quantized activation rows; 0 for float weights.
size_t mmvq_workspace_bytes(const DeviceMatrix& w, int n_tokens, int K);

// X (rows, n_in) f32 -> the activation quantization `mode` in structure-of-arrays form
// (cuda/kernels/mmvq_kernels.h): qs (rows, n_in) int8 and meta (rows, n_in / 32) uint2 = {f32
// bits of d, int16 sums of quants 0..15 | 16..31 << 16}. Row r's quants and d equal
// quant/'s quantize_row of Q8_0 / Q8_1 (d = float of the half d) or Q8_K (d repeated
// per 32) on row r. n_in a multiple of 32 (kQ8_K: 256); qs 16-byte aligned, meta 8.
void quantize_act(const float* x, int rows, int n_in, ActQuant mode, int8_t* qs, uint2* meta, cudaStream_t stream);

// mmvq / mmvq_experts over activation rows quantized beforehand in
// act_quant_for(w.type)'s mode (quantize_act's layout; n_tokens rows).
void mmvq_quantized(const DeviceMatrix& w, int64_t mat, const int8_t* qs, const uint2* meta, int n_tokens, float* y,
                    cudaStream_t stream);
void mmvq_experts_quantized(const DeviceMatrix& w, const RoutedSlots& r, const int8_t* qs, const uint2* meta,
                            float* y, Workspace& ws, cudaStream_t stream);

// True when a routed product of n_tokens tokens over w groups its slots by expert
// (MOETIER_CUDA_MMVQ_GROUPED, default from 24 tokens; quantized types, n_mat <=
// kMaxGroupedMatrices): each selected matrix read once for its slots, any number of
// tokens in one launch (no chunks of kMmvqMaxTokens).
bool mmvq_groups_slots(const DeviceMatrix& w, int n_tokens);
// Overrides MOETIER_CUDA_MMVQ_GROUPED for the process (0: never group).
void set_mmvq_grouped(int min_tokens);
// The process's current setting (0: never group).
int mmvq_grouped_from();

// Overrides MOETIER_CUDA_MMVQ_WIDE16 (one-token rows of fewer than 16 tasks with a lane per
// task, up to 16 lanes per row group; on by default) for the process. The sums are those
// of the narrow lanes in another order: a narrow lane accumulates its tasks one after
// another, a wide group adds one task per lane in its reduction tree (the last bits differ).
void set_mmvq_wide16(bool on);
// Overrides MOETIER_CUDA_MMVQ_SPLIT (one-token rows of more than 32 tasks over up to
// `warps` warps, 2 or 4 (the default); 0 / 1: one warp) for the process. The same sums in another
// order: each warp's partial, then the warps' partials added in shared memory.
void set_mmvq_split(int warps);

}  // namespace mt::cuda
