// A chat request's prompt, and how its reply is to be read, from the model's one chat
// renderer (runtime/chat_prompt.h, shared with `moetier run --chat`): the request's
// messages, tools and chat_template_kwargs rendered through the template. The tool-call
// syntax the template teaches (runtime/tool_calls.h) is how the reply is read back, unless
// tool_choice is "none" (the tools stay in the prompt, the reply is all content). A forced
// call (tool_choice naming a function, or "required" with one tool; "required" with several
// where the syntax writes the name inside the call's JSON, as qwen's does) opens the call for
// the model: the call's opening text goes at the end of the prompt, so that the model writes
// only the arguments, constrained by a grammar compiled from the function's parameter schema
// (runtime/json_schema.h) so that they validate against it; the reply is read as if the
// model had written the opening itself, and the call closed when the arguments are.
#pragma once

#include <string>

#include "core/status.h"
#include "runtime/chat_prompt.h"
#include "runtime/tool_calls.h"
#include "server/openai.h"

namespace mt::server {

using ChatPrompt = mt::ChatPrompt;

struct ChatTurn {
  std::string prompt;           // the text to tokenize (special tokens parsed)
  std::string forced;           // the reply's opening, already at the end of prompt; "" none
  std::string forced_function;  // the function a forced call calls ("" when the model picks)
  std::string forced_suffix;    // what closes a forced call after its arguments
  ToolSyntax syntax = ToolSyntax::kNone;  // how the reply is read; kNone: all content
  std::string tools_json;
};

// InvalidArgument when the template refuses the messages, or a forced call's parameter
// schema cannot be compiled or meets another constraint (response_format, n > 1). A forced
// call's grammar goes into request.choices, and so does render_special for harmony (its
// markers are control tokens).
StatusOr<ChatTurn> prepare_chat(const ChatPrompt& chat, ApiRequest& request);

}  // namespace mt::server
