// Filters and tests (see runtime/jinja_builtins.h).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "runtime/jinja_builtins.h"

namespace mt::jinja {

namespace {

const char* const kFilters[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper"};

const char* const kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
    "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

bool flag(const CallArgs& a, size_t index, std::string_view name, bool fallback = false) {
  const Value* v = a.get(index, name);
  return v ? v->truthy() : fallback;
}

// `a.b.0` as Jinja's attribute= arguments spell it: keys of dicts, indices of lists.
Value attr_path(const Value& v, std::string_view path) {
  Value cur = v;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string part(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (cur.is_mapping()) {
      const Value* next = cur.as_dict().find(part);
      cur = next ? *next : Value::undefined(part);
    } else if (cur.is_list() && !part.empty() && part.size() < 10 &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t i = std::stoul(part);
      cur = i < cur.as_list().size() ? cur.as_list()[i] : Value::undefined(part);
    } else {
      return Value::undefined(part);
    }
  }
  return cur;
}

StatusOr<List> items_of(const Value& v, std::string_view filter) {
  std::optional<List> items = iteration_items(v);
  if (!items) return invalid_argument(std::string(filter) + ": cannot iterate over " + kind_name(v.kind()));
  return std::move(*items);
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  std::string s = v.as_string();
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return Value::string(std::move(s));
}

// Stable sort by key, passing on the first comparison error.
Status sort_by(List& items, const std::function<Value(const Value&)>& key, bool reverse) {
  Status err;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    if (!err.ok()) return false;
    auto c = compare(key(x), key(y));
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  return err;
}

StatusOr<Value> tojson(const Value& v, const CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = flag(a, 0, "ensure_ascii");
  const Value* indent = a.get(1, "indent");
  if (indent && !indent->is_none()) {
    if (!indent->is_integer()) return invalid_argument("tojson: indent must be an integer");
    o.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
    o.item_separator = ",";
  }
  const Value* seps = a.get(2, "separators");
  if (seps && !seps->is_none()) {
    if (!seps->is_list() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() || !seps->as_list()[1].is_string()) {
      return invalid_argument("tojson: separators must be two strings");
    }
    o.item_separator = seps->as_list()[0].as_string();
    o.key_separator = seps->as_list()[1].as_string();
  }
  o.sort_keys = flag(a, 3, "sort_keys");
  MT_ASSIGN_OR_RETURN(std::string s, to_json(v, o));
  return Value::string(std::move(s));
}

StatusOr<std::string> indent(const std::string& s, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  const int64_t width = w && w->is_integer() ? std::clamp<int64_t>(w->as_int(), 0, 1 << 20) : 4;
  const std::string pad = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(width), ' ');
  const bool first = flag(a, 1, "first");
  const bool blank = flag(a, 2, "blank");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t k = s.find('\n'); k != std::string::npos; k = s.find('\n', start)) {
    lines.push_back(s.substr(start, k - start));
    start = k + 1;
  }
  lines.push_back(s.substr(start));  // Jinja's splitlines of s + "\n": s split at every "\n"
  if (pad.size() * lines.size() > kMaxBuiltBytes) return out_of_range("indent: result too large");
  std::string out = lines[0];
  for (size_t k = 1; k < lines.size(); ++k) out += "\n" + ((blank || !lines[k].empty()) ? pad + lines[k] : lines[k]);
  return first ? pad + out : out;
}

StatusOr<Value> to_int(const Value& v, const CallArgs& a) {
  const Value* def = a.get(0, "default");
  const Value fallback = def ? *def : Value::integer(0);
  if (v.is_integer()) return Value::integer(v.as_int());
  auto from_double = [&](double d) { return std::fabs(d) < 9.2e18 ? Value::integer(static_cast<int64_t>(d)) : fallback; };
  if (v.kind() == Value::Kind::kFloat) return from_double(v.as_float());
  if (!v.is_string()) return fallback;
  const std::string& s = v.as_string();
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  auto rest_blank = [&](const char* p) { return std::all_of(p, s.c_str() + s.size(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }); };
  if (end != s.c_str() && errno == 0 && rest_blank(end)) return Value::integer(i);
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() && rest_blank(end)) return from_double(d);
  return fallback;
}

StatusOr<Value> to_float(const Value& v, const CallArgs& a) {
  const Value* def = a.get(0, "default");
  const Value fallback = def ? *def : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_float());
  if (!v.is_string()) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v.as_string().c_str(), &end);
  return end != v.as_string().c_str() ? Value::number(d) : fallback;
}

std::string jinja_title(const std::string& s) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const bool delim = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || std::isspace(static_cast<unsigned char>(c));
    if (!delim) c = static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    word_start = delim;
  }
  return out;
}

