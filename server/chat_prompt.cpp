#include "server/chat_prompt.h"

#include <vector>

namespace mt::server {
namespace {

constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::string token_text_or_empty(const Tokenizer& t, int32_t id) { return t.valid(id) ? t.token_text(id) : ""; }

}  // namespace

ChatPrompt ChatPrompt::from_model(const gguf::GgufFile& file, const Tokenizer& tokenizer) {
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
  p.options_.add_generation_prompt = true;
  p.options_.bos_token = token_text_or_empty(tokenizer, tokenizer.bos());
  p.options_.eos_token = token_text_or_empty(tokenizer, tokenizer.eos());
  p.strip_bos_ = tokenizer.add_bos() && !p.options_.bos_token.empty();
  p.strip_eos_ = tokenizer.add_eos() && !p.options_.eos_token.empty();
  return p;
}

StatusOr<std::string> ChatPrompt::render(std::span<const ApiMessage> messages) const {
  std::vector<ChatMessage> chat;
  chat.reserve(messages.size());
  for (const ApiMessage& m : messages) chat.push_back({m.role, m.content});
  auto rendered = template_->render(chat, options_);
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

}  // namespace mt::server
