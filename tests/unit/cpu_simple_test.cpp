// cpu/ simple family: on every ISA level up to the hardware's, the activation quantizers
// write quant/'s bytes exactly, every dot matches the scalar table's within a bound
// from the norms, and the scalar dots match the double-precision dot of the dequantized
// rows; plus the MOETIER_CPU_ISA parsing and the pairing of weight and activation types.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace mt::cpu {
namespace {

constexpr QuantType kWeightTypes[] = {QuantType::F32,  QuantType::F16,  QuantType::BF16,   QuantType::Q4_0,
                                      QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,   QuantType::Q8_0,
                                      QuantType::IQ4_NL, QuantType::MXFP4};
constexpr QuantType kActivationTypes[] = {QuantType::Q8_0, QuantType::Q8_1, QuantType::Q8_K,
                                          QuantType::F16,  QuantType::BF16, QuantType::F32};
constexpr int64_t kSimpleShapes[] = {32, 64, 256, 4096, 4096 + 32};
constexpr int64_t kFloatOnlyShapes[] = {1, 7, 33, 100, 4096 + 5};  // block size 1 allows any n

// Every level this CPU can run, scalar first.
std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(detect_hardware_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

std::vector<int64_t> shapes_for(QuantType type) {
  std::vector<int64_t> out;
  const int64_t block = type_traits(type).block_elems;
  for (int64_t n : kSimpleShapes) {
    if (n % block == 0) out.push_back(n);
  }
  if (block == 1) out.insert(out.end(), std::begin(kFloatOnlyShapes), std::end(kFloatOnlyShapes));
  return out;
}

// A quantized row in uint32_t storage (aligned for every block struct), plus `offset`
// leading bytes so a row can start at an odd address.
struct AlignedRow {
  std::vector<uint32_t> storage;
  size_t offset = 0;
  size_t bytes = 0;
  AlignedRow(QuantType type, int64_t n, size_t off = 0) : offset(off), bytes(*row_bytes(type, static_cast<uint64_t>(n))) {
    storage.assign((bytes + offset + 3) / 4 + 1, 0xA5A5A5A5u);
  }
  void* data() { return reinterpret_cast<uint8_t*>(storage.data()) + offset; }
  const void* data() const { return reinterpret_cast<const uint8_t*>(storage.data()) + offset; }
  std::vector<uint8_t> byte_vector() const {
    const auto* p = static_cast<const uint8_t*>(data());
    return {p, p + bytes};
  }
};

// Gaussian values whose scale changes every 32 elements by up to 2^+-6, with an
// occasional outlier, so blocks see very different scales.
std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> x(static_cast<size_t>(n));
  float scale = 1.f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale = std::ldexp(1.f, exponent(rng));
    x[i] = normal(rng) * scale * (pick(rng) == 0 ? 20.f : 1.f);
  }
  return x;
}

std::vector<float> dequantized(QuantType type, const AlignedRow& row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, row.data(), out.data(), n);
  return out;
}

// Q4_1 / Q5_1 against Q8_1: the dot uses the activation's s = fp16(d * sum q) where the
// dequantized activation has d * q; per block the difference is |m| * (s's fp16 rounding:
// half an ulp, at least 2^-25 for subnormals). Zero for every other type.
double q8_1_sum_bound(QuantType weight, const AlignedRow& w, const AlignedRow& a, int64_t n) {
  if (weight != QuantType::Q4_1 && weight != QuantType::Q5_1) return 0.0;
  const auto* ab = static_cast<const BlockQ8_1*>(a.data());
  double bound = 0.0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const uint16_t m_bits = weight == QuantType::Q4_1 ? static_cast<const BlockQ4_1*>(w.data())[i].m
                                                      : static_cast<const BlockQ5_1*>(w.data())[i].m;
    const double m = std::fabs(fp16_to_fp32(m_bits));
    const double s = std::fabs(fp16_to_fp32(ab[i].s));
    bound += m * (std::max(s * 0x1p-11, 0x1p-25) + s * 1e-5);
  }
  return bound;
}

