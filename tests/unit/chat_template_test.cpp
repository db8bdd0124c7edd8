// Chat templates: the Jinja interpreter feature by feature, then real templates of the MoE
// families rendered to strings worked out by hand from each template's source.
#include "runtime/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/jinja_builtins.h"
#include "runtime/jinja_eval.h"
#include "runtime/jinja_lexer.h"
#include "runtime/jinja_parser.h"
#include "test_util.h"

namespace mt {
namespace {

using jinja::Value;

StatusOr<std::string> run(std::string_view src, jinja::Dict vars = {}, const jinja::RenderLimits& limits = {}) {
  MT_ASSIGN_OR_RETURN(auto tokens, jinja::tokenize(src));
  MT_ASSIGN_OR_RETURN(auto nodes, jinja::parse_template(tokens));
  jinja::add_global_functions(vars, "2025-06-30");
  return jinja::render_template(nodes, vars, limits);
}

// The rendering, or "ERROR <message>".
std::string R(std::string_view src, jinja::Dict vars = {}) {
  auto r = run(src, std::move(vars));
  return r.ok() ? *r : "ERROR " + r.status().message();
}

Value str_list(std::initializer_list<const char*> items) {
  jinja::List l;
  for (const char* s : items) l.push_back(Value::string(s));
  return Value::list(std::move(l));
}

Value message(const char* role, const char* content) {
  jinja::Dict m;
  m.set("role", Value::string(role));
  m.set("content", Value::string(content));
  return Value::dict(std::move(m));
}

jinja::Dict vars() {
  jinja::Dict v;
  v.set("xs", Value::list({Value::integer(1), Value::integer(2), Value::integer(3)}));
  v.set("words", str_list({"b", "a", "c"}));
  jinja::Dict d;
  d.set("a", Value::integer(1));
  d.set("b", Value::string("two"));
  v.set("d", Value::dict(std::move(d)));
  v.set("msgs", Value::list({message("user", "hi"), message("assistant", "yo"), message("user", "bye")}));
  return v;
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(R("a {{ 1 }} b{# comment #}."), "a 1 b.");
  EXPECT_EQ(R("a  {{- 1 -}}  \n b"), "a1b");
  EXPECT_EQ(R("{% if true %}\nx\n{% endif %}\ny"), "x\ny");               // trim_blocks
  EXPECT_EQ(R("a\n    {% if true %}b{% endif %}"), "a\nb");               // lstrip_blocks
  EXPECT_EQ(R("a\n    {{ 'b' }}"), "a\n    b");                          // not for {{ }}
  EXPECT_EQ(R("{{ 1 }}  {% if true %}x{% endif %}"), "1  x");             // only at a line start
  EXPECT_EQ(R("a\n  {%+ if true %}b{% endif +%}\nc"), "a\n  b\nc");     // "+" keeps both
  EXPECT_EQ(R("  {# c #}\nx"), "x");
  EXPECT_EQ(R("x\n"), "x");  // keep_trailing_newline=False
  EXPECT_EQ(R("x\n\n"), "x\n");
  EXPECT_EQ(R("a\r\nb"), "a\nb");
  EXPECT_EQ(R("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(R("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");  // "}}" inside brackets does not end the tag
}

TEST(Jinja, IfAndFor) {
  EXPECT_EQ(R("{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}many{% endif %},{% endfor %}"),
            "one,two,many,");
  EXPECT_EQ(R("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|"
              "{% endfor %}"),
            "10TrueFalse3|21FalseFalse3|32FalseTrue3|");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}"), "<1>2;1<2>3;2<3>;");
  EXPECT_EQ(R("{% for x in 'abc' %}{{ loop.revindex }}{{ loop.cycle('x', 'y') }}{% endfor %}"), "3x2y1x");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in nothing %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(R("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}"), "15 35 55 75 95 ");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", vars()), "a=1;b=two;ab");
  EXPECT_EQ(R("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}"
              "{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(R("{% for m in msgs %}{% for c in m.content %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", vars()),
            "121;122;1233;");
}

TEST(Jinja, ScopesSetAndNamespace) {
  // Each iteration starts again from the outer value; a namespace carries state out.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(R("{% set ns = namespace(total=0, name='n') %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}"
              "{% endfor %}{{ ns.total }}{{ ns.name }}"),
            "6n");
  EXPECT_EQ(R("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(R("{% set x %}in{{ 1 }}side{% endset %}[{{ x }}]"), "[in1side]");
  EXPECT_EQ(R("{% with a = 3 %}{{ a }}{% endwith %}[{{ a }}]"), "3[]");
  EXPECT_EQ(R("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(R("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(R("{% set s = 'x' %}{% set s.attr = 1 %}"), "ERROR chat template 1:21: can only set attributes of a namespace ('s' is not one)");
}

TEST(Jinja, MacrosAndCall) {
  EXPECT_EQ(R("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}"),
            "Hi Bob! Hi Al?");
  EXPECT_EQ(R("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"), "120");
  EXPECT_EQ(R("{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}"), "late");  // globals as at the call
  EXPECT_EQ(R("{% macro m() %}{% set z = 1 %}{% endmacro %}{{ m() }}{{ z is defined }}"), "False");
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}{{ varargs|length }}{{ varargs[0] }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"), "112{'k': 3}");
  EXPECT_EQ(R("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}"), "[inner]");
  EXPECT_EQ(R("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
              "{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}"),
            "<1><2>");
  EXPECT_EQ(R("{% macro m() %}  x  {% endmacro %}{% set v = m()|trim %}[{{ v }}]"), "[x]");
  EXPECT_EQ(R("{% set ns = namespace() %}{% macro m() %}{% set ns.c = caller %}{% endmacro %}"
              "{% for i in [1] %}{% call m() %}{{ i }}{% endcall %}{% endfor %}{{ ns.c() }}"),
            "ERROR chat template 1:100: caller() used after its call block ended");
}

TEST(Jinja, Filters) {
  const auto v = vars();
  EXPECT_EQ(R("[{{ '  a b \n'|trim }}]{{ 'xxaxx'|trim('x') }}"), "[a b]a");
  EXPECT_EQ(R("{{ [1, 2, 3]|length }}{{ 'h\xc3\xa9llo'|length }}{{ d|length }}{{ nothing|length }}{{ xs|count }}", v), "3520" "3");
  EXPECT_EQ(R(R"({{ {'a': [1, 2.5, true, none], 'b': "q\"\n"}|tojson }})"), R"({"a": [1, 2.5, true, null], "b": "q\"\n"})");
  EXPECT_EQ(R("{{ {'a': 1, 'b': [1], 'c': {}}|tojson(indent=2) }}"), "{\n  \"a\": 1,\n  \"b\": [\n    1\n  ],\n  \"c\": {}\n}");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}{{ '\xc3\xa9'|tojson }}{{ '\xc3\xa9'|tojson(ensure_ascii=true) }}"),
            "{\"a\": 2, \"b\": 1}\"\xc3\xa9\"\"\\u00e9\"");
  EXPECT_EQ(R("{{ {0: 1}|tojson }}{{ 3|string ~ none|string }}{{ 'AbC'|lower }}{{ 'AbC'|upper }}"), "{\"0\": 1}3NoneabcABC");
  EXPECT_EQ(R("{{ 'aaa'|replace('a', 'b', 2) }}{{ [1, 2, 3]|join(', ') }}{{ msgs|join('/', attribute='role') }}", v),
            "bba1, 2, 3user/assistant/user");
  EXPECT_EQ(R("{{ missing|default('dflt') }}{{ ''|default('e', true) }}{{ ''|d('f') }}{{ 'set'|default('x') }}"), "dflte" "set");
  EXPECT_EQ(R("{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'xyz'|first }}{{ 'xyz'|last }}"), "13xz");
  EXPECT_EQ(R("{% for k, x in d|items %}{{ k }}{{ x }}{% endfor %}", v), "a1btwo");
  EXPECT_EQ(R("{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}", v), "hi,bye");
  EXPECT_EQ(R("{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}{{ [{'a': 0}, {'a': 1}]|selectattr('a')|list|length }}", v), "11");
  EXPECT_EQ(R("{{ none|selectattr('a')|list }}{{ [1, 2, 3, 4]|select('even')|list }}{{ [1, 2, 3]|reject('odd')|join }}"), "[][2, 4]2");
  EXPECT_EQ(R("{{ ['a', 'b']|map('upper')|join }}{{ msgs|map(attribute='x', default='-')|join }}{{ 'ab'|list }}", v), "AB---['a', 'b']");
  EXPECT_EQ(R("{{ '42'|int + 1 }}{{ 'x'|int }}{{ 3.9|int }}{{ ' 7 '|int }}{{ '2.5'|float }}"), "43037" "2.5");
  EXPECT_EQ(R("{{ 'hELLO world'|capitalize }}|{{ 'hello big-world'|title }}|{{ '<b>'|safe }}|{{ '<a&b>'|e }}"),
            "Hello world|Hello Big-World|<b>|&lt;a&amp;b&gt;");
  EXPECT_EQ(R("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('>', blank=true) }}"),
            "a\n  b\n\n  c|  a\n  b|a\n>\n>b");
  EXPECT_EQ(R("{{ [3, 1, 2]|sort|join }}{{ words|sort(reverse=true)|join }}{{ [1, 2]|reverse|join }}{{ [1, 1, 2]|unique|join }}", v),
            "123cba2112");
  EXPECT_EQ(R("{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ [1, 2, 3]|sum }}{{ -2|abs }}{{ 2.567|round(1) }}", v), "13622.6");
  EXPECT_EQ(R("{% for k, x in {'b': 1, 'A': 2}|dictsort %}{{ k }}{% endfor %}"), "Ab");
  EXPECT_EQ(R("{{ '<'|safe + '<' }}{{ '<' ~ '<'|safe }}{{ '<'|e|e }}"), "<&lt;<<&lt;");  // markup + str escapes
  EXPECT_EQ(R("{{ 1.5|unknown_filter }}"), "ERROR chat template 1:8: unsupported filter 'unknown_filter'");
}

TEST(Jinja, Tests) {
  const auto v = vars();
  EXPECT_EQ(R("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 's' is string }}{{ d is mapping }}{{ xs is iterable }}",
              v),
            "FalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 's' is sequence }}{{ 1 is number }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 1.5 is float }}",
              v),
            "TrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(R("{{ d is iterable }}{{ d is not mapping }}{{ 's' is mapping }}{{ 'abc' is lower }}{{ range is callable }}", v),
            "TrueFalseFalseTrueTrue");
  EXPECT_EQ(R("{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'a' in d }}{{ 'z' not in d }}{{ 'q' in nothing }}", v), "TrueTrueTrueTrueFalse");
  EXPECT_EQ(R("{{ 'user' is equalto 'user' }}{{ 3 is eq 4 }}{{ 4 is divisibleby 2 }}{{ 1 is in [1] }}{{ 2 is gt 1 }}"),
            "TrueFalseTrueTrueTrue");
  EXPECT_EQ(R("{{ not x is defined }}{{ none is not none }}{{ 3 is odd }}{{ 3 is even }}"), "TrueFalseTrueFalse");
}

