// The forward pass's other operations on the device, each the twin of a CPU function in
// model/ (named beside it). Every pointer is device memory, every launch goes on
// `stream`, matrices are row-major (rows, cols) f32 unless said otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/mmvq_kernels.h"
#include "quant/types.h"

namespace mt::cuda {

// out (n_ids, n) = rows ids[i] of a table in `type` (the token embedding), dequantized as
// quant/'s reference dequantizer does. Every type cuda::supports() (cuda/kernels/matmul.h).
void get_rows(QuantType type, const uint8_t* table, uint64_t row_bytes, const int32_t* ids, int n_ids, int n,
              float* out, cudaStream_t stream);

// out[r] = core/row_argmax.h's row_argmax of row r of x (rows, n): the lowest index of the
// greatest value, -inf and NaN never picked, -1 for a row without any other value. One
// block per row (greedy decoding's pick without the logits leaving the device).
void rows_argmax(const float* x, int rows, int n, int32_t* out, cudaStream_t stream);

// model/attention.cpp rms_norm, per row: out = x / sqrt(mean(x^2) + eps) * w (w null: no
// weight; w has n entries). Rows are x_stride / out_stride floats apart; out may be x.
// The per-head q/k norm is this with rows = tokens * heads, n = head_dim.
struct RmsNormArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const float* w = nullptr;
  float eps = 1e-6f;
  int rows = 0, n = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
};
void rms_norm(const RmsNormArgs& a, cudaStream_t stream);

// model/attention.cpp rope_angles + rope_apply, in place on x (n_tokens, n_heads, head_dim)
// for positions pos0 + t: the first n_rot dims of each head rotated, NORM (adjacent
// pairs) or NEOX (first half with second half), theta_i = pos * freq_scale *
// freq_base^(-2i / n_rot), angles computed as the CPU computes them.
struct RopeParams {
  int n_rot = 0;  // even, <= head_dim
  uint32_t pos0 = 0;
  float freq_base = 10000.0f, freq_scale = 1.0f;
  bool neox = true;
};
void rope(float* x, int n_tokens, int n_heads, int head_dim, const RopeParams& r, cudaStream_t stream);

// y (rows, n) += b (n) per row; y (n) += x (n).
void add_bias(float* y, const float* b, int rows, int n, cudaStream_t stream);
void add(float* y, const float* x, int64_t n, cudaStream_t stream);

// The KV cache: rows (n_tokens, kv_dim) f32 stored at positions pos0.. of a cache of
// `type` (F16, Q8_0 or F32; row_bytes = row_bytes(type, kv_dim)), as the CPU's KvCache
// stores them (model/kv_cache.cpp: F16 round to nearest even, Q8_0 as quant/'s reference).
void kv_store(QuantType type, const float* rows, int n_tokens, int kv_dim, uint8_t* cache, uint64_t row_bytes,
              uint32_t pos0, cudaStream_t stream);

// Causal attention with GQA over the cache (model/attention.cpp attention): q (n_tokens,
// n_head, head_dim) at positions pos0 + t attends to cache rows [0, pos0 + t]; head h
// reads KV head h / (n_head / n_head_kv); scale 1/sqrt(head_dim); softmax in f32;
// out (n_tokens, n_head * head_dim). Decode (few tokens): split-K flash decoding
// (partial max/sum/accumulators per KV chunk, then a reduction); prefill: tiled, the
// score matrix never materialised whole.
// pos_dev: when set, pos0 is read on the device from *pos_dev (a CUDA graph replays the
// same launches at every step); the decode split is then sized for n_kv_cap positions
// and chunks past the real n_kv do nothing (pos0 + n_tokens must stay <= n_kv_cap).
inline constexpr int kAttnDecodeCounters = 8 * 512;  // (decode tokens <= 8) x (query heads <= 512): quant_counters

