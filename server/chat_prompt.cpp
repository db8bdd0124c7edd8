#include "server/chat_prompt.h"

#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"

namespace mt::server {
namespace {

using json = nlohmann::json;

// The name of the request's only tool ("" when there are several or none).
std::string only_tool(const std::string& tools_json) {
  const json tools = json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (!tools.is_array() || tools.size() != 1) return "";
  return tools[0]["function"]["name"].get<std::string>();  // checked by parse_request
}

json parameters_of(const json& fn) {
  return fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : json{{"type", "object"}};
}

// The reply's grammar: `schema` (JSON text) compiled, for a forced call.
Status constrain(const std::string& schema, const std::string& what, ChoiceOptions* choices) {
  if (choices->grammar) return invalid_argument("a forced tool call and response_format cannot both constrain the reply");
  if (choices->n > 1) return invalid_argument("a forced tool call is made in one choice (n = 1)");
  auto grammar = json_schema_grammar(schema);
  if (!grammar.ok()) return invalid_argument("tools: " + what + ": " + grammar.status().message());
  choices->grammar = std::move(*grammar);
  choices->grammar_key = "tool-call:" + schema;
  return {};
}

// The arguments of `function`: its parameter schema (any object when it has none).
Status constrain_arguments(const std::string& tools_json, const std::string& function, ChoiceOptions* choices) {
  for (const json& t : json::parse(tools_json, nullptr, /*allow_exceptions=*/false)) {
    if (t["function"]["name"] == function) return constrain(parameters_of(t["function"]).dump(), function + ".parameters", choices);
  }
  return invalid_argument("no tool named '" + function + "'");
}

// A call to any of the tools, as the object {"name": N, "arguments": A}: one alternative
// per tool, its name a constant and its arguments its parameter schema.
Status constrain_any_call(const std::string& tools_json, ChoiceOptions* choices) {
  json any = json::array();
  for (const json& t : json::parse(tools_json, nullptr, /*allow_exceptions=*/false)) {
    json props = {{"name", {{"const", t["function"]["name"]}}}, {"arguments", parameters_of(t["function"])}};
    any.push_back({{"type", "object"}, {"properties", std::move(props)}, {"required", {"name", "arguments"}}});
  }
  return constrain(json{{"anyOf", std::move(any)}}.dump(), "the calls of tool_choice 'required'", choices);
}

}  // namespace

StatusOr<ChatTurn> prepare_chat(const ChatPrompt& chat, ApiRequest& r) {
  ChatTurn turn;
  ChatRenderOptions o;
  o.tools_json = r.tools_json;
  o.extra_json = r.template_kwargs_json;
  MT_ASSIGN_OR_RETURN(turn.prompt, chat.render(r.messages, o));
  if (r.tools_json.empty() || r.tool_choice == ToolChoice::kNone) return turn;
  turn.syntax = chat.tool_syntax();
  turn.tools_json = r.tools_json;
  // harmony's channels and recipients are control tokens, which a reply leaves out otherwise
  r.choices.render_special = turn.syntax == ToolSyntax::kHarmony;
  std::string function = r.tool_choice == ToolChoice::kFunction ? r.tool_choice_name
                         : r.tool_choice == ToolChoice::kRequired ? only_tool(r.tools_json)
                                                                   : "";
  if (!function.empty()) {
    turn.forced = call_prefix(turn.syntax, function);
    if (!turn.forced.empty()) {
      MT_RETURN_IF_ERROR(constrain_arguments(r.tools_json, function, &r.choices));
      turn.forced_function = function;
      turn.forced_suffix = call_suffix(turn.syntax);
    }
  } else if (r.tool_choice == ToolChoice::kRequired) {  // several tools: the model picks one
    turn.forced = any_call_prefix(turn.syntax);
    if (!turn.forced.empty()) {
      MT_RETURN_IF_ERROR(constrain_any_call(r.tools_json, &r.choices));
      turn.forced_suffix = any_call_suffix(turn.syntax);
    }
  }
  turn.prompt += turn.forced;
  return turn;
}

}  // namespace mt::server