TEST(Jinja, StringAndDictMethods) {
  const auto v = vars();
  EXPECT_EQ(R("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ 'x\n\n'.rstrip('\n') }}|"), "x|hi|x |x|");
  EXPECT_EQ(R("{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a</t>b'.split('</t>')[-1] }}"),
            "['a', 'b', 'c']['a', 'b', '', 'c']['a', 'b,c']b");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.startswith('b') }}"), "TrueTrueFalse");
  EXPECT_EQ(R("{{ 'a-a'.replace('-', '+') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ \"hello wORLD it's\".title() }}"),
            "a+aABab|Hello World It'S");
  EXPECT_EQ(R("{{ ', '.join(['a', 'b']) }}{{ '{} and {name}'.format(1, name='x') }}{{ 'banana'.count('an') }}{{ 'abc'.find('c') }}"),
            "a, b1 and x22");
  EXPECT_EQ(R("{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}{{ d.keys()|list }}{{ d.values()|list }}", v),
            "1None5['a', 'b'][1, 'two']");
  EXPECT_EQ(R("{{ d['a'] }}{{ d.a }}{{ d['zz'] is defined }}{{ msgs[1].role }}{{ msgs[1]['content'] }}{{ xs.0 }}", v), "11Falseassistantyo1");
  EXPECT_EQ(R("{% set p = {'items': 'key'} %}{{ p['items'] }} {{ p.items()|length }}"), "key 1");
}

