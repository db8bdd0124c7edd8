// Several sequences in one forward pass (CudaModel::eval_batch through CudaBackend): each
// of 8 sequences of different prompt lengths, decoded together (their prompts in two
// groups, the second joining while the first decodes, so prompt chunks and decode tokens
// share passes), gets the logits of decoding it alone within the parity bounds (F32 1e-4,
// quantized 2e-2 relative), for every family of mixer (grouped-query attention with and
// without sinks and windows, Gated DeltaNet, latent attention), resident and with tiered
// experts; a batch larger than a micro-batch is cut into passes; bad batches are Statuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backend_schedule.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_model.h"
#include "cuda/tiering.h"
#include "cuda_test_util.h"
#include "model/offload.h"
#include "tiny_model.h"

namespace mt::cuda {
namespace {

constexpr size_t kSeqs = 8;
constexpr int kDecode = 6;  // decode steps after each prompt

// Sequence s: a prompt of 2 + 3 s tokens, then kDecode fixed tokens (no sampling: both
// runs feed the same ids).
std::vector<int32_t> prompt_of(size_t s, uint32_t V) { return mt::test::ids(static_cast<uint32_t>(2 + 3 * s), 11 + s, V); }
int32_t decode_token(size_t s, int k, uint32_t V) { return static_cast<int32_t>((s * 131 + static_cast<size_t>(k) * 17 + 3) % V); }

using Rows = std::map<size_t, std::vector<std::vector<float>>>;  // per sequence: its asked rows in order

// Alone: each sequence its own feeds (the prompt, then each decode token: graph replays).
Rows run_alone(Backend& backend) {
  const uint32_t V = backend.n_vocab();
  Rows out;
  for (size_t s = 0; s < kSeqs; ++s) {
    auto seq = Sequence::create(backend, 64);
    EXPECT_TRUE(seq.ok());
    std::vector<float> lg;
    EXPECT_TRUE(seq->feed(prompt_of(s, V), false, &lg).ok());
    out[s].push_back(lg);
    for (int k = 0; k < kDecode; ++k) {
      const int32_t t = decode_token(s, k, V);
      EXPECT_TRUE(seq->feed({&t, 1}, false, &lg).ok());
      out[s].push_back(lg);
    }
  }
  return out;
}

// Together: the first half's prompts in one call; then every step each started
// sequence's next decode token, the second half's prompts joining at step 2.
Rows run_together(Backend& backend) {
  const uint32_t V = backend.n_vocab();
  std::vector<SeqId> ids(kSeqs);
  std::vector<int> done(kSeqs, -1);  // decode tokens fed; -1: prompt not yet
  for (size_t s = 0; s < kSeqs; ++s) {
    auto id = backend.create_sequence(64);
    EXPECT_TRUE(id.ok());
    ids[s] = *id;
  }
  Rows out;
  auto add_prompt = [&](Batch& b, size_t s, std::vector<size_t>& order) {
    const std::vector<int32_t> p = prompt_of(s, V);
    for (size_t i = 0; i < p.size(); ++i) b.add(ids[s], static_cast<uint32_t>(i), p[i], i + 1 == p.size());
    order.push_back(s);
  };
  for (int step = 0; step <= kDecode + 2; ++step) {
    Batch b;
    std::vector<size_t> order;  // the sequences whose rows the call returns, in batch order
    for (size_t s = 0; s < kSeqs; ++s) {
      if (done[s] >= 0 && done[s] < kDecode) {
        const auto pos = static_cast<uint32_t>(prompt_of(s, V).size()) + static_cast<uint32_t>(done[s]);
        b.add(ids[s], pos, decode_token(s, done[s], V), true);
        order.push_back(s);
      }
    }
    if (step == 0) for (size_t s = 0; s < kSeqs / 2; ++s) add_prompt(b, s, order);
    if (step == 2) for (size_t s = kSeqs / 2; s < kSeqs; ++s) add_prompt(b, s, order);
    if (b.empty()) break;
    std::vector<float> lg;
    const Status st = backend.eval(b, &lg);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return out;
    EXPECT_EQ(lg.size(), order.size() * V);
    for (size_t i = 0; i < order.size(); ++i) {
      out[order[i]].emplace_back(lg.begin() + static_cast<std::ptrdiff_t>(i * V),
                                 lg.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
      ++done[order[i]];
    }
  }
  return out;
}

void expect_same(const Rows& together, const Rows& alone, uint32_t V, double bound) {
  for (size_t s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(together.at(s).size(), alone.at(s).size()) << "sequence " << s;
    for (size_t r = 0; r < alone.at(s).size(); ++r) {
      EXPECT_LE(mt::test::rel(together.at(s)[r].data(), alone.at(s)[r].data(), V), bound) << "sequence " << s << " row " << r;
    }
  }
}

TEST(CudaBatch, EightSequencesTogetherGiveEachSequenceAloneResident) {
  MT_SKIP_WITHOUT_DEVICE();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kGptOss, Arch::kQwen35Moe, Arch::kDeepseek2}) {
    for (const char* quant : {"f32", "q4_k_m"}) {
      SCOPED_TRACE(std::string(arch_info(arch).name) + " " + quant);
      auto host = test::load_tiny(arch, quant, "batch");
      ASSERT_TRUE(host.ok()) << host.status().to_string();
      auto gpu = CudaModel::load(**host);
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      CudaBackend backend(**gpu);
      const Rows alone = run_alone(backend);
      const Rows together = run_together(backend);
      expect_same(together, alone, backend.n_vocab(), std::string(quant) == "f32" ? 1e-4 : 2e-2);
    }
  }
}

TEST(CudaBatch, EightSequencesTogetherGiveEachSequenceAloneTiered) {
  MT_SKIP_WITHOUT_DEVICE();
  synth::SynthConfig c = synth::tiny_for(Arch::kQwen3Moe);
  c.quant = *synth::parse_quant_mix("q4_k_m");
  const std::string path = mt::test::temp_path("batch-tiered.gguf");
  ASSERT_TRUE(synth::write_model(c, {path, false}).ok());
  LoadOptions lo{0, false};
  lo.interleave_experts_only = true;
  auto host = Model::load(path, lo);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto geometry = read_expert_geometry((*host)->file());
  ASSERT_TRUE(geometry.ok());
  CudaOptions options;
  options.experts_on_host = true;
  auto gpu = CudaModel::load(**host, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  for (uint32_t stream_threshold : {0u, 16u}) {  // hybrid steps only; the joining prompts streamed
    SCOPED_TRACE("stream threshold " + std::to_string(stream_threshold));
    CudaTieringOptions to;
    to.pin_budget = geometry->compact_bytes / 2;
    to.stream_threshold = stream_threshold;
    SchedulerOptions so;
    so.max_admissions = 2;
    auto tier = make_cuda_tiering(**host, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), CacheOptions{},
                                  so, to, std::make_unique<ModelCpuExperts>(**host));
    ASSERT_TRUE(tier.ok()) << tier.status().to_string();
    (*gpu)->set_tiering(tier->get());
    CudaBackend backend(**gpu);
    // Alone and together see different cache states (hits on the device, misses on the
    // CPU): the quantized bound covers both.
    const Rows alone = run_alone(backend);
    const Rows together = run_together(backend);
    expect_same(together, alone, backend.n_vocab(), 2e-2);
  }
}

TEST(CudaBatch, APassLargerThanTheMicroBatchAndBadBatches) {
  MT_SKIP_WITHOUT_DEVICE();
  auto host = test::load_tiny(Arch::kQwen3Moe, "f32", "batch-micro");
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::load(**host);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  CudaBackend backend(**gpu);
  const uint32_t V = backend.n_vocab();
  // Two prompts longer than a micro-batch together (MOETIER_CUDA_UBATCH unset: 2048), each
  // asking every 97th row: equal to each alone.
  const uint32_t n = CudaModel::kMicroBatch - 100;
  std::vector<SeqId> ids;
  Batch b;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t s = 0; s < 2; ++s) {
    auto id = backend.create_sequence(n + 8);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    prompts.push_back(mt::test::ids(n, 40 + s, V));
    for (uint32_t i = 0; i < n; ++i) b.add(*id, i, prompts[s][i], i % 97 == 0 || i + 1 == n);
  }
  std::vector<float> together;
  ASSERT_TRUE(backend.eval(b, &together).ok());
  size_t row = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    auto alone = backend.create_sequence(n + 8);
    ASSERT_TRUE(alone.ok());
    Batch one;
    for (uint32_t i = 0; i < n; ++i) one.add(*alone, i, prompts[s][i], i % 97 == 0 || i + 1 == n);
    std::vector<float> ref;
    ASSERT_TRUE(backend.eval(one, &ref).ok());
    for (size_t r = 0; r * V < ref.size(); ++r, ++row) {
      EXPECT_LE(mt::test::rel(together.data() + row * V, ref.data() + r * V, V), 1e-4) << "sequence " << s << " row " << r;
    }
    EXPECT_EQ(backend.position(ids[s]), n);
  }
  EXPECT_EQ(row * V, together.size());
  // Bad batches change nothing: a context overflow in the second sequence, a token id
  // outside the vocabulary.
  Batch bad;
  bad.add(ids[0], n, 1, true);
  bad.add(ids[1], n, 2, true);
  for (uint32_t i = 1; i < 9; ++i) bad.add(ids[1], n + i, 2, false);
  EXPECT_EQ(backend.eval(bad, &together).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(backend.position(ids[0]), n);
  bad.clear();
  bad.add(ids[0], n, 1, true);
  bad.add(ids[1], n, static_cast<int32_t>(V), true);
  EXPECT_EQ(backend.eval(bad, &together).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.position(ids[1]), n);
}

}  // namespace
}  // namespace mt::cuda