struct DotCase {
  QuantType weight;
  int64_t n;
  AlignedRow w;
  AlignedRow a;
  double reference = 0.0;  // sum of dequantized weight x dequantized activation, in double
  double magnitude = 0.0;  // sum of |dequantized weight x dequantized activation|
  double extra = 0.0;      // q8_1_sum_bound

  DotCase(QuantType type, int64_t len, uint32_t seed, size_t offset = 0)
      : weight(type), n(len), w(type, len, offset), a(activation_type(type), len, offset) {
    const std::vector<float> wf = random_floats(n, seed);
    const std::vector<float> af = random_floats(n, seed + 1000);
    quantize_row(weight, wf.data(), w.data(), n);
    kernels_for(Isa::kScalar).quantize[static_cast<int>(activation_type(weight))](af.data(), a.data(), n);
    const std::vector<float> wd = dequantized(weight, w, n);
    const std::vector<float> ad = dequantized(activation_type(weight), a, n);
    for (int64_t i = 0; i < n; ++i) {
      const double p = static_cast<double>(wd[i]) * ad[i];
      reference += p;
      magnitude += std::fabs(p);
    }
    extra = q8_1_sum_bound(weight, w, a, n);
  }
  float dot(Isa isa) const { return kernels_for(isa).vec_dot[static_cast<int>(weight)](n, w.data(), a.data()); }
  double tolerance() const { return 1e-5 * magnitude + extra + 1e-30; }
};

std::string label(Isa isa, QuantType type, int64_t n) {
  return std::string(isa_name(isa)) + " " + type_name(type) + " n=" + std::to_string(n);
}

TEST(CpuSimple, TablesHaveEveryEntry) {
  for (Isa isa : isas()) {
    const KernelTable& t = kernels_for(isa);
    EXPECT_EQ(t.isa, isa);
    for (QuantType type : kWeightTypes) {
      EXPECT_NE(t.vec_dot[static_cast<int>(type)], nullptr) << label(isa, type, 0);
    }
    for (QuantType type : kActivationTypes) {
      EXPECT_NE(t.quantize[static_cast<int>(type)], nullptr) << label(isa, type, 0);
    }
    if (isa != Isa::kScalar) {  // a SIMD level really replaces the scalar kernels
      const KernelTable& s = kernels_for(Isa::kScalar);
      EXPECT_NE(t.vec_dot[static_cast<int>(QuantType::Q4_0)], s.vec_dot[static_cast<int>(QuantType::Q4_0)]);
      EXPECT_NE(t.quantize[static_cast<int>(QuantType::Q8_0)], s.quantize[static_cast<int>(QuantType::Q8_0)]);
    }
  }
  EXPECT_EQ(kernels().isa, active_isa());
}

void expect_quantizers_exact(const std::vector<float>& x, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  for (QuantType act : kActivationTypes) {
    if (n % type_traits(act).block_elems != 0) continue;
    AlignedRow want(act, n);
    quantize_row(act, x.data(), want.data(), n);
    for (Isa isa : isas()) {
      AlignedRow got(act, n);
      kernels_for(isa).quantize[static_cast<int>(act)](x.data(), got.data(), n);
      EXPECT_EQ(got.byte_vector(), want.byte_vector()) << label(isa, act, n) << " " << what;
      EXPECT_EQ(got.storage.back(), 0xA5A5A5A5u) << label(isa, act, n) << " wrote past the row";
    }
  }
}

TEST(CpuSimple, QuantizersMatchReferenceBytes) {
  for (int64_t n : kSimpleShapes) expect_quantizers_exact(random_floats(n, 7 + static_cast<uint32_t>(n)), "random");
  for (int64_t n : kFloatOnlyShapes) expect_quantizers_exact(random_floats(n, 11), "random");
}

