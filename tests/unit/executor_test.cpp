// The tiered-expert executor's contract (executor_contract.h) on the simulated device
// (model/offload.h): a synthetic qwen2moe (shared expert, skewed router, Q4_K_M) and the
// real kjv-moe, a prompt batch then decode steps, half the expert layers pinned; the
// logits bit-identical to the untiered CPU run.
#include <gtest/gtest.h>

#include "executor_contract.h"
#include "experts/geometry.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

class SimulatedTarget final : public test::ContractTarget {
 public:
  SimulatedTarget(const Model& model, std::vector<int32_t> ids, size_t prompt)
      : model_(model), ids_(std::move(ids)), prompt_(prompt) {}
  std::vector<float> untiered() override { return run(nullptr); }
  StatusOr<std::unique_ptr<ExpertTiering>> tier(const PoolPlan& plan, const CacheOptions& co,
                                                const SchedulerOptions& so) override {
    MT_ASSIGN_OR_RETURN(ExpertGeometry geometry, read_expert_geometry(model_.file()));
    const uint64_t pin_budget = geometry.compact_bytes / 2;
    MT_ASSIGN_OR_RETURN(std::unique_ptr<OffloadState> s, make_offload(model_, std::move(geometry), plan, co, so, pin_budget));
    return std::unique_ptr<ExpertTiering>(std::move(s));
  }
  std::vector<float> tiered(ExpertTiering& t) override { return run(&dynamic_cast<OffloadState&>(t).offload); }

 private:
  // The prompt's logits (every row), then one decode step's per remaining token.
  std::vector<float> run(MoeOffload* offload) {
    auto s = Session::create(model_, static_cast<uint32_t>(ids_.size()) + 8);
    EXPECT_TRUE(s.ok());
    s->set_offload(offload);
    std::vector<float> all, step;
    EXPECT_TRUE(s->feed({ids_.data(), prompt_}, true, &step).ok());
    all = step;
    for (size_t t = prompt_; t < ids_.size(); ++t) {
      EXPECT_TRUE(s->feed({&ids_[t], 1}, false, &step).ok());
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  }
  const Model& model_;
  std::vector<int32_t> ids_;
  size_t prompt_;
};

uint32_t moe_layers(const ExpertGeometry& g) { return static_cast<uint32_t>(g.layers.size()); }

TEST(ExecutorContract, SimulatedDeviceOnASyntheticModel) {
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen2Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  c.router_skew = 1.0f;
  const std::string path = test::temp_path("executor-qwen2moe.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto model = Model::load(path, {2});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto geometry = read_expert_geometry((*model)->file());
  ASSERT_TRUE(geometry.ok());
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 131 + 5) % (*model)->hparams().n_vocab);
  SimulatedTarget target(**model, ids, 24);
  test::check_executor_contract(target, *geometry, moe_layers(*geometry));
}

TEST(ExecutorContract, SimulatedDeviceOnKjvMoe) {
  auto model = Model::load(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"), {2});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto geometry = read_expert_geometry((*model)->file());
  ASSERT_TRUE(geometry.ok());
  std::vector<int32_t> ids(31);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 97 + 11) % 4000);
  SimulatedTarget target(**model, ids, 23);
  test::check_executor_contract(target, *geometry, moe_layers(*geometry));
}

}  // namespace
}  // namespace mt
