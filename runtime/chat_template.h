// A model's chat template (the GGUF's `tokenizer.chat_template`, Jinja source) turned into
// the prompt text of a conversation, byte for byte as transformers' apply_chat_template
// renders it (trim_blocks and lstrip_blocks on; `messages`, `add_generation_prompt`,
// `bos_token`, `eos_token`, `tools` (none when there are none) and `documents`=none defined,
// plus every member of the caller's extra variables (chat_template_kwargs: enable_thinking,
// reasoning_effort, ...); raise_exception and strftime_now available). Messages carry what
// transformers passes: an assistant's `tool_calls` ({id, type: "function", function: {name,
// arguments}}, the arguments a dict when they are a JSON object, as the templates expect),
// a tool message's `tool_call_id` and `name`, and `reasoning_content` when given. The template is parsed once, at load time, so a syntax error or
// an unsupported Jinja feature is reported before any request; renders then share the tree.
// The interpreter itself is runtime/jinja_*.h.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace mt {

namespace jinja {
struct Node;
}

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text (an object, as the API sends it)
};

struct ChatMessage {
  std::string role;  // system / user / assistant / tool
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant
  std::string tool_call_id = {};          // tool
  std::string name = {};                  // tool: the function that answered
  std::optional<std::string> reasoning_content = {};
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  std::string date_string;              // strftime_now's date, "YYYY-MM-DD"; empty: today (local time)
  std::optional<bool> enable_thinking;  // defines `enable_thinking` (Qwen3, GLM, DeepSeek read it)
  std::string tools_json;               // a JSON list of tool definitions; "": `tools` is none
  std::string extra_json;               // a JSON object whose members become variables; "": none
};

class ChatTemplate {
 public:
  // Errors (syntax, unsupported feature) are a Status naming line:column.
  static StatusOr<ChatTemplate> parse(std::string source);

  // Errors: the template's raise_exception (InvalidArgument, "raise_exception: <its message>")
  // and runtime type errors, each naming line:column; InvalidArgument when tools_json or
  // extra_json is not the JSON it should be.
  StatusOr<std::string> render(std::span<const ChatMessage> messages, const ChatTemplateOptions& o) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<jinja::Node>> nodes_;  // shared by copies; macros point into it
};

}  // namespace mt
