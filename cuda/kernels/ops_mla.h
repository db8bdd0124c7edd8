// Multi-head latent attention on the device (deepseek2; model/attention_mla.cpp is the
// twin, cuda/sequence_mla.cpp the caller). The cache holds one latent row per position:
// kv_lora_rank (R) normed latent dims then n_rot (P) roped dims, as the CPU's KvCache
// stores a row of kv_dim = R + P (F16, Q8_0 or F32; no V rows). Every head attends to
// that one row (MQA): its query is [wk_b[h] . q_nope_h | rope(q_pe_h)] (R + P), its value
// the row's latent part (R). Every pointer is device memory, every launch on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/memory.h"
#include "quant/types.h"

namespace mt::cuda {

// The rotation angles of model/attention.cpp rope_angles for n_rot dims, as the device
// takes them: theta_scale = freq_base^(-2 / n_rot) (the CPU's float expression), plain
// (theta_k = pos * freq_scale * theta_scale^k, cos and sin times attn_factor) or YaRN
// (yarn_ext != 0: the ramp over [yarn_lo, yarn_hi], cos and sin times yarn_mscale). A
// model's values: cuda/kernel_params.h mla_rope.
struct MlaRope {
  float theta_scale = 1.0f, freq_scale = 1.0f, attn_factor = 1.0f;
  float yarn_ext = 0.0f, yarn_lo = 0.0f, yarn_hi = 0.0f, yarn_mscale = 1.0f;
};

// Up to this many query tokens mla_attention splits the positions into chunks (a second
// launch merges them); a position read on the device (pos_dev) is for such batches only.
inline constexpr int kMlaDecodeMaxTokens = 8;

// Per token t at position pos = (pos_dev ? *pos_dev : pos0) + t:
//   cache row pos <- [rms_norm(c_t[0, R)) * kv_norm | rope(c_t[R, R + P))]   (kv_store's bytes)
//   q_nope (T * H, nope) <- each head's first nope dims of q_t
//   q_pe   (T * H, P)    <- each head's last P dims of q_t, roped
// RoPE is NORM style (adjacent pairs) at the angles of `rope`; the norm's square sum in
// double, the rotation in explicitly rounded float operations (cuda/kernels/ops_norm_rope.cu).
struct MlaPrepArgs {
  const float* c = nullptr;        // (T, c_stride) rows [latent (R) | k_pe (P)]
  int64_t c_stride = 0;
  const float* kv_norm = nullptr;  // (R) kv_a_norm
  float eps = 1e-6f;
  const float* q = nullptr;        // (T, q_stride) rows, per head [nope | pe] (nope + P)
  int64_t q_stride = 0;
  int n_tokens = 0, n_head = 0, R = 0, P = 0, nope = 0;
  MlaRope rope;
  uint32_t pos0 = 0;
  const uint32_t* pos_dev = nullptr;
  float* q_nope = nullptr;         // (T * H, nope)
  float* q_pe = nullptr;           // (T * H, P)
  uint8_t* cache = nullptr;        // (n_ctx, R + P) rows of kv_type, row_bytes apart
  QuantType kv_type = QuantType::F16;
  uint64_t row_bytes = 0;
};
void mla_prep(const MlaPrepArgs& a, cudaStream_t stream);

// Causal MQA over the latent rows (model/attention.cpp attend_tile's math for the latent
// shape): query (t, h) = [q_lat | q_pe] (R + P), first rounded to the cache's activation
// type as the CPU rounds it before its K dots (F16: to half; Q8_0: quantized to q8_0
// blocks and back; F32: as is), attends to rows [0, pos + 1) with scores dot * scale, a
// softmax in f32 (online, never the whole score matrix), value = the row's first R dims;
// out (T, H, R). Up to kMlaDecodeMaxTokens tokens the positions are split in chunks
// (partials in the workspace, merged by a second launch); with pos_dev the split is sized
// for n_kv_cap positions (pos + n_tokens <= n_kv_cap). R <= 1024, P <= 256.
struct MlaAttentionArgs {
  const float* q_lat = nullptr;    // (T, H, R) absorbed queries
  const float* q_pe = nullptr;     // (T, H, P) roped
  const uint8_t* cache = nullptr;  // (n_ctx, R + P) rows
  QuantType kv_type = QuantType::F16;
  uint64_t row_bytes = 0;
  int n_tokens = 0, n_head = 0, R = 0, P = 0;
  float scale = 1.0f;
  uint32_t pos0 = 0;
  const uint32_t* pos_dev = nullptr;
  uint32_t n_kv_cap = 0;
  float* out = nullptr;            // (T, H, R)
};
void mla_attention(const MlaAttentionArgs& a, Workspace& ws, cudaStream_t stream);
// Workspace bytes mla_attention() takes for any call of at most n_tokens tokens.
size_t mla_attention_workspace_bytes(int n_tokens, int n_head, int R);

}  // namespace mt::cuda
