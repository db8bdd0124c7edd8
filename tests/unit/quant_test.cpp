// quant/: dequantizers bit-exact against ggml's golden vectors, quantizers against
// ggml's bytes and error, fp16/bf16 conversions on every edge, and the traits table.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace mt {
namespace {

const std::string kGoldenDir = std::string(MOETIER_TESTDATA_DIR) + "/quant_golden/";
constexpr int64_t kGoldenElems = 512;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(sum / static_cast<double>(a.size()));
}

// Both helpers stage the blocks in uint32_t storage, aligned for every block struct.
std::vector<uint8_t> quantize(QuantType type, const std::vector<float>& x) {
  const size_t bytes = *row_bytes(type, x.size());
  std::vector<uint32_t> aligned((bytes + 3) / 4);
  quantize_row(type, x.data(), aligned.data(), static_cast<int64_t>(x.size()));
  std::vector<uint8_t> out(bytes);
  std::memcpy(out.data(), aligned.data(), bytes);
  return out;
}

std::vector<float> dequantize(QuantType type, const std::vector<uint8_t>& q, size_t n) {
  std::vector<uint32_t> aligned((q.size() + 3) / 4);
  std::memcpy(aligned.data(), q.data(), q.size());
  std::vector<float> out(n);
  dequantize_row(type, aligned.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

// How our quantizer's bytes compare with ggml's _ref output on input.f32.
enum class ByteMatch {
  kExact,
  // Exact except the codes of all-zero blocks (d = 0, so any code decodes to 0): ggml's
  // IQ4_NL reference leaves the previous block's codes there, we write code 8.
  kExactButZeroBlockCodes,
};

// One golden type: the RMSE ggml's reference quantizer reached on input.f32 (from
// testdata/quant_golden/README.md) and how closely we reproduce its bytes.
struct GoldenCase {
  QuantType type;
  double ggml_rmse;
  ByteMatch bytes;
};

const GoldenCase kGoldenCases[] = {
    {QuantType::Q4_0, 4.69e-3, ByteMatch::kExact},
    {QuantType::Q4_1, 3.83e-3, ByteMatch::kExact},
    {QuantType::Q5_0, 2.32e-3, ByteMatch::kExact},
    {QuantType::Q5_1, 1.81e-3, ByteMatch::kExact},
    {QuantType::Q8_0, 2.84e-4, ByteMatch::kExact},
    {QuantType::Q8_1, 2.84e-4, ByteMatch::kExact},
    {QuantType::Q2_K, 1.40e-2, ByteMatch::kExact},
    {QuantType::Q3_K, 8.08e-3, ByteMatch::kExact},
    {QuantType::Q4_K, 3.29e-3, ByteMatch::kExact},
    {QuantType::Q5_K, 1.71e-3, ByteMatch::kExact},
    {QuantType::Q6_K, 8.98e-4, ByteMatch::kExact},
    {QuantType::Q8_K, 6.15e-4, ByteMatch::kExact},
    {QuantType::IQ4_NL, 3.96e-3, ByteMatch::kExactButZeroBlockCodes},
    {QuantType::IQ4_XS, 3.96e-3, ByteMatch::kExact},
    {QuantType::MXFP4, 6.48e-3, ByteMatch::kExact},
};

class QuantGoldenTest : public testing::TestWithParam<GoldenCase> {
 protected:
  std::string path(const char* suffix) const { return kGoldenDir + type_name(GetParam().type) + suffix; }
};

TEST_P(QuantGoldenTest, DequantizeIsBitExact) {
  const QuantType type = GetParam().type;
  ASSERT_TRUE(has_dequantize(type));
  const std::vector<uint8_t> q = read_bytes(path(".q.bin"));
  ASSERT_EQ(q.size(), *row_bytes(type, kGoldenElems));
  const std::vector<float> expected = read_floats(path(".deq.f32"));
  ASSERT_EQ(expected.size(), static_cast<size_t>(kGoldenElems));
  const std::vector<float> got = dequantize(type, q, kGoldenElems);
  int mismatches = 0;
  for (int64_t i = 0; i < kGoldenElems; ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(expected[i])) {
      if (++mismatches <= 5) ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
}

TEST_P(QuantGoldenTest, QuantizeErrorWithinBound) {
  const GoldenCase& c = GetParam();
  ASSERT_TRUE(has_quantize(c.type));
  const std::vector<float> input = read_floats(kGoldenDir + "input.f32");
  ASSERT_EQ(input.size(), static_cast<size_t>(kGoldenElems));
  const std::vector<float> round_trip = dequantize(c.type, quantize(c.type, input), input.size());
  for (float v : round_trip) ASSERT_TRUE(std::isfinite(v));
  const double err = rmse(input, round_trip);
  std::printf("[   RMSE   ] %-7s %.4e  (ggml %.2e, ratio %.3f)\n", type_name(c.type), err, c.ggml_rmse,
              err / c.ggml_rmse);
  EXPECT_LE(err, 1.25 * c.ggml_rmse);
}

TEST_P(QuantGoldenTest, QuantizeMatchesGgmlBytes) {
  const GoldenCase& c = GetParam();
  const std::vector<float> input = read_floats(kGoldenDir + "input.f32");
  const std::vector<uint8_t> expected = read_bytes(path(".q.bin"));
  const std::vector<uint8_t> got = quantize(c.type, input);
  ASSERT_EQ(got.size(), expected.size());
  const size_t block_bytes = type_traits(c.type).block_bytes;
  int mismatches = 0, skipped = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (c.bytes == ByteMatch::kExactButZeroBlockCodes) {
      // IQ4_NL: d is the first 2 bytes of the block, the codes follow.
      const size_t block = i / block_bytes * block_bytes;
      if (i - block >= 2 && expected[block] == 0 && expected[block + 1] == 0) {
        ++skipped;
        continue;
      }
    }
    if (got[i] != expected[i] && ++mismatches <= 5) {
      ADD_FAILURE() << "byte " << i << ": " << int(got[i]) << " vs " << int(expected[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
  // input.f32 has exactly one all-zero 32-block (elements 448..479).
  EXPECT_EQ(skipped, c.bytes == ByteMatch::kExact ? 0 : 16);
}

// Degenerate and extreme rows: all zero, far below the fp16 range (normal and
// subnormal float32), constant, one spike, large, alternating. Output must be finite,
// zeros must stay zero, and no element may be off by more than twice the row's magnitude
// (plus one fp16 subnormal step).
TEST_P(QuantGoldenTest, QuantizeIsRobust) {
  const QuantType type = GetParam().type;
  constexpr size_t n = 512;
  uint32_t state = 0x9e3779b9u;
  auto uniform = [&state] {  // xorshift32 in [-1, 1)
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return static_cast<float>(state) / 2147483648.f - 1.f;
  };
  std::vector<std::vector<float>> rows;
  rows.emplace_back(n, 0.f);
  for (float scale : {1e-30f, 1e-40f, 1e-7f, 1000.f}) {
    std::vector<float> r(n);
    for (float& v : r) v = scale * uniform();
    rows.push_back(r);
  }
  rows.emplace_back(n, 0.5f);
  rows.emplace_back(n, -3.f);
  std::vector<float> spike(n, 0.f);
  spike[37] = 3.f;
  spike[300] = -2.f;
  rows.push_back(spike);
  std::vector<float> alternating(n);
  for (size_t i = 0; i < n; ++i) alternating[i] = (i % 2 != 0) ? 1.f : -1.f;
  rows.push_back(alternating);

  for (size_t r = 0; r < rows.size(); ++r) {
    const std::vector<float>& x = rows[r];
    const std::vector<float> y = dequantize(type, quantize(type, x), n);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << "row " << r << " element " << i;
      if (amax == 0) {
        ASSERT_EQ(y[i], 0.f) << "row " << r << " element " << i;
      }
      // Affine formats (a min and a scale) may be off by up to twice the magnitude when
      // the row is below the fp16 range and only the min survives, rounded to the fp16
      // subnormal step 2^-24.
      ASSERT_LE(std::fabs(y[i] - x[i]), amax * 2.01f + 0x1p-24f) << "row " << r << " element " << i;
    }
  }
}

std::string golden_case_name(const testing::TestParamInfo<GoldenCase>& info) {
  return type_name(info.param.type);
}

INSTANTIATE_TEST_SUITE_P(QuantGolden, QuantGoldenTest, testing::ValuesIn(kGoldenCases), golden_case_name);

TEST(QuantReference, SixteenBitRowsRoundTrip) {
  const std::vector<float> input = read_floats(kGoldenDir + "input.f32");
  for (QuantType type : {QuantType::F32, QuantType::F16, QuantType::BF16}) {
    ASSERT_TRUE(has_quantize(type) && has_dequantize(type));
    const std::vector<uint8_t> q = quantize(type, input);
    ASSERT_EQ(q.size(), *row_bytes(type, input.size()));
    const std::vector<float> y = dequantize(type, q, input.size());
    const float rel = type == QuantType::F32 ? 0.f : type == QuantType::F16 ? 0x1p-11f : 0x1p-8f;
    for (size_t i = 0; i < input.size(); ++i) {
      EXPECT_LE(std::fabs(y[i] - input[i]), std::fabs(input[i]) * rel + 0x1p-25f) << type_name(type) << " " << i;
    }
    // Little-endian on disk: element 0 of the F16 row is fp32_to_fp16(input[0]).
    if (type == QuantType::F16) {
      EXPECT_EQ(q[0] | (q[1] << 8), fp32_to_fp16(input[0]));
    }
  }
}

TEST(QuantReference, CoversTheSupportedTypes) {
  for (const TypeTraits& t : all_type_traits()) {
    EXPECT_EQ(has_dequantize(t.type), t.has_reference) << t.name;
    EXPECT_EQ(has_quantize(t.type), t.has_reference) << t.name;
  }
}

TEST(QuantReference, ZeroBlockEdgeCases) {
  // ggml's Q4_0 stores -0.0 for an all-zero block; MXFP4 stores exponent byte 0.
  const std::vector<float> zeros(32, 0.f);
  const std::vector<uint8_t> q4 = quantize(QuantType::Q4_0, zeros);
  EXPECT_EQ(q4[0] | (q4[1] << 8), 0x8000);
  EXPECT_EQ(quantize(QuantType::MXFP4, zeros)[0], 0x00);
  EXPECT_EQ(std::bit_cast<float>(e8m0_half_bits(0)), 0x1p-128f);
  EXPECT_EQ(e8m0_half_bits(1), 0x00400000u);
  EXPECT_EQ(std::bit_cast<float>(e8m0_half_bits(128)), 1.f);
}

TEST(QuantDeathTest, RejectsPartialBlocks) {
  std::vector<float> x(48, 0.f);
  std::vector<uint8_t> q(64);
  EXPECT_DEATH(quantize_row(QuantType::Q4_0, x.data(), q.data(), 48), "");
  EXPECT_DEATH(dequantize_row(QuantType::IQ2_XXS, q.data(), x.data(), 256), "");
}

// ---- fp16 / bf16 -------------------------------------------------------------------

bool is_fp16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Fp16, ExactValues) {
  EXPECT_EQ(fp32_to_fp16(0.f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.f), 0x7BFF);       // largest finite
  EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);      // smallest normal
  EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(1023 * 0x1p-24f), 0x03FF);  // largest subnormal
  EXPECT_EQ(fp32_to_fp16(-0x1p-24f), 0x8001);
}

TEST(Fp16, OverflowInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp16(inf), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-inf), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7BFF);  // just below the midpoint 65520
  EXPECT_EQ(fp32_to_fp16(65520.f), 0x7C00);     // the tie goes to the even side: inf
  EXPECT_EQ(fp32_to_fp16(-65520.f), 0xFC00);
  EXPECT_TRUE(is_fp16_nan(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_fp16_nan(fp32_to_fp16(from_bits(0x7F800001u))));  // signalling, low payload
  const uint16_t neg_nan = fp32_to_fp16(from_bits(0xFFC00000u));
  EXPECT_TRUE(is_fp16_nan(neg_nan));
  EXPECT_EQ(neg_nan & 0x8000, 0x8000);
}

TEST(Fp16, UnderflowAndSubnormalRounding) {
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);                   // tie with 0 -> even (0)
  EXPECT_EQ(fp32_to_fp16(std::nextafter(0x1p-25f, 1.f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);               // 1.5 ulp -> even (2)
  EXPECT_EQ(fp32_to_fp16(5 * 0x1p-25f), 0x0002);               // 2.5 ulp -> even (2)
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(from_bits(0x00000001u)), 0x0000);     // float32 subnormal
  EXPECT_EQ(fp32_to_fp16(2047 * 0x1p-25f), 0x0400);            // rounds up into the normals
}

TEST(Fp16, NormalRoundingTies) {
  EXPECT_EQ(fp32_to_fp16(1.f + 0x1p-11f), 0x3C00);              // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.f + 3 * 0x1p-11f), 0x3C02);          // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.f + 0x1p-11f + 0x1p-20f), 0x3C01);   // above the tie
  EXPECT_EQ(fp32_to_fp16(2048.f + 1.f), 0x6800);                // 2049: tie -> 2048
  EXPECT_EQ(fp32_to_fp16(2048.f + 3.f), 0x6802);                // 2051: tie -> 2052
}

TEST(Fp16, EveryMidpointRoundsToEven) {
  // For each pair of adjacent finite halves: the midpoint goes to the even code, the
  // floats on either side of it to the nearer code. Covers subnormals and exponent steps.
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double lo = fp16_to_fp32(static_cast<uint16_t>(h | sign));
      const double hi = fp16_to_fp32(static_cast<uint16_t>((h + 1) | sign));
      const auto mid = static_cast<float>((lo + hi) / 2);
      ASSERT_EQ(double(mid), (lo + hi) / 2);
      const uint32_t even = (h % 2 == 0) ? h : h + 1;
      ASSERT_EQ(fp32_to_fp16(mid), even | sign) << h;
      ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, static_cast<float>(lo))), h | sign) << h;
      ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, static_cast<float>(hi))), (h + 1) | sign) << h;
    }
  }
}

