#include "gguf/value.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace mt::gguf {

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "invalid";
}

uint32_t scalar_size(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

bool is_integer(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64: return true;
    default: return false;
  }
}

namespace {
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

int64_t Array::int_at(uint64_t i) const {
  MT_CHECK(i < count && is_integer(elem_type));
  const uint8_t* p = raw.data() + i * scalar_size(elem_type);
  switch (elem_type) {
    case ValueType::kU8: return load<uint8_t>(p);
    case ValueType::kI8: return load<int8_t>(p);
    case ValueType::kU16: return load<uint16_t>(p);
    case ValueType::kI16: return load<int16_t>(p);
    case ValueType::kU32: return load<uint32_t>(p);
    case ValueType::kI32: return load<int32_t>(p);
    case ValueType::kU64: return static_cast<int64_t>(load<uint64_t>(p));
    case ValueType::kI64: return load<int64_t>(p);
    default: return 0;
  }
}

uint64_t Array::uint_at(uint64_t i) const { return static_cast<uint64_t>(int_at(i)); }

double Array::float_at(uint64_t i) const {
  MT_CHECK(i < count);
  const uint8_t* p = raw.data() + i * scalar_size(elem_type);
  if (elem_type == ValueType::kF32) return load<float>(p);
  if (elem_type == ValueType::kF64) return load<double>(p);
  return static_cast<double>(int_at(i));
}

namespace {

std::string quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  // Cut at a UTF-8 character boundary (never before a continuation byte).
  size_t cut = std::min(max_chars, s.size());
  while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  for (char c : s.substr(0, cut)) {
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else if (static_cast<unsigned char>(c) < 0x20) out += '?';
    else out += c;
  }
  if (cut < s.size()) out += "...";
  return out + "\"";
}

std::string scalar_string(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return std::to_string(*i);
  if (const auto* f = std::get_if<double>(&v.data)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *f);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&v.data)) return *b ? "true" : "false";
  return "?";
}

}  // namespace

std::string Value::summary(size_t max_chars) const {
  if (const auto* s = std::get_if<std::string_view>(&data)) return quote(*s, max_chars);
  const Array* a = array();
  if (a == nullptr) return scalar_string(*this);
  std::string out = "[" + std::string(value_type_name(a->elem_type)) + " x " + std::to_string(a->count);
  const uint64_t shown = a->count < 4 ? a->count : 4;
  for (uint64_t i = 0; i < shown; ++i) {
    out += i == 0 ? ": " : ", ";
    if (a->elem_type == ValueType::kString) out += quote(a->strings[i], 16);
    else if (a->elem_type == ValueType::kArray) out += a->arrays[i].summary(16);
    else if (a->elem_type == ValueType::kF32 || a->elem_type == ValueType::kF64) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", a->float_at(i));
      out += buf;
    } else if (a->elem_type == ValueType::kBool) out += a->raw[i] ? "true" : "false";
    else out += std::to_string(a->int_at(i));
  }
  if (shown < a->count) out += ", ...";
  return out + "]";
}

}  // namespace mt::gguf
