// How values print: Python's str() and repr(), and json.dumps as transformers calls it
// (see runtime/jinja_value.h).
#include "runtime/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace mt::jinja {

namespace {

constexpr size_t kMaxNesting = 128;  // repr/json of deeper structures

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);  // shortest round trip
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  int exp10 = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int n = static_cast<int>(digits.size());
  const int point = exp10 + 1;  // the value is 0.<digits> * 10^point
  if (point > -4 && point <= 16) {  // Python's repr switches to an exponent outside 1e-4 .. 1e16
    if (point <= 0) return sign + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    if (point >= n) return sign + digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
  }
  std::string out = sign + digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  std::string ex = std::to_string(std::abs(exp10));
  if (ex.size() < 2) ex = "0" + ex;
  return out + (exp10 < 0 ? "e-" : "e+") + ex;
}

// Decodes one code point at s[i], advancing i; invalid bytes decode as themselves.
std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + quote;
}

// Appends repr(v). A container already on the path prints as "..." (a namespace can hold
// itself), and expansion stops once the text passes kMaxBuiltBytes (shared sublists can make a
// small value print exponentially large).
void repr_into(const Value& v, std::vector<const void*>& path, std::string& out) {
  if (out.size() > kMaxBuiltBytes) return;
  if (v.is_string()) {
    out += string_repr(v.as_string());
    return;
  }
  if (!v.is_list() && !v.is_mapping()) {
    out += v.is_undefined() ? "Undefined" : to_str(v);
    return;
  }
  const void* id = v.is_list() ? static_cast<const void*>(&v.as_list()) : static_cast<const void*>(&v.as_dict());
  if (std::find(path.begin(), path.end(), id) != path.end() || path.size() > kMaxNesting) {
    out += "...";
    return;
  }
  path.push_back(id);
  if (v.is_list()) {
    out += '[';
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      if (i) out += ", ";
      repr_into(v.as_list()[i], path, out);
    }
    out += ']';
  } else {
    const bool ns = v.kind() == Value::Kind::kNamespace;
    out += ns ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, item] : v.as_dict().items()) {
      if (!first) out += ", ";
      first = false;
      repr_into(k, path, out);
      out += ": ";
      repr_into(item, path, out);
    }
    out += ns ? "}>" : "}";
  }
  path.pop_back();
}

std::string repr(const Value& v) {
  std::vector<const void*> path;
  std::string out;
  repr_into(v, path, out);
  return out;
}

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  static const char* hex = "0123456789abcdef";
  auto u16 = [&](uint32_t u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(u >> shift) & 15];
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || (ensure_ascii && u == 0x7F)) {
      u16(u);
      ++i;
    } else if (u < 0x80 || !ensure_ascii) {
      out += c;
      ++i;
    } else {
      const uint32_t cp = utf8_next(s, i);
      if (cp >= 0x10000) {
        u16(0xD800 + ((cp - 0x10000) >> 10));
        u16(0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        u16(cp);
      }
    }
  }
  out += '"';
}

Status json_at(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  if (static_cast<size_t>(depth) > kMaxNesting) return invalid_argument("tojson: nesting too deep");
  if (out.size() > kMaxBuiltBytes) return out_of_range("tojson: result too large");
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(o.indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return {};
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return {};
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return {};
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return {};
    }
    case Value::Kind::kString: json_string(v.as_string(), o.ensure_ascii, out); return {};
    case Value::Kind::kList: {
      const List& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return {};
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        MT_RETURN_IF_ERROR(json_at(l[i], o, depth + 1, out));
      }
      newline(depth);
      out += ']';
      return {};
    }
    case Value::Kind::kDict: {
      // Keys become strings as json.dumps makes them: 1 -> "1", True -> "true", None -> "null".
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, item] : v.as_dict().items()) {
        if (k.is_string()) {
          items.emplace_back(k.as_string(), &item);
        } else if (k.is_number() || k.is_none()) {
          std::string key;
          MT_RETURN_IF_ERROR(json_at(k, o, depth + 1, key));
          items.emplace_back(std::move(key), &item);
        } else {
          return invalid_argument(std::string("tojson: dict keys must be strings or numbers, not ") + kind_name(k.kind()));
        }
      }
      if (items.empty()) {
        out += "{}";
        return {};
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        json_string(items[i].first, o.ensure_ascii, out);
        out += o.key_separator;
        MT_RETURN_IF_ERROR(json_at(*items[i].second, o, depth + 1, out));
      }
      newline(depth);
      out += '}';
      return {};
    }
    default: return invalid_argument(std::string("tojson: a value of type ") + kind_name(v.kind()) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return float_repr(v.as_float());
    case Value::Kind::kString: return v.as_string();
    case Value::Kind::kFunction: return "<function " + v.as_function().name + ">";
    default: return repr(v);
  }
}

std::string to_repr(const Value& v) { return repr(v); }

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

StatusOr<std::string> to_json(const Value& v, const JsonOptions& o) {
  std::string out;
  MT_RETURN_IF_ERROR(json_at(v, o, 0, out));
  return out;
}

}  // namespace mt::jinja
