#include "runtime/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace mt::jinja {

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (len == 1 || i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return b;
  }
  uint32_t cp = b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((c & 0xC0) != 0x80) {
      ++i;
      return b;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

namespace {

thread_local uint64_t t_bytes_made = 0;
thread_local uint64_t t_bytes_limit = UINT64_MAX;
thread_local std::vector<std::weak_ptr<Dict>> t_namespaces;

// Python's // on integers; b != 0 and not (a == INT64_MIN && b == -1).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

StatusOr<Value> int_result(bool overflow, int64_t r) {
  if (overflow) return out_of_range("integer overflow");
  return Value::integer(r);
}

StatusOr<Value> int_pow(int64_t base, int64_t exp) {
  int64_t r = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) return out_of_range("integer overflow");
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return out_of_range("integer overflow");
  }
  return Value::integer(r);
}

Status type_error(const char* op, const Value& a, const Value& b) {
  return invalid_argument(std::string("unsupported operand types for ") + op + ": " + kind_name(a.kind()) + " and " +
                          kind_name(b.kind()));
}

StatusOr<Value> repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({});
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size() * sizeof(Value);
  if (unit != 0 && static_cast<uint64_t>(n) > kMaxBuiltBytes / unit) return out_of_range("repetition result too large");
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out));
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items_) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value v) { set(Value::string(std::move(key)), std::move(v)); }

void Dict::set(Value key, Value v) {
  for (auto& [k, old] : items_) {
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(v));
}

std::string Value::undefined_name() const {
  const auto* s = std::get_if<std::shared_ptr<const std::string>>(&data_);
  return kind_ == Kind::kUndefined && s ? **s : std::string();
}

uint64_t bytes_made() { return t_bytes_made; }

uint64_t set_bytes_limit(uint64_t absolute) { return std::exchange(t_bytes_limit, absolute); }

bool over_bytes_limit() { return t_bytes_made > t_bytes_limit; }

Status check_built(size_t size) {
  if (size > kMaxBuiltBytes || over_bytes_limit()) return out_of_range("result too large");
  return {};
}

Value Value::undefined(std::string name) {
  Value v;
  v.data_ = std::shared_ptr<const std::string>(std::make_shared<std::string>(std::move(name)));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  t_bytes_made += s.size() + sizeof(Value);
  v.data_ = std::shared_ptr<const std::string>(std::make_shared<std::string>(std::move(s)));
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  t_bytes_made += items.size() * sizeof(Value);
  v.data_ = std::shared_ptr<const List>(std::make_shared<List>(std::move(items)));
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  t_bytes_made += d.size() * 2 * sizeof(Value);
  v.data_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::ns(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::kNamespace;
  t_namespaces.push_back(std::get<std::shared_ptr<Dict>>(v.data_));
  return v;
}

size_t namespaces_mark() { return t_namespaces.size(); }

void clear_namespaces_since(size_t mark) {
  for (size_t k = mark; k < t_namespaces.size(); ++k) {
    if (auto d = t_namespaces[k].lock()) *d = Dict();
  }
  t_namespaces.resize(std::min(mark, t_namespaces.size()));
}
Value Value::function(std::string name, std::function<StatusOr<Value>(const CallArgs&)> fn, bool errors_have_position) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.data_ = std::shared_ptr<const Function>(
      std::make_shared<Function>(Function{std::move(name), std::move(fn), errors_have_position}));
  return v;
}

int64_t Value::as_int() const { return kind_ == Kind::kBool ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }

double Value::as_float() const { return kind_ == Kind::kFloat ? std::get<double>(data_) : static_cast<double>(as_int()); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return as_dict().size() != 0;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : named) {
    if (k == name) return &v;
  }
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict().items()) {
        const Value* other = b.as_dict().find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.as_dict() == &b.as_dict();
    case Value::Kind::kFunction: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

StatusOr<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return invalid_argument(std::string("cannot order ") + kind_name(a.kind()) + " and " + kind_name(b.kind()));
}

