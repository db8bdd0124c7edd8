#include "server/openai.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <limits>
#include <random>

#include "runtime/json_schema.h"

namespace mt::server {
namespace {

using json = nlohmann::json;

// Stop strings per request (the API documents 4; llama.cpp takes any number).
constexpr size_t kMaxStops = 16;
// seed 0 asks the Sampler for a random seed; a client's 0 means a fixed seed.
constexpr uint64_t kSeedForZero = 0x9E3779B97F4A7C15ull;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A field that is present and not null.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> read_number(const json& obj, const char* name, double lo, double hi, float* out) {
  const json* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "%g and %g", lo, hi);
    return bad_request(std::string("'") + name + "' must be a number between " + range, name);
  }
  *out = static_cast<float>(v->get<double>());
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& obj, const char* name, int64_t lo, int64_t hi,
                                 std::optional<int64_t>* out) {
  const json* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  // nlohmann stores non-negative integers as unsigned: compare in the value's own type.
  const bool in_range = v->is_number_unsigned()
                            ? (lo <= 0 || v->get<uint64_t>() >= static_cast<uint64_t>(lo)) &&
                                  v->get<uint64_t>() <= static_cast<uint64_t>(hi)
                            : v->is_number_integer() && v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!in_range) {
    return bad_request(
        std::string("'") + name + "' must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi),
        name);
  }
  *out = v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& obj, const char* name, bool* out) {
  const json* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return bad_request(std::string("'") + name + "' must be a boolean", name);
  *out = v->get<bool>();
  return std::nullopt;
}

// Message content: a string or a list of {"type": "text", "text": ...} parts.
std::optional<ApiError> read_content(const json& v, const std::string& param, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return bad_request("'" + param + "' must be a string or a list of text parts", param);
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* text = part.is_object() ? field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" || text == nullptr ||
        !text->is_string()) {
      return bad_request("'" + p + "' must be {\"type\": \"text\", \"text\": string} (only text is supported)", p);
    }
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

