#include "runtime/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "runtime/jinja_expr_parser.h"

namespace mt::jinja {

namespace {

class Parser : public ExprParser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : ExprParser(tokens) {}

  StatusOr<std::vector<Node>> run() {
    std::string end;
    MT_ASSIGN_OR_RETURN(auto nodes, parse_body({}, &end, cur().pos));
    return nodes;
  }

 private:
  Status expect_block_end() { return expect(TokenKind::kBlockEnd, "'%}'"); }

  // --- statements ---

  // Nodes up to a `{% name` with name in `ends` (consumed; its name goes to *which) or the
  // end of the template (allowed only when ends is empty).
  StatusOr<std::vector<Node>> parse_body(std::initializer_list<std::string_view> ends, std::string* which, SourcePos opened) {
    if (++block_depth_ > kMaxDepth) return syntax_error(opened, "blocks nested too deeply");
    std::vector<Node> nodes;
    for (;;) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) break;
        return syntax_error(opened, "this block is never closed (expected {% " + std::string(*(ends.end() - 1)) + " %})");
      }
      if (t.kind == TokenKind::kText) {
        Node n;
        n.kind = Node::Kind::kText;
        n.pos = t.pos;
        n.text = t.text;
        nodes.push_back(std::move(n));
        next();
      } else if (t.kind == TokenKind::kVarBegin) {
        Node n;
        n.kind = Node::Kind::kOutput;
        n.pos = t.pos;
        next();
        MT_ASSIGN_OR_RETURN(n.expr, parse_tuple(true));
        MT_RETURN_IF_ERROR(expect(TokenKind::kVarEnd, "'}}'"));
        nodes.push_back(std::move(n));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& name = peek();
        if (name.kind == TokenKind::kName && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          *which = name.text;
          next();
          next();
          break;
        }
        next();
        MT_ASSIGN_OR_RETURN(Node n, parse_statement());
        nodes.push_back(std::move(n));
      } else {
        return unexpected("template text or a tag");
      }
    }
    --block_depth_;
    return nodes;
  }

  StatusOr<Node> parse_statement() {
    const Token& tag = cur();
    if (tag.kind != TokenKind::kName) return unexpected("a tag name");
    Node n;
    n.pos = tag.pos;
    const std::string name = tag.text;
    next();
    std::string end;
    if (name == "if") return parse_if(std::move(n));
    if (name == "for") return parse_for(std::move(n));
    if (name == "set") return parse_set(std::move(n));
    if (name == "macro") return parse_macro(std::move(n));
    if (name == "call") return parse_call_block(std::move(n));
    if (name == "filter") {
      n.kind = Node::Kind::kFilterBlock;
      MT_ASSIGN_OR_RETURN(n.expr, parse_filters(nullptr));
      MT_RETURN_IF_ERROR(expect_block_end());
      MT_ASSIGN_OR_RETURN(n.body, parse_body({"endfilter"}, &end, n.pos));
      MT_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (name == "with") {
      n.kind = Node::Kind::kWith;
      while (cur().kind != TokenKind::kBlockEnd) {
        if (!n.params.empty()) MT_RETURN_IF_ERROR(expect_op(","));
        MT_ASSIGN_OR_RETURN(std::string var, expect_name());
        MT_RETURN_IF_ERROR(expect_op("="));
        MT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        n.params.emplace_back(std::move(var), std::move(value));
      }
      next();
      MT_ASSIGN_OR_RETURN(n.body, parse_body({"endwith"}, &end, n.pos));
      MT_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (name == "generation") {  // transformers' marker of assistant text: rendered as is
      n.kind = Node::Kind::kWith;
      MT_RETURN_IF_ERROR(expect_block_end());
      MT_ASSIGN_OR_RETURN(n.body, parse_body({"endgeneration"}, &end, n.pos));
      MT_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return syntax_error(n.pos, "'" + name + "' outside a for loop");
      n.kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      MT_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") return syntax_error(n.pos, "unexpected {% " + name + " %}");
    return error_at(StatusCode::kUnimplemented, n.pos, "unsupported tag '" + name + "'");
  }

  StatusOr<Node> parse_if(Node n) {
    ++if_depth_;
    MT_ASSIGN_OR_RETURN(Node done, parse_if_body(std::move(n)));
    --if_depth_;
    return done;
  }

  StatusOr<Node> parse_if_body(Node n) {
    n.kind = Node::Kind::kIf;
    MT_ASSIGN_OR_RETURN(n.expr, parse_tuple(false));
    MT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    MT_ASSIGN_OR_RETURN(n.body, parse_body({"elif", "else", "endif"}, &end, n.pos));
    if (end == "elif") {
      Node elif;
      elif.pos = t_[i_ - 1].pos;
      if (++block_depth_ > kMaxDepth) return syntax_error(elif.pos, "blocks nested too deeply");
      MT_ASSIGN_OR_RETURN(Node chained, parse_if(std::move(elif)));
      --block_depth_;
      n.else_body.push_back(std::move(chained));
      return n;  // the chained if consumed the endif
    }
    if (end == "else") {
      MT_RETURN_IF_ERROR(expect_block_end());
      MT_ASSIGN_OR_RETURN(n.else_body, parse_body({"endif"}, &end, n.pos));
    }
    MT_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  StatusOr<Node> parse_for(Node n) {
    n.kind = Node::Kind::kFor;
    MT_ASSIGN_OR_RETURN(n.targets, parse_targets());
    if (!at_name("in")) return unexpected("'in'");
    next();
    MT_ASSIGN_OR_RETURN(n.expr, parse_tuple(false));
    if (at_name("if")) {
      next();
      MT_ASSIGN_OR_RETURN(n.filter, parse_expression(true));
    }
    if (at_name("recursive")) return error_at(StatusCode::kUnimplemented, cur().pos, "recursive loops are not supported");
    MT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    ++loop_depth_;
    MT_ASSIGN_OR_RETURN(n.body, parse_body({"else", "endfor"}, &end, n.pos));
    --loop_depth_;
    if (end == "else") {
      MT_RETURN_IF_ERROR(expect_block_end());
      MT_ASSIGN_OR_RETURN(n.else_body, parse_body({"endfor"}, &end, n.pos));
    }
    MT_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  // name or name, name, ... (loop variables and set targets)
  StatusOr<std::vector<std::string>> parse_targets() {
    std::vector<std::string> names;
    const bool parens = at_op("(");
    if (parens) next();
    do {
      if (!names.empty()) next();
      MT_ASSIGN_OR_RETURN(std::string name, expect_name());
      names.push_back(std::move(name));
    } while (at_op(","));
    if (parens) MT_RETURN_IF_ERROR(expect_op(")"));
    return names;
  }

  StatusOr<Node> parse_set(Node n) {
    n.kind = Node::Kind::kSet;
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      n.targets.push_back(cur().text);
      next();
      next();
      MT_ASSIGN_OR_RETURN(n.attr, expect_name());
    } else {
      MT_ASSIGN_OR_RETURN(n.targets, parse_targets());
    }
    if (cur().kind == TokenKind::kBlockEnd && n.attr.empty() && n.targets.size() == 1) {
      n.kind = Node::Kind::kSetBlock;
      next();
      std::string end;
      MT_ASSIGN_OR_RETURN(n.body, parse_body({"endset"}, &end, n.pos));
      MT_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    MT_RETURN_IF_ERROR(expect_op("="));
    MT_ASSIGN_OR_RETURN(n.expr, parse_tuple(true));
    MT_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  // (a, b=default, ...)
  StatusOr<NamedExprs> parse_signature() {
    NamedExprs params;
    MT_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      if (!params.empty()) MT_RETURN_IF_ERROR(expect_op(","));
      if (at_op(")")) break;
      MT_ASSIGN_OR_RETURN(std::string name, expect_name());
      ExprPtr def;
      if (at_op("=")) {
        next();
        MT_ASSIGN_OR_RETURN(def, parse_expression(true));
      }
      params.emplace_back(std::move(name), std::move(def));
    }
    next();
    return params;
  }

  StatusOr<Node> parse_macro(Node n) {
    n.kind = Node::Kind::kMacro;
    MT_ASSIGN_OR_RETURN(std::string name, expect_name());
    n.targets.push_back(std::move(name));
    MT_ASSIGN_OR_RETURN(n.params, parse_signature());
    MT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    const int loops = loop_depth_;
    loop_depth_ = 0;
    MT_ASSIGN_OR_RETURN(n.body, parse_body({"endmacro"}, &end, n.pos));
    loop_depth_ = loops;
    MT_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  StatusOr<Node> parse_call_block(Node n) {
    n.kind = Node::Kind::kCallBlock;
    if (at_op("(")) {
      MT_ASSIGN_OR_RETURN(n.params, parse_signature());
    }
    MT_ASSIGN_OR_RETURN(n.expr, parse_expression(true));
    if (n.expr->kind != Expr::Kind::kCall) return syntax_error(n.expr->pos, "{% call %} needs a macro call");
    MT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    MT_ASSIGN_OR_RETURN(n.body, parse_body({"endcall"}, &end, n.pos));
    MT_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StatusOr<std::vector<Node>> parse_template(const std::vector<Token>& tokens) {
  if (tokens.empty()) return std::vector<Node>{};
  return Parser(tokens).run();
}

}  // namespace mt::jinja
