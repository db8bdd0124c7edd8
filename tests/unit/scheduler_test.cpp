// The server's scheduler on the real kjv-moe model: requests decoded together give the
// greedy continuations of the transformers reference (batching changes nothing), a KV
// budget makes requests wait rather than fail, cancellation, max_tokens, stop strings,
// deadlines and bad requests.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "experts/geometry.h"
#include "experts/pools.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "model/offload.h"
#include "server/scheduler.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::string text;
  std::vector<int32_t> tokens;
  GenerationEvent done;
  bool finished = false;
};

GenerationRequest request(const std::vector<int32_t>& prompt, uint32_t max_tokens, Collected* c, int cancel_after = -1) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.on_event = [c, cancel_after](const GenerationEvent& e) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (e.kind == GenerationEvent::Kind::kText) {
      c->text += e.text;
      if (e.token >= 0) c->tokens.push_back(e.token);
      return cancel_after < 0 || static_cast<int>(c->tokens.size()) < cancel_after;
    }
    c->done = e;
    c->finished = true;
    c->cv.notify_all();
    return true;
  };
  return r;
}

void wait(Collected& c) {
  std::unique_lock<std::mutex> lock(c.mu);
  ASSERT_TRUE(c.cv.wait_for(lock, std::chrono::seconds(120), [&] { return c.finished; }));
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"), {2});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(*m);
    backend = std::make_unique<CpuBackend>(*model);
    auto t = Tokenizer::from_gguf(model->file());
    ASSERT_TRUE(t.ok());
    tokenizer = std::make_unique<Tokenizer>(std::move(*t));
    std::ifstream in(test::testdata("models/kjv-moe/refs/refs.json"));
    refs = nlohmann::json::parse(in);
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
  nlohmann::json refs;
};

TEST_F(SchedulerTest, ConcurrentRequestsGiveTheReferenceGreedyContinuations) {
  Scheduler s(*backend, *tokenizer, {.max_running = 8, .n_ctx = 256, .prefill_chunk = 7});
  std::vector<std::unique_ptr<Collected>> out;
  std::vector<std::vector<int32_t>> expected;
  for (int rep = 0; rep < 2; ++rep) {
    for (const auto& p : refs["prompts"]) {
      out.push_back(std::make_unique<Collected>());
      auto ids = p["greedy_ids"].get<std::vector<int32_t>>();
      ids.resize(24);
      expected.push_back(ids);
      ASSERT_TRUE(s.submit(request(p["ids"].get<std::vector<int32_t>>(), 24, out.back().get())).ok());
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    wait(*out[i]);
    EXPECT_EQ(out[i]->done.finish_reason, "length");
    EXPECT_EQ(out[i]->done.completion_tokens, 24u);
    EXPECT_EQ(out[i]->tokens, expected[i]) << "request " << i;
  }
  const SchedulerMetrics m = s.metrics();
  EXPECT_EQ(m.requests_finished, out.size());
  EXPECT_EQ(m.kv_tokens_used, 0u);
  EXPECT_LT(m.steps, out.size() * 24) << "requests were not batched";
}

// Sampling threads (serve --device cuda): requests sampled at temperature 0.8 with fixed
// seeds get the same tokens whether the step's choices are sampled by 4 threads together or
// one after another (each choice's sampler is its own).
TEST_F(SchedulerTest, SamplingThreadsPickTheTokensOneThreadPicks) {
  std::vector<std::vector<int32_t>> runs[2];
  for (uint32_t threads : {1u, 4u}) {
    Scheduler s(*backend, *tokenizer, {.max_running = 8, .n_ctx = 256, .sampling_threads = threads});
    std::vector<std::unique_ptr<Collected>> out;
    uint64_t seed = 11;
    for (const auto& p : refs["prompts"]) {
      out.push_back(std::make_unique<Collected>());
      GenerationRequest r = request(p["ids"].get<std::vector<int32_t>>(), 20, out.back().get());
      r.sampling.temperature = 0.8f;
      r.sampling.seed = seed++;
      ASSERT_TRUE(s.submit(std::move(r)).ok());
    }
    for (auto& c : out) {
      wait(*c);
      runs[threads > 1].push_back(c->tokens);
    }
    EXPECT_LT(s.metrics().steps, out.size() * 20) << "requests were not batched";
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[1][i], runs[0][i]) << "request " << i;
    EXPECT_EQ(runs[0][i].size(), 20u);
  }
}