// Ties of roundf and of nearest_int, zero blocks, a lone huge or tiny value, subnormals,
// infinities and NaN: the corners where a SIMD rounding could differ from quant/'s.
TEST(CpuSimple, QuantizersMatchReferenceOnCorners) {
  std::vector<float> x(1024, 0.f);
  // block 0: d = 1 exactly (amax 127), every x / d halfway between two integers
  x[0] = 127.f;
  for (int j = 1; j < 32; ++j) x[j] = static_cast<float>(j - 16) + 0.5f;
  // block 1: zero. block 2: one huge value among tiny ones. block 3: subnormals only.
  x[64] = 3e38f;
  for (int j = 65; j < 96; ++j) x[j] = 1e-30f * static_cast<float>(j);
  for (int j = 96; j < 128; ++j) x[j] = std::numeric_limits<float>::denorm_min() * static_cast<float>(j - 100);
  // block 4: NaN and -0; block 5: +inf; block 6: -inf with NaN; block 7: largest magnitude twice, signs differ
  x[128] = std::numeric_limits<float>::quiet_NaN();
  x[129] = -0.f;
  x[130] = 5.f;
  x[160] = std::numeric_limits<float>::infinity();
  x[161] = 1.f;
  x[192] = -std::numeric_limits<float>::infinity();
  x[193] = std::bit_cast<float>(0xffc12345u);  // a negative NaN with payload
  x[224] = 2.f;
  x[225] = -2.f;
  x[226] = 1.f;
  // super-block 1 (256..511): Q8_K ties: max -127 gives iscale 1, values halfway
  x[256] = -127.f;
  for (int j = 257; j < 512; ++j) x[j] = static_cast<float>((j % 200) - 100) + 0.5f;
  // super-block 2 (512..767): the largest magnitude first positive, then negative
  x[600] = 9.f;
  x[700] = -9.f;
  x[701] = std::numeric_limits<float>::signaling_NaN();
  // super-block 3 (768..1023): F16 / BF16 rounding corners
  x[800] = 65519.f;
  x[801] = 65520.f;
  x[802] = std::bit_cast<float>(0x3f808000u);  // bf16 tie, round to even (down)
  x[803] = std::bit_cast<float>(0x3f818000u);  // bf16 tie, round to even (up)
  x[804] = 0x1p-25f;                           // fp16 tie with zero
  x[805] = 0x1.8p-24f;                         // fp16 subnormal tie
  x[806] = std::bit_cast<float>(0x7f7fffffu);  // FLT_MAX: bf16 rounds to inf
  expect_quantizers_exact(x, "corners");
}

TEST(CpuSimple, DotsMatchScalarOnEveryIsa) {
  uint32_t seed = 1;
  for (QuantType type : kWeightTypes) {
    for (int64_t n : shapes_for(type)) {
      const DotCase c(type, n, seed++);
      const float scalar = c.dot(Isa::kScalar);
      for (Isa isa : isas()) {
        const float got = c.dot(isa);
        EXPECT_LE(std::fabs(static_cast<double>(got) - scalar), c.tolerance())
            << label(isa, type, n) << ": " << got << " vs scalar " << scalar;
      }
    }
  }
}

TEST(CpuSimple, ScalarDotsMatchDequantizedReference) {
  uint32_t seed = 500;
  for (QuantType type : kWeightTypes) {
    for (int64_t n : shapes_for(type)) {
      const DotCase c(type, n, seed++);
      const float got = c.dot(Isa::kScalar);
      EXPECT_LE(std::fabs(static_cast<double>(got) - c.reference), c.tolerance())
          << label(Isa::kScalar, type, n) << ": " << got << " vs reference " << c.reference;
    }
  }
}

