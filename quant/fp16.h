// Scalar conversions between float32 and the two 16-bit float formats in GGUF files.
//
// Invariant: every function is exact where the target can represent the value and
// otherwise rounds to nearest, ties to even, like ggml's scalar paths: fp32 -> fp16
// handles subnormals, overflow to infinity and NaN (stays NaN, quiet, sign kept);
// fp32 -> bf16 rounds the same way and forces NaN quiet (bit 6), never flushes
// subnormals. Widening (fp16/bf16 -> fp32) is always exact. Pure bit manipulation, no
// intrinsics, usable in constexpr contexts.
#pragma once

#include <bit>
#include <cstdint>

namespace mt {

// IEEE binary16 bits -> float32 (exact).
constexpr float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float32.
  const float mag = static_cast<float>(mant) * 0x1p-24f;
  return sign != 0 ? -mag : mag;
}

// float32 -> IEEE binary16 bits, round to nearest even.
constexpr uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet.
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 0x477ff000 = 65520, halfway between the largest half (65504) and 2^16; the tie
  // goes to the even neighbour, which is infinity.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal (or zero)
    const uint32_t e = ax >> 23;
    const uint32_t shift = 126u - e;  // result = round(m * 2^-shift)
    if (e == 0 || shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // may carry into 0x400: fine
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  const uint32_t rounded = ax + 0x0fffu + ((ax >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

// bfloat16 bits -> float32 (exact).
constexpr float bf16_to_fp32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// float32 -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet bit forced).
constexpr uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace mt