TEST(Fp16, WideningIsExactAndRoundTrips) {
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x0400), 0x1p-14f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.f);
  EXPECT_EQ(fp16_to_fp32(0x3555), 0x1.554p-2f);
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
  EXPECT_EQ(fp16_to_fp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_fp32(0xFC00), -std::numeric_limits<float>::infinity());
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if (is_fp16_nan(bits)) {
      ASSERT_TRUE(std::isnan(fp16_to_fp32(bits))) << h;
      ASSERT_TRUE(is_fp16_nan(fp32_to_fp16(fp16_to_fp32(bits)))) << h;
    } else {
      ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(bits)), bits) << h;
    }
  }
}

TEST(Fp16, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(0.f), 0x0000);
  EXPECT_EQ(fp32_to_bf16(-0.f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(1.f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F807FFFu)), 0x3F80);  // below the tie
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00000001u)), 0x0000);  // subnormals round, not flush
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008001u)), 0x0001);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(Fp16, Bf16NanStaysNan) {
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7FC00000u)), 0x7FC0);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7F800001u)), 0x7FC0);  // would round to inf naively
  EXPECT_EQ(fp32_to_bf16(from_bits(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7FFFFFFFu)), 0x7FFF);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7FC1)));
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.f);
  EXPECT_EQ(bf16_to_fp32(0xC040), -3.f);
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    if (std::isnan(bf16_to_fp32(bits))) continue;
    ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(bits)), bits) << b;
  }
}

