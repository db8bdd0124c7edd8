// Built-in chat formats for the families of the supported architectures, recognised
// from the GGUF's `tokenizer.chat_template` by the markers each family's template uses.
// (A full Jinja interpreter comes with the server; this is what `moetier run --chat`
// needs for one user turn.)
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mt {

enum class ChatFormat {
  kChatMl,   // Qwen2/Qwen3/Qwen1.5-MoE: <|im_start|>role\n...<|im_end|>
  kLlama3,   // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kMistral,  // Mixtral/Mistral: [INST] ... [/INST]
  kTulu,     // OLMoE-Instruct: <|user|>\n...\n<|assistant|>\n
};

const char* chat_format_name(ChatFormat f);

// Recognises the family of a chat template; NotFound when the model has none,
// Unimplemented when it is one moetier does not know yet.
StatusOr<ChatFormat> detect_chat_format(std::string_view chat_template);

// The prompt text for an optional system message and one user message, ending where the
// assistant's reply begins.
std::string apply_chat_format(ChatFormat f, std::string_view system, std::string_view user);

}  // namespace mt
