// The syntax tree of a chat template and the parser that builds it from tokens
// (runtime/jinja_lexer.h).
//
// Expressions follow Jinja's grammar and precedence, loosest first: `x if c else y`, or,
// and, not, comparisons (== != < <= > >= in, not in; chained), + -, ~, * / // %, **,
// unary - +, then postfix attribute/index/slice/call, filters `|f(...)` and tests
// `is [not] t ...` (so `a + b|length` is `a + (b|length)` and `not x is defined` is
// `not (x is defined)`). Statements: if/elif/else, for (with `if` filter and else), set
// (names, tuples, `ns.attr`, block form), macro, call, filter, with, break/continue, and
// transformers' `{% generation %}` marker (its body is kept as is).
//
// Everything a render could later find unsupported is refused here instead, naming its
// line:column: unknown tags, filters and tests, `*args` calls, recursive loops. As in
// Jinja, an unknown filter or test inside an `if` block is an error only when evaluated
// (templates guard optional features that way).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/jinja_lexer.h"
#include "runtime/jinja_value.h"

namespace mt::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using NamedExprs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,    // value
    kName,       // name
    kList,       // children: the items (lists and tuples alike)
    kDict,       // children: key, value, key, value, ...
    kAttr,       // children[0].name
    kIndex,      // children[0][children[1]]
    kSlice,      // children[0][children[1]:children[2]:children[3]]; absent parts are null
    kCall,       // children[0](children[1..], kwargs)
    kFilter,     // children[0] | name(children[1..], kwargs); children[0] is null in a filter block
    kTest,       // children[0] is [not] name(children[1..], kwargs)
    kUnary,      // name: "-", "+" or "not"; children[0]
    kBinary,     // name: + - * / // % ** ~ and or; children[0], children[1]
    kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
    kCondition,  // children[0] if children[1] else children[2] (null: undefined)
  };
  Kind kind = Kind::kLiteral;
  SourcePos pos;
  std::string name;
  Value value;
  std::vector<ExprPtr> children;
  NamedExprs kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  bool negated = false;          // kTest
  bool unsupported = false;      // kFilter/kTest of an unknown name inside an if: an error only if evaluated
  int height = 1;                // of the tree below (parse-time bound on evaluation recursion)
};

struct Node {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // if expr: body, else else_body (an elif is an If alone in else_body)
    kFor,          // for targets in expr [if filter]: body, else else_body
    kSet,          // set targets = expr, or set targets[0].attr = expr
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // macro targets[0](params): body
    kCallBlock,    // call(params) expr: body is the caller
    kFilterBlock,  // filter expr (a filter chain on a null base): body
    kWith,         // with params (the assignments): body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  SourcePos pos;
  std::string text;
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr expr;
  ExprPtr filter;
  NamedExprs params;  // defaults may be null
  std::vector<Node> body;
  std::vector<Node> else_body;
};

// Syntax errors are InvalidArgument, unsupported features Unimplemented; both name the
// line:column of the token at fault.
StatusOr<std::vector<Node>> parse_template(const std::vector<Token>& tokens);

}  // namespace mt::jinja