// select/reject (attr empty) and selectattr/rejectattr: keep items whose test result is `keep`.
StatusOr<Value> select(const Value& v, const CallArgs& a, bool by_attr, bool keep, std::string_view filter) {
  if (!v.truthy()) return Value::list({});  // as Jinja: none and undefined select nothing
  MT_ASSIGN_OR_RETURN(List items, items_of(v, filter));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string()) return invalid_argument(std::string(filter) + " needs an attribute name");
    attr = a.positional[0].as_string();
    next = 1;
  }
  std::string test;
  if (a.positional.size() > next) {
    if (!a.positional[next].is_string()) return invalid_argument(std::string(filter) + ": the test name must be a string");
    test = a.positional[next].as_string();
    if (!is_known_test(test)) return unimplemented(std::string(filter) + ": unsupported test '" + test + "'");
  }
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(a.positional.size(), next + 1)), a.positional.end());
  test_args.named = a.named;
  List out;
  for (const Value& item : items) {
    MT_RETURN_IF_ERROR(check_built(out.size() * sizeof(Value)));
    const Value subject = by_attr ? attr_path(item, attr) : item;
    bool pass = subject.truthy();
    if (!test.empty()) {
      MT_ASSIGN_OR_RETURN(pass, apply_test(test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

StatusOr<Value> map(const Value& v, const CallArgs& a) {
  if (!v.truthy()) return Value::list({});
  MT_ASSIGN_OR_RETURN(List items, items_of(v, "map"));
  List out;
  if (const Value* attr = a.get(a.positional.size(), "attribute")) {
    if (!attr->is_string()) return invalid_argument("map: attribute must be a string");
    const Value* def = a.get(a.positional.size(), "default");
    for (const Value& item : items) {
      MT_RETURN_IF_ERROR(check_built(out.size() * sizeof(Value)));
      Value x = attr_path(item, attr->as_string());
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) return invalid_argument("map needs a filter name or attribute=");
  const std::string name = a.positional[0].as_string();
  if (!is_known_filter(name)) return unimplemented("map: unsupported filter '" + name + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const Value& item : items) {
    MT_RETURN_IF_ERROR(check_built(out.size() * sizeof(Value)));
    MT_ASSIGN_OR_RETURN(Value x, apply_filter(name, item, rest));
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out));
}

StatusOr<Value> sequence_filter(std::string_view name, const Value& v, const CallArgs& a) {
  MT_ASSIGN_OR_RETURN(List items, items_of(v, name));
  // Argument positions: sort(reverse, case_sensitive, attribute), unique/min/max(case_sensitive,
  // attribute), sum(attribute, start).
  const bool case_sensitive = flag(a, name == "sort" ? 1 : 0, "case_sensitive");
  const Value* attr_v = a.get(name == "sort" ? 2 : name == "sum" ? 0 : 1, "attribute");
  const std::string attr = attr_v && attr_v->is_string() ? attr_v->as_string() : "";
  auto key = [&](const Value& x) { return lower_if_string(attr.empty() ? x : attr_path(x, attr), case_sensitive); };
  if (name == "list") return Value::list(std::move(items));
  if (name == "first" || name == "last") {
    if (items.empty()) return Value::undefined(std::string(name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    if (v.is_string()) {
      std::string s;
      for (const Value& c : items) s += c.as_string();
      return Value::string(std::move(s));
    }
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    MT_RETURN_IF_ERROR(sort_by(items, key, flag(a, 0, "reverse")));
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    if (items.size() > (size_t{1} << 16)) return out_of_range("unique: too many items");  // quadratic
    List out;
    for (const Value& x : items) {
      bool seen = false;
      for (const Value& y : out) seen = seen || equals(key(x), key(y));
      if (!seen) out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") {
    if (items.empty()) return Value::undefined(std::string(name));
    MT_RETURN_IF_ERROR(sort_by(items, key, false));
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    const Value* start = a.get(1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const Value& x : items) {
      MT_ASSIGN_OR_RETURN(total, arithmetic(ArithOp::kAdd, total, attr.empty() ? x : attr_path(x, attr)));
    }
    return total;
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* join_attr = a.get(1, "attribute");
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      MT_RETURN_IF_ERROR(check_built(out.size()));
      if (k) out += sep ? to_str(*sep) : "";
      out += to_str(join_attr ? attr_path(items[k], to_str(*join_attr)) : items[k]);
    }
    return Value::string(std::move(out));
  }
  return unimplemented("filter '" + std::string(name) + "'");
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) { return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests); }

StatusOr<Value> apply_filter(std::string_view name, const Value& v, const CallArgs& a) {
  auto method = [&](std::string_view m, const CallArgs& args) -> StatusOr<Value> {
    return find_method(Value::string(to_str(v)), m)->as_function().call(args);
  };
  if (name == "safe") return v.is_markup() ? v : Value::markup(to_str(v));
  if (name == "string") return Value::string(to_str(v));
  if (name == "tojson") return tojson(v, a);
  if (name == "trim") return method("strip", a);
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "replace") return method(name, a);
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "e" || name == "escape") return v.is_markup() ? v : Value::markup(html_escape(to_str(v)));
  if (name == "indent") {
    MT_ASSIGN_OR_RETURN(std::string s, indent(to_str(v), a));
    return Value::string(std::move(s));
  }
  if (name == "int") return to_int(v, a);
  if (name == "float") return to_float(v, a);
  if (name == "d" || name == "default") {
    const Value* def = a.get(0, "default_value");
    const bool boolean = flag(a, 1, "boolean");
    if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value::string("");
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.as_list().size()));
    if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.as_dict().size()));
    if (v.is_undefined()) return Value::integer(0);
    return invalid_argument(std::string("length of ") + kind_name(v.kind()));
  }
  if (name == "items" || name == "dictsort") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_mapping()) return invalid_argument(std::string(name) + " needs a dict, not " + kind_name(v.kind()));
    List out;
    for (const auto& [k, x] : v.as_dict().items()) out.push_back(Value::list({k, x}));
    if (name == "dictsort") {
      const bool case_sensitive = flag(a, 0, "case_sensitive");
      const Value* by = a.get(1, "by");
      const size_t part = by && by->is_string() && by->as_string() == "value" ? 1 : 0;
      MT_RETURN_IF_ERROR(sort_by(out, [&](const Value& x) { return lower_if_string(x.as_list()[part], case_sensitive); },
                                 flag(a, 2, "reverse")));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select", name);
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr", name);
  if (name == "map") return map(v, a);
  if (name == "attr") {
    const Value* attr = a.get(0, "name");
    return attr && attr->is_string() ? attr_path(v, attr->as_string()) : Value::undefined("");
  }
  if (name == "abs") {
    if (!v.is_number()) return invalid_argument(std::string("abs of ") + kind_name(v.kind()));
    if (v.kind() == Value::Kind::kFloat) return Value::number(std::fabs(v.as_float()));
    if (v.as_int() == INT64_MIN) return out_of_range("integer overflow");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "round") {
    if (!v.is_number()) return invalid_argument(std::string("round of ") + kind_name(v.kind()));
    const Value* p = a.get(0, "precision");
    const Value* m = a.get(1, "method");
    const double scale = std::pow(10.0, p && p->is_integer() ? static_cast<double>(p->as_int()) : 0.0);
    const std::string how = m && m->is_string() ? m->as_string() : "common";
    const double x = v.as_float() * scale;
    const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::number(r / scale);
  }
  return sequence_filter(name, v, a);
}

