// cpu/ K-quant dots (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K): the scalar table
// against the dequantize-then-dot reference in double, and every ISA's table up to the
// hardware's against the scalar table, over types x shapes x row kinds. Both bounds are
// |diff| <= 1e-5 * sum|w_i * a_i| + 1e-6 over the dequantized rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/reference.h"
#include "quant/types.h"
#include "test_util.h"

namespace mt::cpu {
namespace {

constexpr QuantType kTypes[] = {QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K,
                                QuantType::Q5_K, QuantType::Q6_K, QuantType::IQ4_XS};
constexpr int64_t kKShapes[] = {256, 512, 2048, 4096, 14336};

// How a test row is made. The quantized kinds go through quant/'s quantize_row; the raw
// kinds write block bytes directly (every code and scale pattern, incl. the extremes that
// would saturate a careless int16 path) with finite block scales.
enum class RowKind { kGaussian, kNegativeHeavy, kPositiveOffset, kOutliers, kRawBytes, kExtremes };
constexpr RowKind kRowKinds[] = {RowKind::kGaussian, RowKind::kNegativeHeavy, RowKind::kPositiveOffset,
                                 RowKind::kOutliers, RowKind::kRawBytes,      RowKind::kExtremes};
const char* kind_name(RowKind k) {
  static const char* const kNames[] = {"gaussian", "negative-heavy", "positive-offset", "outliers", "raw-bytes",
                                       "extremes"};
  return kNames[static_cast<int>(k)];
}

// A row's bytes at a given misalignment inside exactly-sized storage (ASan sees any read
// past the end). Weight blocks need 2-byte alignment, Q8_K blocks 4.
class Row {
 public:
  Row(size_t bytes, size_t offset) : storage_(bytes + offset), offset_(offset) {}
  uint8_t* data() { return storage_.data() + offset_; }
  const uint8_t* data() const { return storage_.data() + offset_; }
  size_t size() const { return storage_.size() - offset_; }

 private:
  std::vector<uint8_t> storage_;  // operator new: 16-aligned
  size_t offset_;
};

using test::bytes_of;

// Floats with a magnitude drawn per 256-block (some blocks all zero) shaped by `kind`.
std::vector<float> random_floats(int64_t n, RowKind kind, std::mt19937& rng) {
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 9);
  static const float kMagnitudes[] = {0.f, 1e-3f, 0.02f, 1.f, 40.f};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float mag = kMagnitudes[pick(rng) % 5];
    for (int64_t j = b * kQKK; j < (b + 1) * kQKK; ++j) {
      float v = gauss(rng);
      switch (kind) {
        case RowKind::kNegativeHeavy: v = pick(rng) == 0 ? std::fabs(v) : -std::fabs(v) - 0.5f; break;
        case RowKind::kPositiveOffset: v += 4.f; break;
        case RowKind::kOutliers: v *= pick(rng) == 0 && pick(rng) < 2 ? 50.f : 1.f; break;
        default: break;
      }
      x[static_cast<size_t>(j)] = mag * v;
    }
  }
  return x;
}

// Byte offsets of the fp16 scales d (and dmin) inside each weight block.
struct ScaleFields {
  size_t d;
  size_t dmin;  // == d: none
};
ScaleFields scale_fields(QuantType type) {
  switch (type) {
    case QuantType::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case QuantType::Q3_K: return {offsetof(BlockQ3_K, d), offsetof(BlockQ3_K, d)};
    case QuantType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case QuantType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case QuantType::Q6_K: return {offsetof(BlockQ6_K, d), offsetof(BlockQ6_K, d)};
    default: return {offsetof(BlockIQ4_XS, d), offsetof(BlockIQ4_XS, d)};
  }
}

void put_half(uint8_t* p, float v) {
  const half_bits h = fp32_to_fp16(v);
  std::memcpy(p, &h, sizeof(h));
}

// Raw kinds: every byte random (kRawBytes) or 0x00 / 0xFF (kExtremes), then finite scales.
void fill_raw_weights(QuantType type, RowKind kind, uint8_t* row, int64_t n, std::mt19937& rng) {
  const size_t block_bytes = type_traits(type).block_bytes;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-1.f, 1.f);
  for (size_t i = 0; i < bytes_of(type, n); ++i) {
    const int b = byte(rng);
    row[i] = static_cast<uint8_t>(kind == RowKind::kExtremes ? (b & 1) * 0xFF : b);
  }
  const ScaleFields f = scale_fields(type);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    put_half(block + f.d, scale(rng));
    if (f.dmin != f.d) put_half(block + f.dmin, scale(rng));
  }
}

// Raw Q8_K activations: int8 over the full range (kExtremes: only -128 and 127) with
// consistent bsums.
void fill_raw_activations(RowKind kind, uint8_t* row, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> value(-128, 127);
  std::uniform_real_distribution<float> scale(1e-3f, 1.f);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ8_K blk{};
    blk.d = scale(rng);
    for (int j = 0; j < kQKK; ++j) {
      const int v = value(rng);
      blk.qs[j] = static_cast<int8_t>(kind == RowKind::kExtremes ? (v < 0 ? -128 : 127) : v);
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * g + l];
      blk.bsums[g] = static_cast<int16_t>(sum);
    }
    std::memcpy(row + static_cast<size_t>(b) * sizeof(BlockQ8_K), &blk, sizeof(blk));
  }
}

