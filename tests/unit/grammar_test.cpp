// Grammar-constrained sampling: the byte grammar's DFA, JSON schemas compiled to grammars
// (sentences that must be accepted and rejected), and token masks over a small vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/grammar.h"
#include "runtime/grammar_tokens.h"
#include "runtime/json_schema.h"

namespace mt {
namespace {

// A complete sentence of the grammar?
bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarDfa dfa(g);
  const int32_t s = dfa.walk(GrammarDfa::start(), text);
  return s != GrammarDfa::kDead && dfa.accepting(s);
}

// A prefix that can still be completed?
bool viable(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarDfa dfa(g);
  return dfa.walk(GrammarDfa::start(), text) != GrammarDfa::kDead;
}

std::shared_ptr<const Grammar> schema(const std::string& text) {
  auto g = json_schema_grammar(text);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

TEST(Grammar, RightRecursionAndAlternatives) {
  GrammarBuilder b;
  // list ::= "a" | "a" "," list  ;  root ::= "[" list "]"
  const int32_t list = b.declare();
  b.define(list, {b.literal("a"), {b.byte('a'), b.byte(','), list}});
  const int32_t root = b.rule({{b.byte('['), list, b.byte(']')}});
  auto g = b.build(root);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(accepts(*g, "[a]"));
  std::string many = "[a";
  for (int i = 0; i < 2000; ++i) many += ",a";  // deep right recursion: stacks never grow
  EXPECT_TRUE(accepts(*g, many + "]"));
  EXPECT_FALSE(accepts(*g, "[a,]"));
  EXPECT_FALSE(accepts(*g, "[a"));
  EXPECT_TRUE(viable(*g, "[a,a"));
  EXPECT_FALSE(viable(*g, "[b"));
}

TEST(Grammar, UndefinedRuleIsAnError) {
  GrammarBuilder b;
  const int32_t r = b.declare();
  EXPECT_FALSE(b.build(r).ok());
}

TEST(JsonSchema, ObjectWithRequiredAndOptionalProperties) {
  auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                      "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, R"({"name":"x","age":3,"ok":true})"));
  EXPECT_TRUE(accepts(g, R"({"name": "x", "ok": false})"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": -12,\n  \"ok\": true\n}"));
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":3})"));              // ok is required
  EXPECT_FALSE(accepts(g, R"({"name":"x","ok":true,"extra":1})"));  // closed
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":3.5,"ok":true})"));  // integer
  EXPECT_FALSE(accepts(g, R"({"age":3,"name":"x","ok":true})"));    // the schema's order
  EXPECT_FALSE(accepts(g, R"( {"name":"x","ok":true})"));           // nothing before the value
  EXPECT_FALSE(accepts(g, R"({"name":"x","ok":true} )"));           // nor after it
  EXPECT_FALSE(accepts(g, "{\"name\":\"a\x01\",\"ok\":true}"));     // control character
  EXPECT_FALSE(accepts(g, "{\"name\":\"\xC3\",\"ok\":true}"));      // broken UTF-8
  EXPECT_TRUE(accepts(g, "{\"name\":\"\xC3\xA9\xE2\x82\xAC\",\"ok\":true}"));
}

