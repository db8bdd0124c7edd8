#include "runtime/jinja_expr_parser.h"

#include "runtime/jinja_builtins.h"

namespace mt::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "'" + t.text + "'";
    case TokenKind::kString: return "string literal";
    case TokenKind::kInt:
    case TokenKind::kFloat: return "number " + t.text;
    case TokenKind::kOperator: return "'" + t.text + "'";
    case TokenKind::kEnd: return "end of template";
  }
  return "?";
}

ExprPtr make(Expr::Kind kind, SourcePos pos, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  e->name = std::move(name);
  return e;
}

}  // namespace

Status ExprParser::unexpected(std::string_view expected) const {
  return syntax_error(cur().pos, "unexpected " + describe(cur()) + ", expected " + std::string(expected));
}

Status ExprParser::expect_op(std::string_view op) {
  if (!at_op(op)) return unexpected("'" + std::string(op) + "'");
  next();
  return {};
}

Status ExprParser::expect(TokenKind kind, std::string_view what) {
  if (cur().kind != kind) return unexpected(what);
  next();
  return {};
}

StatusOr<ExprPtr> ExprParser::sealed(ExprPtr e) const {
  for (const auto& c : e->children) {
    if (c) e->height = std::max(e->height, c->height + 1);
  }
  for (const auto& [unused, c] : e->kwargs) e->height = std::max(e->height, c->height + 1);
  if (e->height > kMaxDepth) return syntax_error(e->pos, "expression nested too deeply");
  return e;
}

StatusOr<std::string> ExprParser::expect_name() {
  if (cur().kind != TokenKind::kName) return unexpected("a name");
  std::string name = cur().text;
  next();
  return name;
}

bool ExprParser::at_tuple_end() const {
  return cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || at_op(")") || at_name("recursive");
}

StatusOr<ExprPtr> ExprParser::parse_tuple(bool with_condition, bool explicit_parens) {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) MT_RETURN_IF_ERROR(expect_op(","));
    if (at_tuple_end()) break;
    MT_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condition));
    items.push_back(std::move(e));
    if (!at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return unexpected("an expression");
  }
  auto e = make(Expr::Kind::kList, pos);
  e->children = std::move(items);
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_expression(bool with_condition) {
  if (++expr_depth_ > kMaxDepth) return syntax_error(cur().pos, "expression nested too deeply");
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_or());
  while (with_condition && at_name("if")) {
    auto cond = make(Expr::Kind::kCondition, cur().pos);
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
    ExprPtr otherwise;
    if (at_name("else")) {
      next();
      MT_ASSIGN_OR_RETURN(otherwise, parse_expression(true));
    }
    cond->children.push_back(std::move(e));
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(otherwise));
    MT_ASSIGN_OR_RETURN(e, sealed(std::move(cond)));
  }
  --expr_depth_;
  return e;
}