StatusOr<bool> apply_test(std::string_view name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  const Value* arg = a.get(0, "value");
  auto need_arg = [&]() -> Status {
    if (!arg) return invalid_argument("test '" + std::string(name) + "' needs an argument");
    return {};
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true" || name == "false") return v.kind() == K::kBool && v.as_bool() == (name == "true");
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == K::kDict;
  if (name == "iterable") return v.is_string() || v.is_list() || v.kind() == K::kDict || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.kind() == K::kDict || v.is_undefined();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.as_string()) {
      const auto u = static_cast<unsigned char>(c);
      if (name == "lower" ? std::isupper(u) : std::islower(u)) return false;
      cased = cased || std::isalpha(u);
    }
    return cased;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_integer()) return invalid_argument("test '" + std::string(name) + "' needs an integer");
    if (name == "divisibleby") {
      MT_RETURN_IF_ERROR(need_arg());
      if (!arg->is_integer() || arg->as_int() == 0) return invalid_argument("divisibleby needs a nonzero integer");
      return arg->as_int() == -1 || v.as_int() % arg->as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  MT_RETURN_IF_ERROR(need_arg());
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, *arg);
  if (name == "ne" || name == "!=") return !equals(v, *arg);
  if (name == "sameas") return v.kind() == arg->kind() && equals(v, *arg);
  if (name == "in") return contains(*arg, v);
  MT_ASSIGN_OR_RETURN(int c, compare(v, *arg));
  if (name == "lt" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == ">") return c > 0;
  return c >= 0;  // ge, >=
}

}  // namespace mt::jinja
