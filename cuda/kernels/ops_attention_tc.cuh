// The two prefill kernels behind attention() (cuda/kernels/ops.h) and the choice between them:
// the tensor-core flash attention (ops_attention_tc.cu) takes every call it fits (an F16
// cache, head_dim 64, 128 or 256, 16-byte aligned rows, a device with sm_80+ code for it);
// the f32 tiled kernel (ops_attention_prefill.cu) takes the rest (F32 and Q8_0 caches,
// other head dims).
//
// Host-only header (no device code): the tests and the benchmark include it to run either
// kernel on the same call. The tensor-core kernel rounds q and the softmax numerators to
// f16 for its matrix products (as the CPU's F16-cache attention does, model/attention.cpp)
// and keeps scores, the softmax state and the output in f32.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/ops.h"
#include "quant/types.h"

namespace mt::cuda {

// kTensorCore: the block shape attention() uses; the 64/128-row ones pin it (tuning).
enum class PrefillKernel { kSimt, kTensorCore, kTensorCore64Rows, kTensorCore128Rows };

// Whether the tensor-core kernel takes this call (the shape checks of attention() aside).
bool attention_prefill_tc_fits(const AttentionArgs& a);

// attention() on the prefill path with a chosen kernel, whatever n_tokens (>= 1);
// kTensorCore requires attention_prefill_tc_fits(a). Takes no workspace.
void attention_prefill_with(PrefillKernel kernel, const AttentionArgs& a, cudaStream_t stream);

namespace detail {

struct AttnGeom;  // cuda/kernels/ops_attention.cuh

bool attention_prefill_tc_fits(QuantType kv_type, const AttnGeom& g);
// block_rows: query rows per block, 64 or 128; 0 picks by head_dim.
void attention_prefill_tc(const AttnGeom& g, cudaStream_t stream, int block_rows = 0);  // ops_attention_tc.cu
void attention_prefill_simt(QuantType kv_type, const AttnGeom& g, cudaStream_t stream);

}  // namespace detail
}  // namespace mt::cuda
