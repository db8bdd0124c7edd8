// GgufFile: a memory-mapped GGUF v2/v3 file that trusts nothing in it.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count metadata pairs, tensor_count tensor infos, zero padding to `general.alignment`
// (default 32), then the data section; tensor i lives at data_start + offset_i.
//
// Invariant after a successful open(): every count, length, dim product, offset and size
// has been checked against the file size with overflow-safe arithmetic; every tensor's
// bytes lie inside the data section, aligned, not overlapping another tensor; keys and
// tensor names are unique. Any violation is a Status naming the field and its byte offset.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "gguf/value.h"
#include "quant/types.h"

namespace mt::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr size_t kMaxTensorName = 63;    // ggml's limit (GGML_MAX_NAME - 1)
constexpr uint32_t kMaxArrayDepth = 8;   // nesting bound for arrays of arrays

struct TensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  std::array<uint64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is contiguous
  QuantType type = QuantType::F32;
  uint64_t offset = 0;   // relative to the data section
  uint64_t nbytes = 0;
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes of one ne[0] row, and of one ne[0] x ne[1] matrix (one expert of a 3-D
  // `*_exps` tensor).
  uint64_t row_bytes() const;
  uint64_t matrix_bytes() const { return row_bytes() * ne[1]; }
};

struct KeyValue {
  std::string_view key;
  Value value;
};

class GgufFile {
 public:
  // Opens and validates a file.
  static StatusOr<GgufFile> open(const std::string& path);
  // Validates bytes already in memory (tests, fuzzing); `bytes` must outlive the result.
  static StatusOr<GgufFile> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& name() const { return name_; }

  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const Value* find(std::string_view key) const;

  // Typed getters: NotFound if the key is missing, InvalidArgument naming the actual and
  // expected types otherwise. Integer getters accept any integer width whose value fits.
  StatusOr<uint64_t> get_uint(std::string_view key) const;
  StatusOr<uint32_t> get_u32(std::string_view key) const;
  StatusOr<int64_t> get_int(std::string_view key) const;
  StatusOr<float> get_f32(std::string_view key) const;
  StatusOr<bool> get_bool(std::string_view key) const;
  StatusOr<std::string_view> get_string(std::string_view key) const;
  StatusOr<const Array*> get_array(std::string_view key) const;
  // Like the above but `fallback` when the key is absent (a wrong type is still an error).
  StatusOr<uint32_t> get_u32_or(std::string_view key, uint32_t fallback) const;
  StatusOr<float> get_f32_or(std::string_view key, float fallback) const;
  StatusOr<bool> get_bool_or(std::string_view key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // The tensor's bytes inside the map (validated at open).
  std::span<const uint8_t> tensor_data(const TensorInfo& t) const;

 private:
  friend class Parser;
  MappedFile file_;                 // empty when parsed from memory
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::map<std::string_view, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string_view, size_t, std::less<>> tensor_index_;
};

}  // namespace mt::gguf