TEST(Jinja, IndexingAndSlicing) {
  EXPECT_EQ(R("{{ xs[::-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[0] }}{{ xs[-1] }}{{ xs[5] is defined }}", vars()), "[3, 2, 1][2, 3][1, 2]13False");
  EXPECT_EQ(R("{{ 'hello'[1:3] }}{{ 'h\xc3\xa9llo'[::-1] }}{{ 'h\xc3\xa9llo'[1] }}{{ 'abcdef'[::2] }}"), "el" "oll\xc3\xa9h" "\xc3\xa9" "ace");
  EXPECT_EQ(R("{{ msgs[1:]|length }}{{ msgs[-1].content }}", vars()), "2bye");
}

TEST(Jinja, Expressions) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }}"),
            "7 9 3 1 -4 3.5 2.0 1024");
  EXPECT_EQ(R("{{ 'ab' * 2 }} {{ 1.5 + 1 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ missing }} {{ xs|length - 1 }}", vars()),
            "abab 2.5 [1, 2] a1None 2");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }}{{ 1 < 2 > 3 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ [1] == [1] }}{{ 1 != 2 }}{{ msgs[0] == msgs[2] }}", vars()),
            "TrueFalseTrueTrueTrueTrueFalse");
  EXPECT_EQ(R("{{ 0 or 'x' }}{{ 1 and 'y' }}{{ not 0 }}{{ none or [] }}{{ false and missing.x }}"), "xyTrue[]False");
  EXPECT_EQ(R("{{ 'yes' if 1 else 'no' }}{{ 'yes' if 0 else 'no' }}[{{ 'yes' if 0 }}]{{ 'a' if 0 else 'b' if 1 else 'c' }}"), "yesno[]b");
  EXPECT_EQ(R("{{ true }}{{ none }}{{ 1.0 }}{{ 0.1 + 0.2 }}{{ 1e20 }}{{ [1, 'a', none, \"it's\"] }}{{ {'k': 'v'} }}"),
            "TrueNone1.00.300000000000000041e+20[1, 'a', None, \"it's\"]{'k': 'v'}");
  EXPECT_EQ(R("{{ 9223372036854775807 + 1 }}"), "ERROR chat template 1:24: integer overflow");
  EXPECT_EQ(R("{{ (-1) ** 65 }} {{ 2 ** 62 }} {{ 1e300|int }} {{ -7 % 3 }} {{ 7 % -3 }}"), "-1 4611686018427387904 0 2 -2");
  EXPECT_EQ(R("{{ range(3)|list }}{{ range(1, 7, 2)|join(',') }}{{ range(3, 0, -1)|list }}"), "[0, 1, 2]1,3,5[3, 2, 1]");
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d %A %d %b') }}"), "2025-06-30 Monday 30 Jun");
  EXPECT_EQ(R("{{ dict(a=1) }}{{ 'abc' 'def' }}"), "{'a': 1}abcdef");
}