// An assistant message's tool_calls, a tool message's tool_call_id and name.
std::optional<ApiError> read_tool_fields(const json& m, const std::string& p, ApiMessage* msg) {
  if (const json* id = field(m, "tool_call_id")) {
    if (!id->is_string()) return bad_request("'" + p + ".tool_call_id' must be a string", p + ".tool_call_id");
    msg->tool_call_id = id->get<std::string>();
  }
  if (const json* name = field(m, "name"); name != nullptr && msg->role == "tool") {
    if (!name->is_string()) return bad_request("'" + p + ".name' must be a string", p + ".name");
    msg->name = name->get<std::string>();
  }
  if (const json* r = field(m, "reasoning_content"); r != nullptr && r->is_string()) msg->reasoning_content = r->get<std::string>();
  const json* calls = field(m, "tool_calls");
  if (calls == nullptr) return std::nullopt;
  const std::string pc = p + ".tool_calls";
  if (msg->role != "assistant") return bad_request("'" + pc + "' is only allowed in assistant messages", pc);
  if (!calls->is_array()) return bad_request("'" + pc + "' must be a list", pc);
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    const std::string pi = pc + "[" + std::to_string(i) + "]";
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    const json* args = fn != nullptr && fn->is_object() ? field(*fn, "arguments") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return bad_request("'" + pi + ".function.name' must be a string", pi + ".function.name");
    }
    if (args != nullptr && !args->is_string() && !args->is_object()) {
      return bad_request("'" + pi + ".function.arguments' must be a JSON string", pi + ".function.arguments");
    }
    const json* id = field(c, "id");
    msg->tool_calls.push_back(ToolCall{id != nullptr && id->is_string() ? id->get<std::string>() : "",
                                       name->get<std::string>(),
                                       args == nullptr ? "{}" : args->is_string() ? args->get<std::string>() : dump(*args)});
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& body, std::vector<ApiMessage>* out) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) return bad_request("'messages' is required", "messages");
  if (!messages->is_array()) return bad_request("'messages' must be a list of messages", "messages");
  if (messages->empty()) return bad_request("'messages' must contain at least one message", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + p + "' must be an object", p);
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) return bad_request("'" + p + ".role' must be a string", p + ".role");
    ApiMessage msg{role->get<std::string>(), ""};
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
      return bad_request("'" + p + ".role' must be 'system', 'developer', 'user', 'assistant' or 'tool', not '" +
                             role->get<std::string>() + "'",
                         p + ".role");
    }
    const json* content = field(m, "content");
    if (content == nullptr) {
      if (msg.role != "assistant") return bad_request("'" + p + ".content' is required", p + ".content");
    } else if (auto e = read_content(*content, p + ".content", &msg.content)) {
      return e;
    }
    if (auto e = read_tool_fields(m, p, &msg)) return e;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> read_stops(const json& body, std::vector<std::string>* out) {
  const json* stop = field(body, "stop");
  if (stop == nullptr) return std::nullopt;
  if (stop->is_string()) {
    out->push_back(stop->get<std::string>());
    return std::nullopt;
  }
  if (!stop->is_array() || stop->size() > kMaxStops) {
    return bad_request("'stop' must be a string or a list of at most " + std::to_string(kMaxStops) + " strings",
                       "stop");
  }
  for (const json& s : *stop) {
    if (!s.is_string()) return bad_request("'stop' must contain strings only", "stop");
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// Fields that would change the answer's meaning and that moetier does not implement.
std::optional<ApiError> reject_unsupported(const json& body) {
  std::optional<int64_t> n;
  if (read_int(body, "best_of", 1, 1, &n)) return bad_request("only best_of = 1 is supported", "best_of");
  if (const json* v = field(body, "echo"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return bad_request("'echo' is not supported", "echo");
  }
  if (const json* v = field(body, "functions"); v != nullptr && !(v->is_array() && v->empty())) {
    return bad_request("'functions' is not supported (use 'tools')", "functions");
  }
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const json& body, SamplingParams* s) {
  if (auto e = read_number(body, "temperature", 0, 2, &s->temperature)) return e;
  float top_p = s->top_p;
  if (auto e = read_number(body, "top_p", 0, 1, &top_p)) return e;
  if (top_p == 0) {
    s->temperature = 0;  // the smallest nucleus: the most likely token
  } else {
    s->top_p = top_p;
  }
  if (auto e = read_number(body, "presence_penalty", -2, 2, &s->presence_penalty)) return e;
  if (auto e = read_number(body, "frequency_penalty", -2, 2, &s->frequency_penalty)) return e;
  if (auto e = read_number(body, "min_p", 0, 1, &s->min_p)) return e;
  if (auto e = read_number(body, "repeat_penalty", 1e-3, 100, &s->repeat_penalty)) return e;
  std::optional<int64_t> v;
  if (auto e = read_int(body, "top_k", 0, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) s->top_k = static_cast<int32_t>(*v);
  v.reset();
  if (auto e = read_int(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) s->repeat_last_n = static_cast<int32_t>(*v);
  v.reset();
  if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &v)) {
    return e;
  }
  if (v) s->seed = *v == 0 ? kSeedForZero : static_cast<uint64_t>(*v);
  Status valid = validate(*s);
  if (!valid.ok()) return bad_request(valid.message());
  return std::nullopt;
}

std::optional<ApiError> read_max_tokens(const json& body, std::optional<uint32_t>* out) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> v;
  if (auto e = read_int(body, "max_tokens", 1, kMax, &v)) return e;
  std::optional<int64_t> completion;
  if (auto e = read_int(body, "max_completion_tokens", 1, kMax, &completion)) return e;
  if (completion) v = completion;
  if (v) *out = static_cast<uint32_t>(*v);
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const json& body, std::string* out) {
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) return bad_request("'prompt' is required", "prompt");
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
  if (!prompt->is_string()) return bad_request("'prompt' must be a string (one prompt per request)", "prompt");
  *out = prompt->get<std::string>();
  return std::nullopt;
}

// `tools`: a list of {"type": "function", "function": {"name", "description"?, "parameters"?}}.
std::optional<ApiError> read_tool_list(const json& tools, std::vector<std::string>* names) {
  if (!tools.is_array()) return bad_request("'tools' must be a list of tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json* type = t.is_object() ? field(t, "type") : nullptr;
    if (type == nullptr || *type != "function") return bad_request("'" + p + ".type' must be 'function'", p + ".type");
    const json* fn = field(t, "function");
    if (fn == nullptr || !fn->is_object()) return bad_request("'" + p + ".function' must be an object", p + ".function");
    const json* name = field(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty() ||
        name->get<std::string>().find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
            std::string::npos) {
      return bad_request("'" + p + ".function.name' must be a name of letters, digits, '_', '-' and '.'",
                         p + ".function.name");
    }
    const json* params = field(*fn, "parameters");
    if (params != nullptr && !params->is_object()) {
      return bad_request("'" + p + ".function.parameters' must be a JSON schema object", p + ".function.parameters");
    }
    names->push_back(name->get<std::string>());
  }
  return std::nullopt;
}

// tools, tool_choice, parallel_tool_calls and chat_template_kwargs.
std::optional<ApiError> read_tools(const json& body, ApiRequest* out) {
  std::vector<std::string> names;
  if (const json* tools = field(body, "tools")) {
    if (auto e = read_tool_list(*tools, &names)) return e;
    if (!tools->empty()) out->tools_json = dump(*tools);
  }
  if (const json* choice = field(body, "tool_choice")) {
    const json* fn = choice->is_object() ? field(*choice, "function") : nullptr;
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    if (*choice == "auto") {
      out->tool_choice = ToolChoice::kAuto;
    } else if (*choice == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (*choice == "required") {
      out->tool_choice = ToolChoice::kRequired;
    } else if (name != nullptr && name->is_string()) {
      out->tool_choice = ToolChoice::kFunction;
      out->tool_choice_name = name->get<std::string>();
      if (std::find(names.begin(), names.end(), out->tool_choice_name) == names.end()) {
        return bad_request("'tool_choice' names the function '" + out->tool_choice_name + "', which is not in 'tools'",
                           "tool_choice");
      }
    } else {
      return bad_request(
          "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
          "tool_choice");
    }
    if (out->tool_choice == ToolChoice::kRequired && names.empty()) {
      return bad_request("'tool_choice' is 'required' but there are no 'tools'", "tool_choice");
    }
  }
  bool parallel = true;
  if (auto e = read_bool(body, "parallel_tool_calls", &parallel)) return e;
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    if (!kwargs->empty()) out->template_kwargs_json = dump(*kwargs);
  }
  return std::nullopt;
}

// logit_bias: {"token id": bias in [-100, 100]}.
std::optional<ApiError> read_logit_bias(const json& body, SamplingParams* s) {
  const json* bias = field(body, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  for (const auto& [key, value] : bias->items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return bad_request("'logit_bias' keys must be token ids (non-negative integers), not '" + key + "'", "logit_bias");
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      return bad_request("'logit_bias[" + key + "]' must be a number between -100 and 100", "logit_bias");
    }
    s->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
  }
  return std::nullopt;
}

// response_format: text, json_object, or json_schema {name, schema, strict} -> a grammar.
std::optional<ApiError> read_response_format(const json& body, std::string_view raw, ChoiceOptions* out) {
  const json* rf = field(body, "response_format");
  if (rf == nullptr) return std::nullopt;
  const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return bad_request("'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                       "response_format");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out->grammar = json_object_grammar();
    out->grammar_key = "json_object";
    return std::nullopt;
  }
  if (t != "json_schema") {
    return bad_request("'response_format.type' must be 'text', 'json_object' or 'json_schema', not '" + t + "'",
                       "response_format.type");
  }
  const json* js = field(*rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return bad_request("'response_format.json_schema' must be an object {name, schema, strict}", "response_format.json_schema");
  }
  if (const json* name = field(*js, "name"); name != nullptr && !name->is_string()) {
    return bad_request("'response_format.json_schema.name' must be a string", "response_format.json_schema.name");
  }
  bool strict = false;
  if (auto e = read_bool(*js, "strict", &strict)) {
    e->param = "response_format.json_schema.strict";
    return e;
  }
  const json* schema = field(*js, "schema");
  if (schema == nullptr) return bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
  // The schema's text with its properties in the client's order (json sorts its keys).
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw, nullptr, false);
  const std::string text = ordered["response_format"]["json_schema"]["schema"].dump();
  auto grammar = json_schema_grammar(text);
  if (!grammar.ok()) return bad_request(grammar.status().message(), "response_format.json_schema.schema");
  out->grammar = std::move(*grammar);
  out->grammar_key = "schema:" + text;
  return std::nullopt;
}

