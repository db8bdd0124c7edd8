// Typed metadata getters of GgufFile.
#include <cmath>
#include <limits>

#include "gguf/reader.h"

namespace mt::gguf {
namespace {

Status wrong_type(std::string_view key, ValueType actual, const char* expected) {
  return invalid_argument("metadata key '" + std::string(key) + "' has type " + value_type_name(actual) +
                          ", expected " + expected);
}

Status missing(std::string_view key) {
  return not_found("metadata key '" + std::string(key) + "' is missing");
}

}  // namespace

const Value* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

StatusOr<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const auto* u = std::get_if<uint64_t>(&v->data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v->data)) {
    if (*i < 0) {
      return invalid_argument("metadata key '" + std::string(key) + "' is negative (" + std::to_string(*i) +
                              "), expected an unsigned value");
    }
    return static_cast<uint64_t>(*i);
  }
  return wrong_type(key, v->type, "an integer");
}

StatusOr<uint32_t> GgufFile::get_u32(std::string_view key) const {
  MT_ASSIGN_OR_RETURN(uint64_t u, get_uint(key));
  if (u > std::numeric_limits<uint32_t>::max()) {
    return invalid_argument("metadata key '" + std::string(key) + "' = " + std::to_string(u) + " does not fit in u32");
  }
  return static_cast<uint32_t>(u);
}

StatusOr<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const auto* i = std::get_if<int64_t>(&v->data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v->data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("metadata key '" + std::string(key) + "' does not fit in i64");
    }
    return static_cast<int64_t>(*u);
  }
  return wrong_type(key, v->type, "an integer");
}

StatusOr<float> GgufFile::get_f32(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const auto* f = std::get_if<double>(&v->data)) {
    if (std::isfinite(*f) && std::fabs(*f) > static_cast<double>(std::numeric_limits<float>::max())) {
      return invalid_argument("metadata key '" + std::string(key) + "' = " + std::to_string(*f) +
                              " does not fit in f32");
    }
    return static_cast<float>(*f);
  }
  return wrong_type(key, v->type, "f32");
}

StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  return wrong_type(key, v->type, "bool");
}

StatusOr<std::string_view> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const auto* s = std::get_if<std::string_view>(&v->data)) return *s;
  return wrong_type(key, v->type, "string");
}

StatusOr<const Array*> GgufFile::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const Array* a = v->array()) return a;
  return wrong_type(key, v->type, "array");
}

StatusOr<uint32_t> GgufFile::get_u32_or(std::string_view key, uint32_t fallback) const {
  if (find(key) == nullptr) return fallback;
  return get_u32(key);
}

StatusOr<float> GgufFile::get_f32_or(std::string_view key, float fallback) const {
  if (find(key) == nullptr) return fallback;
  return get_f32(key);
}

StatusOr<bool> GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  if (find(key) == nullptr) return fallback;
  return get_bool(key);
}

}  // namespace mt::gguf