// serve --expert-cache: the experts tiered through the simulated device at a quarter of
// their bytes keep the greedy continuations (the hybrid path is bit-identical), and the
// per-layer counters the scheduler publishes for /metrics are the offload's own.
TEST_F(SchedulerTest, TieredExpertsKeepTheContinuationsAndPublishTheirCounters) {
  auto geometry = read_expert_geometry(model->file());
  ASSERT_TRUE(geometry.ok());
  auto state = make_offload(*model, *geometry, plan_pools(*geometry, geometry->compact_bytes / 4), {}, {});
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  ServingOptions options{.max_running = 4, .n_ctx = 256, .prefill_chunk = 16};
  options.experts = (*state)->scheduler.get();
  CpuBackend tiered(*model, &(*state)->offload);
  {
    Scheduler s(tiered, *tokenizer, options);
    std::vector<std::unique_ptr<Collected>> out;
    std::vector<std::vector<int32_t>> expected;
    for (const auto& p : refs["prompts"]) {
      out.push_back(std::make_unique<Collected>());
      auto ids = p["greedy_ids"].get<std::vector<int32_t>>();
      ids.resize(16);
      expected.push_back(ids);
      ASSERT_TRUE(s.submit(request(p["ids"].get<std::vector<int32_t>>(), 16, out.back().get())).ok());
    }
    for (size_t i = 0; i < out.size(); ++i) {
      wait(*out[i]);
      EXPECT_EQ(out[i]->tokens, expected[i]) << "request " << i;
    }
    const SchedulerMetrics m = s.metrics();
    const ExpertScheduler& es = *(*state)->scheduler;
    ASSERT_EQ(m.expert_layers.size(), es.cache().n_layers());
    uint64_t lookups = 0;
    for (uint32_t l = 0; l < m.expert_layers.size(); ++l) {
      const ExpertLayerCounters& c = m.expert_layers[l];
      EXPECT_EQ(c.hits, es.cache().counters(l).hits) << "layer " << l;
      EXPECT_EQ(c.misses, es.cache().counters(l).misses) << "layer " << l;
      EXPECT_EQ(c.cpu_experts, es.counters(l).cpu_experts) << "layer " << l;
      EXPECT_EQ(c.h2d_bytes, es.cache().counters(l).bytes_copied + es.counters(l).staged_bytes) << "layer " << l;
      lookups += c.hits + c.misses;
    }
    EXPECT_GT(lookups, 0u);
  }
}

TEST_F(SchedulerTest, AKvBudgetMakesRequestsWaitNotFail) {
  // Room for one request at a time.
  Scheduler s(*backend, *tokenizer, {.max_running = 4, .n_ctx = 64, .kv_budget_tokens = 40});
  std::vector<std::unique_ptr<Collected>> out;
  const std::vector<int32_t> prompt = refs["prompts"][0]["ids"].get<std::vector<int32_t>>();
  ASSERT_LE(prompt.size() + 8, 40u);
  for (int i = 0; i < 4; ++i) {
    out.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s.submit(request(prompt, 8, out.back().get())).ok());
  }
  EXPECT_GE(s.metrics().queued + s.metrics().running, 1u);
  for (auto& c : out) {
    wait(*c);
    EXPECT_EQ(c->done.finish_reason, "length");
    EXPECT_EQ(c->tokens, out.front()->tokens);
  }
  EXPECT_FALSE(s.submit(request(std::vector<int32_t>(40, 1), 8, out.front().get())).ok()) << "can never fit";
}

TEST_F(SchedulerTest, CancelStopLengthTimeoutAndBadRequests) {
  Scheduler s(*backend, *tokenizer, {.max_running = 4, .n_ctx = 128});
  const std::vector<int32_t> prompt = refs["prompts"][1]["ids"].get<std::vector<int32_t>>();
  Collected cancelled, stopped, timed;
  ASSERT_TRUE(s.submit(request(prompt, 40, &cancelled, 3)).ok());
  // A stop string: the first generated word of the reference continuation.
  const std::string ref_text = tokenizer->decode(refs["prompts"][1]["greedy_ids"].get<std::vector<int32_t>>());
  GenerationRequest st = request(prompt, 40, &stopped);
  const std::string stop = ref_text.substr(ref_text.size() / 2, 3);
  st.stops = {stop};
  ASSERT_TRUE(s.submit(std::move(st)).ok());
  GenerationRequest tr = request(prompt, 100, &timed);
  tr.timeout = std::chrono::milliseconds(1);
  ASSERT_TRUE(s.submit(std::move(tr)).ok());
  wait(cancelled);
  wait(stopped);
  wait(timed);
  EXPECT_EQ(cancelled.done.finish_reason, "cancelled");
  EXPECT_LE(cancelled.tokens.size(), 4u);
  EXPECT_EQ(stopped.done.finish_reason, "stop");
  EXPECT_EQ(stopped.text.find(stop), std::string::npos) << "the stop string is cut";
  EXPECT_EQ(timed.done.finish_reason, "timeout");
  Collected unused;
  EXPECT_FALSE(s.submit(request({}, 4, &unused)).ok());
  EXPECT_FALSE(s.submit(request(prompt, 0, &unused)).ok());
  EXPECT_FALSE(s.submit(request({-1}, 4, &unused)).ok());
  EXPECT_FALSE(s.submit(request(prompt, 200, &unused)).ok()) << "prompt + max_tokens > n_ctx";
}

