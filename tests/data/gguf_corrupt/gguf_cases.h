// The corrupt-GGUF corpus as code: a byte builder and a table of named malformed files,
// each paired with the StatusCode and message fragments the reader must answer with.
//
// Generated, not checked in: every case is a few dozen bytes built field by field, so
// the intent of each one is readable here and a reader change cannot silently turn a
// binary blob into a different test. The unit test (tests/unit/gguf_corrupt_test.cpp)
// parses every case in memory; tests/fuzz/make_corpus.cpp writes them to a folder as
// seeds for the fuzzer. Header-only so both can include it.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/value.h"

namespace mt::gguf::testcases {

// Appends little-endian fields; nothing is validated, so any malformation can be built.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u16(uint16_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& i32(int32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& f32(float v) { return put(v); }
  Bytes& f64(double v) { return put(v); }
  Bytes& raw(std::string_view s) { return append(s.data(), s.size()); }
  Bytes& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  Bytes& pad_to(uint64_t align) {
    const uint64_t rem = bytes_.size() % align;
    return zeros(rem == 0 ? 0 : align - rem);
  }
  // A GGUF string: u64 length, then the bytes.
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }

  // GGUF pieces.
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // Key and value type; the caller appends the payload.
  Bytes& key(std::string_view k, ValueType type) { return str(k).u32(static_cast<uint32_t>(type)); }
  Bytes& kv_u32(std::string_view k, uint32_t v) { return key(k, ValueType::kU32).u32(v); }
  Bytes& kv_string(std::string_view k, std::string_view v) { return key(k, ValueType::kString).str(v); }
  // Array header: element type and count; the caller appends the elements.
  Bytes& array_of(ValueType elem, uint64_t count) {
    return u32(static_cast<uint32_t>(elem)).u64(count);
  }
  Bytes& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }

  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> prefix(size_t n) const { return {bytes_.begin(), bytes_.begin() + static_cast<long>(n)}; }

 private:
  template <typename T>
  Bytes& put(T v) { return append(&v, sizeof(T)); }
  // resize + memcpy rather than vector::insert, which trips GCC 12's -Wstringop-overflow.
  Bytes& append(const void* p, size_t n) {
    if (n == 0) return *this;
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    std::memcpy(bytes_.data() + at, p, n);
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

// ggml type ids used below (quant/types.h spells them as QuantType).
constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ4_K = 12, kF64 = 28;

// A valid file: 3 KV pairs (string, u32, string array) and 2 tensors, f32 [8] at 0 and
// q8_0 [32, 2] at 32, default alignment 32. 100 data bytes, padded to 128.
inline Bytes valid_small() {
  Bytes b;
  b.header(2, 3);
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.block_count", 2);
  b.key("tokenizer.ggml.tokens", ValueType::kArray).array_of(ValueType::kString, 3).str("a").str("").str("bc");
  b.tensor("a.weight", {8}, kF32, 0);
  b.tensor("b.weight", {32, 2}, kQ8_0, 32);
  b.pad_to(32);
  for (int i = 0; i < 128; ++i) b.u8(static_cast<uint8_t>(i));
  return b;
}

// A valid file holding one value of each of the 13 types, bool/string/nested/empty arrays.
inline Bytes valid_all_types() {
  Bytes b;
  b.header(0, 17);
  b.key("t.u8", ValueType::kU8).u8(200);
  b.key("t.i8", ValueType::kI8).u8(0x80);
  b.key("t.u16", ValueType::kU16).u16(65535);
  b.key("t.i16", ValueType::kI16).u16(0x8000);
  b.kv_u32("t.u32", 4000000000u);
  b.key("t.i32", ValueType::kI32).i32(-5);
  b.key("t.f32", ValueType::kF32).f32(1.5f);
  b.key("t.bool", ValueType::kBool).u8(1);
  b.kv_string("t.string", "hello \"gguf\"\n");
  b.key("t.u64", ValueType::kU64).u64(std::numeric_limits<uint64_t>::max());
  b.key("t.i64", ValueType::kI64).u64(static_cast<uint64_t>(std::numeric_limits<int64_t>::min()));
  b.key("t.f64", ValueType::kF64).f64(-2.25);
  b.key("t.bools", ValueType::kArray).array_of(ValueType::kBool, 3).u8(1).u8(0).u8(1);
  b.key("t.strings", ValueType::kArray).array_of(ValueType::kString, 2).str("x").str("");
  b.key("t.nested", ValueType::kArray).array_of(ValueType::kArray, 2);
  b.array_of(ValueType::kI32, 2).i32(1).i32(-1);
  b.array_of(ValueType::kF32, 0);
  b.key("t.empty", ValueType::kArray).array_of(ValueType::kU64, 0);
  b.kv_string("t.empty_string", "");
  return b;
}

// The smallest valid file: a header with no KV pairs and no tensors.
inline Bytes valid_header_only() { return Bytes().header(0, 0); }

struct CorruptCase {
  std::string name;                   // also the corpus file name (<name>.gguf)
  std::vector<uint8_t> bytes;
  StatusCode code = StatusCode::kDataLoss;
  std::vector<std::string> needles;   // substrings the error message must contain
  int64_t at = -1;                    // the byte offset the message must name; -1: any
};

// Arrays nested `levels` deep (the outermost array counts as level 1), innermost empty u8.
inline Bytes nested_arrays(uint32_t levels) {
  Bytes b;
  b.header(0, 1).key("deep", ValueType::kArray);
  for (uint32_t i = 1; i < levels; ++i) b.array_of(ValueType::kArray, 1);
  b.array_of(ValueType::kU8, 0);
  return b;
}

// One tensor `t` after a single KV pair; `data_bytes` bytes follow the aligned header.
inline Bytes one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset, size_t data_bytes,
                        std::string_view name = "t") {
  Bytes b;
  b.header(1, 1).kv_string("general.architecture", "llama");
  b.tensor(name, ne, type, offset);
  b.pad_to(32).zeros(data_bytes);
  return b;
}