// One token of a pass over several sequences: its sequence's cache rows of the layer (K,
// V) and the positions it sees (its position + 1; its own row is written at n_kv - 1).
struct SeqKvRow {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  uint32_t n_kv = 0;
  uint32_t pad = 0;
};
// Decode tokens of different sequences in one attention launch (AttentionArgs seq_rows).
inline constexpr int kAttnDecodeMaxSeqTokens = 64;

struct AttentionArgs {
  const float* q = nullptr;
  const uint8_t* k_cache = nullptr;  // (n_ctx, kv_dim) rows of kv_type
  const uint8_t* v_cache = nullptr;
  QuantType kv_type = QuantType::F16;
  uint64_t kv_row_bytes = 0;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t pos0 = 0;
  float* out = nullptr;
  const uint32_t* pos_dev = nullptr;
  uint32_t n_kv_cap = 0;
  // Decode: when n_kv (n_kv_cap with pos_dev) <= this and head_dim is 64, 128 or 256, the
  // warps kernel (a block per chunk and head, each warp an online-softmax decoder; one
  // chunk up to 256 positions, which writes the output in the same launch); 0: never.
  uint32_t warp_max = 0;
  // The warps kernel's lanes form: a warp scores 32 positions at once, a lane per position
  // over the whole head, one max and one sum reduction per 32 positions.
  bool warp_lanes = false;
  // gpt-oss / laguna: a sliding window (a query at position p sees keys (p - window, p];
  // 0: all) and per-head sink logits (n_head; in the softmax's denominator only; null: none).
  uint32_t window = 0;
  const float* sinks = nullptr;
  // Decode: the output rows also quantized in quant_mode (the output projection's
  // activation rows, ActRows) into quant_qs (n_tokens, n_head * head_dim) and quant_meta
  // (n_tokens, n_head * head_dim / 32), with cuda/kernels/act_quant.cuh's routines (the bytes a
  // quantize launch would write), where the warps kernel runs in one chunk; a block wider
  // than a head (Q8_K: 256) by the last of its heads' CTAs, counted on quant_counters
  // (kAttnDecodeCounters zeroed uint32_t, left zeroed). quant_qs null: none.
  int8_t* quant_qs = nullptr;
  uint2* quant_meta = nullptr;
  ActQuant quant_mode = ActQuant::kQ8_0;
  uint32_t* quant_counters = nullptr;
  // Several sequences' decode tokens (device, n_tokens <= kAttnDecodeMaxSeqTokens): token t
  // attends over seq_rows[t]'s cache and n_kv positions instead of k_cache / v_cache from
  // pos0 (k_cache / v_cache: any one of them, for the alignment checks; every cache of the
  // same type and row bytes); max_n_kv: the largest n_kv (sizes the split).
  const SeqKvRow* seq_rows = nullptr;
  uint32_t max_n_kv = 0;
};
// True when the output rows were also quantized (AttentionArgs quant_qs).
bool attention(const AttentionArgs& a, Workspace& ws, cudaStream_t stream);
// Workspace bytes attention() takes (the decode partials; prefill takes none), enough for
// every call with at most n_tokens tokens and pos0 + n_tokens <= n_kv.
size_t attention_workspace_bytes(int n_tokens, int n_head, int head_dim, uint32_t n_kv);

// model/ffn.cpp router: per token, probs = softmax(logits row) (n_expert); the top K by
// probability (ties: lower id first) to ids (T, K) in rank order, their probs to weights
// (T, K), divided by their sum (clamped to >= 6.103515625e-5) when renormalize.
void router_topk(const float* logits, int n_tokens, int n_expert, int K, bool renormalize, int32_t* ids,
                 float* weights, cudaStream_t stream);

