// OpenAI API shapes for `moetier serve`. Request bodies are parsed and validated into a
// plain ApiRequest; every problem (malformed JSON, a wrong type, a value out of range, a
// feature moetier does not have) becomes an ApiError naming the field, never an exception.
// Responses and SSE chunks are built the way the official clients read them:
// chat.completion / chat.completion.chunk and text_completion objects, `data: {...}\n\n`
// events ending with `data: [DONE]`, usage {prompt_tokens, completion_tokens, total_tokens}.
// Invariant: everything written is valid JSON in valid UTF-8 (invalid bytes of generated
// text are replaced by U+FFFD, never thrown on).
//
// Defaults where the API leaves a field out: the engine's sampler defaults (llama.cpp's:
// temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), a random seed, max_tokens = the rest
// of the context. llama.cpp's extensions top_k, min_p, repeat_penalty and repeat_last_n are
// accepted too. top_p 0 means greedy; seed 0 is a fixed seed like any other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/sampling.h"
#include "server/scheduler.h"

namespace mt::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // or "server_error", "not_found_error", ...
  std::string message;
  std::string param;  // the offending field ("messages[2].role"); "" = null
  std::string code;   // "context_length_exceeded", "model_not_found", ...; "" = null
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const ApiError& e);

enum class Endpoint { kChat, kCompletion };

// role "system" (also for "developer"), "user", "assistant" (with tool_calls, content
// optional) or "tool" (with tool_call_id).
using ApiMessage = ChatMessage;

// How the model may call the request's tools: as it likes, not at all, at least once, or
// exactly the named function (tool_choice_name).
enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                   // "" when not given
  std::vector<ApiMessage> messages;    // kChat: non-empty
  std::string prompt;                  // kCompletion
  SamplingParams sampling;             // passes validate()
  std::optional<uint32_t> max_tokens;  // >= 1 when given
  std::vector<std::string> stops;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // llama.cpp's extension ignore_eos: the end-of-generation tokens are never sampled, so a
  // choice runs to max_tokens unless a stop string, a grammar or the context ends it.
  bool ignore_eos = false;
  // n, logprobs / top_logprobs (chat) or logprobs: k (completions), response_format
  // (json_object or json_schema, compiled to a grammar); logit_bias is in `sampling`.
  ChoiceOptions choices;
  // chat: `tools` as a JSON list of {"type": "function", "function": {name, description,
  // parameters}} (validated; "" when none), tool_choice, and chat_template_kwargs (a JSON
  // object; "" when none).
  std::string tools_json;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  std::string template_kwargs_json;
};

// Parses and validates a request body; on failure *out is unspecified.
std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, ApiRequest* out);

struct Usage {
  uint32_t prompt_tokens = 0, completion_tokens = 0;
};

// What every response object of one request repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  uint32_t n = 1;             // choices (chunk_start announces each)
  int32_t top_logprobs = -1;  // -1: "logprobs": null in every choice
};

// The meta of a request's response: a fresh id, the time now, and the request's choices.
ResponseMeta response_meta(const ApiRequest& request, std::string model);

// A fresh id with the endpoint's prefix and 24 random hex digits.
std::string new_response_id(Endpoint endpoint);

// The whole answer of a non-streaming request.
std::string response_body(const ResponseMeta& meta, std::string_view text, std::string_view finish_reason,
                          const Usage& usage);

// SSE events (each "data: ...\n\n") of a streaming request, in order: chunk_start (chat
// only: the assistant role, once per choice), chunk_text for each piece, chunk_finish, chunk_usage when
// include_usage, then kSseDone. usage_field adds "usage": null to a chunk, as the API does
// when include_usage is on.
std::string chunk_start(const ResponseMeta& meta, bool usage_field);
std::string chunk_text(const ResponseMeta& meta, std::string_view text, bool usage_field);
std::string chunk_finish(const ResponseMeta& meta, std::string_view finish_reason, bool usage_field);
std::string chunk_usage(const ResponseMeta& meta, const Usage& usage);

// A chat reply read through the template's tool-call syntax (runtime/tool_calls.h).
struct ChatReplyParts {
  std::string content, reasoning;  // reasoning: "reasoning_content" when not empty
  std::vector<ToolCall> tool_calls;
};
// The whole answer: message {role, content (null when there are only tool calls),
// reasoning_content, tool_calls [{id, type: "function", function: {name, arguments}}]}.
std::string chat_response_body(const ResponseMeta& meta, const ChatReplyParts& reply, std::string_view finish_reason,
                               const Usage& usage);
// Stream deltas: reasoning text, and one whole tool call at `index` (id, type, name and
// the arguments in one delta).
std::string chunk_reasoning(const ResponseMeta& meta, std::string_view text, bool usage_field);
std::string chunk_tool_call(const ResponseMeta& meta, size_t index, const ToolCall& call, bool usage_field);
std::string sse_error(const ApiError& e);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models and GET /v1/models/{id}.
std::string models_body(std::string_view model, int64_t created);
std::string model_body(std::string_view model, int64_t created);

}  // namespace mt::server
