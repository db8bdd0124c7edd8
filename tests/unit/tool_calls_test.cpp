// Tools through the real chat templates of the families we run (Qwen3, Qwen3.5, gpt-oss,
// GLM-4.6, DeepSeek V3.1): the tools and tool turns rendered, the calls the template writes
// parsed back to the same call, each syntax parsed (malformed text comes back as content),
// and streaming: any split of the text into pieces gives the same reply as the whole.
#include "runtime/tool_calls.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "runtime/chat_template.h"
#include "test_util.h"

namespace mt::tool_calls_test {
namespace {

using json = nlohmann::json;
using Kind = ReplyPiece::Kind;

std::string read_template(const std::string& file) {
  std::ifstream in(test::testdata("chat_templates/" + file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
  "required": ["city"]}}}])";

std::string render(const std::string& file, const std::vector<ChatMessage>& messages, bool gen, std::string tools = kTools) {
  auto t = ChatTemplate::parse(read_template(file));
  if (!t.ok()) return "PARSE ERROR " + t.status().message();
  ChatTemplateOptions o;
  o.add_generation_prompt = gen;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.date_string = "2025-06-30";
  o.tools_json = std::move(tools);
  auto r = t->render(messages, o);
  return r.ok() ? *r : "ERROR " + r.status().message();
}

const ChatMessage kUser{"user", "Weather in Paris?"};

ChatMessage call_turn() {
  ChatMessage m{"assistant", ""};
  m.tool_calls.push_back({"call_1", "get_weather", R"({"city": "Paris", "days": 2})"});
  return m;
}

ChatMessage tool_turn() {
  ChatMessage m{"tool", "sunny"};
  m.tool_call_id = "call_1";
  m.name = "get_weather";
  return m;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Family {
  const char* file;
  ToolSyntax syntax;
  std::vector<std::string> tools_shown;  // in the prompt once tools are given
  std::string call_written;              // how the template writes call_turn()
  std::string tool_written;              // how it writes tool_turn()
};

const Family kFamilies[] = {
    {"Qwen-Qwen3-0.6B.jinja", ToolSyntax::kQwen,
     {"# Tools", R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city")"},
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
     "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>"},
    {"Qwen3.5-4B.jinja", ToolSyntax::kQwen, {"# Tools", "<tools>", "\"name\": \"get_weather\""},
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
     "</function>\n</tool_call>",
     "<tool_response>\nsunny\n</tool_response>"},
    {"openai-gpt-oss-120b.jinja", ToolSyntax::kHarmony, {"namespace functions {", "type get_weather = (_: {"},
     "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", \"days\": 2}<|call|>",
     "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>"},
    {"GLM-4.6.jinja", ToolSyntax::kGlm, {"# Tools", "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""},
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
     "<arg_value>2</arg_value>\n</tool_call>",
     "<|observation|>\n<tool_response>\nsunny\n</tool_response>"},
    // V3.1's template does not show `tools` (the caller's system message describes them).
    {"deepseek-ai-DeepSeek-V3.1.jinja", ToolSyntax::kDeepSeek, {},
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 2}"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>"},
};

TEST(ToolCalls, DetectsTheSyntaxOfEachFamily) {
  for (const Family& f : kFamilies) EXPECT_EQ(detect_tool_syntax(read_template(f.file)), f.syntax) << f.file;
  EXPECT_EQ(detect_tool_syntax(read_template("microsoft-Phi-3.5-mini-instruct.jinja")), ToolSyntax::kNone);
}

TEST(ToolCalls, RealTemplatesRenderToolsCallsAndToolTurns) {
  for (const Family& f : kFamilies) {
    const std::string with_tools = render(f.file, {kUser}, true);
    for (const std::string& part : f.tools_shown) EXPECT_TRUE(has(with_tools, part)) << f.file << ": " << with_tools;
    if (!f.tools_shown.empty()) {
      EXPECT_FALSE(has(render(f.file, {kUser}, true, ""), f.tools_shown[0])) << f.file;
    }
    const std::string turns = render(f.file, {kUser, call_turn(), tool_turn()}, true);
    EXPECT_TRUE(has(turns, f.call_written)) << f.file << ": " << turns;
    EXPECT_TRUE(has(turns, f.tool_written)) << f.file << ": " << turns;
  }
}

// What a template writes for an assistant's call, read back by that family's parser.
TEST(ToolCalls, ParsesBackTheCallsTheTemplatesWrite) {
  for (const Family& f : kFamilies) {
    const std::string prompt = render(f.file, {kUser}, true);
    const std::string whole = render(f.file, {kUser, call_turn()}, false);
    ASSERT_EQ(whole.compare(0, prompt.size(), prompt), 0) << f.file << ": " << prompt << "\n---\n" << whole;
    const auto pieces = parse_reply(f.syntax, whole.substr(prompt.size()), ToolSchemas(kTools));
    std::vector<ToolCall> calls;
    for (const ReplyPiece& p : pieces) {
      if (p.kind == Kind::kToolCall) calls.push_back(p.call);
    }
    ASSERT_EQ(calls.size(), 1u) << f.file << ": " << whole.substr(prompt.size());
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"city": "Paris", "days": 2})")) << f.file;
    EXPECT_EQ(calls[0].id.rfind("call_", 0), 0u);
  }
}