// model/ffn.cpp route_token for the other routing maths (glm4moe, DeepSeek-V3-style):
// scores by softmax or sigmoid, the selection bias (n_expert; null: none) added for choosing only,
// group-limited routing (n_groups <= 1: none; <= 64 groups), the top K (<= 32) by
// selection score (ties: lower id), weights the unbiased scores, renormalised if asked
// (sum clamped at 6.103515625e-5), then scaled. n_expert <= 512.
struct RouteMath {
  bool sigmoid = false;
  // gpt-oss: the raw logits (+ logit_bias, (n_expert) or null) choose, and the weights are
  // a softmax over the K chosen (model/ffn.cpp kSoftmaxOfSelected).
  bool softmax_selected = false;
  const float* logit_bias = nullptr;
  const float* selection_bias = nullptr;
  bool renormalize = false;
  float scale = 1.0f;
  int n_groups = 0, n_group_used = 0;
};
void router_route(const float* logits, int n_tokens, int n_expert, int K, const RouteMath& m, int32_t* ids,
                  float* weights, cudaStream_t stream);

// u = silu(g) * u, or silu(u) when g is null; n elements.
void swiglu(const float* g, float* u, int64_t n, cudaStream_t stream);

// The experts' rows of a MoE layer and how they combine (moe_combine, and fused into the
// next norm, moe_combine_add_rms_norm).
struct MoeCombineIn {
  const float* d = nullptr;        // (T*K, n) expert rows
  const float* weights = nullptr;  // (T, K)
  int K = 0;
  const float* d_sh = nullptr;     // (T, n) shared expert rows, or null
  const float* gate_inp = nullptr; // (n) the shared expert's gate, or null (ungated)
  const float* h = nullptr;        // (T, n) FFN input rows (the gate's input; needed with d_sh and gate_inp)
};
// model/ffn.cpp weighted sum: out (T, n) = sum over k in rank order of weights[t, k] *
// d[t * K + k]; then, with a shared expert (d_sh non-null), + sigmoid(dot(gate_inp, h[t]))
// * d_sh[t] (the dot in f32 on the device; f64 on the CPU). gate_inp null with d_sh
// non-null: the shared expert added ungated.
void moe_combine(const MoeCombineIn& c, int n_tokens, int n, float* out, cudaStream_t stream);

// Fused sequences of the decode step (cuda/kernels/ops_fused.cu), each equal to its parts:
// x += y (y null: x unchanged), then out = rms_norm(x) * w; rows of n, contiguous. One
// CTA per row; for a decode step's rows (<= 8) up to 1024 threads each, with the sums in
// the 256-thread order, so any row count writes the same bytes for a row.
void add_rms_norm(float* x, const float* y, const float* w, float eps, int rows, int n, float* out,
                  cudaStream_t stream);

// The rows of the fused norms below: x (rows, n) += y, out = rms_norm(x) * w, and out
// quantized for the products that read it next into qs (rows, n) int8 and meta (rows,
// n / 32) (cuda/kernels/mmvq_kernels.h's format in `mode`, the bytes quantize_act() would
// write).
struct RowNormArgs {
  float* x = nullptr;        // (rows, n) the residual stream, updated in place
  const float* y = nullptr;  // (rows, n) added to x first, or null
  const float* w = nullptr;  // (n) the norm's weight
  float eps = 1e-6f;
  int rows = 0, n = 0;
  float* out = nullptr;      // (rows, n)
  ActQuant mode = ActQuant::kQ8_0;
  int8_t* qs = nullptr;      // null: not quantized (moe_combine_add_rms_norm only)
  uint2* meta = nullptr;
};
// add_rms_norm plus the quantized rows (a.qs required). Only where
// add_rms_norm_quant_supports(a.n, a.mode).
void add_rms_norm_quant(const RowNormArgs& a, cudaStream_t stream);
bool add_rms_norm_quant_supports(int n, ActQuant mode);

// moe_combine + add_rms_norm(_quant) in one launch: y = the weighted sum of the row's
// experts (+ the gated shared expert, its gate from c.h = the FFN input rows, which must
// be a.out: read before it is overwritten), x += y, out = rms_norm(x) * w, quantized when
// a.qs is set (a.y unused). n >= 256 (one CTA per row, as add_rms_norm).
void moe_combine_add_rms_norm(const MoeCombineIn& c, const RowNormArgs& a, cudaStream_t stream);

