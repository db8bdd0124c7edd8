#include "cpu/scale_tables.h"

#include <bit>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace mt::cpu {
namespace {

constexpr Fp16Table make_fp16_table() {
  Fp16Table t{};
  for (uint32_t h = 0; h < 65536; ++h) t.v[h] = fp16_to_fp32(static_cast<uint16_t>(h));
  return t;
}

constexpr E8m0Table make_e8m0_table() {
  E8m0Table t{};
  for (uint32_t e = 0; e < 256; ++e) t.v[e] = std::bit_cast<float>(e8m0_half_bits(static_cast<uint8_t>(e)));
  return t;
}

}  // namespace

alignas(64) constinit const Fp16Table kFp16ToFp32 = make_fp16_table();
alignas(64) constinit const E8m0Table kE8m0HalfToFp32 = make_e8m0_table();

}  // namespace mt::cpu