// Weight blocks of random bytes (every code pattern, Q8_0's -128 included), the scale
// fields then set to moderate finite values: each ISA against the scalar table.
void randomize_blocks(QuantType type, AlignedRow& w, int64_t n, std::mt19937& rng) {
  auto* bytes = static_cast<uint8_t*>(w.data());
  for (size_t i = 0; i < w.bytes; ++i) bytes[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  std::uniform_int_distribution<int> exponent(110, 140);
  const size_t block_bytes = type_traits(type).block_bytes;
  for (int64_t b = 0; b < n / kQK32; ++b) {
    uint8_t* block = bytes + static_cast<size_t>(b) * block_bytes;
    auto set_half = [block](size_t offset, float v) {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(block + offset, &h, sizeof(h));
    };
    switch (type) {
      case QuantType::MXFP4: block[0] = static_cast<uint8_t>(exponent(rng)); break;
      case QuantType::Q4_1: case QuantType::Q5_1:
        set_half(0, scale(rng));
        set_half(2, scale(rng));
        break;
      default: set_half(0, scale(rng)); break;  // d leads every other 32-element block
    }
  }
}

TEST(CpuSimple, DotsMatchScalarOnRandomBlocks) {
  std::mt19937 rng(77);
  for (QuantType type : kWeightTypes) {
    if (type_traits(type).block_elems != kQK32) continue;
    for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{4096 + 32}}) {
      DotCase c(type, n, 4000 + static_cast<uint32_t>(n));
      randomize_blocks(type, c.w, n, rng);
      const std::vector<float> wd = dequantized(type, c.w, n);
      const std::vector<float> ad = dequantized(activation_type(type), c.a, n);
      c.magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) c.magnitude += std::fabs(static_cast<double>(wd[i]) * ad[i]);
      c.extra = q8_1_sum_bound(type, c.w, c.a, n);
      const float scalar = c.dot(Isa::kScalar);
      for (Isa isa : isas()) {
        EXPECT_LE(std::fabs(static_cast<double>(c.dot(isa)) - scalar), c.tolerance()) << label(isa, type, n);
      }
    }
  }
}

// F16 / BF16 rows carry no alignment requirement: rows starting at an odd address.
TEST(CpuSimple, HalfDotsAtOddAddresses) {
  for (QuantType type : {QuantType::F16, QuantType::BF16}) {
    for (int64_t n : {int64_t{33}, int64_t{4096 + 5}}) {
      const DotCase c(type, n, 900, /*offset=*/1);
      for (Isa isa : isas()) {
        EXPECT_LE(std::fabs(static_cast<double>(c.dot(isa)) - c.reference), c.tolerance()) << label(isa, type, n);
      }
    }
  }
}

TEST(CpuSimple, ActivationPairing) {
  EXPECT_EQ(activation_type(QuantType::Q4_0), QuantType::Q8_0);
  EXPECT_EQ(activation_type(QuantType::Q5_0), QuantType::Q8_0);
  EXPECT_EQ(activation_type(QuantType::Q8_0), QuantType::Q8_0);
  EXPECT_EQ(activation_type(QuantType::IQ4_NL), QuantType::Q8_0);
  EXPECT_EQ(activation_type(QuantType::MXFP4), QuantType::Q8_0);
  EXPECT_EQ(activation_type(QuantType::Q4_1), QuantType::Q8_1);
  EXPECT_EQ(activation_type(QuantType::Q5_1), QuantType::Q8_1);
  EXPECT_EQ(activation_type(QuantType::Q4_K), QuantType::Q8_K);
  EXPECT_EQ(activation_type(QuantType::IQ4_XS), QuantType::Q8_K);
  EXPECT_EQ(activation_type(QuantType::F16), QuantType::F16);
  EXPECT_EQ(activation_type(QuantType::BF16), QuantType::BF16);
  EXPECT_EQ(activation_type(QuantType::F32), QuantType::F32);
  EXPECT_EQ(activation_row_bytes(QuantType::Q4_0, 4096), 4096u / 32 * 34);
  EXPECT_EQ(activation_row_bytes(QuantType::Q5_1, 64), 2u * 36);
  EXPECT_EQ(activation_row_bytes(QuantType::Q6_K, 512), 2u * 292);
  EXPECT_EQ(activation_row_bytes(QuantType::BF16, 7), 14u);
  EXPECT_EQ(activation_row_bytes(QuantType::F32, 7), 28u);
}

