#include "runtime/chat_template.h"

#include <nlohmann/json.hpp>

#include "runtime/jinja_builtins.h"
#include "runtime/jinja_eval.h"
#include "runtime/jinja_lexer.h"
#include "runtime/jinja_parser.h"

namespace mt {
namespace {

using jinja::Value;
// Insertion order kept: `tool | tojson` prints the keys in the order the client sent them,
// as Python's dicts do.
using json = nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 64;

StatusOr<Value> from_json(const json& j, int depth) {
  if (depth > kMaxJsonDepth) return invalid_argument("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
  switch (j.type()) {
    case json::value_t::null: return Value::none();
    case json::value_t::boolean: return Value::boolean(j.get<bool>());
    case json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case json::value_t::number_unsigned:
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return Value::number(j.get<double>());
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case json::value_t::number_float: return Value::number(j.get<double>());
    case json::value_t::string: return Value::string(j.get<std::string>());
    case json::value_t::array: {
      jinja::List l;
      for (const json& item : j) {
        MT_ASSIGN_OR_RETURN(Value v, from_json(item, depth + 1));
        l.push_back(std::move(v));
      }
      return Value::list(std::move(l));
    }
    case json::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        MT_ASSIGN_OR_RETURN(Value v, from_json(it.value(), depth + 1));
        d.set(it.key(), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    default: return invalid_argument("unsupported JSON value");
  }
}

StatusOr<json> parse_json(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(std::string(what) + " is not valid JSON");
  return j;
}

// {id, type: "function", function: {name, arguments}}; arguments as a dict when they are
// a JSON object (GLM and gpt-oss iterate or tojson them), else the text as given.
Value tool_call_value(const ToolCall& c) {
  json args = json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
  Value arguments = Value::string(c.arguments);
  if (args.is_object()) {
    auto v = from_json(args, 1);
    if (v.ok()) arguments = std::move(*v);
  }
  jinja::Dict fn;
  fn.set("name", Value::string(c.name));
  fn.set("arguments", std::move(arguments));
  jinja::Dict d;
  d.set("id", Value::string(c.id));
  d.set("type", Value::string("function"));
  d.set("function", Value::dict(std::move(fn)));
  return Value::dict(std::move(d));
}

Value message_value(const ChatMessage& m) {
  jinja::Dict d;
  d.set("role", Value::string(m.role));
  d.set("content", Value::string(m.content));
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ToolCall& c : m.tool_calls) calls.push_back(tool_call_value(c));
    d.set("tool_calls", Value::list(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.set("tool_call_id", Value::string(m.tool_call_id));
  if (!m.name.empty()) d.set("name", Value::string(m.name));
  if (m.reasoning_content) d.set("reasoning_content", Value::string(*m.reasoning_content));
  return Value::dict(std::move(d));
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::parse(std::string source) {
  MT_ASSIGN_OR_RETURN(auto tokens, jinja::tokenize(source));
  MT_ASSIGN_OR_RETURN(auto nodes, jinja::parse_template(tokens));
  ChatTemplate t;
  t.source_ = std::move(source);
  t.nodes_ = std::make_shared<const std::vector<jinja::Node>>(std::move(nodes));
  return t;
}

StatusOr<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, const ChatTemplateOptions& o) const {
  jinja::List list;
  for (const ChatMessage& m : messages) list.push_back(message_value(m));
  jinja::Dict globals;
  globals.set("messages", Value::list(std::move(list)));
  globals.set("add_generation_prompt", Value::boolean(o.add_generation_prompt));
  globals.set("bos_token", Value::string(o.bos_token));
  globals.set("eos_token", Value::string(o.eos_token));
  globals.set("tools", Value::none());
  globals.set("documents", Value::none());
  if (!o.tools_json.empty()) {
    MT_ASSIGN_OR_RETURN(json tools, parse_json(o.tools_json, "tools"));
    if (!tools.is_array()) return invalid_argument("tools must be a JSON list");
    MT_ASSIGN_OR_RETURN(Value v, from_json(tools, 0));
    if (!v.as_list().empty()) globals.set("tools", std::move(v));
  }
  if (o.enable_thinking) globals.set("enable_thinking", Value::boolean(*o.enable_thinking));
  if (!o.extra_json.empty()) {
    MT_ASSIGN_OR_RETURN(json extra, parse_json(o.extra_json, "the template variables"));
    if (!extra.is_object()) return invalid_argument("the template variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages") return invalid_argument("the template variables cannot replace 'messages'");
      MT_ASSIGN_OR_RETURN(Value v, from_json(it.value(), 1));
      globals.set(it.key(), std::move(v));
    }
  }
  jinja::add_global_functions(globals, o.date_string);
  return jinja::render_template(*nodes_, globals);
}

}  // namespace mt
