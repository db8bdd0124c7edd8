#include "runtime/chat_template.h"

#include "runtime/jinja_builtins.h"
#include "runtime/jinja_eval.h"
#include "runtime/jinja_lexer.h"
#include "runtime/jinja_parser.h"

namespace mt {

StatusOr<ChatTemplate> ChatTemplate::parse(std::string source) {
  MT_ASSIGN_OR_RETURN(auto tokens, jinja::tokenize(source));
  MT_ASSIGN_OR_RETURN(auto nodes, jinja::parse_template(tokens));
  ChatTemplate t;
  t.source_ = std::move(source);
  t.nodes_ = std::make_shared<const std::vector<jinja::Node>>(std::move(nodes));
  return t;
}

StatusOr<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, const ChatTemplateOptions& o) const {
  using jinja::Value;
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", Value::string(m.role));
    d.set("content", Value::string(m.content));
    list.push_back(Value::dict(std::move(d)));
  }
  jinja::Dict globals;
  globals.set("messages", Value::list(std::move(list)));
  globals.set("add_generation_prompt", Value::boolean(o.add_generation_prompt));
  globals.set("bos_token", Value::string(o.bos_token));
  globals.set("eos_token", Value::string(o.eos_token));
  globals.set("tools", Value::none());
  globals.set("documents", Value::none());
  if (o.enable_thinking) globals.set("enable_thinking", Value::boolean(*o.enable_thinking));
  jinja::add_global_functions(globals, o.date_string);
  return jinja::render_template(*nodes_, globals);
}

}  // namespace mt
