// Device dequantizers: element i of one block of a GGUF type, as a float, bit-exact with
// quant/dequantize.cpp (the reference). A runtime QuantType becomes a compile-time traits
// type (Dq<QuantType::X>) once, at the host boundary (dispatch_type); kernels are then
// templates over the traits and never switch on the type inside a loop.
//
// Invariants:
//  * `block` points at one on-disk block (quant/blocks.h layout) aligned as the block
//    struct is (2 bytes for the types with a half field, 4 for F32, 1 for MXFP4); a row
//    that starts aligned keeps every block aligned (quant/blocks.h).
//  * Bit-exactness: every multiply/add is a round-to-nearest intrinsic (__fmul_rn,
//    __fadd_rn, __fsub_rn), which nvcc never contracts into an FMA, in the reference's
//    order; fp16 widening via __half2float (exact, subnormals kept); bf16 by a shift.
//  * The value tables are quant/blocks.h's own arrays, packed into 64-bit constants at
//    compile time (no device memory, no copies of the numbers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "quant/blocks.h"
#include "quant/types.h"

namespace mt::cuda {

namespace dq_detail {

// 8 int8 table entries [first, first + 8) as one little-endian uint64.
constexpr uint64_t pack8(const int8_t* table, int first) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(table[first + k])) << (8 * k);
  return v;
}
inline constexpr uint64_t kIq4Lo = pack8(kIq4Values, 0), kIq4Hi = pack8(kIq4Values, 8);
inline constexpr uint64_t kFp4Lo = pack8(kFp4x2Values, 0), kFp4Hi = pack8(kFp4x2Values, 8);

// Entry `code` (0..15) of a 16-entry int8 table packed as (lo, hi), as a float.
__device__ __forceinline__ float table16(uint64_t lo, uint64_t hi, int code) {
  const uint64_t word = code < 8 ? lo : hi;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (code & 7)))));
}

__device__ __forceinline__ float h2f(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// Nibble of element i (0..31) in the Q4_0 layout: byte i % 16, low nibble for i < 16.
__device__ __forceinline__ int nibble32(const uint8_t* qs, int i) {
  const uint8_t byte = qs[i & 15];
  return i < 16 ? (byte & 0xF) : (byte >> 4);
}

}  // namespace dq_detail

// Traits per type: kType, kElems (elements per block), kBytes (bytes per block), and
// get(block, i) = element i (0 <= i < kElems) of the block.
template <QuantType T>
struct Dq;

template <>
struct Dq<QuantType::F32> {
  static constexpr QuantType kType = QuantType::F32;
  static constexpr int kElems = 1, kBytes = 4;
  __device__ static float get(const uint8_t* b, int i) { return reinterpret_cast<const float*>(b)[i]; }
};

template <>
struct Dq<QuantType::F16> {
  static constexpr QuantType kType = QuantType::F16;
  static constexpr int kElems = 1, kBytes = 2;
  __device__ static float get(const uint8_t* b, int i) {
    return dq_detail::h2f(reinterpret_cast<const uint16_t*>(b)[i]);
  }
};

template <>
struct Dq<QuantType::BF16> {
  static constexpr QuantType kType = QuantType::BF16;
  static constexpr int kElems = 1, kBytes = 2;
  __device__ static float get(const uint8_t* b, int i) {
    return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(b)[i]) << 16);
  }
};

template <>
struct Dq<QuantType::Q4_0> {
  static constexpr QuantType kType = QuantType::Q4_0;
  static constexpr int kElems = BlockQ4_0::kElems, kBytes = sizeof(BlockQ4_0);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
    return __fmul_rn(static_cast<float>(dq_detail::nibble32(b->qs, i) - 8), dq_detail::h2f(b->d));
  }
};

template <>
struct Dq<QuantType::Q4_1> {
  static constexpr QuantType kType = QuantType::Q4_1;
  static constexpr int kElems = BlockQ4_1::kElems, kBytes = sizeof(BlockQ4_1);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(p);
    const float q = static_cast<float>(dq_detail::nibble32(b->qs, i));
    return __fadd_rn(__fmul_rn(q, dq_detail::h2f(b->d)), dq_detail::h2f(b->m));
  }
};

// Q5_0 / Q5_1: element i's fifth bit is bit i of qh (little-endian uint32).
template <>
struct Dq<QuantType::Q5_0> {
  static constexpr QuantType kType = QuantType::Q5_0;
  static constexpr int kElems = BlockQ5_0::kElems, kBytes = sizeof(BlockQ5_0);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ5_0*>(p);
    const int code = dq_detail::nibble32(b->qs, i) | static_cast<int>(((load_qh(b->qh) >> i) & 1u) << 4);
    return __fmul_rn(static_cast<float>(code - 16), dq_detail::h2f(b->d));
  }
};