// Adds one case: its name, its bytes, the words its error names, the offset it reports.
struct CaseAdder {
  std::vector<CorruptCase>& c;
  void operator()(std::string name, const Bytes& b, std::vector<std::string> needles, int64_t at = -1) const {
    c.push_back({std::move(name), b.bytes(), StatusCode::kDataLoss, std::move(needles), at});
  }
};

// The header, the metadata keys and values, general.alignment.
inline void add_header_cases(const CaseAdder& add) {
  const uint64_t kHuge = uint64_t{1} << 40;

  // Header.
  add("empty", Bytes(), {"magic", "file ends"}, 0);
  add("truncated_magic", Bytes().raw("GG"), {"magic", "file ends"}, 0);
  add("wrong_magic", Bytes().raw("GGUX").u32(3).u64(0).u64(0), {"magic", "not a GGUF file"}, 0);
  add("ggml_magic_bytes_swapped", Bytes().raw("FUGG").u32(3).u64(0).u64(0), {"magic"}, 0);
  add("version_0", Bytes().header(0, 0, 0), {"version", "0"}, 4);
  add("version_1", Bytes().header(0, 0, 1), {"version", "1 is not supported"}, 4);
  add("version_4", Bytes().header(0, 0, 4), {"version", "4 is not supported"}, 4);
  add("version_byte_swapped", Bytes().header(0, 0, 0x03000000), {"version", "byte-swapped"}, 4);
  add("truncated_version", Bytes().raw("GGUF").u16(3), {"version", "file ends"}, 4);
  add("truncated_tensor_count", Bytes().raw("GGUF").u32(3).u32(0), {"tensor_count", "file ends"}, 8);
  add("truncated_kv_count", Bytes().raw("GGUF").u32(3).u64(0).u32(1), {"kv_count", "file ends"}, 16);
  add("huge_tensor_count", Bytes().header(kHuge, 0).zeros(64), {"tensor_count", "cannot fit"}, 8);
  add("max_tensor_count", Bytes().header(~uint64_t{0}, 0), {"tensor_count", "cannot fit"}, 8);
  add("huge_kv_count", Bytes().header(0, kHuge).zeros(64), {"kv_count", "cannot fit"}, 16);
  add("kv_count_one_too_many", Bytes().header(0, 3).kv_u32("a", 1).kv_u32("b", 2),
      {"kv_count", "cannot fit"}, 16);

  // Metadata keys and values.
  add("key_length_past_eof", Bytes().header(0, 1).u64(1000).raw("abcdefghijkl"), {"key", "string length 1000"}, 24);
  add("key_length_max", Bytes().header(0, 1).u64(~uint64_t{0}).raw("abcdefgh"), {"key", "string length"}, 24);
  add("string_value_past_eof", Bytes().header(0, 1).key("k", ValueType::kString).u64(uint64_t{1} << 63).raw("xy"),
      {"key 'k'", "string length"}, 37);
  add("empty_key", Bytes().header(0, 1).str("").u32(4).u32(7), {"empty key"}, 24);
  add("value_type_13", Bytes().header(0, 1).str("k").u32(13).u32(0), {"key 'k'", "unknown value type 13"}, 33);
  add("value_type_max", Bytes().header(0, 1).str("k").u32(0xFFFFFFFFu).u32(0), {"unknown value type 4294967295"}, 33);
  add("truncated_u32_value", Bytes().header(0, 1).key("k", ValueType::kU32).u16(1), {"key 'k'", "file ends"}, 37);
  add("truncated_f64_value", Bytes().header(0, 1).key("k", ValueType::kF64).u32(1), {"key 'k'", "file ends"}, 37);
  add("bool_2", Bytes().header(0, 1).key("flag", ValueType::kBool).u8(2), {"key 'flag'", "bool value 2"}, 40);
  add("bool_255", Bytes().header(0, 1).key("flag", ValueType::kBool).u8(255), {"bool value 255"}, 40);
  add("bool_array_2", Bytes().header(0, 1).key("f", ValueType::kArray).array_of(ValueType::kBool, 3).u8(0).u8(1).u8(2),
      {"key 'f'[2]", "bool"}, 51);
  add("array_elem_type_13", Bytes().header(0, 1).key("a", ValueType::kArray).u32(13).u64(0),
      {"key 'a' element type", "unknown value type 13"}, 37);
  add("array_huge_count", Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kU32, kHuge).u32(1),
      {"key 'a'", "array of", "cannot fit"}, 41);
  add("array_max_count", Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kU64, ~uint64_t{0}),
      {"key 'a'", "cannot fit"}, 41);
  add("string_array_huge_count",
      Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kString, kHuge).str("x"),
      {"key 'a'", "cannot fit"}, 41);
  add("nested_array_huge_count",
      Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kArray, kHuge).zeros(24),
      {"key 'a'", "cannot fit"}, 41);
  add("truncated_scalar_array",
      Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kU32, 4).u32(1).u32(2),
      {"key 'a'", "cannot fit"}, 41);
  add("truncated_string_array",
      Bytes().header(0, 1).key("a", ValueType::kArray).array_of(ValueType::kString, 2).str("one").u64(5).raw("tw"),
      {"key 'a'[1]", "string length 5"}, 60);
  add("truncated_array_header", Bytes().header(0, 1).key("a", ValueType::kArray).u32(4).u32(0),
      {"key 'a' count", "file ends"}, 41);
  add("arrays_nested_9_deep", nested_arrays(9), {"key 'deep'", "nested deeper than 8"});
  add("arrays_nested_1000_deep", nested_arrays(1000), {"nested deeper than 8"});
  add("duplicate_key", Bytes().header(0, 2).kv_u32("general.x", 1).kv_u32("general.x", 2),
      {"key 'general.x'", "duplicate key"}, 49);

  // general.alignment.
  add("alignment_u64", Bytes().header(0, 1).key("general.alignment", ValueType::kU64).u64(32),
      {"general.alignment", "type u64, expected u32"}, 24);
  add("alignment_string", Bytes().header(0, 1).kv_string("general.alignment", "32"),
      {"general.alignment", "type string"}, 24);
  add("alignment_48", Bytes().header(0, 1).kv_u32("general.alignment", 48),
      {"general.alignment", "48", "power of two"}, 24);
  add("alignment_0", Bytes().header(0, 2).kv_u32("a", 1).kv_u32("general.alignment", 0),
      {"general.alignment", "0", "power of two"}, 41);
}

