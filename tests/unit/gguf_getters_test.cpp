// Typed metadata getters: NotFound names the missing key, InvalidArgument names the
// actual and expected types; integer getters accept any width whose value fits and
// reject negative or too-large values; the *_or fallbacks apply only to absent keys.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"

namespace mt::gguf {
namespace {

class GgufGetters : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    GgufWriter w;
    w.set("v.u8", Value{ValueType::kU8, uint64_t{7}});
    w.set("v.u16", Value{ValueType::kU16, uint64_t{65535}});
    w.set_u32("v.u32", std::numeric_limits<uint32_t>::max());
    w.set("v.u64_small", Value::u64(5));
    w.set("v.u64_big", Value::u64(uint64_t{1} << 32));
    w.set("v.u64_max", Value::u64(std::numeric_limits<uint64_t>::max()));
    w.set_i32("v.i32", 9);
    w.set_i32("v.i32_neg", -1);
    w.set("v.i8_neg", Value{ValueType::kI8, int64_t{-3}});
    w.set("v.i64_big", Value{ValueType::kI64, int64_t{1} << 40});
    w.set("v.i64_neg", Value{ValueType::kI64, int64_t{-2}});
    w.set_f32("v.f32", 0.25f);
    w.set("v.f64", Value{ValueType::kF64, 1e-6});
    w.set_bool("v.bool", true);
    w.set_string("v.string", "qwen3moe");
    w.set_u32_array("v.array", {1, 2, 3});
    const std::string path = test::temp_path("getters.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = new GgufFile(std::move(*f));
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  static const GgufFile& f() { return *file_; }
  static GgufFile* file_;
};
GgufFile* GgufGetters::file_ = nullptr;

template <typename T>
void expect_error(const StatusOr<T>& r, StatusCode code, std::initializer_list<const char*> needles) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const char* n : needles) EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
}

