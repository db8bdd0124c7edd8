// The persistent decode step: one token through every layer of a fully resident model in
// ONE cooperative launch. A decode step made of separate launches is bound by its chain
// of ~12 dependent launches per layer, each a few microseconds whatever its bytes (3.3
// ms per token on qwen3-30b-a3b q4_k_m, 14% of the H200's bandwidth). Here one CTA per
// SM lives for the whole step and a layer's phases are separated by grid-wide barriers
// instead of launch boundaries. Whatever a phase needs whole from the previous one (the
// normed row, the top-k, the SwiGLU rows, the residual) every CTA recomputes from global
// memory into its shared memory rather than waiting a further barrier for one CTA to
// hand it over; each CTA quantizes its copy of the activation row there, in the mode the
// weight type pairs with (cuda/mmvq_kernels.h ActQuant), and the products are MMVQ's
// own per-type dot routines (cuda/mmvq_common.cuh rows_partial).
//
// A layer's phases (a barrier after each):
//   A  x_l = x_{l-1} + y + sum_k w_k d_k (CTA 0 stores it), attention norm, Q|K|V product
//   B  attention, one item per (query head, chunk of 32..kPersistentChunk positions, as
//      many as fill the grid): q/k norm and RoPE (cuda/ops_device.cuh head_norm_rope), the
//      new K/V row (the group's first head writes it to the cache), scores, softmax, P.V
//      (several chunks: a head's last item, counted on the head's counter, merges them)
//   C  wo product
//   D  x_l + y, FFN norm, router product
//   E  top-k (every CTA, cuda/ops_topk.cuh), gate|up products of the K experts
//   F  SwiGLU of the K rows (every CTA), down products
// A product's rows reach L2 ahead of it where the phase before leaves the memory idle
// (L2 prefetches of this CTA's share): wo and the router during attention, the down
// rows with gate|up, the next layer's Q|K|V with down. Unstacked wq, wk, wv share one
// space of units (the CTA's share taken over the three); the router's few rows take a
// CTA each. A thread's loads from other CTAs' results are issued together (unrolled),
// since a phase is bound by such latency chains, not by its bytes.
// and after the last layer the output norm and the logits product.
//
// Scope (persistent_unsupported names what is missing): attention layers of grouped-query
// attention without biases, gates, sinks or windows, per-head q/k norms or none, an F16
// cache; a routed FFN in every layer with softmax top-k (no bias, groups or scale),
// stacked gate|up, no shared expert; weight types F32, F16, BF16, Q4_0, Q8_0,
// Q4_K, Q5_K, Q6_K at their natural alignment. MOETIER_CUDA_PERSISTENT=1 turns it on; off
// by default: measured slower than the launched step on the H200 (qwen3-30b-a3b q4_k_m
// tg128 272.6 vs 301.6 t/s; every phase costs about a launch: docs/PERFORMANCE.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/matmul.h"
#include "quant/types.h"

namespace mt {
struct HParams;
struct ArchInfo;
}  // namespace mt

