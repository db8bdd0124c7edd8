// The scheduler's per-request choices on the real kjv-moe model: n choices forked from one
// prompt (greedy choices equal the single greedy continuation; seeded ones differ and
// replay), logprobs equal to the log-softmax of the model's own logits, logit_bias bans,
// and grammar-constrained choices that end as soon as their JSON is complete. Also the
// sampler-level pieces: log_softmax_top and the bias.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <condition_variable>
#include <mutex>

#include "model/cpu_backend.h"
#include "model/model.h"
#include "runtime/json_schema.h"
#include "server/scheduler.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

struct Choices {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<TokenLogprobs>> logprobs;
  std::vector<std::string> finish;
  GenerationEvent last;
  int dones = 0, lasts = 0;
  bool finished = false;
};

GenerationRequest request(std::vector<int32_t> prompt, uint32_t max_tokens, uint32_t n, Choices* c) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.choices.n = n;
  c->text.resize(n);
  c->tokens.resize(n);
  c->logprobs.resize(n);
  c->finish.resize(n);
  r.on_event = [c](const GenerationEvent& e) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (e.kind == GenerationEvent::Kind::kText) {
      c->text[e.index] += e.text;
      if (e.token >= 0) c->tokens[e.index].push_back(e.token);
      c->logprobs[e.index].insert(c->logprobs[e.index].end(), e.logprobs.begin(), e.logprobs.end());
      return true;
    }
    if (e.kind == GenerationEvent::Kind::kDone) {
      ++c->dones;
      c->finish[e.index] = e.finish_reason;
    }
    if (e.last) {
      ++c->lasts;
      c->last = e;
      c->finished = true;
      c->cv.notify_all();
    }
    return true;
  };
  return r;
}

void wait(Choices& c) {
  std::unique_lock<std::mutex> lock(c.mu);
  ASSERT_TRUE(c.cv.wait_for(lock, std::chrono::seconds(120), [&] { return c.finished; }));
}

class SchedulerChoicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"), {2});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(*m);
    backend = std::make_unique<CpuBackend>(*model);
    auto t = Tokenizer::from_gguf(model->file());
    ASSERT_TRUE(t.ok());
    tokenizer = std::make_unique<Tokenizer>(std::move(*t));
    prompt = tokenizer->encode("In the beginning God created", true, false);
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> prompt;
};

TEST_F(SchedulerChoicesTest, GreedyChoicesAreTheGreedyContinuationAndUsageCountsThemAll) {
  Scheduler s(*backend, *tokenizer, {.max_running = 4, .n_ctx = 128});
  Choices one, three;
  ASSERT_TRUE(s.submit(request(prompt, 12, 1, &one)).ok());
  ASSERT_TRUE(s.submit(request(prompt, 12, 3, &three)).ok());
  wait(one);
  wait(three);
  EXPECT_EQ(three.dones, 3);
  EXPECT_EQ(three.lasts, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three.tokens[i], one.tokens[0]) << "choice " << i;
    EXPECT_EQ(three.finish[i], "length");
  }
  EXPECT_EQ(three.last.completion_tokens, 36u);
  EXPECT_EQ(three.last.prompt_tokens, prompt.size());
  EXPECT_EQ(s.metrics().kv_tokens_used, 0u);
  EXPECT_EQ(s.metrics().completion_tokens, 48u);
}

TEST_F(SchedulerChoicesTest, SeededChoicesDifferAndReplay) {
  Scheduler s(*backend, *tokenizer, {.max_running = 4, .n_ctx = 128});
  Choices a, b;
  for (Choices* c : {&a, &b}) {
    GenerationRequest r = request(prompt, 16, 3, c);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 42;
    ASSERT_TRUE(s.submit(std::move(r)).ok());
  }
  wait(a);
  wait(b);
  EXPECT_EQ(a.tokens, b.tokens);  // the same seed replays every choice
  EXPECT_TRUE(a.tokens[0] != a.tokens[1] || a.tokens[1] != a.tokens[2]) << "three seeded choices were identical";
}

