// ChatPrompt: the one place where a chat's messages become the model's prompt text: the
// GGUF's `tokenizer.chat_template` (Jinja, runtime/chat_template.h) rendered with every
// message and the generation prompt, or ChatML when the model has no template or one that
// does not parse (what llama.cpp falls back to). A BOS the template writes at the start
// (an EOS at the end) is removed when the tokenizer adds one anyway, so it is not doubled
// (llama.cpp does the same).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "gguf/reader.h"
#include "runtime/chat_template.h"
#include "server/openai.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

class ChatPrompt {
 public:
  static ChatPrompt from_model(const gguf::GgufFile& file, const Tokenizer& tokenizer);

  // InvalidArgument when the template refuses the messages (its raise_exception, e.g.
  // roles that do not alternate).
  StatusOr<std::string> render(std::span<const ApiMessage> messages) const;

  // "the model's chat template" or "chatml (fallback: ...)", for the start-up line.
  const std::string& description() const { return description_; }

 private:
  std::optional<ChatTemplate> template_;
  ChatTemplateOptions options_;
  bool strip_bos_ = false, strip_eos_ = false;
  std::string description_;
};

}  // namespace mt::server