TEST(JsonSchema, StringsNumbersEnumsArrays) {
  auto s = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(accepts(s, R"("a")"));
  EXPECT_TRUE(accepts(s, R"("ab")"));
  EXPECT_TRUE(accepts(s, R"("a\"c")"));  // an escape is one character
  EXPECT_FALSE(accepts(s, R"("abcd")"));
  auto n = schema(R"({"type": "number"})");
  for (const char* ok : {"0", "-1.5", "3e10", "2.25E-3", "1234567890123456"}) EXPECT_TRUE(accepts(n, ok)) << ok;
  for (const char* bad : {"01", "-", "1.", ".5", "+1", "12345678901234567"}) EXPECT_FALSE(accepts(n, bad)) << bad;
  auto e = schema(R"({"enum": ["red", 7, null, {"a": [1]}]})");
  EXPECT_TRUE(accepts(e, R"("red")"));
  EXPECT_TRUE(accepts(e, "7"));
  EXPECT_TRUE(accepts(e, "null"));
  EXPECT_TRUE(accepts(e, R"({"a":[1]})"));
  EXPECT_FALSE(accepts(e, R"("blue")"));
  auto a = schema(R"({"type": "array", "items": {"type": ["integer", "null"]}, "minItems": 1, "maxItems": 3})");
  EXPECT_FALSE(accepts(a, "[]"));
  EXPECT_TRUE(accepts(a, "[1]"));
  EXPECT_TRUE(accepts(a, "[1, null, 3]"));
  EXPECT_FALSE(accepts(a, "[1,2,3,4]"));
  auto any = schema(R"({"anyOf": [{"type": "boolean"}, {"const": "x"}]})");
  EXPECT_TRUE(accepts(any, "true"));
  EXPECT_TRUE(accepts(any, R"("x")"));
  EXPECT_FALSE(accepts(any, "1"));
}

TEST(JsonSchema, RefsAndRecursion) {
  auto g = schema(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
                      "$ref": "#/$defs/node"})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, R"({"v":1})"));
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"w":2}]})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  for (const auto& [text, keyword] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "string", "pattern": "a+"})", "pattern"},
           {R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}})", "minimum"},
           {R"({"type": "string", "format": "date"})", "format"},
           {R"({"$ref": "http://x/y"})", "$ref"},
           {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "required"},
           {R"({"type": "string", "maxLength": 100000})", "maxLength"},
           {R"({"type": "wat"})", "wat"}}) {
    auto g = json_schema_grammar(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().message().find(keyword), std::string::npos) << g.status().message();
  }
  EXPECT_FALSE(json_schema_grammar("{not json").ok());
  std::string huge = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200; ++i) huge += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(": {"type": "string", "maxLength": 4000})";
  auto g = json_schema_grammar(huge + "}}");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("too large"), std::string::npos) << g.status().message();
}

TEST(JsonSchema, JsonObjectIsAnyObject) {
  auto g = json_object_grammar();
  EXPECT_TRUE(accepts(g, R"({})"));
  EXPECT_TRUE(accepts(g, R"({"a": [1, {"b": null}, "c"], "d": -0.5e3})"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a": })"));
  EXPECT_FALSE(accepts(g, R"({"a": 1,})"));
}

// A vocabulary of 10 pieces plus an empty (control) token and an end-of-generation token.
std::shared_ptr<const TokenVocab> small_vocab() {
  return std::make_shared<const TokenVocab>(
      std::vector<std::string>{"{", "}", "\"", "a", "\"a\"", "{\"", ":", " ", "true", "tr", "", "</s>"},
      std::vector<int32_t>{11});
}

std::vector<int32_t> allowed(TokenGrammar& tg, int32_t state) {
  const std::vector<uint64_t>& m = tg.mask(state);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 12; ++i) {
    if ((m[0] >> i) & 1) ids.push_back(i);
  }
  return ids;
}

TEST(TokenGrammar, MasksFollowTheGrammarAndEndAtCompletion) {
  auto g = schema(R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})");
  TokenGrammar tg(g, small_vocab());
  int32_t s = TokenGrammar::start();
  EXPECT_EQ(allowed(tg, s), (std::vector<int32_t>{0, 5}));  // "{" and "{\""
  s = tg.advance(s, 5);
  EXPECT_EQ(allowed(tg, s), (std::vector<int32_t>{3}));  // only "a" continues "{\""
  s = tg.advance(s, 3);
  s = tg.advance(s, 2);
  s = tg.advance(s, 6);
  EXPECT_EQ(allowed(tg, s), (std::vector<int32_t>{7, 8, 9}));  // " ", "true", "tr"
  EXPECT_EQ(tg.advance(s, 3), GrammarDfa::kDead);             // "a" is not a boolean
  EXPECT_EQ(tg.advance(s, 10), GrammarDfa::kDead);            // no bytes: never
  s = tg.advance(s, 8);
  EXPECT_FALSE(tg.done(s));
  s = tg.advance(s, 1);
  EXPECT_TRUE(tg.done(s));
  EXPECT_EQ(allowed(tg, s), (std::vector<int32_t>{11}));  // complete: only the end
}

TEST(TokenGrammar, ApplyMaskSetsForbiddenLogitsToMinusInfinity) {
  std::vector<float> logits(70, 1.0f);
  std::vector<uint64_t> mask(2, 0);
  mask[0] = 0b101;
  mask[1] = uint64_t{1} << 5;  // token 69
  EXPECT_EQ(apply_token_mask(mask, logits), 3u);
  EXPECT_EQ(logits[0], 1.0f);
  EXPECT_EQ(logits[2], 1.0f);
  EXPECT_EQ(logits[69], 1.0f);
  EXPECT_TRUE(std::isinf(logits[1]) && logits[1] < 0);
  EXPECT_TRUE(std::isinf(logits[68]) && logits[68] < 0);
}

}  // namespace
}  // namespace mt
