#include "runtime/jinja_eval.h"

#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "runtime/jinja_builtins.h"

namespace mt::jinja {

namespace {

struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) { vars[name] = std::move(v); }
};

// Python's slice(start, stop, step).indices(n), as the list of selected indices.
StatusOr<std::vector<int64_t>> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_undefined() && !v->is_integer()) return invalid_argument("slice indices must be integers");
  }
  const int64_t st = step.is_integer() ? step.as_int() : 1;
  if (st == 0) return invalid_argument("slice step cannot be zero");
  const int64_t lower = st > 0 ? 0 : -1;
  const int64_t upper = st > 0 ? n : n - 1;
  auto clamp = [&](const Value& v, int64_t absent) {
    if (!v.is_integer()) return absent;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    return i < lower ? lower : i > upper ? upper : i;
  };
  const int64_t a = clamp(start, st > 0 ? lower : upper);
  const int64_t b = clamp(stop, st > 0 ? upper : lower);
  std::vector<int64_t> out;
  for (int64_t i = a; st > 0 ? i < b : i > b;) {
    out.push_back(i);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  return out;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.kind() == Value::Kind::kNamespace) {
    const Value* v = obj.as_dict().find(name);
    return v ? *v : Value::undefined(name);
  }
  if (auto m = find_method(obj, name)) return *m;  // d.items is the method even with an "items" key
  if (obj.kind() == Value::Kind::kDict) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_mapping()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && key.is_integer()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()[static_cast<size_t>(i)];
    } else {
      const auto at = utf8_offsets(obj.as_string());
      const auto n = static_cast<int64_t>(at.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const auto k = static_cast<size_t>(i);
        return Value::string(obj.as_string().substr(at[k], at[k + 1] - at[k]));
      }
    }
  }
  if (key.is_string() && obj.kind() != Value::Kind::kNamespace) {
    if (auto m = find_method(obj, key.as_string())) return *m;
  }
  return Value::undefined(key.is_string() ? key.as_string() : to_str(key));
}