template <>
struct Dq<QuantType::Q5_1> {
  static constexpr QuantType kType = QuantType::Q5_1;
  static constexpr int kElems = BlockQ5_1::kElems, kBytes = sizeof(BlockQ5_1);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ5_1*>(p);
    const int code = dq_detail::nibble32(b->qs, i) | static_cast<int>(((load_qh(b->qh) >> i) & 1u) << 4);
    return __fadd_rn(__fmul_rn(static_cast<float>(code), dq_detail::h2f(b->d)), dq_detail::h2f(b->m));
  }
};

template <>
struct Dq<QuantType::Q8_0> {
  static constexpr QuantType kType = QuantType::Q8_0;
  static constexpr int kElems = BlockQ8_0::kElems, kBytes = sizeof(BlockQ8_0);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
    return __fmul_rn(static_cast<float>(b->qs[i]), dq_detail::h2f(b->d));
  }
};

template <>
struct Dq<QuantType::IQ4_NL> {
  static constexpr QuantType kType = QuantType::IQ4_NL;
  static constexpr int kElems = BlockIQ4_NL::kElems, kBytes = sizeof(BlockIQ4_NL);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockIQ4_NL*>(p);
    const float v = dq_detail::table16(dq_detail::kIq4Lo, dq_detail::kIq4Hi, dq_detail::nibble32(b->qs, i));
    return __fmul_rn(dq_detail::h2f(b->d), v);
  }
};

template <>
struct Dq<QuantType::MXFP4> {
  static constexpr QuantType kType = QuantType::MXFP4;
  static constexpr int kElems = BlockMXFP4::kElems, kBytes = sizeof(BlockMXFP4);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockMXFP4*>(p);
    const float v = dq_detail::table16(dq_detail::kFp4Lo, dq_detail::kFp4Hi, dq_detail::nibble32(b->qs, i));
    return __fmul_rn(v, __uint_as_float(e8m0_half_bits(b->e)));
  }
};

// Q2_K / Q3_K traversal: element i is in half h = i / 128; inside it, shift step
// st = (i % 128) / 32 (bits 2st, 2st + 1), group g = (i % 32) / 16, position l = i % 16;
// its 2 low bits are in qs[32h + 16g + l], its scale is number 8h + 2st + g.
template <>
struct Dq<QuantType::Q2_K> {
  static constexpr QuantType kType = QuantType::Q2_K;
  static constexpr int kElems = BlockQ2_K::kElems, kBytes = sizeof(BlockQ2_K);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ2_K*>(p);
    const int h = i / 128, st = (i % 128) / 32, g = (i % 32) / 16, l = i % 16;
    const uint8_t sc = b->scales[8 * h + 2 * st + g];
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(sc & 0xF));
    const float ml = __fmul_rn(dq_detail::h2f(b->dmin), static_cast<float>(sc >> 4));
    const int q = (b->qs[32 * h + 16 * g + l] >> (2 * st)) & 3;
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  }
};

// Q3_K: as Q2_K, plus the high bit: bit (4h + st) of hmask[16g + l]; clear means q2 - 4.
template <>
struct Dq<QuantType::Q3_K> {
  static constexpr QuantType kType = QuantType::Q3_K;
  static constexpr int kElems = BlockQ3_K::kElems, kBytes = sizeof(BlockQ3_K);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ3_K*>(p);
    const int h = i / 128, st = (i % 128) / 32, g = (i % 32) / 16, l = i % 16;
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(q3k_scale(8 * h + 2 * st + g, b->scales)));
    const int q2 = (b->qs[32 * h + 16 * g + l] >> (2 * st)) & 3;
    const bool high = (b->hmask[16 * g + l] & (1u << (4 * h + st))) != 0;
    return __fmul_rn(dl, static_cast<float>(q2 - (high ? 0 : 4)));
  }
};

