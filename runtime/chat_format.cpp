#include "runtime/chat_format.h"

namespace mt {

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kTulu: return "tulu";
  }
  return "?";
}

StatusOr<ChatFormat> detect_chat_format(std::string_view t) {
  if (t.empty()) return not_found("the model has no chat template (tokenizer.chat_template); run without --chat");
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatFormat::kChatMl;
  if (has("<|start_header_id|>")) return ChatFormat::kLlama3;
  if (has("[INST]")) return ChatFormat::kMistral;
  if (has("<|user|>") && has("<|assistant|>")) return ChatFormat::kTulu;
  return unimplemented("the model's chat template is not one of the built-in formats (chatml, llama3, mistral, tulu)");
}

std::string apply_chat_format(ChatFormat f, std::string_view system, std::string_view user) {
  std::string out;
  switch (f) {
    case ChatFormat::kChatMl:
      if (!system.empty()) out += "<|im_start|>system\n" + std::string(system) + "<|im_end|>\n";
      out += "<|im_start|>user\n" + std::string(user) + "<|im_end|>\n<|im_start|>assistant\n";
      break;
    case ChatFormat::kLlama3:
      if (!system.empty()) out += "<|start_header_id|>system<|end_header_id|>\n\n" + std::string(system) + "<|eot_id|>";
      out += "<|start_header_id|>user<|end_header_id|>\n\n" + std::string(user) +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::kMistral:
      out += "[INST] ";
      if (!system.empty()) out += std::string(system) + "\n\n";
      out += std::string(user) + " [/INST]";
      break;
    case ChatFormat::kTulu:
      if (!system.empty()) out += "<|system|>\n" + std::string(system) + "\n";
      out += "<|user|>\n" + std::string(user) + "\n<|assistant|>\n";
      break;
  }
  return out;
}

}  // namespace mt
