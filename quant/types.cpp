#include "quant/types.h"

#include <array>
#include <cctype>

#include "core/check.h"
#include "core/checked_math.h"

namespace mt {
namespace {

constexpr std::array kTraits = {
    TypeTraits{QuantType::F32, "f32", 1, 4, true},
    TypeTraits{QuantType::F16, "f16", 1, 2, true},
    TypeTraits{QuantType::Q4_0, "q4_0", 32, 18, true},
    TypeTraits{QuantType::Q4_1, "q4_1", 32, 20, true},
    TypeTraits{QuantType::Q5_0, "q5_0", 32, 22, true},
    TypeTraits{QuantType::Q5_1, "q5_1", 32, 24, true},
    TypeTraits{QuantType::Q8_0, "q8_0", 32, 34, true},
    TypeTraits{QuantType::Q8_1, "q8_1", 32, 36, true},
    TypeTraits{QuantType::Q2_K, "q2_K", 256, 84, true},
    TypeTraits{QuantType::Q3_K, "q3_K", 256, 110, true},
    TypeTraits{QuantType::Q4_K, "q4_K", 256, 144, true},
    TypeTraits{QuantType::Q5_K, "q5_K", 256, 176, true},
    TypeTraits{QuantType::Q6_K, "q6_K", 256, 210, true},
    TypeTraits{QuantType::Q8_K, "q8_K", 256, 292, true},
    TypeTraits{QuantType::IQ2_XXS, "iq2_xxs", 256, 66, false},
    TypeTraits{QuantType::IQ2_XS, "iq2_xs", 256, 74, false},
    TypeTraits{QuantType::IQ3_XXS, "iq3_xxs", 256, 98, false},
    TypeTraits{QuantType::IQ1_S, "iq1_s", 256, 50, false},
    TypeTraits{QuantType::IQ4_NL, "iq4_nl", 32, 18, true},
    TypeTraits{QuantType::IQ3_S, "iq3_s", 256, 110, false},
    TypeTraits{QuantType::IQ2_S, "iq2_s", 256, 82, false},
    TypeTraits{QuantType::IQ4_XS, "iq4_xs", 256, 136, true},
    TypeTraits{QuantType::I8, "i8", 1, 1, false},
    TypeTraits{QuantType::I16, "i16", 1, 2, false},
    TypeTraits{QuantType::I32, "i32", 1, 4, false},
    TypeTraits{QuantType::I64, "i64", 1, 8, false},
    TypeTraits{QuantType::F64, "f64", 1, 8, false},
    TypeTraits{QuantType::IQ1_M, "iq1_m", 256, 56, false},
    TypeTraits{QuantType::BF16, "bf16", 1, 2, true},
    TypeTraits{QuantType::TQ1_0, "tq1_0", 256, 54, false},
    TypeTraits{QuantType::TQ2_0, "tq2_0", 256, 66, false},
    TypeTraits{QuantType::MXFP4, "mxfp4", 32, 17, true},
    TypeTraits{QuantType::NVFP4, "nvfp4", 64, 36, false},
    TypeTraits{QuantType::Q1_0, "q1_0", 128, 18, false},
    TypeTraits{QuantType::Q2_0, "q2_0", 64, 18, false},
};

constexpr uint32_t kMaxId = 42;

// Dense id -> index map, built at compile time from kTraits.
constexpr std::array<int8_t, kMaxId + 1> make_index() {
  std::array<int8_t, kMaxId + 1> index{};
  for (auto& v : index) v = -1;
  for (size_t i = 0; i < kTraits.size(); ++i) index[static_cast<uint32_t>(kTraits[i].type)] = static_cast<int8_t>(i);
  return index;
}
constexpr auto kIndex = make_index();

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

const TypeTraits* find_type_traits(uint32_t id) {
  if (id > kMaxId || kIndex[id] < 0) return nullptr;
  return &kTraits[static_cast<size_t>(kIndex[id])];
}

const TypeTraits& type_traits(QuantType type) {
  const TypeTraits* t = find_type_traits(static_cast<uint32_t>(type));
  MT_CHECK_MSG(t != nullptr, "QuantType value outside the traits table");
  return *t;
}

std::optional<QuantType> type_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    if (iequals(t.name, name)) return t.type;
  }
  return std::nullopt;
}

std::span<const TypeTraits> all_type_traits() { return kTraits; }

std::optional<uint64_t> row_bytes(QuantType type, uint64_t n) {
  const TypeTraits& t = type_traits(type);
  if (n % t.block_elems != 0) return std::nullopt;
  return checked_mul(n / t.block_elems, t.block_bytes);
}

}  // namespace mt
