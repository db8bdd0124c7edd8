// Methods of strings and dicts, and the global functions (see runtime/jinja_builtins.h).
#include <time.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "runtime/jinja_builtins.h"

namespace mt::jinja {

namespace {

constexpr int64_t kMaxRange = int64_t{1} << 20;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
char upper(char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); }
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// The string argument `index`/`name`, or `fallback` when absent or none.
StatusOr<std::string> str_arg(const CallArgs& a, size_t index, std::string_view name, std::string fallback, bool* given = nullptr) {
  const Value* v = a.get(index, name);
  if (given) *given = v && !v->is_none();
  if (!v || v->is_none()) return fallback;
  if (!v->is_string()) return invalid_argument(std::string(name) + " must be a string, not " + kind_name(v->kind()));
  return v->as_string();
}

StatusOr<int64_t> int_arg(const CallArgs& a, size_t index, std::string_view name, int64_t fallback) {
  const Value* v = a.get(index, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_integer()) return invalid_argument(std::string(name) + " must be an integer, not " + kind_name(v->kind()));
  return v->as_int();
}

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto drop = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_ws(c); };
  size_t b = 0;
  size_t e = s.size();
  while (left && b < e && drop(s[b])) ++b;
  while (right && e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

StatusOr<Value> split(const std::string& s, const CallArgs& a) {
  bool has_sep = false;
  MT_ASSIGN_OR_RETURN(std::string sep, str_arg(a, 0, "sep", "", &has_sep));
  MT_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(a, 1, "maxsplit", -1));
  List parts;
  if (has_sep) {
    if (sep.empty()) return invalid_argument("split: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t k = s.find(sep, start);
      if (k == std::string::npos) break;
      parts.push_back(Value::string(s.substr(start, k - start)));
      start = k + sep.size();
    }
    parts.push_back(Value::string(s.substr(start)));
    return Value::list(std::move(parts));
  }
  size_t i = 0;
  for (;;) {
    while (i < s.size() && is_ws(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(Value::string(strip(s.substr(i), nullptr, false, true)));
      break;
    }
    size_t j = i;
    while (j < s.size() && !is_ws(s[j])) ++j;
    parts.push_back(Value::string(s.substr(i, j - i)));
    i = j;
  }
  return Value::list(std::move(parts));
}

StatusOr<Value> replace(const std::string& s, const CallArgs& a) {
  MT_ASSIGN_OR_RETURN(std::string from, str_arg(a, 0, "old", ""));
  MT_ASSIGN_OR_RETURN(std::string to, str_arg(a, 1, "new", ""));
  MT_ASSIGN_OR_RETURN(int64_t count, int_arg(a, 2, "count", -1));
  std::string out;
  if (from.empty()) {  // Python puts `to` around every code point
    const auto at = utf8_offsets(s);
    for (size_t k = 0; k + 1 < at.size(); ++k) {
      MT_RETURN_IF_ERROR(check_built(out.size()));
      if (count < 0 || static_cast<int64_t>(k) < count) out += to;
      out += s.substr(at[k], at[k + 1] - at[k]);
    }
    if (count < 0 || static_cast<int64_t>(at.size()) - 1 < count) out += to;
    return Value::string(std::move(out));
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t k = s.find(from, start);
    if (k == std::string::npos) break;
    MT_RETURN_IF_ERROR(check_built(out.size()));
    out += s.substr(start, k - start) + to;
    start = k + from.size();
  }
  return Value::string(out + s.substr(start));
}

StatusOr<bool> affix_matches(const std::string& s, const Value* affix, bool prefix) {
  if (!affix) return invalid_argument(prefix ? "startswith needs an argument" : "endswith needs an argument");
  List options = affix->is_list() ? affix->as_list() : List{*affix};
  for (const Value& o : options) {
    if (!o.is_string()) return invalid_argument(std::string("affix must be a string, not ") + kind_name(o.kind()));
    const std::string& x = o.as_string();
    if (x.size() <= s.size() && s.compare(prefix ? 0 : s.size() - x.size(), x.size(), x) == 0) return true;
  }
  return false;
}

std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = prev_cased ? lower(c) : upper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

// "{} {0} {name}".format(...); format specs are not supported.
StatusOr<Value> format(const std::string& s, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) return invalid_argument("format: unmatched '{'");
    const std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) return unimplemented("format: field specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = a.get(auto_index++, "");
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      v = field.size() < 9 ? a.get(static_cast<size_t>(std::stoul(field)), "") : nullptr;
    } else {
      v = a.get(a.positional.size(), field);
    }
    if (!v) return invalid_argument("format: no argument for {" + field + "}");
    out += to_str(*v);
    MT_RETURN_IF_ERROR(check_built(out.size()));
    i = close;
  }
  return Value::string(std::move(out));
}

