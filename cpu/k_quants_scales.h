// Scale unpacking of the K-quant and IQ4_XS blocks for the SIMD dot kernels: the packed
// 6-bit scales become one byte per sub-block with a few 32/64-bit mask-and-shift steps
// (the scalar kernels use quant/blocks.h's per-index helpers, which define the layout).
// Results stay in integer registers (two uint64 = 16 bytes, little-endian): a vector load
// of two fresh 8-byte stores would miss store-to-load forwarding.
//
// Invariant: everything here has internal linkage. Each ISA's translation unit compiles
// its own copy with its own flags; an inline function with external linkage would be
// merged by the linker into one copy, possibly the AVX-512 one, and that copy could then
// run on a CPU without AVX-512.
#pragma once

#include <cstdint>
#include <cstring>

namespace mt::cpu {
namespace {  // internal linkage on purpose, see above

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 16 bytes: byte i of lo is byte i, byte i of hi is byte 8 + i.
struct Bytes16 {
  uint64_t lo;
  uint64_t hi;
};
inline Bytes16 bytes16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  return {w0 | static_cast<uint64_t>(w1) << 32, w2 | static_cast<uint64_t>(w3) << 32};
}

// Q4_K / Q5_K: 12 bytes -> bytes 0..7 the 8 scales, bytes 8..15 the 8 mins (0..63 each).
inline Bytes16 unpack_k4_scales(const uint8_t* b) {
  const uint32_t u0 = load_u32(b), u1 = load_u32(b + 4), u2 = load_u32(b + 8);
  return bytes16(u0 & 0x3f3f3f3fu,                                        // scales 0..3
                 (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u),          // scales 4..7
                 u1 & 0x3f3f3f3fu,                                        // mins 0..3
                 ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u));  // mins 4..7
}

// Q3_K: 12 bytes -> the 16 scales biased by +32 (0..63; the signed scale is byte i - 32).
inline Bytes16 unpack_q3k_scales(const uint8_t* b) {
  const uint32_t u0 = load_u32(b), u1 = load_u32(b + 4), u2 = load_u32(b + 8);
  return bytes16((u0 & 0x0f0f0f0fu) | ((u2 & 0x03030303u) << 4),          // scales 0..3
                 (u1 & 0x0f0f0f0fu) | ((u2 << 2) & 0x30303030u),          // scales 4..7
                 ((u0 >> 4) & 0x0f0f0f0fu) | (u2 & 0x30303030u),          // scales 8..11
                 ((u1 >> 4) & 0x0f0f0f0fu) | ((u2 >> 2) & 0x30303030u));  // scales 12..15
}

// IQ4_XS: scales_l (4 bytes, a nibble per sub-block) and scales_h (2 bits per sub-block)
// -> the 8 scales biased by +32 as the bytes of one uint64 (byte i = sub-block i).
inline uint64_t unpack_iq4xs_scales(const uint8_t* scales_l, uint16_t scales_h) {
  uint64_t lo = load_u32(scales_l);  // nibble i -> byte i
  lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
  lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
  lo = (lo | (lo << 4)) & 0x0f0f0f0f0f0f0f0full;
  uint64_t hi = scales_h;  // 2-bit field i -> byte i
  hi = (hi | (hi << 24)) & 0x000000ff000000ffull;
  hi = (hi | (hi << 12)) & 0x000f000f000f000full;
  hi = (hi | (hi << 6)) & 0x0303030303030303ull;
  return lo | (hi << 4);
}

}  // namespace
}  // namespace mt::cpu