TEST(Jinja, UndefinedIsLenientExceptInArithmetic) {
  EXPECT_EQ(R("[{{ missing }}][{{ missing.attr }}][{{ missing.a.b }}][{{ missing['x'] }}][{{ none.x }}]"), "[][][][][]");
  EXPECT_EQ(R("{% if missing.attr %}x{% else %}y{% endif %}{{ missing|length }}{{ missing is none }}"), "y0False");
  EXPECT_EQ(R("{{ 'a' + missing }}"), "ERROR chat template 1:8: 'missing' is undefined");
  EXPECT_EQ(R("{{ missing() }}"), "ERROR chat template 1:4: 'missing' is undefined");
}

TEST(Jinja, ErrorsNameLineAndColumn) {
  auto code = [](std::string_view src) { return run(src).status().code(); };
  EXPECT_EQ(R("{% if x %}\n  {{ 1 + }}\n{% endif %}"), "ERROR chat template 2:10: unexpected '}}', expected an expression");
  EXPECT_EQ(R("\n{{ x|frobnicate }}"), "ERROR chat template 2:6: unsupported filter 'frobnicate'");
  EXPECT_EQ(code("\n{{ x|frobnicate }}"), StatusCode::kUnimplemented);
  EXPECT_EQ(R("{{ x is frobnicated }}"), "ERROR chat template 1:9: unsupported test 'frobnicated'");
  // As in Jinja, an unknown filter inside an if only fails when evaluated.
  EXPECT_EQ(R("{% if false %}{{ x|from_json }}{% endif %}ok"), "ok");
  EXPECT_EQ(R("{% if true %}{{ x|from_json }}{% endif %}"), "ERROR chat template 1:19: unsupported filter 'from_json'");
  EXPECT_EQ(R("ab\n  {% include 'x' %}"), "ERROR chat template 2:6: unsupported tag 'include'");
  EXPECT_EQ(code("{% include 'x' %}"), StatusCode::kUnimplemented);
  EXPECT_EQ(R("x\n{% for a in b %}abc"), "ERROR chat template 2:4: this block is never closed (expected {% endfor %})");
  EXPECT_EQ(R("{% endif %}"), "ERROR chat template 1:4: unexpected {% endif %}");
  EXPECT_EQ(R("a {{ x"), "ERROR chat template 1:3: unclosed {{ tag");
  EXPECT_EQ(R("{{ 'abc }}"), "ERROR chat template 1:4: unterminated string literal");
  EXPECT_EQ(R("{# never closed"), "ERROR chat template 1:1: unclosed comment");
  EXPECT_EQ(R("{{ 1 }}\n{{ 'a' - 1 }}"), "ERROR chat template 2:8: unsupported operand types for -: string and int");
  EXPECT_EQ(R("{% break %}"), "ERROR chat template 1:4: 'break' outside a for loop");
  const std::string deep = "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}";
  EXPECT_NE(R(deep).find("expression nested too deeply"), std::string::npos);
}

