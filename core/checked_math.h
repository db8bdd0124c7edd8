// Overflow-checked unsigned arithmetic for sizes computed from untrusted numbers.
//
// Every product or sum of counts read from a file goes through these, so a hostile
// header can never wrap a size into something small that then passes a bounds check.
#pragma once

#include <cstdint>
#include <optional>

namespace mt {

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Round x up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> checked_align_up(uint64_t x, uint64_t align) {
  auto sum = checked_add(x, align - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(align - 1);
}

constexpr bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace mt
