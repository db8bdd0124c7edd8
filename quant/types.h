// The ggml tensor types as one traits table: id, name, block elements, block bytes.
//
// Invariant: a tensor row of n elements of type T occupies n / block_elems(T) *
// block_bytes(T) bytes, and n must be a multiple of block_elems(T). Ids are the GGUF
// `type` field (ggml_type). The table also lists types moetier has no kernels for, so a
// file holding them can still be inspected and sized exactly; `has_reference` says
// whether quant/ can dequantize it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace mt {

enum class QuantType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29,
  BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct TypeTraits {
  QuantType type;
  const char* name;       // ggml's spelling: "q4_K", "bf16", "mxfp4"
  uint32_t block_elems;   // elements per block (QK)
  uint32_t block_bytes;   // bytes per block
  bool has_reference;     // quant/ has a reference dequantizer for it
};

// nullptr when `id` is not a ggml type id (the gaps 4, 5, 31-33, 36-38 and >= 43).
const TypeTraits* find_type_traits(uint32_t id);
// Traits of a known type; aborts on an id that is not in the table (a programming error).
const TypeTraits& type_traits(QuantType type);
inline const char* type_name(QuantType type) { return type_traits(type).name; }
// Case-insensitive lookup by name ("Q4_K", "q4_k", "bf16"); nullopt if unknown.
std::optional<QuantType> type_from_name(std::string_view name);
// Every type in the table, in id order.
std::span<const TypeTraits> all_type_traits();

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size or the
// size overflows.
std::optional<uint64_t> row_bytes(QuantType type, uint64_t n);

}  // namespace mt