StatusOr<ExprPtr> ExprParser::binary(std::string op, SourcePos pos, ExprPtr lhs, ExprPtr rhs) {
  auto e = make(Expr::Kind::kBinary, pos, std::move(op));
  e->children.push_back(std::move(lhs));
  e->children.push_back(std::move(rhs));
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_or() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_and());
  while (at_name("or")) {
    const SourcePos pos = cur().pos;
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_and());
    MT_ASSIGN_OR_RETURN(e, binary("or", pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_and() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_not());
  while (at_name("and")) {
    const SourcePos pos = cur().pos;
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_not());
    MT_ASSIGN_OR_RETURN(e, binary("and", pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_not() {
  if (!at_name("not")) return parse_compare();
  if (++expr_depth_ > kMaxDepth) return syntax_error(cur().pos, "expression nested too deeply");
  auto e = make(Expr::Kind::kUnary, cur().pos, "not");
  next();
  MT_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
  e->children.push_back(std::move(operand));
  --expr_depth_;
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_compare() {
  const SourcePos pos = cur().pos;
  MT_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
  auto e = make(Expr::Kind::kCompare, pos);
  e->children.push_back(std::move(first));
  for (;;) {
    std::string op;
    if (cur().kind == TokenKind::kOperator &&
        (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") || at_op(">") || at_op(">="))) {
      op = cur().text;
      next();
    } else if (at_name("in")) {
      op = "in";
      next();
    } else if (at_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    e->ops.push_back(std::move(op));
    e->children.push_back(std::move(rhs));
  }
  if (e->ops.empty()) return std::move(e->children[0]);
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_math1() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_concat());
  while (at_op("+") || at_op("-")) {
    const Token op = cur();
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_concat());
    MT_ASSIGN_OR_RETURN(e, binary(op.text, op.pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_concat() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_math2());
  while (at_op("~")) {
    const SourcePos pos = cur().pos;
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math2());
    MT_ASSIGN_OR_RETURN(e, binary("~", pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_math2() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_pow());
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const Token op = cur();
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_pow());
    MT_ASSIGN_OR_RETURN(e, binary(op.text, op.pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_pow() {
  MT_ASSIGN_OR_RETURN(ExprPtr e, parse_unary(true));
  while (at_op("**")) {
    const SourcePos pos = cur().pos;
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_unary(true));
    MT_ASSIGN_OR_RETURN(e, binary("**", pos, std::move(e), std::move(rhs)));
  }
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_unary(bool with_filters) {
  if (++expr_depth_ > kMaxDepth) return syntax_error(cur().pos, "expression nested too deeply");
  ExprPtr e;
  if (at_op("-") || at_op("+")) {
    e = make(Expr::Kind::kUnary, cur().pos, cur().text);
    next();
    MT_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    e->children.push_back(std::move(operand));
    MT_ASSIGN_OR_RETURN(e, sealed(std::move(e)));
  } else {
    MT_ASSIGN_OR_RETURN(e, parse_primary());
  }
  MT_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
  if (with_filters) {
    for (;;) {
      if (at_op("|")) {
        MT_ASSIGN_OR_RETURN(e, parse_filters(std::move(e)));
      } else if (at_name("is")) {
        MT_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
      } else if (at_op("(")) {
        MT_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        break;
      }
    }
  }
  --expr_depth_;
  return e;
}

StatusOr<ExprPtr> ExprParser::parse_primary() {
  const Token& t = cur();
  ExprPtr e = make(Expr::Kind::kLiteral, t.pos);
  switch (t.kind) {
    case TokenKind::kName:
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      next();
      return e;
    case TokenKind::kString: {
      std::string s;
      while (cur().kind == TokenKind::kString) {  // adjacent literals join, as in Python
        s += cur().text;
        next();
      }
      e->value = Value::string(std::move(s));
      return e;
    }
    case TokenKind::kInt: e->value = Value::integer(t.int_value); next(); return e;
    case TokenKind::kFloat: e->value = Value::number(t.float_value); next(); return e;
    case TokenKind::kOperator:
      if (t.text == "(") {
        next();
        MT_ASSIGN_OR_RETURN(e, parse_tuple(true, true));
        MT_RETURN_IF_ERROR(expect_op(")"));
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  return unexpected("an expression");
}

StatusOr<ExprPtr> ExprParser::parse_list() {
  auto e = make(Expr::Kind::kList, cur().pos);
  next();
  while (!at_op("]")) {
    if (!e->children.empty()) MT_RETURN_IF_ERROR(expect_op(","));
    if (at_op("]")) break;
    MT_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    e->children.push_back(std::move(item));
  }
  next();
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_dict() {
  auto e = make(Expr::Kind::kDict, cur().pos);
  next();
  while (!at_op("}")) {
    if (!e->children.empty()) MT_RETURN_IF_ERROR(expect_op(","));
    if (at_op("}")) break;
    MT_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    MT_RETURN_IF_ERROR(expect_op(":"));
    MT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    e->children.push_back(std::move(key));
    e->children.push_back(std::move(value));
  }
  next();
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_postfix(ExprPtr e) {
  for (;;) {
    if (at_op(".")) {
      next();
      if (cur().kind == TokenKind::kName) {
        auto attr = make(Expr::Kind::kAttr, cur().pos, cur().text);
        attr->children.push_back(std::move(e));
        MT_ASSIGN_OR_RETURN(e, sealed(std::move(attr)));
      } else if (cur().kind == TokenKind::kInt) {
        auto index = make(Expr::Kind::kIndex, cur().pos);
        auto lit = make(Expr::Kind::kLiteral, cur().pos);
        lit->value = Value::integer(cur().int_value);
        index->children.push_back(std::move(e));
        index->children.push_back(std::move(lit));
        MT_ASSIGN_OR_RETURN(e, sealed(std::move(index)));
      } else {
        return unexpected("an attribute name");
      }
      next();
    } else if (at_op("[")) {
      MT_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
    } else if (at_op("(")) {
      MT_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
    } else {
      return e;
    }
  }
}

StatusOr<ExprPtr> ExprParser::parse_subscript(ExprPtr base) {
  const SourcePos pos = cur().pos;
  next();
  ExprPtr parts[3];
  int n_parts = 1;
  if (!at_op(":")) {
    MT_ASSIGN_OR_RETURN(parts[0], parse_expression(true));
  }
  while (at_op(":") && n_parts < 3) {
    next();
    if (!at_op("]") && !at_op(":")) {
      MT_ASSIGN_OR_RETURN(parts[n_parts], parse_expression(true));
    }
    ++n_parts;
  }
  MT_RETURN_IF_ERROR(expect_op("]"));
  auto e = make(n_parts == 1 ? Expr::Kind::kIndex : Expr::Kind::kSlice, pos);
  e->children.push_back(std::move(base));
  for (int k = 0; k < (n_parts == 1 ? 1 : 3); ++k) e->children.push_back(std::move(parts[k]));
  return sealed(std::move(e));
}

Status ExprParser::parse_args(Expr& e) {
  MT_RETURN_IF_ERROR(expect_op("("));
  bool first = true;
  while (!at_op(")")) {
    if (!first) MT_RETURN_IF_ERROR(expect_op(","));
    first = false;
    if (at_op(")")) break;
    if (at_op("*") || at_op("**")) {
      return error_at(StatusCode::kUnimplemented, cur().pos, "*args and **kwargs in calls are not supported");
    }
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      MT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!e.kwargs.empty()) return syntax_error(cur().pos, "positional argument after a keyword argument");
      MT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.children.push_back(std::move(value));
    }
  }
  next();
  return {};
}

StatusOr<ExprPtr> ExprParser::parse_call(ExprPtr callee) {
  auto e = make(Expr::Kind::kCall, callee->pos);
  e->children.push_back(std::move(callee));
  MT_RETURN_IF_ERROR(parse_args(*e));
  return sealed(std::move(e));
}

StatusOr<ExprPtr> ExprParser::parse_filters(ExprPtr base) {
  bool first = base == nullptr;
  while (first || at_op("|")) {
    if (!first) next();
    first = false;
    const SourcePos pos = cur().pos;
    MT_ASSIGN_OR_RETURN(std::string name, expect_name());
    const bool known = is_known_filter(name);
    if (!known && if_depth_ == 0) return error_at(StatusCode::kUnimplemented, pos, "unsupported filter '" + name + "'");
    auto e = make(Expr::Kind::kFilter, pos, std::move(name));
    e->unsupported = !known;
    e->children.push_back(std::move(base));
    if (at_op("(")) MT_RETURN_IF_ERROR(parse_args(*e));
    MT_ASSIGN_OR_RETURN(base, sealed(std::move(e)));
  }
  return base;
}

StatusOr<ExprPtr> ExprParser::parse_test(ExprPtr subject) {
  next();  // is
  bool negated = false;
  if (at_name("not")) {
    negated = true;
    next();
  }
  const SourcePos pos = cur().pos;
  MT_ASSIGN_OR_RETURN(std::string name, expect_name());
  const bool known = is_known_test(name);
  if (!known && if_depth_ == 0) return error_at(StatusCode::kUnimplemented, pos, "unsupported test '" + name + "'");
  auto e = make(Expr::Kind::kTest, pos, std::move(name));
  e->unsupported = !known;
  e->negated = negated;
  e->children.push_back(std::move(subject));
  if (at_op("(")) {
    MT_RETURN_IF_ERROR(parse_args(*e));
  } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString || cur().kind == TokenKind::kInt ||
              cur().kind == TokenKind::kFloat || at_op("[") || at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if") && !at_name("is")) {
    // One argument without parentheses: `x is divisibleby 3`, `x is sameas false`.
    MT_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    MT_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    e->children.push_back(std::move(arg));
  }
  return sealed(std::move(e));
}

}  // namespace mt::jinja