// Q4_K / Q5_K: element i is in chunk c = i / 64 (qs[32c ..]), sub-block 2c + (i % 64 >= 32)
// (low nibbles first), position l = i % 32.
template <>
struct Dq<QuantType::Q4_K> {
  static constexpr QuantType kType = QuantType::Q4_K;
  static constexpr int kElems = BlockQ4_K::kElems, kBytes = sizeof(BlockQ4_K);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(p);
    const int c = i / 64, hi = (i % 64) / 32, l = i % 32;
    uint8_t sc = 0, mn = 0;
    unpack_scale_min_k4(2 * c + hi, b->scales, &sc, &mn);
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(sc));
    const float ml = __fmul_rn(dq_detail::h2f(b->dmin), static_cast<float>(mn));
    const uint8_t byte = b->qs[32 * c + l];
    const int q = hi ? (byte >> 4) : (byte & 0xF);
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  }
  // Elements i0 .. i0 + 7 (i0 % 8 == 0: one sub-block, its scale decoded once).
  __device__ static void get8(const uint8_t* p, int i0, float* v) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(p);
    const int c = i0 / 64, hi = (i0 % 64) / 32, l0 = i0 % 32;
    uint8_t sc = 0, mn = 0;
    unpack_scale_min_k4(2 * c + hi, b->scales, &sc, &mn);
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(sc));
    const float ml = __fmul_rn(dq_detail::h2f(b->dmin), static_cast<float>(mn));
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint8_t byte = b->qs[32 * c + l0 + k];
      const int q = hi ? (byte >> 4) : (byte & 0xF);
      v[k] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  }
};

template <>
struct Dq<QuantType::Q5_K> {
  static constexpr QuantType kType = QuantType::Q5_K;
  static constexpr int kElems = BlockQ5_K::kElems, kBytes = sizeof(BlockQ5_K);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ5_K*>(p);
    const int c = i / 64, hi = (i % 64) / 32, l = i % 32;
    uint8_t sc = 0, mn = 0;
    unpack_scale_min_k4(2 * c + hi, b->scales, &sc, &mn);
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(sc));
    const float ml = __fmul_rn(dq_detail::h2f(b->dmin), static_cast<float>(mn));
    const uint8_t byte = b->qs[32 * c + l];
    const int bit5 = (b->qh[l] >> (2 * c + hi)) & 1;
    const int q = (hi ? (byte >> 4) : (byte & 0xF)) + 16 * bit5;
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  }
  __device__ static void get8(const uint8_t* p, int i0, float* v) {
    const auto* b = reinterpret_cast<const BlockQ5_K*>(p);
    const int c = i0 / 64, hi = (i0 % 64) / 32, l0 = i0 % 32;
    uint8_t sc = 0, mn = 0;
    unpack_scale_min_k4(2 * c + hi, b->scales, &sc, &mn);
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(sc));
    const float ml = __fmul_rn(dq_detail::h2f(b->dmin), static_cast<float>(mn));
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint8_t byte = b->qs[32 * c + l0 + k];
      const int bit5 = (b->qh[l0 + k] >> (2 * c + hi)) & 1;
      const int q = (hi ? (byte >> 4) : (byte & 0xF)) + 16 * bit5;
      v[k] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  }
};

// Q6_K: half h = i / 128, quarter qt = (i % 128) / 32, l = i % 32. Low 4 bits from
// ql[64h + l + 32 * (qt & 1)] (low nibble for qt < 2), high 2 bits are bits 2qt, 2qt + 1
// of qh[32h + l], scale number 8h + l / 16 + 2qt; value = (d * scale) * (code - 32).
template <>
struct Dq<QuantType::Q6_K> {
  static constexpr QuantType kType = QuantType::Q6_K;
  static constexpr int kElems = BlockQ6_K::kElems, kBytes = sizeof(BlockQ6_K);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(p);
    const int h = i / 128, qt = (i % 128) / 32, l = i % 32;
    const uint8_t lbyte = b->ql[64 * h + l + 32 * (qt & 1)];
    const int low = qt < 2 ? (lbyte & 0xF) : (lbyte >> 4);
    const int high = (b->qh[32 * h + l] >> (2 * qt)) & 3;
    const int q = (low | (high << 4)) - 32;
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(b->scales[8 * h + l / 16 + 2 * qt]));
    return __fmul_rn(dl, static_cast<float>(q));
  }
  // Elements i0 .. i0 + 7 (i0 % 8 == 0: one run of 16 sharing a scale).
  __device__ static void get8(const uint8_t* p, int i0, float* v) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(p);
    const int h = i0 / 128, qt = (i0 % 128) / 32, l0 = i0 % 32;
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(b->scales[8 * h + l0 / 16 + 2 * qt]));
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int l = l0 + k;
      const uint8_t lbyte = b->ql[64 * h + l + 32 * (qt & 1)];
      const int low = qt < 2 ? (lbyte & 0xF) : (lbyte >> 4);
      const int high = (b->qh[32 * h + l] >> (2 * qt)) & 3;
      v[k] = __fmul_rn(dl, static_cast<float>((low | (high << 4)) - 32));
    }
  }
};

