#include "runtime/chat_prompt.h"

#include <fstream>
#include <sstream>

namespace mt {
namespace {

constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::string token_text_or_empty(const Tokenizer& t, int32_t id) { return t.valid(id) ? t.token_text(id) : ""; }

StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("--chat-template-file: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("--chat-template-file: error reading '" + path + "'");
  return ss.str();
}

}  // namespace

void ChatPrompt::set_tokens(const Tokenizer& tokenizer) {
  options_.add_generation_prompt = true;
  options_.bos_token = token_text_or_empty(tokenizer, tokenizer.bos());
  options_.eos_token = token_text_or_empty(tokenizer, tokenizer.eos());
  strip_bos_ = tokenizer.add_bos() && !options_.bos_token.empty();
  strip_eos_ = tokenizer.add_eos() && !options_.eos_token.empty();
  tool_syntax_ = detect_tool_syntax(template_->source());
}

StatusOr<ChatPrompt> ChatPrompt::load(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                      const std::string& template_file) {
  if (!template_file.empty()) {
    MT_ASSIGN_OR_RETURN(std::string source, read_text_file(template_file));
    auto parsed = ChatTemplate::parse(std::move(source));
    if (!parsed.ok()) return invalid_argument("--chat-template-file " + template_file + ": " + parsed.status().message());
    ChatPrompt p;
    p.template_ = std::move(*parsed);
    p.description_ = template_file;
    p.set_tokens(tokenizer);
    return p;
  }
  ChatPrompt p;
  auto source = file.get_string("tokenizer.chat_template");
  if (source.ok()) {
    auto parsed = ChatTemplate::parse(std::string(*source));
    if (parsed.ok()) {
      p.template_ = std::move(*parsed);
      p.description_ = "the model's chat template";
    } else {
      p.description_ = "chatml (fallback: the model's chat template: " + parsed.status().message() + ")";
    }
  } else {
    p.description_ = "chatml (fallback: the model has no chat template)";
  }
  if (!p.template_) p.template_ = ChatTemplate::parse(kChatMl).value();
  p.set_tokens(tokenizer);
  return p;
}

StatusOr<ChatPrompt> ChatPrompt::from_source(const std::string& source, const Tokenizer& tokenizer) {
  MT_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source.empty() ? std::string(kChatMl) : source));
  ChatPrompt p;
  p.template_ = std::move(t);
  p.description_ = source.empty() ? "chatml" : "the given template";
  p.set_tokens(tokenizer);
  return p;
}

StatusOr<std::string> ChatPrompt::render(std::span<const ChatMessage> messages, const ChatRenderOptions& o) const {
  ChatTemplateOptions options = options_;
  options.tools_json = o.tools_json;
  options.extra_json = o.extra_json;
  options.add_generation_prompt = o.add_generation_prompt;
  auto rendered = template_->render(messages, options);
  if (!rendered.ok()) return invalid_argument("the chat template refused the messages: " + rendered.status().message());
  std::string text = std::move(*rendered);
  const std::string& bos = options_.bos_token;
  const std::string& eos = options_.eos_token;
  if (strip_bos_ && text.compare(0, bos.size(), bos) == 0) text.erase(0, bos.size());
  if (strip_eos_ && text.size() >= eos.size() && text.compare(text.size() - eos.size(), eos.size(), eos) == 0) {
    text.erase(text.size() - eos.size());
  }
  return text;
}

}  // namespace mt