TEST(Jinja, RaiseExceptionAndLimits) {
  auto r = run("line1\n{{ raise_exception('bad input') }}");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "chat template 2:4: raise_exception: bad input");
  EXPECT_EQ(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "ERROR chat template 1:4: macro calls nested too deeply");
  jinja::RenderLimits tight;
  tight.max_steps = 1000;
  auto slow = run("{% for i in range(100) %}{% for j in range(100) %}.{% endfor %}{% endfor %}", {}, tight);
  EXPECT_EQ(slow.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(R("{{ 'x' * 100000000000 }}"), "ERROR chat template 1:8: repetition result too large");
  const char* doubling = "{% set ns = namespace(s='abc') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}";
  EXPECT_NE(R(doubling).find("concatenation result too large"), std::string::npos);
  jinja::RenderLimits small;
  small.max_bytes_made = 1 << 20;
  EXPECT_NE(run(doubling, {}, small).status().message().find("the template built too much data"), std::string::npos);
}

// --- real templates ---

std::string read_template(const std::string& file) {
  std::ifstream in(test::testdata("chat_templates/" + file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Conv {
  std::vector<ChatMessage> messages;
  ChatTemplateOptions options;
};

std::string render_file(const std::string& file, const Conv& c) {
  auto t = ChatTemplate::parse(read_template(file));
  if (!t.ok()) return "PARSE ERROR " + t.status().message();
  auto r = t->render(c.messages, c.options);
  return r.ok() ? *r : "ERROR " + r.status().message();
}

const ChatMessage kSys{"system", "You are terse."};
const ChatMessage kU1{"user", "Hi there"};
const ChatMessage kA1{"assistant", "Hello! How can I help?"};
const ChatMessage kU2{"user", "What is 2+2?"};

Conv conv(std::vector<ChatMessage> m, bool gen = true, std::optional<bool> thinking = std::nullopt) {
  Conv c{std::move(m), {}};
  c.options.add_generation_prompt = gen;
  c.options.enable_thinking = thinking;
  c.options.bos_token = "<s>";
  c.options.eos_token = "</s>";
  c.options.date_string = "2025-06-30";
  return c;
}

TEST(ChatTemplateReal, Qwen3) {
  const std::string f = "Qwen-Qwen3-0.6B.jinja";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_file(f, conv({kU1}, true, false)),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // The reasoning of an assistant turn after the last user turn is split out and kept.
  EXPECT_EQ(render_file(f, conv({kU1, {"assistant", "<think>\nLet me think.\n</think>\n\nHello!"}}, false)),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\nLet me think.\n</think>\n\nHello!<|im_end|>\n");
}

TEST(ChatTemplateReal, Qwen35) {
  const std::string f = "Qwen3.5-4B.jinja";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(render_file(f, conv({kU1}, true, false)),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_file(f, conv({kU1, {"assistant", "The answer."}}, false)),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer.<|im_end|>\n");
  EXPECT_EQ(render_file(f, conv({kSys})), "ERROR chat template 79:9: raise_exception: No user query found in messages.");
}

TEST(ChatTemplateReal, GptOss) {
  const std::string f = "openai-gpt-oss-120b.jinja";
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
      "Current date: 2025-06-30\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be "
      "included for every message.<|end|>";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})),
            sys + "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|><|start|>user<|message|>Hi there<|end|>"
                  "<|start|>assistant");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            sys + "<|start|>user<|message|>Hi there<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|end|>"
                  "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant");
  EXPECT_EQ(render_file(f, conv({kU1, kA1}, false)),
            sys + "<|start|>user<|message|>Hi there<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>");
}