// The attention block between the Q/K/V products and attention(): per token and head,
// + bias, the per-head q/k RMSNorm (weights of head_dim; null: none), RoPE at position
// pos + t (pos = *pos_dev when set, else pos0; the angles as model/attention.cpp
// rope_angles, YaRN included), q heads to q_out (n_tokens, n_head,
// head_dim), k and v heads stored in the caches' rows as kv_store() stores them.
// Q/K/V rows are read at q_src + t * q_stride (and k_, v_), so one (T, q_dim + 2 kv_dim)
// product or three separate ones both serve. kv_type F16, F32 or Q8_0; head_dim <= 256.
struct AttnPrepArgs {
  const float *q_src = nullptr, *k_src = nullptr, *v_src = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-6f;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  float freq_base = 10000.0f, freq_scale = 1.0f;
  // cos and sin times attn_factor; YaRN (yarn_ext != 0): pair k's angle mixes the
  // interpolated and extrapolated ones by the ramp over [yarn_lo, yarn_hi] (model/hparams.h
  // RopeYarn), cos and sin times yarn_mscale instead.
  float attn_factor = 1.0f;
  float yarn_ext = 0.0f, yarn_lo = 0.0f, yarn_hi = 0.0f, yarn_mscale = 1.0f;
  bool neox = true;
  uint32_t pos0 = 0;
  const uint32_t* pos_dev = nullptr;
  float* q_out = nullptr;
  uint8_t *k_cache = nullptr, *v_cache = nullptr;  // (n_ctx, n_head_kv * head_dim) rows
  QuantType kv_type = QuantType::F16;
  uint64_t row_bytes = 0;
  // Several sequences (device, n_tokens entries): token t's rows go to seq_rows[t]'s cache
  // at position n_kv - 1 (pos0, pos_dev, k_cache and v_cache unused).
  const SeqKvRow* seq_rows = nullptr;
};
void attn_prep(const AttnPrepArgs& a, cudaStream_t stream);

// gu (n_rows, 2 * ff) = [gate | up] rows (a fused gate+up product) -> out (n_rows, ff) =
// silu(gate) * up, as swiglu() computes it.
void swiglu_pairs(const float* gu, int64_t n_rows, int ff, float* out, cudaStream_t stream);
// The same, plus out quantized in `mode` (qs (n_rows, ff), meta (n_rows, ff / 32)) for the
// product that reads it next; where swiglu_pairs_quant_supports(ff, mode).
void swiglu_pairs_quant(const float* gu, int64_t n_rows, int ff, float* out, ActQuant mode, int8_t* qs, uint2* meta,
                        cudaStream_t stream);
bool swiglu_pairs_quant_supports(int ff, ActQuant mode);

// The tiered MoE step (cuda/tiering_device.h): d's row idx[r] (n floats) = rows' row r,
// for the n_rows expert rows the CPU computed; a row whose idx is negative is skipped.
void scatter_rows(float* d, const float* rows, const int32_t* idx, int n_rows, int n, cudaStream_t stream);

// ---- gpt-oss's experts and laguna's attention gate (cuda/kernels/ops_oai.cu)

// model/ffn.cpp add_expert_bias over slot rows: y[r * stride + c] += bias[experts[r] * n +
// c] for r < rows, c < n (bias (n_expert, n) f32).
void add_expert_bias(float* y, int64_t rows, int n, int64_t stride, const int32_t* experts, const float* bias,
                     cudaStream_t stream);
// model/ffn.cpp swiglu_oai: out (rows, ff) from [gate | up] rows (rows, 2 ff); and in place
// u = swiglu_oai(g, u) over n elements.
void swiglu_oai_pairs(const float* gu, int64_t rows, int ff, float* out, cudaStream_t stream);
void swiglu_oai(const float* g, float* u, int64_t n, cudaStream_t stream);
// laguna: x (rows, n) *= softplus(gate (rows, G)), element i of a row reading gate i / (n / G)
// (per head: G = n_head; per element: G = n).
void mul_softplus_gate(float* x, const float* gate, int64_t rows, int n, int G, cudaStream_t stream);

