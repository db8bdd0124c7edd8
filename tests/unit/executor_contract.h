// The tiered-expert executor's contract (experts/executor.h), one test body for every
// device: tests/unit/executor_test.cpp runs it on the simulated device (model/offload.h),
// tests/cuda/executor_test.cpp on the GPU (cuda/tiering.h). For a model, at expert
// budgets of 10% and 50% in hybrid mode, hybrid with the split of misses (frequency
// policy: refused misses staged) and stream mode:
//   - every selected expert of every layer-step is computed exactly once: counted per
//     (layer, expert, token) through wrappers of the device and the CPU experts placed
//     between the executor and the tiering's own (Instrumented below), on exactly one
//     side, and nothing else is computed;
//   - the output equals the untiered run's (the device's notion of equal: bit-identical
//     logits on the CPU, the same greedy tokens on the GPU).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "experts/executor.h"
#include "experts/geometry.h"
#include "experts/pools.h"
#include "experts/tiering.h"

namespace mt::test {

// Per layer-step: the selections the executor was given, and what each side computed.
class ContractLedger {
 public:
  void group(const DeviceGroup& g) {
    open_.clear();
    layer_ = g.layer;
    for (size_t i = 0; i < g.selected.size(); ++i) {
      const auto e = static_cast<uint32_t>(g.selected[i]);
      const uint32_t t = static_cast<uint32_t>(i) / g.k;
      open_[{e, t}].selected += 1;
      if (g.slot[i] >= 0 || g.staged[i] >= 0) {
        open_[{e, t}].computed += 1;
        ++device_computed;
      }
    }
    ++layer_steps;
  }
  void cpu(uint32_t layer, std::span<const ExpertJob> jobs) {
    if (layer != layer_) note("CPU jobs of layer " + std::to_string(layer) + " in layer " + std::to_string(layer_) + "'s step");
    for (const ExpertJob& j : jobs) {
      open_[{j.expert, j.token}].computed += 1;
      ++cpu_computed;
    }
  }
  void close() {
    for (const auto& [key, c] : open_) {
      ++selections;
      if (c.selected != 1 || c.computed != 1) {
        note("layer " + std::to_string(layer_) + " expert " + std::to_string(std::get<0>(key)) + " token " +
             std::to_string(std::get<1>(key)) + ": selected " + std::to_string(c.selected) + ", computed " +
             std::to_string(c.computed));
      }
    }
    open_.clear();
  }

  uint64_t layer_steps = 0, selections = 0, device_computed = 0, cpu_computed = 0, errors = 0;
  std::string first_error;

 private:
  struct Count {
    uint32_t selected = 0, computed = 0;
  };
  void note(const std::string& what) {
    if (errors++ == 0) first_error = what;
  }
  uint32_t layer_ = 0;
  std::map<std::tuple<uint32_t, uint32_t>, Count> open_;  // (expert, token)
};

class CountingDevice final : public ExpertDevice {
 public:
  CountingDevice(ExpertDevice& inner, ContractLedger& ledger) : inner_(inner), ledger_(ledger) {}
  void copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) override { inner_.copy_to_slot(layer, expert, slot); }
  void wait_copies(uint32_t layer) override { inner_.wait_copies(layer); }
  void stage(uint32_t layer, std::span<const uint32_t> experts) override { inner_.stage(layer, experts); }
  void compute(const DeviceGroup& g) override {
    ledger_.group(g);
    inner_.compute(g);
  }
  float* cpu_rows(size_t n) override { return inner_.cpu_rows(n); }
  void finish(const DeviceGroup& g, std::span<const int32_t> cpu_slots, const float* rows) override {
    inner_.finish(g, cpu_slots, rows);
    ledger_.close();
  }

 private:
  ExpertDevice& inner_;
  ContractLedger& ledger_;
};