TEST(ChatTemplateReal, DeepSeekV31) {
  const std::string f = "deepseek-ai-DeepSeek-V3.1.jinja";
  Conv c = conv({kSys, kU1});
  c.options.bos_token = "<｜begin▁of▁sentence｜>";
  EXPECT_EQ(render_file(f, c), "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi there<｜Assistant｜><think></think>");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            "<s><｜User｜>Hi there<｜Assistant｜><think></think>Hello! How can I help?<｜end▁of▁sentence｜>"
            "<｜User｜>What is 2+2?<｜Assistant｜><think></think>");
  EXPECT_EQ(render_file(f, conv({kU1}, true, true)), "<s><｜User｜>Hi there<｜Assistant｜><think>");
}

TEST(ChatTemplateReal, Glm46) {
  const std::string f = "GLM-4.6.jinja";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})), "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHi there<|assistant|>");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think></think>\nHello! How can I help?<|user|>\nWhat is 2+2?<|assistant|>");
  EXPECT_EQ(render_file(f, conv({kU1}, true, false)), "[gMASK]<sop><|user|>\nHi there/nothink<|assistant|>\n<think></think>");
  EXPECT_EQ(render_file(f, conv({kU1, {"assistant", "<think>Plan.</think>Answer."}}, false)),
            "[gMASK]<sop><|user|>\nHi there<|assistant|>\n<think>Plan.</think>\nAnswer.");
}