// ---- Gated DeltaNet (qwen3next / qwen35moe; model/gated_delta_net.cpp, cuda/kernels/ops_gdn.cu)

// Whether the kernels below serve a model: key/value head dims 64 or 128, conv 2..8.
bool gdn_supports(int state_size, int conv_kernel);
// The causal depthwise conv + SiLU over T tokens of one sequence: u (T, C) from qkv (T,
// row stride qkv_stride) with w (C, Kc) and the state (Kc - 1, C) of the raw rows before
// (updated to the last Kc - 1 rows).
struct GdnConvArgs {
  const float* qkv = nullptr;
  int64_t qkv_stride = 0;
  const float* w = nullptr;
  float* state = nullptr;
  float* u = nullptr;
  int T = 0, C = 0, Kc = 0;
};
void gdn_conv(const GdnConvArgs& a, cudaStream_t stream);
// The gates' inputs: b and a rows `stride` apart; grouped (qwen3next): one (T, 2 nv)
// input b whose row holds per key head [b of its nv / nk value heads | a of the same
// heads], a unused.
struct GdnGateArgs {
  const float* b = nullptr;
  const float* a = nullptr;
  int64_t stride = 0;
  const float* ssm_a = nullptr;    // (nv)
  const float* dt_bias = nullptr;  // (nv)
  bool grouped = false;
};
// beta (T, nv) = sigmoid(b), g (T, nv) = ssm_a * softplus(a + dt_bias).
void gdn_gates(const GdnGateArgs& ga, int T, int nv, int nk, float* beta, float* g, cudaStream_t stream);
// The delta rule over T tokens of one sequence (model/delta_rule.h: the recurrent form
// for short runs, the chunked form, cuda/kernels/ops_gdn_chunk.cu, from 16 tokens),
// q and k L2-normalised here: u (T, conv_dim) = q heads | k heads | v heads (key_dim =
// nk * dk each for q and k); value head h reads key head h % nk (tiled) or h / (nv / nk);
// state (nv, dk, dk) transposed per head as the CPU's; out (T, nv * dk).
struct DeltaRuleArgs {
  const float* u = nullptr;
  int conv_dim = 0, key_dim = 0;
  int nk = 0, nv = 0, dk = 0;
  bool tiled = false;
  const float* g = nullptr;
  const float* beta = nullptr;
  float* state = nullptr;
  float* out = nullptr;
  int T = 0;
  float eps = 1e-6f;
};
void delta_rule(const DeltaRuleArgs& a, cudaStream_t stream);
// The z-gated RMSNorm's inputs (gated_rms_norm): z rows z_stride apart, w (dk).
struct GdnNormArgs {
  const float* z = nullptr;
  int64_t z_stride = 0;
  const float* w = nullptr;
  float eps = 1e-6f;
};
// The decode step's gdn_gates + delta_rule + gated_rms_norm in one launch (the recurrent
// form, where delta_rule_gated_fits(T): runs shorter than the chunked form's): a.g and
// a.beta unused, out the normed rows.
bool delta_rule_gated_fits(int T);
void delta_rule_gated(const DeltaRuleArgs& a, const GdnGateArgs& ga, const GdnNormArgs& na, cudaStream_t stream);
// o (T, nv, dv) <- rms_norm(o_h) * na.w * silu(z_h) per head, in place; z rows
// na.z_stride apart.
void gated_rms_norm(float* o, const GdnNormArgs& na, int T, int nv, int dv, cudaStream_t stream);
// Gated attention (qwen3next / qwen35moe): src (T, rows `stride` apart) holds per head
// [query (hd) | gate (hd)]; q and gate (T, n_head * hd) apart. x *= sigmoid(gate).
void split_gated_q(const float* src, int64_t stride, int T, int n_head, int hd, float* q, float* gate,
                   cudaStream_t stream);
void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t stream);

}  // namespace mt::cuda
