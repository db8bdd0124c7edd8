// The library of the chat-template interpreter: filters (`x|trim`), tests (`x is string`),
// methods of strings and dicts (`s.strip()`, `d.items()`), and the global functions a
// render starts with (range, namespace, dict, raise_exception, strftime_now).
//
// These are Python/Jinja semantics as transformers runs them (its `tojson` is json.dumps
// with ensure_ascii=False). Text case and whitespace functions know ASCII only. Errors
// returned here carry no position; the interpreter adds the line:column of the call.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "runtime/jinja_value.h"

namespace mt::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

StatusOr<Value> apply_filter(std::string_view name, const Value& v, const CallArgs& args);
StatusOr<bool> apply_test(std::string_view name, const Value& v, const CallArgs& args);

// `obj.name` when it names a method of a string or dict: the method bound to obj.
std::optional<Value> find_method(const Value& obj, std::string_view name);

// The global functions. strftime_now formats `date` ("YYYY-MM-DD", optionally followed by
// "THH:MM:SS") when it is not empty, else the local time now.
void add_global_functions(Dict& globals, const std::string& date);

// The prefix of a Status from raise_exception (the template's own error message follows).
inline constexpr std::string_view kRaisedPrefix = "raise_exception: ";

}  // namespace mt::jinja