// ---- traits table ------------------------------------------------------------------

TEST(Types, RowBytes) {
  struct Expect {
    QuantType type;
    uint64_t bytes_per_512;
  };
  const Expect expects[] = {
      {QuantType::F32, 2048},   {QuantType::F16, 1024},  {QuantType::BF16, 1024},
      {QuantType::Q4_0, 288},   {QuantType::Q4_1, 320},  {QuantType::Q5_0, 352},
      {QuantType::Q5_1, 384},   {QuantType::Q8_0, 544},  {QuantType::Q8_1, 576},
      {QuantType::Q2_K, 168},   {QuantType::Q3_K, 220},  {QuantType::Q4_K, 288},
      {QuantType::Q5_K, 352},   {QuantType::Q6_K, 420},  {QuantType::Q8_K, 584},
      {QuantType::IQ4_NL, 288}, {QuantType::IQ4_XS, 272}, {QuantType::MXFP4, 272},
  };
  for (const Expect& e : expects) {
    ASSERT_TRUE(row_bytes(e.type, 512).has_value()) << type_name(e.type);
    EXPECT_EQ(*row_bytes(e.type, 512), e.bytes_per_512) << type_name(e.type);
  }
  EXPECT_EQ(*row_bytes(QuantType::Q4_K, 0), 0u);
  EXPECT_FALSE(row_bytes(QuantType::Q4_0, 48).has_value());   // not whole blocks
  EXPECT_FALSE(row_bytes(QuantType::Q4_K, 128).has_value());
  EXPECT_FALSE(row_bytes(QuantType::F32, uint64_t{1} << 63).has_value());  // overflow
}

