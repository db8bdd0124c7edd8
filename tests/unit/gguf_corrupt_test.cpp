// Corrupt GGUFs: every case of the generated corpus (tests/data/gguf_corrupt/gguf_cases.h)
// fails with the right StatusCode and a message naming the field and its byte offset;
// every prefix and every single-byte corruption of valid files fails cleanly or parses
// into a file whose every getter and tensor span still works.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"
#include "tests/data/gguf_corrupt/gguf_cases.h"

namespace mt::gguf {
namespace {

using testcases::Bytes;

std::string offset_text(uint64_t at) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "at offset 0x%" PRIx64 ":", at);
  return buf;
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Touches everything a parsed file offers; returns a checksum so nothing is optimised out.
uint64_t exercise(const GgufFile& f, std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (const KeyValue& kv : f.metadata()) {
    EXPECT_EQ(f.find(kv.key), &kv.value);
    sum += kv.value.summary().size() + kv.value.summary(0).size();
    sum += f.get_uint(kv.key).ok() + f.get_u32(kv.key).ok() + f.get_int(kv.key).ok() + f.get_f32(kv.key).ok();
    sum += f.get_bool(kv.key).ok() + f.get_string(kv.key).ok() + f.get_array(kv.key).ok();
    sum += f.get_u32_or(kv.key, 1).ok() + f.get_f32_or(kv.key, 1).ok() + f.get_bool_or(kv.key, true).ok();
  }
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(f.find_tensor(t.name), &t);
    std::span<const uint8_t> d = f.tensor_data(t);
    EXPECT_EQ(d.size(), t.nbytes);
    if (!d.empty()) {
      EXPECT_GE(d.data(), bytes.data());
      EXPECT_LE(d.data() + d.size(), bytes.data() + bytes.size());
      sum += d.front() + d.back();
    }
  }
  return sum;
}

TEST(GgufCorrupt, EveryCaseFailsNamingFieldAndOffset) {
  const auto cases = testcases::corrupt_cases();
  EXPECT_GE(cases.size(), 60u);
  std::set<std::string> names;
  for (const testcases::CorruptCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name";
    auto f = GgufFile::parse(c.bytes, c.name + ".gguf");
    ASSERT_FALSE(f.ok()) << "parsed a corrupt file";
    EXPECT_EQ(f.status().code(), c.code) << f.status().to_string();
    const std::string& m = f.status().message();
    EXPECT_TRUE(contains(m, "gguf '" + c.name + ".gguf'")) << m;
    EXPECT_TRUE(contains(m, "at offset 0x")) << m;
    if (c.at >= 0) {
      EXPECT_TRUE(contains(m, offset_text(static_cast<uint64_t>(c.at)))) << m;
    }
    for (const std::string& needle : c.needles) EXPECT_TRUE(contains(m, needle)) << "'" << needle << "' not in: " << m;
  }
}

TEST(GgufCorrupt, ValidSeedsParse) {
  for (const Bytes& b : {testcases::valid_small(), testcases::valid_all_types(), testcases::valid_header_only()}) {
    auto f = GgufFile::parse(b.bytes());
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    exercise(*f, b.bytes());
  }
  const Bytes small_bytes = testcases::valid_small();  // parsed files view their bytes
  auto small = GgufFile::parse(small_bytes.bytes());
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->tensors().size(), 2u);
  EXPECT_EQ(small->data_offset(), 288u);
  EXPECT_EQ((*small->get_array("tokenizer.ggml.tokens"))->strings[2], "bc");
  const Bytes all_bytes = testcases::valid_all_types();
  auto all = GgufFile::parse(all_bytes.bytes());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->metadata().size(), 17u);
  EXPECT_EQ(*all->get_int("t.i8"), -128);
  EXPECT_EQ(*all->get_int("t.i16"), -32768);
  EXPECT_EQ(all->find("t.nested")->summary(), "[array x 2: [i32 x 2: 1, -1], [f32 x 0]]");
}

TEST(GgufCorrupt, NestingLimitIsEightLevels) {
  const Bytes eight_bytes = testcases::nested_arrays(8);
  auto eight = GgufFile::parse(eight_bytes.bytes());
  EXPECT_TRUE(eight.ok()) << eight.status().to_string();
  const Bytes nine_bytes = testcases::nested_arrays(9);
  auto nine = GgufFile::parse(nine_bytes.bytes());
  ASSERT_FALSE(nine.ok());
  EXPECT_TRUE(contains(nine.status().message(), "nested deeper than 8")) << nine.status().message();
}

TEST(GgufCorrupt, AlignedOffsetsUnderAlignment64Parse) {
  Bytes b;
  b.header(2, 1).kv_u32("general.alignment", 64);
  b.tensor("a", {8}, testcases::kF32, 0).tensor("b", {8}, testcases::kF32, 64).pad_to(64).zeros(96);
  auto f = GgufFile::parse(b.bytes());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
}

TEST(GgufCorrupt, TouchingAndEmptyTensorsDoNotOverlap) {
  Bytes b;
  b.header(3, 0);
  b.tensor("a", {8}, testcases::kF32, 0).tensor("empty", {0, 4}, testcases::kF32, 0);
  b.tensor("b", {8}, testcases::kF32, 32).pad_to(32).zeros(64);
  auto f = GgufFile::parse(b.bytes());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensor_data(*f->find_tensor("empty")).size(), 0u);
}

