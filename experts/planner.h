// Placement planner: a pure function from the model's sizes, the machine's memory and a
// hardware profile to a plan (what lives on the GPU, which expert layers are pinned, how
// many CPU threads) with the predicted decode tokens/s of each execution mode.
//
// Device memory, in this order: dense weights (attention, norms, router, output head),
// the KV cache (batch x ctx tokens), shared experts, a reserve for activations and
// workspace (max(512 MiB, 5% of the device)), and the expert cache: explicit, or auto =
// whatever is left. The cache is carved into exact-geometry pools (experts/pools.h).
// Host memory: the whole file is mapped (every expert lives on the host) and the pinned
// copies come on top, so the pin budget (asked, or auto = 50% of host memory) is capped at
// host memory minus the file's size; layers are pinned by choose_pinned_layers().
//
// Predicted decode (experts/cost_model.h), per step of `batch` sequences: dense and shared
// bytes once; per MoE layer the distinct experts the batch selects (top_k each; for a
// batch > 1, E * (1 - (1 - k/E)^B) under uniform routing), a fraction of them resident:
// the popularity profile's coverage of the layer's slots, or slots / n_expert (uniform).
// cpu reads everything on the host; stream copies the misses to the device (pageable
// layers at the pageable link speed); hybrid computes the misses on the CPU. KV cache
// reads are not counted (short context). auto picks the fastest mode that fits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "experts/cost_model.h"
#include "experts/geometry.h"
#include "experts/host_store.h"
#include "experts/hw_profile.h"
#include "experts/pools.h"
#include "experts/popularity.h"

namespace mt {

enum class KvType { kF16, kQ8_0 };
const char* kv_type_name(KvType t);  // "f16", "q8_0"
enum class RequestedMode { kAuto, kCpu, kStream, kHybrid };
const char* requested_mode_name(RequestedMode m);  // "auto", "cpu", ...

// Everything but the routed experts, in bytes, from the caller (GGUF tensors, hparams).
struct ModelSizes {
  uint64_t file_bytes = 0;            // the mapped file
  uint64_t dense_bytes = 0;           // to the GPU: attention, norms, router, output head
  uint64_t token_embd_bytes = 0;      // stays on the host
  uint64_t token_embd_row_bytes = 0;  // read per token
  uint64_t shared_expert_bytes = 0;   // all layers' shared experts
  uint64_t kv_bytes_per_token_f16 = 0;   // n_layer * 2 * n_head_kv * head_dim * 2
  uint64_t kv_bytes_per_token_q8_0 = 0;  // the same elements at 34/32 bytes
  uint64_t state_bytes_per_seq = 0;      // recurrent (Gated DeltaNet) layers' F32 states, any context
  uint32_t n_expert_used = 0;         // top-k
  uint32_t context_length = 0;        // trained context (for the explanation)
};

struct PlanInputs {
  ExpertGeometry geometry;
  ModelSizes model;
  uint64_t device_bytes = 0;                  // 0: no GPU
  uint64_t host_bytes = 0;
  std::optional<uint64_t> pin_budget;         // nullopt: 50% of host memory
  uint32_t ctx = 0;
  KvType kv = KvType::kF16;
  uint32_t batch = 1;                         // sequences decoded together
  std::optional<uint64_t> expert_cache_bytes; // nullopt: auto
  HwProfile hw;
  const PopularityProfile* popularity = nullptr;
  uint32_t cpu_threads = 0;                   // 0: the profile's thread count
  RequestedMode mode = RequestedMode::kAuto;
};

struct GpuItem {
  std::string name;   // "dense weights", "kv cache", "shared experts", "expert pool q4_K/q4_K/q4_K", "reserve"
  uint64_t bytes = 0;
};

struct ModePlan {
  MoeMode mode = MoeMode::kCpu;
  bool available = false;   // false: needs a GPU that is not there
  bool fits = false;
  std::string why;          // when it does not fit
  ModePrediction predicted;
  DecodeTraffic traffic;    // per step
};

struct Plan {
  bool fits = false;
  std::string why;                    // empty when it fits
  MoeMode mode = MoeMode::kCpu;       // the chosen one
  RequestedMode requested = RequestedMode::kAuto;
  std::vector<ModePlan> modes;        // cpu, stream, hybrid
  std::vector<std::string> notes;     // assumptions and rules, one line each

  uint64_t device_bytes = 0, host_bytes = 0;
  std::vector<GpuItem> gpu;           // empty without a GPU
  uint64_t gpu_bytes = 0;             // sum of gpu
  uint64_t reserve_bytes = 0;
  uint64_t kv_bytes = 0;
  uint32_t ctx = 0, batch = 1;
  KvType kv = KvType::kF16;
  uint64_t expert_cache_bytes = 0;    // the budget given to plan_pools
  bool expert_cache_auto = true;
  PoolPlan pools;

  uint64_t pin_budget = 0;            // after the host-memory cap
  std::string pin_budget_rule;
  PinChoice pin;
  uint64_t host_needed_bytes = 0;     // for the chosen mode

  uint32_t cpu_threads = 0;
  std::string hit_rate_assumption;
  double hit_rate = 0;                // expected, weighted by selected expert bytes
  std::string hw_profile_source;
  uint32_t n_moe_layers = 0, n_expert = 0, top_k = 0;
};

StatusOr<Plan> make_plan(const PlanInputs& in);

std::string plan_to_json(const Plan& plan);  // pretty, 2-space indent
std::string plan_to_text(const Plan& plan);

}  // namespace mt