std::string summary(const std::vector<ReplyPiece>& pieces) {
  std::string s;
  for (const ReplyPiece& p : pieces) {
    if (p.kind == Kind::kContent) s += "[c:" + p.text + "]";
    if (p.kind == Kind::kReasoning) s += "[r:" + p.text + "]";
    if (p.kind == Kind::kToolCall) s += "[call " + p.call.name + " " + p.call.arguments + "]";
  }
  return s;
}

struct Case {
  ToolSyntax syntax;
  std::string text, expected;
};

const Case kCases[] = {
    {ToolSyntax::kQwen, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
     "[c:Sure.\n][call f {\"a\":1}]"},
    {ToolSyntax::kQwen, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1]}\"}</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call>",
     "[call f {\"a\":[1]}][c:\n][call g {}]"},
    {ToolSyntax::kQwen, "<tool_call>\n<function=f>\n<parameter=city>\nOslo\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
     "[call f {\"city\":\"Oslo\",\"n\":3}]"},
    {ToolSyntax::kQwen, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "[call f {\"a\":1}]"},  // unclosed at the end
    {ToolSyntax::kQwen, "<tool_call>not json</tool_call> after", "[c:<tool_call>not json</tool_call> after]"},
    {ToolSyntax::kQwen, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "[c:<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>]"},
    {ToolSyntax::kQwen, "a <tool_ca", "[c:a <tool_ca]"},
    {ToolSyntax::kGlm, "<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>n</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>",
     "[call f {\"city\":\"Oslo\",\"n\":[1,2]}]"},
    {ToolSyntax::kGlm, "<tool_call>f\n<arg_key>city</arg_key></tool_call>", "[c:<tool_call>f\n<arg_key>city</arg_key></tool_call>]"},
    {ToolSyntax::kDeepSeek, "Ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>"
                            "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "[c:Ok][call f {\"a\":1}][call g {}]"},
    {ToolSyntax::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "[call f {\"a\":1}]"},
    {ToolSyntax::kDeepSeek, "<｜tool▁calls▁begin｜>oops", "[c:<｜tool▁calls▁begin｜>oops]"},
    {ToolSyntax::kHarmony, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>",
     "[r:Think.][call f {\"a\":1}]"},
    {ToolSyntax::kHarmony, "<|channel|>final<|message|>Hello!<|return|>", "[c:Hello!]"},
    {ToolSyntax::kHarmony, " to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}", "[call f {\"a\":1}]"},
    {ToolSyntax::kHarmony, "<|channel|>commentary to=functions.f<|message|>{broken<|call|>", "[c:{broken]"},
    {ToolSyntax::kHarmony, "plain text, no channels", "[c:plain text, no channels]"},
    {ToolSyntax::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>", "[c:<tool_call>{\"name\": \"f\"}</tool_call>]"},
};

TEST(ToolCalls, ParsesEachSyntaxAndKeepsMalformedTextAsContent) {
  for (const Case& c : kCases) EXPECT_EQ(summary(parse_reply(c.syntax, c.text)), c.expected) << c.text;
}

// Pieces of one kind merged, as a client assembles deltas.
std::string assemble(std::vector<ReplyPiece> pieces) {
  std::vector<ReplyPiece> merged;
  for (ReplyPiece& p : pieces) {
    if (p.kind != Kind::kToolCall && !merged.empty() && merged.back().kind == p.kind) {
      merged.back().text += p.text;
    } else if (p.kind == Kind::kToolCall || !p.text.empty()) {
      merged.push_back(std::move(p));
    }
  }
  return summary(merged);
}

TEST(ToolCalls, StreamingGivesTheSameReplyForAnySplit) {
  for (const Case& c : kCases) {
    for (size_t cut = 1; cut < c.text.size(); cut += 1) {
      ReplyStream s(c.syntax);
      std::vector<ReplyPiece> pieces;
      for (size_t at = 0; at < c.text.size(); at += cut) {
        for (ReplyPiece& p : s.push(std::string_view(c.text).substr(at, cut))) pieces.push_back(std::move(p));
      }
      for (ReplyPiece& p : s.finish()) pieces.push_back(std::move(p));
      ASSERT_EQ(assemble(std::move(pieces)), c.expected) << c.text << " in pieces of " << cut;
    }
  }
}

TEST(ToolCalls, ContentBeforeACallIsStreamedAtOnceAndTheCallWhenItCloses) {
  ReplyStream s(ToolSyntax::kQwen);
  EXPECT_EQ(summary(s.push("Let me check. <tool")), "[c:Let me check. ]");  // "<tool" may open a call
  EXPECT_EQ(summary(s.push("_call>{\"name\": \"f\", \"arguments\": {}}")), "");
  EXPECT_EQ(summary(s.push("</tool_call>")), "[call f {}]");
  EXPECT_EQ(s.calls(), 1u);
  EXPECT_EQ(summary(s.finish()), "");
}

TEST(ToolCalls, ForcedCallPrefixAndSuffixCloseACall) {
  for (ToolSyntax syntax : {ToolSyntax::kQwen, ToolSyntax::kDeepSeek, ToolSyntax::kHarmony}) {
    const std::string text = call_prefix(syntax, "get_weather") + R"({"city": "Oslo"})" + call_suffix(syntax);
    EXPECT_EQ(summary(parse_reply(syntax, text)), "[call get_weather {\"city\":\"Oslo\"}]") << tool_syntax_name(syntax);
  }
  EXPECT_EQ(call_prefix(ToolSyntax::kNone, "f"), "");
  const std::string any = any_call_prefix(ToolSyntax::kQwen) + R"({"name": "g", "arguments": {}})" +
                          any_call_suffix(ToolSyntax::kQwen);
  EXPECT_EQ(summary(parse_reply(ToolSyntax::kQwen, any)), "[call g {}]");
  EXPECT_EQ(any_call_prefix(ToolSyntax::kHarmony), "");
}

TEST(ChatTemplateKwargs, BecomeTemplateVariables) {
  auto t = ChatTemplate::parse(read_template("Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(t.ok());
  ChatTemplateOptions o;
  o.extra_json = R"({"enable_thinking": false})";
  EXPECT_EQ(*t->render(std::vector<ChatMessage>{kUser}, o),
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  auto oss = ChatTemplate::parse(read_template("openai-gpt-oss-120b.jinja"));
  ASSERT_TRUE(oss.ok());
  o.extra_json = R"({"reasoning_effort": "high"})";
  o.date_string = "2025-06-30";
  EXPECT_TRUE(has(*oss->render(std::vector<ChatMessage>{kUser}, o), "Reasoning: high"));
  o.extra_json = "[1]";
  EXPECT_EQ(t->render(std::vector<ChatMessage>{kUser}, o).status().code(), StatusCode::kInvalidArgument);
  o.extra_json = R"({"messages": []})";
  EXPECT_EQ(t->render(std::vector<ChatMessage>{kUser}, o).status().code(), StatusCode::kInvalidArgument);
  o.extra_json = "";
  o.tools_json = "{not json";
  EXPECT_EQ(t->render(std::vector<ChatMessage>{kUser}, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt::tool_calls_test
