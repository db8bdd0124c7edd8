// The kjv-moe model's own tokenizer (byte-level BPE, qwen2 pre-tokenizer, trained for the
// model): our ids equal the Hugging Face tokenizer's ids stored with the reference outputs
// (refs/refs.json) and llama.cpp's ids (llamacpp_check_f16.json, which also covers the
// prompt with digits and a newline), and the greedy continuations decode to the text
// transformers decoded.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

using nlohmann::json;

json read_json(const std::string& rel) {
  std::ifstream in(test::testdata(rel));
  EXPECT_TRUE(in.good()) << rel;
  return json::parse(in);
}

Tokenizer kjv_tokenizer() {
  auto file = gguf::GgufFile::open(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"));
  MT_CHECK_MSG(file.ok(), file.status().to_string().c_str());
  auto tok = Tokenizer::from_gguf(*file);
  MT_CHECK_MSG(tok.ok(), tok.status().to_string().c_str());
  return std::move(tok).value();
}

TEST(TokenizerKjv, VocabFacts) {
  const Tokenizer tok = kjv_tokenizer();
  EXPECT_EQ(tok.n_vocab(), 4096u);
  EXPECT_STREQ(tok.model_name(), "gpt2");
  EXPECT_STREQ(tok.pre_name(), "qwen2");
  EXPECT_EQ(tok.bos(), 4095);
  EXPECT_EQ(tok.eos(), 4095);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_TRUE(tok.is_eog(4095));
  EXPECT_EQ(tok.token_text(4095), "<|endoftext|>");
}

TEST(TokenizerKjv, PromptsMatchTransformersIds) {
  const Tokenizer tok = kjv_tokenizer();
  const json refs = read_json("models/kjv-moe/refs/refs.json");
  ASSERT_EQ(refs["prompts"].size(), 3u);
  for (const json& p : refs["prompts"]) {
    const std::string text = p["text"];
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, true, false), ids) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(TokenizerKjv, PromptsMatchLlamaCppIds) {
  const Tokenizer tok = kjv_tokenizer();
  const json check = read_json("models/kjv-moe/llamacpp_check_f16.json");
  const json refs = read_json("models/kjv-moe/refs/refs.json");
  // Prompt 3 is listed only in the model's README.
  std::vector<std::string> texts;
  for (const json& p : refs["prompts"]) texts.push_back(p["text"]);
  texts.push_back("Chapter 3, verse 16:\nFor God so loved the world, that he gave");
  ASSERT_EQ(check["prompts"].size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const json& p = check["prompts"][i];
    ASSERT_EQ(p["prompt"].get<size_t>(), i);
    EXPECT_EQ(tok.encode(texts[i], true, false), p["llama_tokens"].get<std::vector<int32_t>>()) << texts[i];
  }
}

TEST(TokenizerKjv, GreedyContinuationsDecodeToTransformersText) {
  const Tokenizer tok = kjv_tokenizer();
  const json refs = read_json("models/kjv-moe/refs/refs.json");
  for (const json& p : refs["prompts"]) {
    const auto ids = p["greedy_ids"].get<std::vector<int32_t>>();
    const std::string want = p["greedy_text"];
    EXPECT_EQ(tok.decode(ids), want);
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, want);
    // Re-encoding the continuation gives the same ids (the model emitted canonical tokens).
    EXPECT_EQ(tok.encode(want, false, false), ids) << want;
  }
}

}  // namespace
}  // namespace mt