TEST(GgufCorrupt, MissingFileIsIoError) {
  auto f = GgufFile::open(test::temp_path("does-not-exist.gguf"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(f.status().message(), "does-not-exist.gguf")) << f.status().message();
  auto dir = GgufFile::open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kIoError);
}

TEST(GgufCorrupt, EmptyAndCorruptFilesOnDisk) {
  const std::string empty = test::temp_path("empty.gguf");
  std::ofstream(empty, std::ios::binary).close();
  auto f = GgufFile::open(empty);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(f.status().message(), "magic")) << f.status().message();
  EXPECT_TRUE(contains(f.status().message(), empty)) << f.status().message();

  for (const testcases::CorruptCase& c : testcases::corrupt_cases()) {
    const std::string path = test::temp_path(c.name + ".gguf");
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(c.bytes.data()), static_cast<std::streamsize>(c.bytes.size()));
    auto g = GgufFile::open(path);
    ASSERT_FALSE(g.ok()) << c.name;
    EXPECT_EQ(g.status().code(), c.code) << c.name;
  }
}

// Every prefix of a valid file either fails as data loss naming an offset, or (where the
// prefix happens to be a complete file) parses.
void expect_every_prefix_handled(const std::vector<uint8_t>& file, size_t* n_failed) {
  *n_failed = 0;
  for (size_t n = 0; n < file.size(); ++n) {
    const std::vector<uint8_t> prefix(file.begin(), file.begin() + static_cast<long>(n));
    auto f = GgufFile::parse(prefix);
    if (f.ok()) {
      exercise(*f, prefix);
      continue;
    }
    ++*n_failed;
    ASSERT_EQ(f.status().code(), StatusCode::kDataLoss) << "prefix " << n << ": " << f.status().to_string();
    ASSERT_TRUE(contains(f.status().message(), "at offset 0x")) << f.status().message();
  }
}

TEST(GgufCorrupt, EveryPrefixOfValidFilesFailsCleanly) {
  size_t failed = 0;
  const Bytes small = testcases::valid_small();
  expect_every_prefix_handled(small.bytes(), &failed);
  EXPECT_EQ(failed, 288u + 100u);  // every prefix that cuts the data of the last tensor
  const Bytes all = testcases::valid_all_types();
  expect_every_prefix_handled(all.bytes(), &failed);
  EXPECT_EQ(failed, all.size());  // its last value ends the file

  // A writer-made file with every tensor type of the round-trip test and alignment 64.
  GgufWriter w(64);
  w.set_string("general.architecture", "qwen3moe");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "", "ccc"});
  w.set_f32_array("tokenizer.ggml.scores", {0.5f, 1.5f, -1.0f});
  w.add_tensor("blk.0.ffn_up_exps.weight", QuantType::Q4_K, {256, 2, 2}, [](uint64_t, uint64_t n, uint8_t* d) {
    for (uint64_t i = 0; i < n * 144; ++i) d[i] = static_cast<uint8_t>(i);
  });
  w.add_tensor("norm.weight", QuantType::F32, {5}, [](uint64_t, uint64_t, uint8_t* d) { std::memset(d, 1, 20); });
  const std::string path = test::temp_path("prefix.gguf");
  ASSERT_TRUE(w.write(path).ok());
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto whole = GgufFile::parse(file);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const TensorInfo& last = whole->tensors().back();
  expect_every_prefix_handled(file, &failed);
  EXPECT_EQ(failed, whole->data_offset() + last.offset + last.nbytes);  // the padding after it may go
}

TEST(GgufCorrupt, SampledPrefixesOfAVocabFile) {
  std::ifstream in(test::testdata("vocab/ggml-vocab-llama-spm.gguf"), std::ios::binary);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(file.size(), 723869u);
  for (size_t k = 0; k < 200; ++k) {
    const size_t n = k < 100 ? k * 7 : file.size() - 1 - (k - 100) * (file.size() / 100);
    auto f = GgufFile::parse(std::span<const uint8_t>(file.data(), n));
    ASSERT_FALSE(f.ok()) << n;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  }
}

// Every byte of valid files replaced by a few nasty values: whatever parses must be sane.
TEST(GgufCorrupt, EverySingleByteCorruptionIsHandled) {
  for (const Bytes& b : {testcases::valid_small(), testcases::valid_all_types()}) {
    size_t parsed = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x02}, uint8_t{0x0D}, uint8_t{0x40}, uint8_t{0x80},
                        uint8_t{0xFF}}) {
        std::vector<uint8_t> bytes = b.bytes();
        bytes[i] = v;
        auto f = GgufFile::parse(bytes);
        if (f.ok()) {
          ++parsed;
          exercise(*f, bytes);
        } else {
          ASSERT_EQ(f.status().code(), StatusCode::kDataLoss) << "byte " << i << " = " << int{v};
        }
      }
    }
    EXPECT_GT(parsed, 0u);
  }
}

}  // namespace
}  // namespace mt::gguf
