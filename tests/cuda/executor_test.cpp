// The tiered-expert executor's contract (tests/unit/executor_contract.h) on the GPU device
// (cuda/tiering.h): the real kjv-moe and a synthetic qwen2moe (shared expert, skewed
// router, Q4_K_M), the prompt and 64 generated tokens through the hybrid step (no prefill
// streaming: every layer-step through the executor), half the expert layers pinned; the
// greedy tokens equal to the resident GPU run's fed the same batches (the prompt 8 tokens
// at a time).
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda/cuda_model.h"
#include "cuda/tiering.h"
#include "cuda_test_util.h"
#include "executor_contract.h"
#include "experts/geometry.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "model/offload.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda {
namespace {

constexpr int kTokens = 64;

// Greedy continuation of `prompt` (fed in pieces of `piece` tokens; 0: whole), as floats.
std::vector<float> greedy(Evaluator& e, const std::vector<int32_t>& prompt, size_t piece) {
  std::vector<float> out;
  std::vector<float> logits;
  const size_t step = piece == 0 ? prompt.size() : piece;
  for (size_t i = 0; i < prompt.size(); i += step) {
    EXPECT_TRUE(e.feed({prompt.data() + i, std::min(step, prompt.size() - i)}, false, &logits).ok());
  }
  for (int i = 0; i < kTokens; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(static_cast<float>(next));
    EXPECT_TRUE(e.feed({&next, 1}, false, &logits).ok());
  }
  return out;
}

class GpuTarget final : public mt::test::ContractTarget {
 public:
  GpuTarget(std::string path, std::vector<int32_t> prompt, bool interleave)
      : path_(std::move(path)), prompt_(std::move(prompt)), interleave_(interleave) {}
  std::vector<float> untiered() override {
    auto host = Model::load(path_, {0, false});
    EXPECT_TRUE(host.ok()) << host.status().to_string();
    if (!host.ok()) return {};
    auto resident = CudaModel::load(**host);
    EXPECT_TRUE(resident.ok());
    if (!resident.ok()) return {};
    auto seq = (*resident)->new_sequence(n_ctx());
    EXPECT_TRUE(seq.ok());
    return seq.ok() ? greedy(**seq, prompt_, kHybridMaxTokens) : std::vector<float>{};  // as the hybrid step's pieces
  }
  StatusOr<std::unique_ptr<ExpertTiering>> tier(const PoolPlan& plan, const CacheOptions& co,
                                                const SchedulerOptions& so) override {
    if (host_ == nullptr) {
      LoadOptions lo{0, interleave_};
      lo.interleave_experts_only = true;
      MT_ASSIGN_OR_RETURN(host_, Model::load(path_, lo));
      CudaOptions options;
      options.experts_on_host = true;
      MT_ASSIGN_OR_RETURN(tiered_, CudaModel::load(*host_, options));
    }
    MT_ASSIGN_OR_RETURN(ExpertGeometry geometry, read_expert_geometry(host_->file()));
    CudaTieringOptions to;
    to.pin_budget = geometry.compact_bytes / 2;  // about half the layers pinned, the rest pageable
    to.stream_threshold = 0;                     // the prompt through the hybrid step too
    MT_ASSIGN_OR_RETURN(std::unique_ptr<CudaTiering> t,
                        make_cuda_tiering(*host_, std::move(geometry), plan, co, so, to,
                                          std::make_unique<ModelCpuExperts>(*host_)));
    return std::unique_ptr<ExpertTiering>(std::move(t));
  }
  std::vector<float> tiered(ExpertTiering& t) override {
    tiered_->set_tiering(&dynamic_cast<CudaTiering&>(t));
    std::vector<float> out;
    {
      auto seq = tiered_->new_sequence(n_ctx());
      EXPECT_TRUE(seq.ok()) << seq.status().to_string();
      if (seq.ok()) out = greedy(**seq, prompt_, 0);
    }
    tiered_->set_tiering(nullptr);
    return out;
  }
  ~GpuTarget() override {
    tiered_.reset();
    host_.reset();
  }

 private:
  uint32_t n_ctx() const { return static_cast<uint32_t>(prompt_.size()) + kTokens + 8; }
  std::string path_;
  std::vector<int32_t> prompt_;
  bool interleave_;
  std::unique_ptr<Model> host_;
  std::unique_ptr<CudaModel> tiered_;
};

TEST(ExecutorContract, GpuDeviceOnKjvMoe) {
  MT_SKIP_WITHOUT_DEVICE();
  const std::string here = __FILE__;  // the repository's copy (the GPU machine lacks the shared test data)
  const std::string path = here.substr(0, here.rfind("/tests/")) + "/models/kjv-moe-f16.gguf";
  std::vector<int32_t> prompt(23);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 97 + 11) % 4000);
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  auto geometry = read_expert_geometry(*file);
  ASSERT_TRUE(geometry.ok());
  GpuTarget target(path, prompt, false);
  mt::test::check_executor_contract(target, *geometry, static_cast<uint32_t>(geometry->layers.size()));
}

TEST(ExecutorContract, GpuDeviceOnASyntheticModel) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen2Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  c.router_skew = 1.0f;
  const std::string path = mt::test::temp_path("executor-gpu-qwen2moe.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  auto geometry = read_expert_geometry(*file);
  ASSERT_TRUE(geometry.ok());
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 131 + 7) % 200);
  GpuTarget target(path, prompt, true);  // Q4_K / Q6_K experts: the CPU reads interleaved copies
  mt::test::check_executor_contract(target, *geometry, static_cast<uint32_t>(geometry->layers.size()));
}

}  // namespace
}  // namespace mt::cuda
