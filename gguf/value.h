// GGUF metadata values: the 13 value types and a value that views file bytes.
//
// A Value read from a file points into the file's memory map (strings and raw arrays
// are views, never copies), so it lives as long as the GgufFile it came from. Arrays of
// scalars keep their packed little-endian bytes; arrays of strings keep one view per
// element; nested arrays keep their child values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace mt::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
constexpr uint32_t kValueTypeCount = 13;

const char* value_type_name(ValueType type);
// Bytes of one scalar of this type; 0 for string and array (variable size).
uint32_t scalar_size(ValueType type);
bool is_integer(ValueType type);

struct Value;

struct Array {
  ValueType elem_type = ValueType::kU8;
  uint64_t count = 0;
  std::span<const uint8_t> raw;            // scalar elements: count * scalar_size bytes
  std::vector<std::string_view> strings;   // elem_type == kString
  std::vector<Value> arrays;               // elem_type == kArray (nested)

  // Scalar element i as a number (checked by the caller: i < count, scalar type).
  int64_t int_at(uint64_t i) const;
  uint64_t uint_at(uint64_t i) const;
  double float_at(uint64_t i) const;
};

struct Value {
  ValueType type = ValueType::kU8;
  // Scalars: integers in u (unsigned types) or i (signed), floats in f, bool in b.
  std::variant<uint64_t, int64_t, double, bool, std::string_view, Array> data;

  static Value u32(uint32_t v) { return {ValueType::kU32, uint64_t{v}}; }
  static Value i32(int32_t v) { return {ValueType::kI32, int64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::kU64, v}; }
  static Value f32(float v) { return {ValueType::kF32, double{v}}; }
  static Value boolean(bool v) { return {ValueType::kBool, v}; }
  // The string must outlive the Value (the writer copies into its own storage).
  static Value string(std::string_view v) { return {ValueType::kString, v}; }

  const Array* array() const { return std::get_if<Array>(&data); }
  // A short human rendering: scalars in full, strings quoted and cut, arrays summarised
  // as "[string x 151936: "!", "\"", ...]".
  std::string summary(size_t max_chars = 80) const;
};

}  // namespace mt::gguf