// n, logprobs and top_logprobs (chat) or logprobs: k (completions), response_format, logit_bias.
std::optional<ApiError> read_choices(const json& body, std::string_view raw, Endpoint endpoint, ApiRequest* out) {
  std::optional<int64_t> v;
  if (auto e = read_int(body, "n", 1, kMaxChoices, &v)) return e;
  if (v) out->choices.n = static_cast<uint32_t>(*v);
  if (endpoint == Endpoint::kChat) {
    bool logprobs = false;
    if (auto e = read_bool(body, "logprobs", &logprobs)) return e;
    v.reset();
    if (auto e = read_int(body, "top_logprobs", 0, kMaxTopLogprobs, &v)) return e;
    if (v && !logprobs) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (logprobs) out->choices.top_logprobs = v ? static_cast<int32_t>(*v) : 0;
  } else {
    v.reset();
    const json* lp = field(body, "logprobs");
    if (lp != nullptr && lp->is_boolean()) {  // accepted as "logprobs, no alternatives"
      if (lp->get<bool>()) out->choices.top_logprobs = 0;
    } else {
      if (auto e = read_int(body, "logprobs", 0, kMaxTopLogprobs, &v)) return e;
      if (v) out->choices.top_logprobs = static_cast<int32_t>(*v);
    }
  }
  if (const json* tools = field(body, "tools"); out->choices.n > 1 && tools != nullptr && tools->is_array() && !tools->empty()) {
    return bad_request("'n' above 1 is not supported with 'tools'", "n");
  }
  if (auto e = read_response_format(body, raw, &out->choices)) return e;
  return read_logit_bias(body, &out->sampling);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json object_head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

json finish_value(std::string_view finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(std::string(finish_reason));
}

// One streamed choice: a chat delta or a completion's text.
std::string chunk(const ResponseMeta& meta, json delta_or_text, std::string_view finish_reason, bool usage_field) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json j = object_head(meta, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}};
  choice[chat ? "delta" : "text"] = std::move(delta_or_text);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_value(finish_reason);
  j["choices"] = json::array({std::move(choice)});
  if (usage_field) j["usage"] = nullptr;
  return sse(j);
}

}  // namespace

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dump(json{{"error", std::move(err)}});
}