class Renderer {
 public:
  Renderer(Scope& root, const RenderLimits& limits)
      : root_(root), limits_(limits), previous_limit_(set_bytes_limit(bytes_made() + limits.max_bytes_made)) {}
  ~Renderer() { set_bytes_limit(previous_limit_); }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  Status render(const std::vector<Node>& nodes, Scope& s, std::string& out) {
    for (const Node& n : nodes) {
      MT_RETURN_IF_ERROR(render_node(n, s, out));
      if (out.size() > limits_.max_output_bytes) return error_at(StatusCode::kOutOfRange, n.pos, "output too large");
      if (flow_ != Flow::kNormal) return {};
    }
    return {};
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Clock = std::chrono::steady_clock;

  Status step(SourcePos pos) {
    if (++steps_ > limits_.max_steps || std::chrono::duration<double>(Clock::now() - start_).count() > limits_.max_seconds) {
      return error_at(StatusCode::kOutOfRange, pos, "the template ran too long");
    }
    return check_bytes(pos);
  }

  Status check_bytes(SourcePos pos) const {
    if (over_bytes_limit()) {
      return error_at(StatusCode::kOutOfRange, pos, "the template built too much data");
    }
    return {};
  }

  Status render_node(const Node& n, Scope& s, std::string& out) {
    MT_RETURN_IF_ERROR(step(n.pos));
    switch (n.kind) {
      case Node::Kind::kText: out += n.text; return {};
      case Node::Kind::kOutput: {
        MT_ASSIGN_OR_RETURN(Value v, eval(*n.expr, s));
        out += to_str(v);
        return {};
      }
      case Node::Kind::kIf: {
        MT_ASSIGN_OR_RETURN(Value cond, eval(*n.expr, s));
        return render(cond.truthy() ? n.body : n.else_body, s, out);
      }
      case Node::Kind::kFor: return render_for(n, s, out);
      case Node::Kind::kSet: {
        MT_ASSIGN_OR_RETURN(Value v, eval(*n.expr, s));
        if (!n.attr.empty()) {
          const Value* target = s.find(n.targets[0]);
          if (!target || target->kind() != Value::Kind::kNamespace) {
            return syntax_error(n.pos, "can only set attributes of a namespace ('" + n.targets[0] + "' is not one)");
          }
          target->namespace_dict().set(n.attr, std::move(v));
          return {};
        }
        return assign(n.targets, std::move(v), s, n.pos);
      }
      case Node::Kind::kSetBlock: {
        std::string body;
        MT_RETURN_IF_ERROR(render(n.body, s, body));
        s.set(n.targets[0], Value::string(std::move(body)));
        return {};
      }
      case Node::Kind::kMacro: s.set(n.targets[0], make_macro(n, nullptr, nullptr)); return {};
      case Node::Kind::kCallBlock: {
        // The caller may be kept (`{% set ns.c = caller %}`); after the block it refuses to run.
        auto open = std::make_shared<bool>(true);
        Value caller = make_macro(n, &s, open);
        auto v = eval_call(*n.expr, s, &caller);
        *open = false;
        if (!v.ok()) return v.status();
        out += to_str(*v);
        return {};
      }
      case Node::Kind::kFilterBlock: {
        std::string body;
        MT_RETURN_IF_ERROR(render(n.body, s, body));
        const Value base = Value::string(std::move(body));
        const Value* saved = filter_base_;
        filter_base_ = &base;
        auto v = eval(*n.expr, s);
        filter_base_ = saved;
        if (!v.ok()) return v.status();
        out += to_str(*v);
        return {};
      }
      case Node::Kind::kWith: {
        Scope inner{&s, {}};
        for (const auto& [name, expr] : n.params) {
          MT_ASSIGN_OR_RETURN(Value v, eval(*expr, s));
          inner.set(name, std::move(v));
        }
        return render(n.body, inner, out);
      }
      case Node::Kind::kBreak: flow_ = Flow::kBreak; return {};
      case Node::Kind::kContinue: flow_ = Flow::kContinue; return {};
    }
    return {};
  }

  Status assign(const std::vector<std::string>& targets, Value v, Scope& s, SourcePos pos) {
    if (targets.size() == 1) {
      s.set(targets[0], std::move(v));
      return {};
    }
    if (!v.is_list() || v.as_list().size() != targets.size()) {
      return syntax_error(pos, "cannot unpack " + std::string(kind_name(v.kind())) + " into " +
                                   std::to_string(targets.size()) + " names");
    }
    for (size_t k = 0; k < targets.size(); ++k) s.set(targets[k], v.as_list()[k]);
    return {};
  }

  StatusOr<List> iterable_items(const Value& v, SourcePos pos) {
    std::optional<List> items = iteration_items(v);
    if (!items) return syntax_error(pos, std::string("cannot iterate over ") + kind_name(v.kind()));
    return std::move(*items);
  }

  Status render_for(const Node& n, Scope& s, std::string& out) {
    MT_ASSIGN_OR_RETURN(Value seq, eval(*n.expr, s));
    MT_ASSIGN_OR_RETURN(List items, iterable_items(seq, n.expr->pos));
    if (n.filter) {
      List kept;
      for (Value& item : items) {
        Scope probe{&s, {}};
        MT_RETURN_IF_ERROR(assign(n.targets, item, probe, n.pos));
        MT_ASSIGN_OR_RETURN(Value keep, eval(*n.filter, probe));
        if (keep.truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Scope inner{&s, {}};
      return render(n.else_body, inner, out);
    }
    const auto count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      MT_RETURN_IF_ERROR(step(n.pos));
      Scope it{&s, {}};
      const Value& item = items[static_cast<size_t>(i)];
      MT_RETURN_IF_ERROR(assign(n.targets, item, it, n.pos));
      Dict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(count - i));
      loop.set("revindex0", Value::integer(count - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == count - 1));
      loop.set("length", Value::integer(count));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < count) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.set("cycle", Value::function("loop.cycle", [i](const CallArgs& a) -> StatusOr<Value> {
                 if (a.positional.empty()) return invalid_argument("loop.cycle needs at least one value");
                 return a.positional[static_cast<size_t>(i) % a.positional.size()];
               }));
      it.set("loop", Value::dict(std::move(loop)));
      MT_RETURN_IF_ERROR(render(n.body, it, out));
      const Flow f = flow_;
      flow_ = Flow::kNormal;
      if (f == Flow::kBreak) break;
    }
    return {};
  }

