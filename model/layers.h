// Layer helpers: the pieces every architecture file composes into a block.
//
// A block works on a batch of tokens at consecutive positions: X is the residual stream
// (n_tokens, n_embd), updated in place. Every helper computes each token exactly as it
// would alone (batching only shares weight dequantization), so a batch gives the same
// numbers as one token at a time through the KV cache. Intermediates are reported to an
// optional Trace under llama.cpp's graph names ("attn_norm", "Qcur", "ffn_moe_probs",
// ...) with the block index, so CPU, CUDA and llama.cpp can be diffed by name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "experts/executor.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace mt {

struct MoeOffload;
class RoutingReplay;  // experts/routing_replay.h

// Receives named intermediates (one row per token) and the routing decisions.
class Trace {
 public:
  virtual ~Trace() = default;
  // Called once at the start of each forward call (a prompt batch, or one decoded token).
  virtual void begin_step() {}
  virtual void tensor(const char* /*name*/, uint32_t /*layer*/, uint32_t /*pos*/, std::span<const float> /*row*/) {}
  virtual void routing(uint32_t /*layer*/, uint32_t /*pos*/, std::span<const int32_t> /*experts*/,
                       std::span<const float> /*weights*/) {}
  // Routing replay (issue 28): the stream whose experts this feed's MoE layers compute in
  // place of the router's top-k (routing() then reports them); null: the router's.
  virtual RoutingReplay* routing_override() { return nullptr; }
  // Whether routing() is wanted: a CUDA step copies the routing back (a sync per layer) only then.
  virtual bool wants_routing() const { return true; }
};

// The 1-D tensors of a layer as floats (norm weights, biases, the shared-expert gate).
struct LayerVectors {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, bq, bk, bv, shexp_gate_inp, exp_probs_b;
  std::vector<float> q_a_norm, kv_a_norm;  // MLA
  std::vector<float> bo, sinks, router_b;  // gpt-oss
  std::vector<float> ssm_conv1d, ssm_dt, ssm_a, ssm_norm;  // Gated DeltaNet
};

// One sequence's rows of a batch: rows [row0, row0 + n) are its tokens at positions
// pos0 .. pos0 + n - 1, attending to (and stored in) its own KV cache.
struct SeqRows {
  uint32_t row0 = 0, n = 0;
  uint32_t pos0 = 0;
  KvCache* kv = nullptr;
};

// A layer's inputs for a batch of one or more sequences: every projection and the MoE run
// over all rows at once (a hot expert is read once for the whole batch); attention runs
// per sequence over its own cache.
struct BlockArgs {
  const HParams& hp;
  const LayerWeights& w;
  const LayerVectors& v;
  uint32_t layer;
  float* x;                  // (n_tokens, n_embd) residual stream, in/out
  uint32_t n_tokens;         // rows of all sequences
  std::span<const SeqRows> seqs;  // in row order, covering [0, n_tokens)
  ThreadPool& pool;
  Trace* trace;              // may be null (positions reported are each sequence's)
  MoeOffload* offload = nullptr;  // null: every expert on the CPU

  // Position of row t in its sequence.
  uint32_t pos(uint32_t t) const {
    for (const SeqRows& s : seqs) {
      if (t < s.row0 + s.n) return s.pos0 + (t - s.row0);
    }
    return 0;
  }
};

// RMSNorm: out = x / sqrt(mean(x^2) + eps) * w (w may be empty: no weight).
void rms_norm(const float* x, const std::vector<float>& w, float eps, int64_t n, float* out);
// Softmax in place: max-subtracted, the sum accumulated in double, scaled by its inverse.
void softmax(float* x, size_t n);
// The same with one more logit in the denominator only (an attention sink).
void softmax_with_sink(float* x, size_t n, float sink);

// Below this many rows (tokens, slots), a block's per-row work stays on the calling thread:
// a decode step's one row costs less than a pool hand-off.
inline constexpr int64_t kMinParallelRows = 8;

// Attention sub-block: norm, Q/K/V (+biases), q/k norm, RoPE, KV cache, causal softmax
// attention with GQA, output projection, residual add.
void attention_block(const BlockArgs& a, QkNorm qk_norm, RopeStyle rope_style);
// Gated DeltaNet mixer (qwen3next / qwen35moe, model/gated_delta_net.cpp): norm, the fused
// q|k|v projection through the causal conv (its window in the sequence's conv state), L2-
// normed q / k, the delta rule on the sequence's recurrent state, the z-gated RMSNorm,
// ssm_out, residual add.
void gated_delta_net_block(const BlockArgs& a);
// Puts a sequence's recurrent states where they were after position n_pos - 1, n_pos inside
// its last run (pos0, pos0 + n], which must have been logged (KvCache::set_log_runs): the
// conv window rebuilt from the logged rows, the delta state restored and its first
// n_pos - pos0 tokens replayed (recurrent form). Anything else is a Status naming the
// recurrent state.
Status rollback_recurrent(const HParams& hp, KvCache& kv, uint32_t n_pos);
// Multi-head latent attention (deepseek2, model/attention_mla.cpp): q (low-rank pair or one
// matrix), the latent row (normed compressed KV + the shared rope key) into the cache, q's
// nope part absorbed into latent space per head (wk_b), MQA over the latent rows with
// scale 1/sqrt(mla_k), the latent result per head through wv_b, output projection.
void mla_attention_block(const BlockArgs& a);
// Its softmax scale: 1 / sqrt(mla_k), times YaRN's magnitude squared (llama.cpp's deepseek2
// graph; the CUDA twin, cuda/sequence_mla.cpp, takes the same number).
float mla_kq_scale(const HParams& hp);

// The routing math of a model (HParams' gating, renormalisation, scale, groups).
struct MoeMath {
  ExpertGating gating = ExpertGating::kSoftmax;
  bool renormalize = false;   // divide the top-k weights by their sum
  float scale = 1.0f;         // then multiply them by this
  uint32_t n_groups = 0;      // group-limited routing: keep the best n_group_used groups
  uint32_t n_group_used = 0;
};
MoeMath moe_math(const HParams& hp);

// One token's routing: scores[n_expert] from the router logits (in place, by the gating),
// the selection bias (may be empty) added for choosing only, the groups limited, then the
// k best experts (descending selection score, ties to the lower id) and their weights
// (unbiased scores, renormalised, scaled). `work` is scratch of n_expert floats.
void route_token(const MoeMath& math, float* scores, uint32_t n_expert, uint32_t k, const std::vector<float>& bias,
                 int32_t* selected, float* weights, std::vector<float>& work);

// MoE sub-block: norm, router, top-k, routed SwiGLU experts weighted and summed, the
// shared expert (sigmoid-gated where the layer has a gate vector), residual add.
void moe_block(const BlockArgs& a, const MoeMath& math);
// Dense SwiGLU FFN sub-block (leading dense blocks, dense llama).
void dense_ffn_block(const BlockArgs& a);

// Routed expert outputs for chosen (expert, token) pairs, each exactly as moe_block
// computes that expert's row: out[i] (n_embd) = down_e(swiglu(gate_e h_t, up_e h_t)) for
// jobs[i] = {e, t}; h (n_tokens, n_embd) the normed FFN input. The CPU's share of a tiered
// layer (model/offload.h ModelCpuExperts, behind experts/executor.h CpuExperts).
void expert_outputs(const LayerWeights& w, const float* h, uint32_t n_tokens, size_t n_embd,
                    std::span<const ExpertJob> jobs, float* out, ThreadPool& pool);

}  // namespace mt