namespace mt::cuda {

class DeviceWeights;

inline constexpr int kPersistentThreads = 512;  // per CTA, one CTA per SM
inline constexpr int kPersistentChunk = 256;    // attention positions per item
inline constexpr int kPersistentMaxExperts = 512;
inline constexpr int kPersistentMaxHeadDim = 256;
inline constexpr int kPersistentMaxHeads = 128;
inline constexpr int kPersistentPhases = 7;  // profile stamps per layer: the start, then A B C D E F

// The activation quantization the kernel gives weight type t: 1 Q8_0 (Q4_0, Q8_0), 2
// Q8_K (Q4_K, Q5_K, Q6_K), 0 none (F32, F16, BF16 read f32 rows), -1 unsupported type.
__host__ __device__ constexpr int persistent_act_mode(QuantType t) {
  switch (t) {
    case QuantType::Q4_0:
    case QuantType::Q8_0: return 1;
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K: return 2;
    case QuantType::F32:
    case QuantType::F16:
    case QuantType::BF16: return 0;
    default: return -1;
  }
}

// A matrix as the persistent kernel reads it (a DeviceMatrix's fields, device pointer).
struct PMat {
  const uint8_t* w = nullptr;
  uint64_t row_bytes = 0, matrix_bytes = 0;
  int n_in = 0, n_out = 0;
  QuantType type = QuantType::F32;
};
PMat pmat(const DeviceMatrix& m);

struct PLayer {
  // Q|K|V as one stacked matrix (E -> Q + 2 KV; n_qkv 1) or wq, wk, wv (n_qkv 3, types may
  // differ but their quantized ones share one activation mode, that of qkv_act).
  PMat qkv[3];
  int n_qkv = 1;
  QuantType qkv_act = QuantType::F32;
  PMat wo, router, gate_up, down;  // (Q -> E) (E -> X) per expert (E -> 2 ff) (ff -> E)
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  uint8_t *k_cache = nullptr, *v_cache = nullptr;  // (n_ctx, kv_dim) F16 rows
};

struct PersistentArgs {
  const PLayer* layers = nullptr;  // device (n_layer)
  int n_layer = 0;
  PMat output;                     // (E -> n_vocab)
  const float* output_norm = nullptr;
  int E = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_expert = 0, K = 0, ff = 0;
  float eps = 1e-6f, attn_scale = 1.0f;
  // RoPE (cuda/ops_device.cuh RopeArgs' fields)
  int n_rot = 0;
  float theta_scale = 1.0f, freq_scale = 1.0f, attn_factor = 1.0f;
  float yarn_ext = 0.0f, yarn_lo = 0.0f, yarn_hi = 0.0f, yarn_mscale = 1.0f;
  bool neox = true, renormalize = true;
  uint64_t kv_row_bytes = 0;
  const uint32_t* pos = nullptr;  // device (1): the token's position
  float* x[2] = {nullptr, nullptr};  // (E) residual, x[l & 1] = layer l's input; x[0] = the embedded token
  float* qkv = nullptr;     // (Q + 2 KV)
  float* att = nullptr;     // (Q) attention output
  float2* ml = nullptr;     // (n_head, max_chunks) chunk max and sum
  float* acc = nullptr;     // (n_head, max_chunks, head_dim) chunk accumulators
  int max_chunks = 0;
  float* y = nullptr;       // (E) wo's output
  float* router = nullptr;  // (n_expert) logits
  float* gu = nullptr;      // (K, 2 ff)
  float* d = nullptr;       // (K, E)
  float* logits = nullptr;  // (n_vocab)
  unsigned* barrier = nullptr;  // (1) arrivals, zero at the launch
  unsigned* head_counters = nullptr;  // (n_head) attention items done per head, zero at the launch
  int32_t* route_ids = nullptr;  // (n_layer, K) the selected experts
  float* route_wts = nullptr;    // (n_layer, K) their weights
  unsigned long long* prof = nullptr;  // (n_layer + 1, kPersistentPhases) phase end times, or null
  int fmax = 0;             // floats of the shared activation row: max(E, Q, K ff) rounded up to 256
};

// Empty when the model's decode step can run persistent, else what stops it.
std::string persistent_unsupported(const HParams& hp, const ArchInfo& arch, const DeviceWeights& w, QuantType kv_type);

// The grid (CTAs) and dynamic shared memory of the launch; 0 CTAs when the device cannot
// keep a CTA on every SM (then the step runs its usual launches).
struct PersistentLaunch {
  int ctas = 0;
  size_t smem = 0;
};
PersistentLaunch persistent_launch_config(const PersistentArgs& a);

// The step, a.x[0] holding the embedded token and *a.barrier zero (both enqueued before).
void persistent_decode(const PersistentArgs& a, const PersistentLaunch& cfg, cudaStream_t stream);
// Persistent steps launched by this process (tests: the path really ran).
uint64_t persistent_decode_launches();

}  // namespace mt::cuda
