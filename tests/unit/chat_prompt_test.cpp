// ChatPrompt, the one chat renderer of `run --chat` and `serve`: the GGUF's template,
// --chat-template-file over it (an unreadable or broken file is an error), the ChatML
// fallback, the tool-call syntax of the template in use, tools and template variables.
#include "runtime/chat_prompt.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace mt::chat_prompt_test {
namespace {

struct Vocab {
  gguf::GgufFile file;
  Tokenizer tokenizer;
};

// The Qwen2 vocabulary, which carries Qwen2's ChatML template.
Vocab qwen2() {
  auto file = gguf::GgufFile::open(test::testdata("vocab/ggml-vocab-qwen2.gguf"));
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return Vocab{std::move(*file), std::move(*tok)};
}

std::string templ(const std::string& name) { return test::testdata("chat_templates/" + name); }

TEST(ChatPrompt, TheModelsTemplateOrAFileOverIt) {
  Vocab v = qwen2();
  auto own = ChatPrompt::load(v.file, v.tokenizer);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(own->description(), "the model's chat template");
  const std::vector<ChatMessage> hi = {{"user", "Hi"}};
  EXPECT_NE(own->render(hi)->find("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);

  auto phi = ChatPrompt::load(v.file, v.tokenizer, templ("microsoft-Phi-3.5-mini-instruct.jinja"));
  ASSERT_TRUE(phi.ok()) << phi.status().message();
  EXPECT_EQ(*phi->render(hi), "<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(phi->tool_syntax(), ToolSyntax::kNone);

  auto qwen3 = ChatPrompt::load(v.file, v.tokenizer, templ("Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(qwen3.ok());
  EXPECT_EQ(qwen3->tool_syntax(), ToolSyntax::kQwen);
  ChatRenderOptions o;
  o.extra_json = R"({"enable_thinking": false})";
  o.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
  const std::string text = *qwen3->render(hi, o);
  EXPECT_NE(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n</tools>"), std::string::npos);
  EXPECT_NE(text.find("<|im_start|>assistant\n<think>\n\n</think>\n\n"), std::string::npos);
}

TEST(ChatPrompt, ABadTemplateFileIsAnErrorAndChatMlTheFallback) {
  Vocab v = qwen2();
  EXPECT_EQ(ChatPrompt::load(v.file, v.tokenizer, templ("no-such.jinja")).status().code(), StatusCode::kNotFound);
  const std::string broken = test::temp_path("broken.jinja");
  std::ofstream(broken) << "{% for m in messages %}{{ m.content }";
  auto bad = ChatPrompt::load(v.file, v.tokenizer, broken);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("broken.jinja"), std::string::npos) << bad.status().message();

  auto chatml = ChatPrompt::from_source("", v.tokenizer);
  ASSERT_TRUE(chatml.ok());
  const std::vector<ChatMessage> turns = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(*chatml->render(turns), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  ChatRenderOptions o;
  o.tools_json = "not json";
  EXPECT_EQ(chatml->render(turns, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt::chat_prompt_test
