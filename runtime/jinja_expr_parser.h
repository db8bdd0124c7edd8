// The expression half of the template parser (runtime/jinja_parser.h has the grammar):
// a cursor over the tokens of a template plus recursive descent over Jinja's precedence
// levels. The statement parser derives from it, so both share one cursor and one view of
// how deep they are (in expressions, to bound the recursion; in `if` blocks, where an
// unknown filter or test is left to fail when evaluated, as Jinja does).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/jinja_lexer.h"
#include "runtime/jinja_parser.h"

namespace mt::jinja {

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& tokens) : t_(tokens) {}

 protected:
  static constexpr int kMaxDepth = 200;  // nesting of expressions and of blocks

  // --- token access ---
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool at_op(std::string_view op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool at_name(std::string_view name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  Status unexpected(std::string_view expected) const;
  Status expect_op(std::string_view op);
  Status expect(TokenKind kind, std::string_view what);
  StatusOr<std::string> expect_name();

  // --- expressions ---
  // a or a, b, ... (a tuple, kept as a list)
  StatusOr<ExprPtr> parse_tuple(bool with_condition, bool explicit_parens = false);
  // with_condition: `x if c else y` allowed (not in a for loop's iterable, where `if` filters)
  StatusOr<ExprPtr> parse_expression(bool with_condition);
  // | name(args) | name ... ; base is null in a filter block
  StatusOr<ExprPtr> parse_filters(ExprPtr base);
  // e with its height set from its children's; an error past kMaxDepth, since evaluating
  // (and freeing) the tree recurses along its height: `x.a.a.a...` nests without brackets.
  StatusOr<ExprPtr> sealed(ExprPtr e) const;

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int expr_depth_ = 0;
  int if_depth_ = 0;

 private:
  bool at_tuple_end() const;
  StatusOr<ExprPtr> binary(std::string op, SourcePos pos, ExprPtr lhs, ExprPtr rhs);
  StatusOr<ExprPtr> parse_or();
  StatusOr<ExprPtr> parse_and();
  StatusOr<ExprPtr> parse_not();
  StatusOr<ExprPtr> parse_compare();
  StatusOr<ExprPtr> parse_math1();
  StatusOr<ExprPtr> parse_concat();
  StatusOr<ExprPtr> parse_math2();
  StatusOr<ExprPtr> parse_pow();
  StatusOr<ExprPtr> parse_unary(bool with_filters);
  StatusOr<ExprPtr> parse_primary();
  StatusOr<ExprPtr> parse_list();
  StatusOr<ExprPtr> parse_dict();
  StatusOr<ExprPtr> parse_postfix(ExprPtr e);
  StatusOr<ExprPtr> parse_subscript(ExprPtr base);
  Status parse_args(Expr& e);  // (args, name=value, ...) into e.children and e.kwargs
  StatusOr<ExprPtr> parse_call(ExprPtr callee);
  StatusOr<ExprPtr> parse_test(ExprPtr subject);
};

}  // namespace mt::jinja