// /metrics' view of the steps and the KV cache: every step counted in both batch-size
// histograms, every fed token in the tokens histogram, several sequences in some steps;
// the KV in use (tokens reserved and written, sequences, bytes) while requests run, and 0
// once they are cancelled.
// Requests sent a few ms apart to an idle scheduler (ServingOptions::gather) start in one
// step with every prompt whole (prefill_idle_chunk), then decode together: one prompt step
// and max_tokens - 1 decode steps in all. Without the wait the first request's prompt goes
// alone and the others are paced in beside it in chunks of prefill_chunk.
TEST_F(SchedulerTest, RequestsSentTogetherStartInOneStep) {
  const std::vector<int32_t> prompt = refs["prompts"][0]["ids"].get<std::vector<int32_t>>();
  ASSERT_GT(prompt.size(), 4u);
  for (const bool gather : {true, false}) {
    ServingOptions options{.max_running = 3, .n_ctx = 128, .prefill_chunk = 4, .prefill_idle_chunk = 512};
    if (gather) options.gather = std::chrono::milliseconds(2000);
    Scheduler s(*backend, *tokenizer, options);
    std::vector<std::unique_ptr<Collected>> out;
    for (int i = 0; i < 3; ++i) {
      out.push_back(std::make_unique<Collected>());
      ASSERT_TRUE(s.submit(request(prompt, 8, out.back().get())).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(gather ? 5 : 100));
    }
    for (auto& c : out) wait(*c);
    const SchedulerMetrics m = s.metrics();
    if (gather) {
      EXPECT_EQ(m.steps, 8u) << "one step of three whole prompts, then 7 decode steps of three";
      EXPECT_EQ(m.step_sequences.sum, 3u * 8u);
    } else {
      EXPECT_GT(m.steps, 8u);
    }
  }
}

TEST_F(SchedulerTest, StepHistogramsAndKvInUseBackToZeroAfterCancel) {
  ServingOptions options{.max_running = 4, .n_ctx = 128, .prefill_chunk = 16};
  options.kv_bytes_per_token = 1000;
  options.kv_bytes_per_sequence = 7;
  Scheduler s(*backend, *tokenizer, options);
  const std::vector<int32_t> prompt = refs["prompts"][0]["ids"].get<std::vector<int32_t>>();
  std::vector<std::unique_ptr<Collected>> out;
  for (int i = 0; i < 3; ++i) {
    out.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s.submit(request(prompt, 8, out.back().get())).ok());
  }
  for (auto& c : out) wait(*c);
  SchedulerMetrics m = s.metrics();
  uint64_t seq_steps = 0, tok_steps = 0;
  for (uint64_t c : m.step_sequences.counts) seq_steps += c;
  for (uint64_t c : m.step_tokens.counts) tok_steps += c;
  EXPECT_EQ(seq_steps, m.steps);
  EXPECT_EQ(tok_steps, m.steps);
  EXPECT_EQ(m.step_tokens.sum, 3 * (prompt.size() + 8 - 1)) << "every prompt token and every sampled token but the last";
  EXPECT_GT(m.step_sequences.sum, m.steps) << "no step evaluated several sequences";
  EXPECT_LT(m.step_sequences.counts[0], m.steps);

  // Two long requests cancelled once they are decoding.
  Collected a, b;
  auto ida = s.submit(request(prompt, 100, &a));
  auto idb = s.submit(request(prompt, 100, &b));
  ASSERT_TRUE(ida.ok() && idb.ok());
  for (int i = 0; i < 2000; ++i) {
    m = s.metrics();
    if (m.kv_sequences == 2 && m.kv_tokens_filled > 2 * prompt.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(m.kv_tokens_used, 2 * (prompt.size() + 100));
  EXPECT_EQ(m.kv_sequences, 2u);
  EXPECT_GT(m.kv_tokens_filled, 2 * prompt.size());
  EXPECT_LE(m.kv_tokens_filled, m.kv_tokens_used);
  EXPECT_EQ(m.kv_bytes_used, m.kv_tokens_used * 1000 + 2 * 7);
  s.cancel(*ida);
  s.cancel(*idb);
  wait(a);
  wait(b);
  EXPECT_EQ(a.done.finish_reason, "cancelled");
  for (int i = 0; i < 2000 && (s.metrics().kv_sequences != 0 || s.metrics().kv_tokens_filled != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  m = s.metrics();
  EXPECT_EQ(m.kv_tokens_used, 0u);
  EXPECT_EQ(m.kv_tokens_filled, 0u);
  EXPECT_EQ(m.kv_sequences, 0u);
  EXPECT_EQ(m.kv_bytes_used, 0u);
  EXPECT_EQ(m.running, 0u);
  EXPECT_EQ(m.requests_cancelled, 2u);
}

}  // namespace
}  // namespace mt