TEST_F(SchedulerChoicesTest, LogprobsAreTheLogSoftmaxOfTheModelsLogits) {
  auto seq = Sequence::create(*backend, 64);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  ASSERT_TRUE(seq->feed(prompt, false, &logits).ok());
  double sum = 0;
  float max = logits[0];
  for (float l : logits) max = std::max(max, l);
  for (float l : logits) sum += std::exp(double(l) - max);
  const double lse = max + std::log(sum);

  Scheduler s(*backend, *tokenizer, {.max_running = 2, .n_ctx = 128});
  Choices c;
  GenerationRequest r = request(prompt, 4, 1, &c);
  r.choices.top_logprobs = 5;
  ASSERT_TRUE(s.submit(std::move(r)).ok());
  wait(c);
  ASSERT_EQ(c.logprobs[0].size(), 4u);
  const TokenLogprobs& first = c.logprobs[0][0];
  ASSERT_EQ(first.top.size(), 5u);
  EXPECT_EQ(first.chosen.token, first.top[0].token);  // greedy: the most likely
  EXPECT_NEAR(first.chosen.logprob, logits[static_cast<size_t>(first.chosen.token)] - lse, 1e-4);
  EXPECT_EQ(first.chosen.piece, tokenizer->token_to_piece(first.chosen.token));
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_NEAR(first.top[k].logprob, logits[static_cast<size_t>(first.top[k].token)] - lse, 1e-4);
    if (k > 0) {
      EXPECT_LE(first.top[k].logprob, first.top[k - 1].logprob);
    }
  }
}

TEST_F(SchedulerChoicesTest, LogitBiasBansTheGreedyToken) {
  Scheduler s(*backend, *tokenizer, {.max_running = 2, .n_ctx = 128});
  Choices plain, banned;
  ASSERT_TRUE(s.submit(request(prompt, 2, 1, &plain)).ok());
  wait(plain);
  GenerationRequest r = request(prompt, 2, 1, &banned);
  r.sampling.logit_bias = {{plain.tokens[0][0], -100.0f}};
  ASSERT_TRUE(s.submit(std::move(r)).ok());
  wait(banned);
  EXPECT_NE(banned.tokens[0][0], plain.tokens[0][0]);

  Choices bad;
  GenerationRequest out_of_vocab = request(prompt, 2, 1, &bad);
  out_of_vocab.sampling.logit_bias = {{999999, 5.0f}};
  auto st = s.submit(std::move(out_of_vocab));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("logit_bias"), std::string::npos);
}

TEST_F(SchedulerChoicesTest, GrammarChoicesEndWithValidJson) {
  auto g = json_schema_grammar(R"({"type": "object", "properties": {"who": {"type": "string", "maxLength": 10},
      "n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["who", "n", "ok"]})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Scheduler s(*backend, *tokenizer, {.max_running = 4, .n_ctx = 256});
  Choices c;
  GenerationRequest r = request(prompt, 120, 3, &c);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  r.choices.grammar = *g;
  r.choices.grammar_key = "test";
  ASSERT_TRUE(s.submit(std::move(r)).ok());
  wait(c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.finish[i], "stop") << c.text[i];
    auto j = nlohmann::json::parse(c.text[i], nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.text[i];
    EXPECT_TRUE(j["who"].is_string() && j["who"].get<std::string>().size() <= 40) << c.text[i];
    EXPECT_TRUE(j["n"].is_number_integer()) << c.text[i];
    EXPECT_TRUE(j["ok"].is_boolean()) << c.text[i];
  }
}

TEST(LogSoftmaxTop, ValuesAndOrder) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  std::vector<TokenLogprob> top;
  const float lp = log_softmax_top(logits, 3, 3, &top);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l));
  EXPECT_NEAR(lp, -2.0 - std::log(sum), 1e-6);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // ties: the lower id first
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 0);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(sum), 1e-6);
  log_softmax_top(logits, 0, 0, &top);
  EXPECT_TRUE(top.empty());
}

TEST(LogitBias, BansAndShifts) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{1, -100.0f}};
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f};
  EXPECT_EQ(Sampler(p, 3).sample(logits), 2);
  p.logit_bias = {{0, 4.5f}};
  EXPECT_EQ(Sampler(p, 3).sample(logits), 0);
  p.logit_bias = {{0, 101.0f}};
  EXPECT_FALSE(validate(p).ok());
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -100.0f}};
  EXPECT_TRUE(validate(p).ok());
  EXPECT_FALSE(validate_logit_bias(p, 3).ok());  // nothing left to sample
  p.logit_bias = {{3, 1.0f}};
  EXPECT_FALSE(validate_logit_bias(p, 3).ok());
}

}  // namespace
}  // namespace mt
