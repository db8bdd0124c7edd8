// Values of the chat-template interpreter: Python's data model cut down to what chat
// templates touch. A Value is undefined, none, bool, int, float, string, list, dict,
// namespace or function.
//
// Strings, lists and dicts are never mutated once built, so they are shared by pointer; a
// namespace is the one mutable object, shared so that `{% set ns.x = ... %}` inside a loop
// or macro is seen after it. Dicts keep insertion order, as Python's do. Strings are UTF-8
// bytes; lengths and indices of strings count code points, as Python's do. Conversions
// follow Python: str() for `{{ }}` output, repr() for items inside containers, and
// json.dumps (as transformers' `tojson` calls it) for tojson.
//
// A string can be markup (markupsafe's Markup, made by `|safe` and `|escape`): as in
// Python, `markup + str` HTML-escapes the plain operand. Nothing else treats it apart.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace mt::jinja {

class Value;
struct CallArgs;
struct Function;
using List = std::vector<Value>;

// Insertion-ordered map (the dicts of chat templates are small). Keys are mostly strings,
// but any value compares as Python's == does ({0: 0, 512: 128} occurs in real templates).
class Dict {
 public:
  const Value* find(std::string_view key) const;  // a string key
  const Value* find(const Value& key) const;
  void set(std::string key, Value v);  // replaces the value of an existing key in place
  void set(Value key, Value v);
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<Value, Value>> items_;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined

  static Value undefined(std::string name);  // the name is kept for error messages
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value markup(std::string s);
  static Value list(List items);
  static Value dict(Dict d);
  static Value ns(Dict d);
  static Value function(std::string name, std::function<StatusOr<Value>(const CallArgs&)> fn,
                        bool errors_have_position = false);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_integer() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }  // Python: bool is an int

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;   // bool or int
  double as_float() const;  // bool, int or float
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
  std::string undefined_name() const;  // the name an undefined value was looked up by, if known
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }  // dict or namespace
  Dict& namespace_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }

  bool truthy() const;  // Python's bool(): empty, zero, none and undefined are false

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  // Strings are shared too, so that copying a value (every variable read) costs no bytes.
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>, std::shared_ptr<const List>,
               std::shared_ptr<Dict>, std::shared_ptr<const Function>>
      data_;
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  // The argument at `index` if given positionally, else the one named `name`; nullptr if neither.
  const Value* get(size_t index, std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<StatusOr<Value>(const CallArgs&)> call;
  bool errors_have_position = false;  // macros: their errors already name a place in the template
};

const char* kind_name(Value::Kind k);

std::string to_str(const Value& v);   // Python str(): what `{{ v }}` prints
std::string to_repr(const Value& v);  // Python repr(): how items print inside a list or dict
std::string html_escape(std::string_view s);  // markupsafe.escape: & < > " '

struct JsonOptions {
  int indent = -1;  // < 0: one line
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson defaults to False
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
StatusOr<std::string> to_json(const Value& v, const JsonOptions& o);

bool equals(const Value& a, const Value& b);                 // Python ==
StatusOr<int> compare(const Value& a, const Value& b);       // Python <, as -1/0/1; error when unordered
enum class ArithOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
StatusOr<Value> arithmetic(ArithOp op, const Value& a, const Value& b);
// Python `item in container` for a string (substring), list, dict (key) or undefined (never).
StatusOr<bool> contains(const Value& container, const Value& item);

// Bytes of strings and container slots this thread has made as values, ever.
// A render sets a limit on it; the interpreter and the loops of the library check
// over_bytes_limit() so that a template cannot build data without bound, and no single
// operation builds a string or list of more than kMaxBuiltBytes.
uint64_t bytes_made();
uint64_t set_bytes_limit(uint64_t absolute);  // returns the previous limit
bool over_bytes_limit();
inline constexpr size_t kMaxBuiltBytes = size_t{1} << 26;
// Out of range when a result of `size` bytes would pass kMaxBuiltBytes or the render's limit.
Status check_built(size_t size);

// Namespaces made by this thread after `mark` (from namespaces_mark()) lose their
// contents, which breaks the cycles a template can make through them (`{% set ns.me = ns
// %}`) so that they are freed; a render calls this as it ends.
size_t namespaces_mark();
void clear_namespaces_since(size_t mark);

// Decodes the code point at s[i] and advances i; an invalid byte decodes as itself.
uint32_t utf8_next(std::string_view s, size_t& i);
// UTF-8: the byte offset of every code point, plus the end, so that s[i] is
// s.substr(at[i], at[i + 1] - at[i]). Invalid bytes count as one code point each.
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);

// What `for x in v` walks: a list's items, a dict's keys, a string's characters, nothing
// for undefined; nullopt when v is not iterable (the caller names the error).
std::optional<List> iteration_items(const Value& v);

}  // namespace mt::jinja