// IQ4_XS: sub-block ib = i / 32 uses qs[16ib ..] in the Q4_0 layout and the 6-bit scale
// ls = low nibble of scales_l[ib / 2] (high nibble for odd ib) | bits 2ib, 2ib + 1 of
// scales_h << 4; value = (d * (ls - 32)) * table[nibble].
template <>
struct Dq<QuantType::IQ4_XS> {
  static constexpr QuantType kType = QuantType::IQ4_XS;
  static constexpr int kElems = BlockIQ4_XS::kElems, kBytes = sizeof(BlockIQ4_XS);
  __device__ static float get(const uint8_t* p, int i) {
    const auto* b = reinterpret_cast<const BlockIQ4_XS*>(p);
    const int ib = i / 32;
    const int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4);
    const float dl = __fmul_rn(dq_detail::h2f(b->d), static_cast<float>(ls - 32));
    const int code = dq_detail::nibble32(b->qs + 16 * ib, i % 32);
    return __fmul_rn(dl, dq_detail::table16(dq_detail::kIq4Lo, dq_detail::kIq4Hi, code));
  }
};

// Element i of a block of the traits' type.
template <class Q>
__device__ __forceinline__ float dequant_one(const uint8_t* block, int i) {
  return Q::get(block, i);
}

// The whole block into out[0 .. Q::kElems).
template <class Q>
__device__ void dequant_block(const uint8_t* block, float* out) {
  for (int i = 0; i < Q::kElems; ++i) out[i] = Q::get(block, i);
}

// Elements i0 .. i0 + 7 of a block (i0 % 8 == 0, Q::kElems % 8 == 0): the traits' get8
// where it has one (scales decoded once), else eight get()s. Same values either way.
template <class Q>
__device__ __forceinline__ void dequant_eight(const uint8_t* block, int i0, float* v) {
  if constexpr (requires { Q::get8(block, i0, v); }) {
    Q::get8(block, i0, v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = Q::get(block, i0 + k);
  }
}

// Element `col` of a row of the traits' type (row = the row's first block).
template <class Q>
__device__ __forceinline__ float dequant_row_elem(const uint8_t* row, int64_t col) {
  return Q::get(row + (col / Q::kElems) * Q::kBytes, static_cast<int>(col % Q::kElems));
}

// True for the 16 types above.
constexpr bool dequant_supported(QuantType t) {
  switch (t) {
    case QuantType::F32: case QuantType::F16: case QuantType::BF16: case QuantType::Q4_0:
    case QuantType::Q4_1: case QuantType::Q5_0: case QuantType::Q5_1: case QuantType::Q8_0:
    case QuantType::IQ4_NL: case QuantType::MXFP4: case QuantType::Q2_K: case QuantType::Q3_K:
    case QuantType::Q4_K: case QuantType::Q5_K: case QuantType::Q6_K: case QuantType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

// Host side: fn(Dq<t>{}) for the runtime type t (the one switch on the type); an
// unsupported type is a broken invariant of the caller (check dequant_supported first).
template <class Fn>
decltype(auto) dispatch_type(QuantType t, Fn&& fn) {
  switch (t) {
    case QuantType::F32: return fn(Dq<QuantType::F32>{});
    case QuantType::F16: return fn(Dq<QuantType::F16>{});
    case QuantType::BF16: return fn(Dq<QuantType::BF16>{});
    case QuantType::Q4_0: return fn(Dq<QuantType::Q4_0>{});
    case QuantType::Q4_1: return fn(Dq<QuantType::Q4_1>{});
    case QuantType::Q5_0: return fn(Dq<QuantType::Q5_0>{});
    case QuantType::Q5_1: return fn(Dq<QuantType::Q5_1>{});
    case QuantType::Q8_0: return fn(Dq<QuantType::Q8_0>{});
    case QuantType::IQ4_NL: return fn(Dq<QuantType::IQ4_NL>{});
    case QuantType::MXFP4: return fn(Dq<QuantType::MXFP4>{});
    case QuantType::Q2_K: return fn(Dq<QuantType::Q2_K>{});
    case QuantType::Q3_K: return fn(Dq<QuantType::Q3_K>{});
    case QuantType::Q4_K: return fn(Dq<QuantType::Q4_K>{});
    case QuantType::Q5_K: return fn(Dq<QuantType::Q5_K>{});
    case QuantType::Q6_K: return fn(Dq<QuantType::Q6_K>{});
    case QuantType::IQ4_XS: return fn(Dq<QuantType::IQ4_XS>{});
    default:
      std::fprintf(stderr, "%s:%d: no CUDA dequantizer for type id %u\n", __FILE__, __LINE__,
                   static_cast<unsigned>(t));
      std::abort();
  }
}

}  // namespace mt::cuda