TEST(CpuIsa, NamesRoundTrip) {
  for (int i = 0; i < 4; ++i) {
    const Isa isa = static_cast<Isa>(i);
    EXPECT_EQ(isa_from_name(isa_name(isa)), isa);
  }
  EXPECT_EQ(isa_from_name("AVX512VNNI"), Isa::kAvx512Vnni);
  EXPECT_EQ(isa_from_name("Scalar"), Isa::kScalar);
  EXPECT_EQ(isa_from_name("avx"), std::nullopt);
  EXPECT_EQ(isa_from_name("avx2 "), std::nullopt);
  EXPECT_EQ(isa_from_name(""), std::nullopt);
}

TEST(CpuIsa, OverrideOnlyLowers) {
  EXPECT_EQ(parse_isa_override(nullptr, Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(parse_isa_override("", Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(parse_isa_override("scalar", Isa::kAvx512Vnni), Isa::kScalar);
  EXPECT_EQ(parse_isa_override("avx2", Isa::kAvx512Vnni), Isa::kAvx2);
  EXPECT_EQ(parse_isa_override("AVX512", Isa::kAvx512Vnni), Isa::kAvx512);
  EXPECT_EQ(parse_isa_override("avx512vnni", Isa::kAvx512Vnni), Isa::kAvx512Vnni);
  // above the hardware: the hardware's level
  EXPECT_EQ(parse_isa_override("avx512vnni", Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(parse_isa_override("avx512", Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(parse_isa_override("avx2", Isa::kScalar), Isa::kScalar);
  // unknown: the hardware's level
  EXPECT_EQ(parse_isa_override("sse4", Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(parse_isa_override("fastest", Isa::kAvx512Vnni), Isa::kAvx512Vnni);
}

TEST(CpuIsa, ActiveIsNotAboveHardware) {
  EXPECT_LE(active_isa(), detect_hardware_isa());
  EXPECT_EQ(active_isa(), parse_isa_override(std::getenv("MOETIER_CPU_ISA"), detect_hardware_isa()));
}

}  // namespace
// The F16 widening of every level (the scalar one computes the three cases side by side
// and selects): axpy_f16 with a = 1 onto zeros gives every one of the 65536 halves exactly
// (NaNs stay NaN with their sign), and an F16 dot with a one-hot activation picks each value.
TEST(CpuSimple, F16WideningExactForEveryHalf) {
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  for (Isa isa : isas()) {
    const KernelTable& t = kernels_for(isa);
    std::vector<float> y(65536, 0.f);
    t.axpy_f16(65536, 1.f, halves.data(), y.data());
    int wrong = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float want = fp16_to_fp32(static_cast<uint16_t>(h));
      const bool same = std::isnan(want) ? (std::isnan(y[h]) && std::signbit(y[h]) == std::signbit(want))
                                         : y[h] == want;
      if (!same && ++wrong <= 5) ADD_FAILURE() << isa_name(isa) << ": half 0x" << std::hex << h << " gave " << y[h];
    }
    EXPECT_EQ(wrong, 0) << isa_name(isa);
    // The dot: eight halves (a whole lane group) against a one-hot F16 activation.
    const uint16_t one = fp32_to_fp16(1.f);
    for (uint32_t h = 0; h < 65536; h += 7) {
      if (std::isnan(fp16_to_fp32(static_cast<uint16_t>(h))) || std::isinf(fp16_to_fp32(static_cast<uint16_t>(h)))) continue;
      uint16_t w[8] = {0, 0, 0, static_cast<uint16_t>(h), 0, 0, 0, 0};
      uint16_t a[8] = {0, 0, 0, one, 0, 0, 0, 0};
      ASSERT_EQ(t.vec_dot[static_cast<int>(QuantType::F16)](8, w, a), fp16_to_fp32(static_cast<uint16_t>(h)) + 0.f)
          << isa_name(isa) << " half 0x" << std::hex << h;
    }
  }
}

}  // namespace mt::cpu
