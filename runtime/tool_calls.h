// Tool calls read back out of a model's generated text, in the syntax its chat template
// taught it (the syntax is recognised from the template's source):
//   qwen      <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>   (Qwen3, Hermes)
//             <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>
//             (Qwen3.5, Qwen3-Coder)
//   glm       <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call>  (GLM-4.5+)
//   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
//             (V3.1; R1's `function<｜tool▁sep｜>N\n```json\n{...}\n```` too)
//   harmony   <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>
//             (gpt-oss; its analysis channel becomes reasoning, final and preambles content)
// Invariant: nothing is lost. Text that is not a well-formed call (an unclosed block, a body
// that is not the syntax, arguments that are not a JSON object) comes back as content, byte
// for byte; a call's arguments are always a JSON object's text.
//
// ReplyStream does the same a piece at a time for streaming: content is passed on as soon
// as it cannot be the start of a call (a suffix that could begin a marker is held back), a
// call comes out whole once its block closes, and finish() settles what is still held.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_template.h"

namespace mt {

enum class ToolSyntax { kNone, kQwen, kGlm, kDeepSeek, kHarmony };

const char* tool_syntax_name(ToolSyntax s);

// From the markers the template writes (kNone when it knows no tool calls).
ToolSyntax detect_tool_syntax(std::string_view chat_template);

// One piece of a reply: content, reasoning (harmony's analysis channel) or a whole call.
struct ReplyPiece {
  enum class Kind { kContent, kReasoning, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;  // kContent / kReasoning
  ToolCall call;     // kToolCall (id filled in)
};

// Parameter types by function, from the request's tools (a JSON list): the values of the
// XML syntaxes (qwen's <parameter>, glm's <arg_value>) are text, and become JSON numbers,
// booleans, objects or lists only where the schema does not say "string".
class ToolSchemas {
 public:
  ToolSchemas() = default;
  explicit ToolSchemas(std::string_view tools_json);  // malformed: no types known
  bool is_string_param(std::string_view function, std::string_view param) const;

 private:
  std::vector<std::pair<std::string, std::string>> string_params_;  // (function, param)
};

class ReplyStream {
 public:
  explicit ReplyStream(ToolSyntax syntax, ToolSchemas schemas = {});

  std::vector<ReplyPiece> push(std::string_view text);
  std::vector<ReplyPiece> finish();
  size_t calls() const { return calls_; }

 private:
  std::vector<ReplyPiece> scan(bool final);
  std::vector<ReplyPiece> scan_harmony(bool final);

  ToolSyntax syntax_;
  ToolSchemas schemas_;
  std::string buf_;
  size_t calls_ = 0;
  // harmony: inside a message's body (after <|message|>), of this kind and recipient
  bool in_body_ = false, plain_ = false;
  ReplyPiece::Kind body_kind_ = ReplyPiece::Kind::kContent;
  std::string recipient_;
};

// The whole reply at once: adjacent pieces of one kind merged.
std::vector<ReplyPiece> parse_reply(ToolSyntax syntax, std::string_view text, const ToolSchemas& schemas = {});

// The text that opens a call to `function` in the syntax, for a forced call: the reply is
// made to start with it, so the model writes only the arguments (a JSON object) and
// call_suffix closes the call. Empty for kNone.
std::string call_prefix(ToolSyntax syntax, std::string_view function);
std::string call_suffix(ToolSyntax syntax);
// A call to any of the tools, where the syntax carries the name inside the JSON (qwen's
// {"name": N, "arguments": {...}}): the opening before that object and the closing after
// it; "" for the syntaxes that write the name outside it.
std::string any_call_prefix(ToolSyntax syntax);
std::string any_call_suffix(ToolSyntax syntax);

// "call_" and 24 random alphanumerics.
std::string new_tool_call_id();

}  // namespace mt