// The tensor infos and where their data lies.
inline void add_tensor_cases(const CaseAdder& add) {
  // Tensor infos.
  add("tensor_name_length_past_eof", Bytes().header(1, 0).u64(500).raw(std::string(40, 'b')),
      {"tensor info 0 name", "string length"}, 24);
  add("tensor_name_empty", Bytes().header(1, 0).tensor("", {8}, kF32, 0).pad_to(32).zeros(32),
      {"empty tensor name"}, 24);
  add("tensor_name_64_bytes", one_tensor({8}, kF32, 0, 32, std::string(64, 'n')),
      {"tensor info 0", "name is 64 bytes", "at most 63"}, 69);
  add("n_dims_0", one_tensor({}, kF32, 0, 32), {"tensor 't'", "n_dims 0"}, 78);
  add("n_dims_5", one_tensor({1, 1, 1, 1, 1}, kF32, 0, 32), {"tensor 't'", "n_dims 5"}, 78);
  add("n_dims_max", Bytes().header(1, 0).str("t").u32(0xFFFFFFFFu).zeros(64), {"n_dims 4294967295"}, 33);
  add("truncated_dims", Bytes().header(1, 0).str("t").u32(3).u64(8).u64(8).u32(8),
      {"tensor 't' ne[2]", "file ends"}, 53);
  add("dim_above_int64_max", one_tensor({32, uint64_t{1} << 63}, kF32, 0, 32), {"ne[1]", "too large"}, 90);
  add("dim_product_overflow", one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 32),
      {"tensor 't'", "overflow"}, 90);
  add("dim_product_above_int64_max", one_tensor({uint64_t{1} << 31, 1, uint64_t{1} << 32}, kF32, 0, 32),
      {"tensor 't'", "overflow"}, 98);
  add("byte_size_overflow", one_tensor({uint64_t{1} << 62}, kF64, 0, 32), {"tensor 't'", "byte size overflow"}, 78);
  add("tensor_type_4", one_tensor({32}, 4, 0, 128), {"tensor 't'", "unknown tensor type id 4"}, 90);
  add("tensor_type_99", one_tensor({32}, 99, 0, 128), {"tensor 't'", "unknown tensor type id 99"}, 90);
  add("tensor_type_31", one_tensor({32}, 31, 0, 128), {"unknown tensor type id 31"}, 90);
  add("ne0_not_block_multiple", one_tensor({33, 2}, kQ8_0, 0, 128), {"tensor 't'", "ne[0] = 33", "not a multiple"}, 78);
  add("ne0_not_qk_multiple", one_tensor({128, 3, 2}, kQ4_K, 0, 1024), {"ne[0] = 128", "not a multiple", "q4_K"}, 78);
  add("offset_not_aligned", one_tensor({8}, kF32, 8, 64), {"tensor 't'", "offset 8", "alignment 32"}, 94);
  add("offset_not_aligned_64",
      Bytes().header(1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, kF32, 32).pad_to(64).zeros(128),
      {"offset 32", "alignment 64"}, 82);
  add("duplicate_tensor",
      Bytes().header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64),
      {"tensor 'w'", "duplicate tensor"}, 57);

  // Tensor placement.
  add("data_past_eof", one_tensor({64}, kF32, 0, 255), {"tensor 't'", "outside", "255-byte data section"}, 94);
  add("data_offset_past_eof", one_tensor({8}, kF32, 1024, 64), {"tensor 't'", "outside"}, 94);
  add("data_offset_max", one_tensor({8}, kF32, ~uint64_t{31}, 64), {"tensor 't'", "outside"}, 94);
  add("data_section_past_eof", Bytes().header(1, 0).tensor("t", {0}, kF32, 0), {"data section", "past the end"}, 57);
  add("overlap",
      Bytes().header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96),
      {"tensor 'b'", "overlaps tensor 'a'"}, 82);
  add("overlap_same_offset",
      Bytes().header(2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96),
      {"overlaps"});
  add("overlap_out_of_order",
      Bytes().header(2, 0).tensor("late", {8}, kF32, 64).tensor("early", {24}, kF32, 0).pad_to(32).zeros(128),
      {"tensor 'late'", "overlaps tensor 'early'"}, 52);
  // A zero-size tensor sorted between two overlapping ones must not hide the overlap.
  add("overlap_behind_empty_tensor",
      Bytes().header(3, 0).tensor("big", {64}, kF32, 0).tensor("empty", {0}, kF32, 32)
          .tensor("small", {8}, kF32, 64).pad_to(32).zeros(256),
      {"tensor 'small'", "overlaps tensor 'big'"});
}

inline std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> c;
  add_header_cases(CaseAdder{c});
  add_tensor_cases(CaseAdder{c});
  return c;
}

}  // namespace mt::gguf::testcases