TEST(Types, BlockStructsMatchTheTable) {
  EXPECT_EQ(type_traits(QuantType::Q4_0).block_bytes, sizeof(BlockQ4_0));
  EXPECT_EQ(type_traits(QuantType::Q2_K).block_bytes, sizeof(BlockQ2_K));
  EXPECT_EQ(type_traits(QuantType::Q3_K).block_bytes, sizeof(BlockQ3_K));
  EXPECT_EQ(type_traits(QuantType::Q6_K).block_bytes, sizeof(BlockQ6_K));
  EXPECT_EQ(type_traits(QuantType::Q8_K).block_bytes, sizeof(BlockQ8_K));
  EXPECT_EQ(type_traits(QuantType::IQ4_XS).block_bytes, sizeof(BlockIQ4_XS));
  EXPECT_EQ(type_traits(QuantType::MXFP4).block_bytes, sizeof(BlockMXFP4));
  EXPECT_EQ(type_traits(QuantType::Q4_K).block_elems, static_cast<uint32_t>(BlockQ4_K::kElems));
  EXPECT_EQ(type_traits(QuantType::MXFP4).block_elems, static_cast<uint32_t>(BlockMXFP4::kElems));
}

TEST(Types, NameRoundTrip) {
  for (const TypeTraits& t : all_type_traits()) {
    EXPECT_EQ(type_from_name(t.name), t.type) << t.name;
    std::string upper = t.name;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(type_from_name(upper), t.type) << upper;
    EXPECT_EQ(find_type_traits(static_cast<uint32_t>(t.type)), &t);
  }
  EXPECT_EQ(type_from_name("q4_2"), std::nullopt);
  EXPECT_EQ(type_from_name(""), std::nullopt);
  EXPECT_EQ(type_from_name("q4_k_m"), std::nullopt);
}

TEST(Types, UnknownIdsHaveNoTraits) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 1000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(find_type_traits(id), nullptr) << id;
  }
  ASSERT_NE(find_type_traits(39), nullptr);
  EXPECT_STREQ(find_type_traits(39)->name, "mxfp4");
  EXPECT_EQ(all_type_traits().size(), 35u);
}

}  // namespace
}  // namespace mt