StatusOr<Value> string_method(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool given = false;
    MT_ASSIGN_OR_RETURN(std::string chars, str_arg(a, 0, "chars", "", &given));
    return Value::string(strip(s, given ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") return split(s, a);
  if (name == "replace") return replace(s, a);
  if (name == "startswith" || name == "endswith") {
    MT_ASSIGN_OR_RETURN(bool m, affix_matches(s, a.get(0, name == "startswith" ? "prefix" : "suffix"), name == "startswith"));
    return Value::boolean(m);
  }
  std::string out = s;
  if (name == "upper" || name == "lower") {
    for (char& c : out) c = name == "upper" ? upper(c) : lower(c);
    return Value::string(std::move(out));
  }
  if (name == "title") return Value::string(python_title(s));
  if (name == "capitalize") {
    for (size_t k = 0; k < out.size(); ++k) out[k] = k == 0 ? upper(out[k]) : lower(out[k]);
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "count") {
    MT_ASSIGN_OR_RETURN(std::string sub, str_arg(a, 0, "sub", ""));
    if (name == "find") {
      const size_t k = s.find(sub);
      return Value::integer(k == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(s.substr(0, k))));
    }
    if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
    int64_t n = 0;
    for (size_t k = s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items || !items->is_list()) return invalid_argument("join needs a list");
    out.clear();
    for (size_t k = 0; k < items->as_list().size(); ++k) {
      const Value& item = items->as_list()[k];
      if (!item.is_string()) return invalid_argument(std::string("join: item is ") + kind_name(item.kind()) + ", not string");
      MT_RETURN_IF_ERROR(check_built(out.size()));
      if (k) out += s;
      out += item.as_string();
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") {
    List lines;
    size_t start = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\n' || s[k] == '\r') {
        lines.push_back(Value::string(s.substr(start, k - start)));
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
        start = k + 1;
      }
    }
    if (start < s.size()) lines.push_back(Value::string(s.substr(start)));
    return Value::list(std::move(lines));
  }
  if (name == "format") return format(s, a);
  if (name == "isdigit" || name == "isalpha" || name == "isspace") {
    bool all = !s.empty();
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      all = all && (name == "isdigit" ? std::isdigit(u) != 0 : name == "isalpha" ? std::isalpha(u) != 0 : is_ws(c));
    }
    return Value::boolean(all);
  }
  return invalid_argument("string has no method '" + std::string(name) + "'");
}

bool is_string_method(std::string_view name) {
  static const char* kNames[] = {"strip", "lstrip", "rstrip", "split", "replace", "startswith", "endswith",
                                 "upper", "lower", "title", "capitalize", "find", "count", "join",
                                 "splitlines", "format", "isdigit", "isalpha", "isspace"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

StatusOr<Value> dict_method(const Dict& d, std::string_view name, const CallArgs& a) {
  if (name == "get") {
    const Value* key = a.get(0, "key");
    if (!key) return invalid_argument("get needs a key");
    const Value* v = d.find(*key);
    if (v) return *v;
    const Value* fallback = a.get(1, "default");
    return fallback ? *fallback : Value::none();
  }
  List out;
  for (const auto& [k, v] : d.items()) {
    if (name == "items") out.push_back(Value::list({k, v}));
    if (name == "keys") out.push_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::list(std::move(out));
}

StatusOr<Value> range(const CallArgs& a) {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  for (const Value& v : a.positional) {
    if (!v.is_integer()) return invalid_argument("range needs integers");
  }
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  } else {
    return invalid_argument("range takes 1 to 3 integers");
  }
  if (step == 0) return invalid_argument("range step cannot be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) return out_of_range("range too long");
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::list(std::move(out));
}

StatusOr<Value> strftime_now(const std::string& date, const CallArgs& a) {
  MT_ASSIGN_OR_RETURN(std::string fmt, str_arg(a, 0, "format", ""));
  std::tm tm{};
  if (date.empty()) {
    const std::time_t now = std::time(nullptr);
    localtime_r(&now, &tm);
  } else {
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    const int n = std::sscanf(date.c_str(), "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
    if (n != 3 && n != 6) return invalid_argument("date '" + date + "' is not YYYY-MM-DD[THH:MM:SS]");
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    const std::time_t t = timegm(&tm);  // fills in the weekday and day of the year
    gmtime_r(&t, &tm);
  }
  if (fmt.empty()) return Value::string("");
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  if (n == 0) return invalid_argument("strftime_now: format '" + fmt + "' gives nothing or too much");
  return Value::string(std::string(buf, n));
}

Dict kwargs_dict(const CallArgs& a) {
  Dict d;
  for (const Value& v : a.positional) {
    if (v.kind() != Value::Kind::kDict) continue;
    for (const auto& [k, item] : v.as_dict().items()) d.set(k, item);
  }
  for (const auto& [k, v] : a.named) d.set(k, v);
  return d;
}

}  // namespace

std::optional<Value> find_method(const Value& obj, std::string_view name) {
  if (obj.is_string() && is_string_method(name)) {
    return Value::function(std::string(name), [s = obj.as_string(), n = std::string(name)](const CallArgs& a) {
      return string_method(s, n, a);
    });
  }
  if (obj.kind() == Value::Kind::kDict && (name == "get" || name == "items" || name == "keys" || name == "values")) {
    return Value::function(std::string(name), [obj, n = std::string(name)](const CallArgs& a) {
      return dict_method(obj.as_dict(), n, a);
    });
  }
  return std::nullopt;
}

void add_global_functions(Dict& globals, const std::string& date) {
  globals.set("range", Value::function("range", range));
  globals.set("namespace", Value::function("namespace", [](const CallArgs& a) -> StatusOr<Value> {
                return Value::ns(kwargs_dict(a));
              }));
  globals.set("dict", Value::function("dict", [](const CallArgs& a) -> StatusOr<Value> { return Value::dict(kwargs_dict(a)); }));
  globals.set("raise_exception", Value::function("raise_exception", [](const CallArgs& a) -> StatusOr<Value> {
                const Value* msg = a.get(0, "message");
                return invalid_argument(std::string(kRaisedPrefix) + (msg ? to_str(*msg) : std::string()));
              }));
  globals.set("strftime_now", Value::function("strftime_now", [date](const CallArgs& a) { return strftime_now(date, a); }));
}

}  // namespace mt::jinja