class CountingCpu final : public CpuExperts {
 public:
  CountingCpu(CpuExperts& inner, ContractLedger& ledger) : inner_(inner), ledger_(ledger) {}
  void compute(uint32_t layer, const float* h, uint32_t n_tokens, std::span<const ExpertJob> jobs, float* out) override {
    ledger_.cpu(layer, jobs);
    inner_.compute(layer, h, n_tokens, jobs, out);
  }

 private:
  CpuExperts& inner_;
  ContractLedger& ledger_;
};

// The counting wrappers between a tiering's executor and its device and CPU experts: a
// new executor over the same scheduler, the tiering's pointers refreshed (bound()).
struct Instrumented {
  explicit Instrumented(ExpertTiering& t)
      : device(std::make_unique<CountingDevice>(*t.device, ledger)), cpu(std::make_unique<CountingCpu>(*t.cpu, ledger)) {
    t.executor = std::make_unique<TieredExecutor>(*t.scheduler, *device, *cpu, t.n_layer);
    t.bound();
  }
  ContractLedger ledger;
  std::unique_ptr<CountingDevice> device;
  std::unique_ptr<CountingCpu> cpu;
};

// What a device's contract test supplies.
class ContractTarget {
 public:
  virtual ~ContractTarget() = default;
  // The run with every expert untiered, as numbers (logits, or greedy token ids).
  virtual std::vector<float> untiered() = 0;
  // A tiering of the device over the model, and the same run through it.
  virtual StatusOr<std::unique_ptr<ExpertTiering>> tier(const PoolPlan& plan, const CacheOptions& co,
                                                        const SchedulerOptions& so) = 0;
  virtual std::vector<float> tiered(ExpertTiering& t) = 0;
};

// The contract over one model whose geometry is `geometry` (n_moe_layers MoE layers).
inline void check_executor_contract(ContractTarget& target, const ExpertGeometry& geometry, uint32_t n_moe_layers) {
  const std::vector<float> ref = target.untiered();
  ASSERT_FALSE(ref.empty());
  enum class Variant { kHybrid, kSplit, kStream };
  for (Variant v : {Variant::kHybrid, Variant::kSplit, Variant::kStream}) {
    for (int pct : {10, 50}) {
      SCOPED_TRACE(std::string(v == Variant::kHybrid ? "hybrid" : v == Variant::kSplit ? "hybrid split" : "stream") +
                   " budget " + std::to_string(pct) + "%");
      SchedulerOptions so;
      so.mode = v == Variant::kStream ? MoeMode::kStream : MoeMode::kHybrid;
      so.split_misses = v == Variant::kSplit;
      if (so.split_misses) so.split_fraction = 0.5;
      CacheOptions co;
      if (v != Variant::kHybrid) co.policy = CachePolicy::kFrequency;  // first requests refused: staged
      auto tiering = target.tier(plan_pools(geometry, geometry.compact_bytes / 100 * static_cast<uint64_t>(pct)), co, so);
      ASSERT_TRUE(tiering.ok()) << tiering.status().to_string();
      ExpertTiering& t = **tiering;
      Instrumented counted(t);
      const std::vector<float> got = target.tiered(t);
      EXPECT_EQ(got.size(), ref.size());
      EXPECT_TRUE(got == ref) << "the tiered output differs from the untiered run";
      const ContractLedger& c = counted.ledger;
      EXPECT_EQ(c.errors, 0u) << c.first_error;
      EXPECT_EQ(c.layer_steps, t.scheduler->steps() * n_moe_layers);
      EXPECT_EQ(c.device_computed + c.cpu_computed, c.selections);
      EXPECT_GT(c.device_computed, 0u);
      if (v == Variant::kStream) {
        EXPECT_EQ(c.cpu_computed, 0u);
      } else {
        EXPECT_GT(c.cpu_computed, 0u);
      }
      uint64_t staged = 0;
      for (uint32_t l = 0; l < t.n_layer; ++l) staged += t.scheduler->counters(l).staged;
      if (v != Variant::kHybrid) {
        EXPECT_GT(staged, 0u) << "no refused miss was staged";
      }
    }
  }
}

}  // namespace mt::test
