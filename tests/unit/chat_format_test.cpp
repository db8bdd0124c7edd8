// Built-in chat formats: detection from the real templates and the rendered prompts.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/chat_format.h"
#include "test_util.h"

namespace mt {
namespace {

std::string read(const std::string& rel) {
  std::ifstream in(test::testdata(rel));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatFormat, DetectsTheFamiliesFromRealTemplates) {
  EXPECT_EQ(*detect_chat_format(read("chat_templates/Qwen-Qwen3-0.6B.jinja")), ChatFormat::kChatMl);
  EXPECT_EQ(*detect_chat_format(read("chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja")), ChatFormat::kChatMl);
  EXPECT_EQ(*detect_chat_format(read("chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja")), ChatFormat::kLlama3);
  EXPECT_EQ(*detect_chat_format(read("chat_templates/mistralai-Mistral-Nemo-Instruct-2407.jinja")), ChatFormat::kMistral);
  EXPECT_EQ(detect_chat_format("").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(detect_chat_format("{{ messages }}").status().code(), StatusCode::kUnimplemented);
}

TEST(ChatFormat, RendersOneUserTurn) {
  EXPECT_EQ(apply_chat_format(ChatFormat::kChatMl, "Be brief.", "Hi"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_format(ChatFormat::kMistral, "", "Hi"), "[INST] Hi [/INST]");
  EXPECT_EQ(apply_chat_format(ChatFormat::kLlama3, "", "Hi"),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_format(ChatFormat::kTulu, "", "Hi"), "<|user|>\nHi\n<|assistant|>\n");
}

}  // namespace
}  // namespace mt