  // A macro (caller_scope null) or the caller of a call block (its body sees the scope
  // around the block, while *open). Arguments bind to the parameters, then to varargs/kwargs.
  Value make_macro(const Node& n, Scope* caller_scope, std::shared_ptr<bool> open) {
    const std::string name = n.kind == Node::Kind::kMacro ? n.targets[0] : "caller";
    return Value::function(
        name,
        [this, &n, caller_scope, open](const CallArgs& args) -> StatusOr<Value> {
          if (open && !*open) return syntax_error(n.pos, "caller() used after its call block ended");
          if (++call_depth_ > limits_.max_call_depth) {
            --call_depth_;
            return error_at(StatusCode::kOutOfRange, n.pos, "macro calls nested too deeply");
          }
          Scope scope{caller_scope ? caller_scope : &root_, {}};
          const NamedExprs& params = n.params;
          List varargs;
          Dict kwargs;
          for (size_t k = params.size(); k < args.positional.size(); ++k) varargs.push_back(args.positional[k]);
          for (const auto& [key, v] : args.named) {
            bool is_param = false;
            for (const auto& p : params) is_param = is_param || p.first == key;
            if (key == "caller") {
              scope.set("caller", v);
            } else if (!is_param) {
              kwargs.set(key, v);
            }
          }
          Status st;
          for (size_t k = 0; k < params.size() && st.ok(); ++k) {
            const Value* given = args.get(k, params[k].first);
            if (given) {
              scope.set(params[k].first, *given);
            } else if (params[k].second) {
              auto def = eval(*params[k].second, scope);
              if (def.ok()) {
                scope.set(params[k].first, std::move(def).value());
              } else {
                st = def.status();
              }
            } else {
              scope.set(params[k].first, Value::undefined(params[k].first));
            }
          }
          scope.set("varargs", Value::list(std::move(varargs)));
          scope.set("kwargs", Value::dict(std::move(kwargs)));
          std::string out;
          if (st.ok()) st = render(n.body, scope, out);
          flow_ = Flow::kNormal;
          --call_depth_;
          if (!st.ok()) return st;
          return Value::string(std::move(out));
        },
        /*errors_have_position=*/true);
  }

