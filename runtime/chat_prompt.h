// ChatPrompt: the one place where a chat's messages become the model's prompt text, for
// `moetier run --chat` and `moetier serve` alike: a chat template (Jinja,
// runtime/chat_template.h) rendered with every message, the tools and the caller's extra
// template variables, and the generation prompt. The template is the one given with
// --chat-template-file, else the GGUF's `tokenizer.chat_template`, else ChatML (what
// llama.cpp falls back to), also when the GGUF's template does not parse; a template file
// that cannot be read or parsed is an error (the user asked for it). A BOS the template
// writes at the start (an EOS at the end) is removed when the tokenizer adds one anyway,
// so it is not doubled (llama.cpp does the same). The template also says which syntax
// the model writes tool calls in (runtime/tool_calls.h).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "gguf/reader.h"
#include "runtime/chat_template.h"
#include "runtime/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace mt {

struct ChatRenderOptions {
  std::string tools_json;  // a JSON list of tool definitions; "": none
  std::string extra_json;  // chat_template_kwargs: a JSON object; "": none
  bool add_generation_prompt = true;
};

class ChatPrompt {
 public:
  // template_file: "" for the model's own template.
  static StatusOr<ChatPrompt> load(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                   const std::string& template_file = "");
  // A template given as text (tests); "" for ChatML.
  static StatusOr<ChatPrompt> from_source(const std::string& source, const Tokenizer& tokenizer);

  // InvalidArgument when the template refuses the messages (its raise_exception, e.g.
  // roles that do not alternate) or the tools / variables are not the JSON they should be.
  StatusOr<std::string> render(std::span<const ChatMessage> messages, const ChatRenderOptions& o = {}) const;

  // "the model's chat template", "FILE" or "chatml (fallback: ...)", for the start-up line.
  const std::string& description() const { return description_; }
  ToolSyntax tool_syntax() const { return tool_syntax_; }

 private:
  void set_tokens(const Tokenizer& tokenizer);

  std::optional<ChatTemplate> template_;
  ChatTemplateOptions options_;
  bool strip_bos_ = false, strip_eos_ = false;
  std::string description_;
  ToolSyntax tool_syntax_ = ToolSyntax::kNone;
};

}  // namespace mt