TEST_F(GgufGetters, MissingKeyIsNotFoundNamingTheKey) {
  expect_error(f().get_u32("no.such.key"), StatusCode::kNotFound, {"'no.such.key'", "missing"});
  expect_error(f().get_uint("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  expect_error(f().get_int("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  expect_error(f().get_f32("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  expect_error(f().get_bool("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  expect_error(f().get_string("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  expect_error(f().get_array("no.such.key"), StatusCode::kNotFound, {"'no.such.key'"});
  EXPECT_EQ(f().find("no.such.key"), nullptr);
  EXPECT_EQ(f().find("v.u8"), &f().metadata()[0].value);
}

TEST_F(GgufGetters, WrongTypeNamesBothTypes) {
  expect_error(f().get_u32("v.string"), StatusCode::kInvalidArgument, {"'v.string'", "type string", "integer"});
  expect_error(f().get_int("v.f32"), StatusCode::kInvalidArgument, {"'v.f32'", "type f32", "integer"});
  expect_error(f().get_uint("v.bool"), StatusCode::kInvalidArgument, {"type bool", "integer"});
  expect_error(f().get_f32("v.u32"), StatusCode::kInvalidArgument, {"'v.u32'", "type u32", "expected f32"});
  expect_error(f().get_bool("v.u8"), StatusCode::kInvalidArgument, {"'v.u8'", "type u8", "expected bool"});
  expect_error(f().get_string("v.array"), StatusCode::kInvalidArgument, {"type array", "expected string"});
  expect_error(f().get_array("v.string"), StatusCode::kInvalidArgument, {"type string", "expected array"});
  expect_error(f().get_u32("v.array"), StatusCode::kInvalidArgument, {"type array", "integer"});
}

TEST_F(GgufGetters, U32AcceptsEveryIntegerWidthThatFits) {
  EXPECT_EQ(*f().get_u32("v.u8"), 7u);
  EXPECT_EQ(*f().get_u32("v.u16"), 65535u);
  EXPECT_EQ(*f().get_u32("v.u32"), std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(*f().get_u32("v.u64_small"), 5u);
  EXPECT_EQ(*f().get_u32("v.i32"), 9u);
}

TEST_F(GgufGetters, U32RejectsNegativeAndTooLarge) {
  expect_error(f().get_u32("v.i32_neg"), StatusCode::kInvalidArgument, {"'v.i32_neg'", "negative", "-1"});
  expect_error(f().get_u32("v.i8_neg"), StatusCode::kInvalidArgument, {"negative", "-3"});
  expect_error(f().get_u32("v.u64_big"), StatusCode::kInvalidArgument, {"'v.u64_big'", "4294967296", "u32"});
  expect_error(f().get_u32("v.i64_big"), StatusCode::kInvalidArgument, {"does not fit in u32"});
  expect_error(f().get_uint("v.i64_neg"), StatusCode::kInvalidArgument, {"negative"});
}

TEST_F(GgufGetters, WideIntegers) {
  EXPECT_EQ(*f().get_uint("v.u64_max"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f().get_uint("v.i64_big"), uint64_t{1} << 40);
  EXPECT_EQ(*f().get_int("v.i64_neg"), -2);
  EXPECT_EQ(*f().get_int("v.u32"), int64_t{std::numeric_limits<uint32_t>::max()});
  EXPECT_EQ(*f().get_int("v.i8_neg"), -3);
  expect_error(f().get_int("v.u64_max"), StatusCode::kInvalidArgument, {"'v.u64_max'", "i64"});
}

TEST_F(GgufGetters, FloatsBoolsStringsArrays) {
  EXPECT_EQ(*f().get_f32("v.f32"), 0.25f);
  EXPECT_EQ(*f().get_f32("v.f64"), 1e-6f);  // f64 narrows to f32
  EXPECT_TRUE(*f().get_bool("v.bool"));
  EXPECT_EQ(*f().get_string("v.string"), "qwen3moe");
  auto a = f().get_array("v.array");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->elem_type, ValueType::kU32);
  EXPECT_EQ((*a)->count, 3u);
  EXPECT_EQ((*a)->uint_at(2), 3u);
}

TEST_F(GgufGetters, FallbacksOnlyForAbsentKeys) {
  EXPECT_EQ(*f().get_u32_or("no.such.key", 42), 42u);
  EXPECT_EQ(*f().get_f32_or("no.such.key", 1.5f), 1.5f);
  EXPECT_EQ(*f().get_bool_or("no.such.key", true), true);
  EXPECT_EQ(*f().get_bool_or("no.such.key", false), false);
  EXPECT_EQ(*f().get_u32_or("v.u8", 42), 7u);
  EXPECT_EQ(*f().get_f32_or("v.f32", 1.5f), 0.25f);
  EXPECT_EQ(*f().get_bool_or("v.bool", false), true);
  // A present key of the wrong type or out of range is an error, never the fallback.
  expect_error(f().get_u32_or("v.string", 42), StatusCode::kInvalidArgument, {"type string"});
  expect_error(f().get_u32_or("v.i32_neg", 42), StatusCode::kInvalidArgument, {"negative"});
  expect_error(f().get_f32_or("v.bool", 1.5f), StatusCode::kInvalidArgument, {"type bool", "f32"});
  expect_error(f().get_bool_or("v.u8", true), StatusCode::kInvalidArgument, {"type u8", "bool"});
}

}  // namespace
}  // namespace mt::gguf

namespace mt::gguf {
namespace {

TEST(GgufEdges, HugeF64DoesNotFitF32AndSummaryCutsAtCharBoundary) {
  GgufWriter w;
  w.set("big", Value{ValueType::kF64, 1e300});
  w.set("ok", Value{ValueType::kF64, 0.5});
  w.set_string("utf8", "\xC3\xA9\xC3\xA9\xC3\xA9");  // "ééé": 2 bytes each
  const std::string path = ::mt::test::temp_path("edges.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->get_f32("big").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FLOAT_EQ(*f->get_f32("ok"), 0.5f);
  // 3 bytes would split the second character: the cut backs off to 2.
  EXPECT_EQ(f->find("utf8")->summary(3), "\"\xC3\xA9...\"");
}

TEST(GgufEdges, FullWriteWithoutDataSourceIsAnError) {
  GgufWriter w;
  w.add_tensor("t", QuantType::F32, {4}, {});
  Status s = w.write(::mt::test::temp_path("nodata.gguf"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no data source"), std::string::npos);
}

}  // namespace
}  // namespace mt::gguf