  StatusOr<CallArgs> eval_args(const Expr& e, size_t first, Scope& s) {
    CallArgs args;
    for (size_t k = first; k < e.children.size(); ++k) {
      MT_ASSIGN_OR_RETURN(Value v, eval(*e.children[k], s));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, expr] : e.kwargs) {
      MT_ASSIGN_OR_RETURN(Value v, eval(*expr, s));
      args.named.emplace_back(name, std::move(v));
    }
    return args;
  }

  StatusOr<Value> eval_call(const Expr& e, Scope& s, const Value* caller) {
    MT_ASSIGN_OR_RETURN(Value callee, eval(*e.children[0], s));
    MT_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, s));
    if (caller) args.named.emplace_back("caller", *caller);
    if (callee.kind() != Value::Kind::kFunction) {
      const std::string what = callee.is_undefined() ? "'" + callee.undefined_name() + "' is undefined" :
                                                       std::string(kind_name(callee.kind())) + " is not callable";
      return syntax_error(e.pos, what);
    }
    const Function& fn = callee.as_function();
    auto r = fn.call(args);
    if (!r.ok() && !fn.errors_have_position) return error_at(r.status().code(), e.pos, r.status().message());
    return r;
  }

  StatusOr<Value> eval(const Expr& e, Scope& s) {
    MT_RETURN_IF_ERROR(check_bytes(e.pos));
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: {
        const Value* v = s.find(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::kList: {
        List items;
        for (const auto& c : e.children) {
          MT_ASSIGN_OR_RETURN(Value v, eval(*c, s));
          items.push_back(std::move(v));
        }
        return Value::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
          MT_ASSIGN_OR_RETURN(Value key, eval(*e.children[k], s));
          MT_ASSIGN_OR_RETURN(Value v, eval(*e.children[k + 1], s));
          d.set(std::move(key), std::move(v));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kAttr: {
        MT_ASSIGN_OR_RETURN(Value base, eval(*e.children[0], s));
        return get_attr(base, e.name);
      }
      case Expr::Kind::kIndex: {
        MT_ASSIGN_OR_RETURN(Value base, eval(*e.children[0], s));
        MT_ASSIGN_OR_RETURN(Value key, eval(*e.children[1], s));
        return get_item(base, key);
      }
      case Expr::Kind::kSlice: return eval_slice(e, s);
      case Expr::Kind::kCall: return eval_call(e, s, nullptr);
      case Expr::Kind::kFilter: {
        if (e.unsupported) return error_at(StatusCode::kUnimplemented, e.pos, "unsupported filter '" + e.name + "'");
        Value base;
        if (e.children[0]) {
          MT_ASSIGN_OR_RETURN(base, eval(*e.children[0], s));
        } else if (filter_base_) {
          base = *filter_base_;
        }
        MT_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, s));
        auto r = apply_filter(e.name, base, args);
        if (!r.ok()) return error_at(r.status().code(), e.pos, r.status().message());
        return r;
      }
      case Expr::Kind::kTest: {
        if (e.unsupported) return error_at(StatusCode::kUnimplemented, e.pos, "unsupported test '" + e.name + "'");
        MT_ASSIGN_OR_RETURN(Value subject, eval(*e.children[0], s));
        MT_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, s));
        auto r = apply_test(e.name, subject, args);
        if (!r.ok()) return error_at(r.status().code(), e.pos, r.status().message());
        return Value::boolean(*r != e.negated);
      }
      case Expr::Kind::kUnary: {
        MT_ASSIGN_OR_RETURN(Value v, eval(*e.children[0], s));
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (!v.is_number()) return syntax_error(e.pos, std::string("bad operand for unary ") + e.name + ": " + kind_name(v.kind()));
        if (e.name == "+") return v;
        if (v.kind() == Value::Kind::kFloat) return Value::number(-v.as_float());
        if (v.as_int() == INT64_MIN) return error_at(StatusCode::kOutOfRange, e.pos, "integer overflow");
        return Value::integer(-v.as_int());
      }
      case Expr::Kind::kBinary: return eval_binary(e, s);
      case Expr::Kind::kCompare: return eval_compare(e, s);
      case Expr::Kind::kCondition: {
        MT_ASSIGN_OR_RETURN(Value cond, eval(*e.children[1], s));
        if (cond.truthy()) return eval(*e.children[0], s);
        if (e.children[2]) return eval(*e.children[2], s);
        return Value::undefined("");
      }
    }
    return Value();
  }

  StatusOr<Value> eval_slice(const Expr& e, Scope& s) {
    MT_ASSIGN_OR_RETURN(Value base, eval(*e.children[0], s));
    Value parts[3];
    for (int k = 0; k < 3; ++k) {
      if (e.children[static_cast<size_t>(k) + 1]) {
        MT_ASSIGN_OR_RETURN(parts[k], eval(*e.children[static_cast<size_t>(k) + 1], s));
      }
    }
    if (base.is_undefined()) return base;
    if (!base.is_list() && !base.is_string()) return syntax_error(e.pos, std::string("cannot slice ") + kind_name(base.kind()));
    std::vector<size_t> at;
    int64_t n = 0;
    if (base.is_list()) {
      n = static_cast<int64_t>(base.as_list().size());
    } else {
      at = utf8_offsets(base.as_string());
      n = static_cast<int64_t>(at.size()) - 1;
    }
    auto idx = slice_indices(n, parts[0], parts[1], parts[2]);
    if (!idx.ok()) return syntax_error(e.pos, idx.status().message());
    if (base.is_list()) {
      List out;
      for (int64_t i : *idx) out.push_back(base.as_list()[static_cast<size_t>(i)]);
      return Value::list(std::move(out));
    }
    std::string out;
    for (int64_t i : *idx) {
      const auto k = static_cast<size_t>(i);
      out += base.as_string().substr(at[k], at[k + 1] - at[k]);
    }
    return Value::string(std::move(out));
  }

  StatusOr<Value> eval_binary(const Expr& e, Scope& s) {
    MT_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], s));
    if (e.name == "and" && !a.truthy()) return a;
    if (e.name == "or" && a.truthy()) return a;
    MT_ASSIGN_OR_RETURN(Value b, eval(*e.children[1], s));
    if (e.name == "and" || e.name == "or") return b;
    if (e.name == "~") {
      std::string sa = to_str(a);
      std::string sb = to_str(b);
      if (sa.size() + sb.size() > kMaxBuiltBytes) return error_at(StatusCode::kOutOfRange, e.pos, "concatenation result too large");
      return Value::string(sa + sb);
    }
    ArithOp op = ArithOp::kAdd;
    if (e.name == "-") op = ArithOp::kSub;
    if (e.name == "*") op = ArithOp::kMul;
    if (e.name == "/") op = ArithOp::kDiv;
    if (e.name == "//") op = ArithOp::kFloorDiv;
    if (e.name == "%") op = ArithOp::kMod;
    if (e.name == "**") op = ArithOp::kPow;
    auto r = arithmetic(op, a, b);
    if (!r.ok()) return error_at(r.status().code(), e.pos, r.status().message());
    return r;
  }

  StatusOr<Value> eval_compare(const Expr& e, Scope& s) {
    MT_ASSIGN_OR_RETURN(Value left, eval(*e.children[0], s));
    for (size_t k = 0; k < e.ops.size(); ++k) {
      MT_ASSIGN_OR_RETURN(Value right, eval(*e.children[k + 1], s));
      const std::string& op = e.ops[k];
      bool ok = false;
      if (op == "==" || op == "!=") {
        ok = equals(left, right) == (op == "==");
      } else if (op == "in" || op == "notin") {
        auto c = contains(right, left);
        if (!c.ok()) return error_at(c.status().code(), e.pos, c.status().message());
        ok = *c == (op == "in");
      } else {
        auto c = compare(left, right);
        if (!c.ok()) return error_at(c.status().code(), e.pos, c.status().message());
        ok = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
      }
      if (!ok) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  Scope& root_;
  const RenderLimits& limits_;
  Flow flow_ = Flow::kNormal;
  uint64_t steps_ = 0;
  const Clock::time_point start_ = Clock::now();
  const uint64_t previous_limit_;
  int call_depth_ = 0;
  const Value* filter_base_ = nullptr;  // the rendered body under a filter block
};

}  // namespace

StatusOr<std::string> render_template(const std::vector<Node>& nodes, const Dict& globals, const RenderLimits& limits) {
  const size_t namespaces = namespaces_mark();
  std::string out;
  Status st;
  {
    Scope root;
    for (const auto& [name, v] : globals.items()) root.set(to_str(name), v);
    Renderer r(root, limits);
    st = r.render(nodes, root, out);
  }
  clear_namespaces_since(namespaces);
  if (!st.ok()) return st;
  return out;
}

}  // namespace mt::jinja