// One test case: a weight row of `type` and a Q8_K activation row of n elements, plus
// the reference dot in double and the tolerance of both comparisons.
struct Case {
  Row weights;
  Row acts;
  double reference = 0;
  double tolerance = 0;
  std::string name;
};

Case make_case(QuantType type, int64_t n, RowKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  Case c{Row(bytes_of(type, n), 2), Row(bytes_of(QuantType::Q8_K, n), 4), 0, 0,
         std::string(type_name(type)) + " n=" + std::to_string(n) + " " + kind_name(kind)};
  if (kind == RowKind::kRawBytes || kind == RowKind::kExtremes) {
    fill_raw_weights(type, kind, c.weights.data(), n, rng);
    fill_raw_activations(kind, c.acts.data(), n, rng);
  } else {
    // quantize_row wants block-aligned destinations: stage in fresh vectors.
    std::vector<uint8_t> w(c.weights.size()), a(c.acts.size());
    quantize_row(type, random_floats(n, kind, rng).data(), w.data(), n);
    quantize_row(QuantType::Q8_K, random_floats(n, RowKind::kOutliers, rng).data(), a.data(), n);
    std::memcpy(c.weights.data(), w.data(), w.size());
    std::memcpy(c.acts.data(), a.data(), a.size());
  }
  std::vector<uint8_t> w(c.weights.size()), a(c.acts.size());  // aligned copies to dequantize
  std::memcpy(w.data(), c.weights.data(), w.size());
  std::memcpy(a.data(), c.acts.data(), a.size());
  std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
  dequantize_row(type, w.data(), wf.data(), n);
  dequantize_row(QuantType::Q8_K, a.data(), af.data(), n);
  double abs_sum = 0;
  for (size_t i = 0; i < wf.size(); ++i) {
    c.reference += static_cast<double>(wf[i]) * af[i];
    abs_sum += std::fabs(static_cast<double>(wf[i]) * af[i]);
  }
  c.tolerance = 1e-5 * abs_sum + 1e-6;
  return c;
}

float run(const KernelTable& t, QuantType type, int64_t n, const Case& c) {
  const VecDotFn dot = t.vec_dot[static_cast<int>(type)];
  return dot(n, c.weights.data(), c.acts.data());
}

// Every (type, shape, kind) case once, with a seed of its own.
template <typename Fn>
void for_each_case(Fn&& fn) {
  uint32_t seed = 1;
  for (QuantType type : kTypes) {
    for (int64_t n : kKShapes) {
      for (RowKind kind : kRowKinds) fn(type, n, make_case(type, n, kind, seed++));
    }
  }
}

TEST(CpuKQuants, EveryIsaHasTheSixDots) {
  for (int level = 0; level <= static_cast<int>(detect_hardware_isa()); ++level) {
    const KernelTable& t = kernels_for(static_cast<Isa>(level));
    EXPECT_EQ(t.isa, static_cast<Isa>(level));
    for (QuantType type : kTypes) {
      EXPECT_NE(t.vec_dot[static_cast<int>(type)], nullptr) << isa_name(t.isa) << " " << type_name(type);
    }
  }
}

TEST(CpuKQuants, ScalarMatchesDequantizedReference) {
  const KernelTable& scalar = kernels_for(Isa::kScalar);
  for_each_case([&](QuantType type, int64_t n, const Case& c) {
    const double got = run(scalar, type, n, c);
    EXPECT_NEAR(got, c.reference, c.tolerance) << c.name;
  });
}

TEST(CpuKQuants, EveryIsaMatchesScalar) {
  const KernelTable& scalar = kernels_for(Isa::kScalar);
  const int hardware = static_cast<int>(detect_hardware_isa());
  for_each_case([&](QuantType type, int64_t n, const Case& c) {
    const double want = run(scalar, type, n, c);
    for (int level = 1; level <= hardware; ++level) {
      const KernelTable& t = kernels_for(static_cast<Isa>(level));
      EXPECT_NEAR(run(t, type, n, c), want, c.tolerance) << c.name << " " << isa_name(t.isa);
    }
  });
}

// With and without VNNI the AVX-512 dots do the same exact integer sums and the same
// float steps: the two levels agree bit for bit.
TEST(CpuKQuants, Avx512LevelsAgreeExactly) {
  if (detect_hardware_isa() < Isa::kAvx512Vnni) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const KernelTable& plain = kernels_for(Isa::kAvx512);
  const KernelTable& vnni = kernels_for(Isa::kAvx512Vnni);
  for_each_case([&](QuantType type, int64_t n, const Case& c) {
    EXPECT_EQ(run(plain, type, n, c), run(vnni, type, n, c)) << c.name;
  });
}

// An all-zero activation row gives exactly 0 at every level, whatever the weights.
TEST(CpuKQuants, ZeroActivationsGiveZero) {
  for (QuantType type : kTypes) {
    Case c = make_case(type, 512, RowKind::kRawBytes, 99);
    std::memset(c.acts.data(), 0, c.acts.size());
    for (int level = 0; level <= static_cast<int>(detect_hardware_isa()); ++level) {
      EXPECT_EQ(run(kernels_for(static_cast<Isa>(level)), type, 512, c), 0.f)
          << type_name(type) << " " << isa_name(static_cast<Isa>(level));
    }
  }
}

}  // namespace
}  // namespace mt::cpu