std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, ApiRequest* out) {
  *out = ApiRequest{};
  out->endpoint = endpoint;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("the request body is not valid JSON");
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  if (const json* model = field(j, "model")) {
    if (!model->is_string()) return bad_request("'model' must be a string", "model");
    out->model = model->get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = read_messages(j, &out->messages)) return e;
  } else if (auto e = read_prompt(j, &out->prompt)) {
    return e;
  }
  if (auto e = reject_unsupported(j)) return e;
  if (endpoint == Endpoint::kChat) {
    if (auto e = read_tools(j, out)) return e;
  }
  if (auto e = read_sampling(j, &out->sampling)) return e;
  if (auto e = read_choices(j, body, endpoint, out)) return e;
  if (auto e = read_max_tokens(j, &out->max_tokens)) return e;
  if (auto e = read_stops(j, &out->stops)) return e;
  if (auto e = read_bool(j, "stream", &out->stream)) return e;
  if (auto e = read_bool(j, "ignore_eos", &out->ignore_eos)) return e;
  if (const json* options = field(j, "stream_options")) {
    if (!out->stream) return bad_request("'stream_options' is only allowed with stream: true", "stream_options");
    if (!options->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    if (auto e = read_bool(*options, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  return std::nullopt;
}

std::string new_response_id(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[25];
  std::snprintf(hex, sizeof hex, "%012llx%012llx", static_cast<unsigned long long>(rng() & 0xFFFFFFFFFFFFull),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFFFFFull));
  return std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + hex;
}

std::string response_body(const ResponseMeta& meta, std::string_view text, std::string_view finish_reason,
                          const Usage& usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json j = object_head(meta, chat ? "chat.completion" : "text_completion");
  json choice = {{"index", 0}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_value(finish_reason);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chunk_start(const ResponseMeta& meta, bool usage_field) {
  std::string out = chunk(meta, {{"role", "assistant"}, {"content", ""}}, "", usage_field);
  for (uint32_t i = 1; i < meta.n; ++i) {
    json j = object_head(meta, "chat.completion.chunk");
    json choice = {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    j["choices"] = json::array({std::move(choice)});
    if (usage_field) j["usage"] = nullptr;
    out += sse(j);
  }
  return out;
}

ResponseMeta response_meta(const ApiRequest& request, std::string model) {
  ResponseMeta meta{request.endpoint, new_response_id(request.endpoint), static_cast<int64_t>(std::time(nullptr)),
                    std::move(model)};
  meta.n = request.choices.n;
  meta.top_logprobs = request.choices.top_logprobs;
  return meta;
}

std::string chunk_text(const ResponseMeta& meta, std::string_view text, bool usage_field) {
  if (meta.endpoint == Endpoint::kChat) return chunk(meta, {{"content", std::string(text)}}, "", usage_field);
  return chunk(meta, std::string(text), "", usage_field);
}

std::string chunk_finish(const ResponseMeta& meta, std::string_view finish_reason, bool usage_field) {
  if (meta.endpoint == Endpoint::kChat) return chunk(meta, json::object(), finish_reason, usage_field);
  return chunk(meta, "", finish_reason, usage_field);
}

std::string chunk_usage(const ResponseMeta& meta, const Usage& usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json j = object_head(meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return sse(j);
}

namespace {

json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

std::string chat_response_body(const ResponseMeta& meta, const ChatReplyParts& reply, std::string_view finish_reason,
                               const Usage& usage) {
  json j = object_head(meta, "chat.completion");
  json message = {{"role", "assistant"}};
  message["content"] = reply.content.empty() && !reply.tool_calls.empty() ? json(nullptr) : json(reply.content);
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) {
    message["tool_calls"] = json::array();
    for (const ToolCall& c : reply.tool_calls) message["tool_calls"].push_back(tool_call_json(c));
  }
  json choice = {{"index", 0}, {"message", std::move(message)}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_value(finish_reason);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chunk_reasoning(const ResponseMeta& meta, std::string_view text, bool usage_field) {
  return chunk(meta, {{"reasoning_content", std::string(text)}}, "", usage_field);
}

std::string chunk_tool_call(const ResponseMeta& meta, size_t index, const ToolCall& call, bool usage_field) {
  json c = tool_call_json(call);
  c["index"] = index;
  return chunk(meta, {{"tool_calls", json::array({std::move(c)})}}, "", usage_field);
}

std::string sse_error(const ApiError& e) { return "data: " + error_body(e) + "\n\n"; }

std::string model_body(std::string_view model, int64_t created) {
  return dump({{"id", std::string(model)}, {"object", "model"}, {"created", created}, {"owned_by", "moetier"}});
}

std::string models_body(std::string_view model, int64_t created) {
  json entry = {{"id", std::string(model)}, {"object", "model"}, {"created", created}, {"owned_by", "moetier"}};
  return dump({{"object", "list"}, {"data", json::array({std::move(entry)})}});
}

}  // namespace mt::server