TEST(ChatTemplateReal, LagunaS) {
  const std::string f = "poolside-Laguna-S-2.1.jinja";
  const std::string eos = "\u3008|EOS|\u3009";
  const std::string default_system =
      "<system>You are a helpful, conversationally-fluent assistant made by Poolside. You are here to be helpful to users "
      "through natural language conversations.</system>\n";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})), eos + "<system>You are terse.</system>\n<user>Hi there</user>\n<assistant><think>");
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            eos + default_system +
                "<user>Hi there</user>\n<assistant><think></think>Hello! How can I help?</assistant>\n"
                "<user>What is 2+2?</user>\n<assistant><think>");
  EXPECT_EQ(render_file(f, conv({kU1}, true, false)), eos + default_system + "<user>Hi there</user>\n<assistant></think>");
  // An empty system message opts out of the default one.
  EXPECT_EQ(render_file(f, conv({{"system", ""}, kU1}, false, false)), eos + "<user>Hi there</user>\n");
}

TEST(ChatTemplateReal, MistralSmall32) {
  const std::string f = "Mistral-Small-3.2-24B-Instruct-2506.jinja";
  EXPECT_EQ(render_file(f, conv({kSys, kU1})), "<s>[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hi there[/INST]");
  const std::string default_system =
      "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\n"
      "Your knowledge base was last updated on 2023-10-01. The current date is 2025-06-30.\n\n"
      R"(When you're not sure about some information or when the user's request requires up-to-date or specific data, you must use the available tools to fetch the information. Do not hesitate to use tools whenever they can provide a more accurate or complete response. If no relevant tools are available, then clearly state that you don't have the information and avoid making up anything.

If the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. "What are some good restaurants around me?" => "Where are you?" or "When is the next flight to Tokyo" => "Where do you travel from?").
You are always very attentive to dates, and when asked about information at specific dates, you discard information that is at another date.
You follow these instructions in all languages, and always respond to the user in the language they use or request.
Next sections describe the capabilities that you have.

# WEB BROWSING INSTRUCTIONS

You cannot perform any web search or access internet to open URLs, links etc. If it seems like the user is expecting you to do so, you clarify the situation and ask the user to copy paste the text directly in the chat.

# MULTI-MODAL INSTRUCTIONS

You have the ability to read images, but you cannot generate images. You also cannot transcribe audio files or videos.
You cannot read nor transcribe audio files or videos.

# TOOL CALLING INSTRUCTIONS

You may have access to tools that you can use to fetch information or perform actions. You must use these tools in the following situations:

1. When the request requires up-to-date information.
2. When the request requires specific data that you do not have in your knowledge base.
3. When the request involves actions that you cannot perform without tools.

Always prioritize using tools to provide the most accurate and helpful response. If tools are not available, inform the user that you cannot perform the requested action at the moment.)";
  EXPECT_EQ(render_file(f, conv({kU1, kA1, kU2})),
            "<s>[SYSTEM_PROMPT]" + default_system +
                "[/SYSTEM_PROMPT][INST]Hi there[/INST]Hello! How can I help?</s>[INST]What is 2+2?[/INST]");
  EXPECT_EQ(render_file(f, conv({kU1, kU2})),
            "ERROR chat template 52:17: raise_exception: After the optional system message, conversation roles must "
            "alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplateReal, ParsesEveryTemplateInTheCollection) {
  // Every real template parses; the ones needing tools or other kwargs are not rendered here.
  for (const auto& entry : std::filesystem::directory_iterator(test::testdata("chat_templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    auto t = ChatTemplate::parse(read_template(entry.path().filename().string()));
    EXPECT_TRUE(t.ok()) << entry.path().filename() << ": " << t.status().message();
  }
  auto bad = ChatTemplate::parse("{% for m in messages %}\n{{ m.content | nope }}{% endfor %}");
  EXPECT_EQ(bad.status().message(), "chat template 2:16: unsupported filter 'nope'");
}

}  // namespace
}  // namespace mt