StatusOr<Value> arithmetic(ArithOp op, const Value& a, const Value& b) {
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) return invalid_argument("'" + v->undefined_name() + "' is undefined");
  }
  const bool ints = a.is_integer() && b.is_integer();
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case ArithOp::kAdd:
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
        return int_result(overflow, r);
      }
      if (nums) return Value::number(a.as_float() + b.as_float());
      if ((a.is_string() && b.is_string()) || (a.is_list() && b.is_list())) {
        const size_t n = a.is_string() ? a.as_string().size() + b.as_string().size()
                                       : (a.as_list().size() + b.as_list().size()) * sizeof(Value);
        if (n > kMaxBuiltBytes) return out_of_range("concatenation result too large");
      }
      if (a.is_string() && b.is_string()) {
        if (!a.is_markup() && !b.is_markup()) return Value::string(a.as_string() + b.as_string());
        auto safe = [](const Value& v) { return v.is_markup() ? v.as_string() : html_escape(v.as_string()); };
        return Value::markup(safe(a) + safe(b));
      }
      if (a.is_list() && b.is_list()) {
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(out));
      }
      return type_error("+", a, b);
    case ArithOp::kSub:
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
        return int_result(overflow, r);
      }
      if (nums) return Value::number(a.as_float() - b.as_float());
      return type_error("-", a, b);
    case ArithOp::kMul:
      if (ints) {
        int64_t r = 0;
        const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
        return int_result(overflow, r);
      }
      if (nums) return Value::number(a.as_float() * b.as_float());
      if ((a.is_string() || a.is_list()) && b.is_integer()) return repeat(a, b.as_int());
      if (a.is_integer() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
      return type_error("*", a, b);
    case ArithOp::kDiv:
      if (!nums) return type_error("/", a, b);
      if (b.as_float() == 0.0) return invalid_argument("division by zero");
      return Value::number(a.as_float() / b.as_float());
    case ArithOp::kFloorDiv:
      if (!nums) return type_error("//", a, b);
      if (b.as_float() == 0.0) return invalid_argument("division by zero");
      if (ints) {
        if (a.as_int() == INT64_MIN && b.as_int() == -1) return out_of_range("integer overflow");
        return Value::integer(floor_div(a.as_int(), b.as_int()));
      }
      return Value::number(std::floor(a.as_float() / b.as_float()));
    case ArithOp::kMod:
      if (!nums) return type_error("%", a, b);
      if (b.as_float() == 0.0) return invalid_argument("modulo by zero");
      if (ints) {
        if (b.as_int() == -1) return Value::integer(0);
        return Value::integer(a.as_int() - floor_div(a.as_int(), b.as_int()) * b.as_int());
      }
      {
        double r = std::fmod(a.as_float(), b.as_float());
        if (r != 0.0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
        return Value::number(r);
      }
    case ArithOp::kPow:
      if (!nums) return type_error("**", a, b);
      if (ints && b.as_int() >= 0) return int_pow(a.as_int(), b.as_int());
      return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  return type_error("?", a, b);
}

StatusOr<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) return invalid_argument(std::string("'in <string>' needs a string, not ") + kind_name(item.kind()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return container.as_dict().find(item) != nullptr;
    case Value::Kind::kUndefined: return false;
    default: return invalid_argument(std::string("'in' needs a string, list or dict, not ") + kind_name(container.kind()));
  }
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> at;
  at.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    at.push_back(i);
    utf8_next(s, i);
  }
  at.push_back(s.size());
  return at;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8_next(s, i);
  return n;
}

std::optional<List> iteration_items(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return List{};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, unused] : v.as_dict().items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const auto at = utf8_offsets(v.as_string());
      for (size_t k = 0; k + 1 < at.size(); ++k) chars.push_back(Value::string(v.as_string().substr(at[k], at[k + 1] - at[k])));
      return chars;
    }
    default: return std::nullopt;
  }
}

}  // namespace mt::jinja
