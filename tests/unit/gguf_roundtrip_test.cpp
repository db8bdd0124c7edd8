// Writer -> reader round trip: every value type (scalars, strings, scalar/bool/string/
// nested/empty arrays) comes back with its type and value; tensors of several types come
// back with their shapes, aligned offsets in ggml's layout and the exact bytes FillRows
// produced; a non-default alignment is written and honoured; a sparse write has the same
// size and header as a full one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"

namespace mt::gguf {
namespace {

template <typename T>
Value scalar_array(ValueType elem, const std::vector<T>& v) {  // views v: keep it alive
  Array a;
  a.elem_type = elem;
  a.count = v.size();
  a.raw = {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
  return Value{ValueType::kArray, std::move(a)};
}

Value string_array(const std::vector<std::string_view>& v) {
  Array a;
  a.elem_type = ValueType::kString;
  a.count = v.size();
  a.strings = v;
  return Value{ValueType::kArray, std::move(a)};
}

Value array_of_arrays(std::vector<Value> children) {
  Array a;
  a.elem_type = ValueType::kArray;
  a.count = children.size();
  a.arrays = std::move(children);
  return Value{ValueType::kArray, std::move(a)};
}

StatusOr<GgufFile> write_and_open(const GgufWriter& w, const std::string& name, const WriteOptions& o = {}) {
  const std::string path = test::temp_path(name);
  MT_RETURN_IF_ERROR(w.write(path, o));
  return GgufFile::open(path);
}

TEST(GgufRoundTrip, EveryScalarType) {
  const std::string_view with_nul("a\0b", 3);
  GgufWriter w;
  w.set("s.u8", Value{ValueType::kU8, uint64_t{200}});
  w.set("s.i8", Value{ValueType::kI8, int64_t{-128}});
  w.set("s.u16", Value{ValueType::kU16, uint64_t{65535}});
  w.set("s.i16", Value{ValueType::kI16, int64_t{-32768}});
  w.set_u32("s.u32", std::numeric_limits<uint32_t>::max());
  w.set_i32("s.i32", std::numeric_limits<int32_t>::min());
  w.set_f32("s.f32", -0.15625f);
  w.set_bool("s.true", true);
  w.set_bool("s.false", false);
  w.set_string("s.string", "ünïcödé text");
  w.set_string("s.empty_string", "");
  w.set("s.nul_string", Value::string(with_nul));
  w.set("s.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  w.set("s.i64", Value{ValueType::kI64, std::numeric_limits<int64_t>::min()});
  w.set("s.f64", Value{ValueType::kF64, 3.141592653589793});
  w.set("s.f64_tiny", Value{ValueType::kF64, 4.9e-324});
  auto f = write_and_open(w, "scalars.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();

  ASSERT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(f->metadata()[0].key, "s.u8");  // insertion order is kept
  EXPECT_EQ(f->metadata()[15].key, "s.f64_tiny");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->data_offset(), f->file_size());  // no padding without tensors (ggml's layout)

  auto type_of = [&](const char* key) { return f->find(key)->type; };
  EXPECT_EQ(type_of("s.u8"), ValueType::kU8);
  EXPECT_EQ(type_of("s.i8"), ValueType::kI8);
  EXPECT_EQ(type_of("s.u16"), ValueType::kU16);
  EXPECT_EQ(type_of("s.i16"), ValueType::kI16);
  EXPECT_EQ(type_of("s.u32"), ValueType::kU32);
  EXPECT_EQ(type_of("s.i32"), ValueType::kI32);
  EXPECT_EQ(type_of("s.f32"), ValueType::kF32);
  EXPECT_EQ(type_of("s.true"), ValueType::kBool);
  EXPECT_EQ(type_of("s.string"), ValueType::kString);
  EXPECT_EQ(type_of("s.u64"), ValueType::kU64);
  EXPECT_EQ(type_of("s.i64"), ValueType::kI64);
  EXPECT_EQ(type_of("s.f64"), ValueType::kF64);

  EXPECT_EQ(*f->get_uint("s.u8"), 200u);
  EXPECT_EQ(*f->get_int("s.i8"), -128);
  EXPECT_EQ(*f->get_uint("s.u16"), 65535u);
  EXPECT_EQ(*f->get_int("s.i16"), -32768);
  EXPECT_EQ(*f->get_u32("s.u32"), std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(*f->get_int("s.i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(*f->get_f32("s.f32"), -0.15625f);
  EXPECT_TRUE(*f->get_bool("s.true"));
  EXPECT_FALSE(*f->get_bool("s.false"));
  EXPECT_EQ(*f->get_string("s.string"), "ünïcödé text");
  EXPECT_EQ(*f->get_string("s.empty_string"), "");
  EXPECT_EQ(*f->get_string("s.nul_string"), with_nul);
  EXPECT_EQ(*f->get_uint("s.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->get_int("s.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<double>(f->find("s.f64")->data), 3.141592653589793);  // f64 keeps every bit
  EXPECT_EQ(std::get<double>(f->find("s.f64_tiny")->data), 4.9e-324);

  EXPECT_EQ(f->find("s.u8")->summary(), "200");
  EXPECT_EQ(f->find("s.i64")->summary(), "-9223372036854775808");
  EXPECT_EQ(f->find("s.true")->summary(), "true");
  EXPECT_EQ(f->find("s.string")->summary(5), "\"ünï...\"");  // cut after 5 bytes ("ü", "ï": 2 each)
  EXPECT_EQ(f->find("s.empty_string")->summary(), "\"\"");
}

TEST(GgufRoundTrip, EveryArrayKind) {
  const std::vector<uint8_t> u8s{0, 1, 255};
  const std::vector<int8_t> i8s{-128, 0, 127};
  const std::vector<uint16_t> u16s{1, 65535};
  const std::vector<int16_t> i16s{-32768, 32767};
  const std::vector<uint64_t> u64s{0, std::numeric_limits<uint64_t>::max()};
  const std::vector<int64_t> i64s{std::numeric_limits<int64_t>::min(), -1, 7};
  const std::vector<double> f64s{-1.5, 1e300};
  const std::vector<uint8_t> bools{1, 0, 0, 1};
  const std::vector<int32_t> inner_ints{5, -6};
  const std::vector<uint32_t> empty_u32;
  GgufWriter w;
  w.set("a.u8", scalar_array(ValueType::kU8, u8s));
  w.set("a.i8", scalar_array(ValueType::kI8, i8s));
  w.set("a.u16", scalar_array(ValueType::kU16, u16s));
  w.set("a.i16", scalar_array(ValueType::kI16, i16s));
  w.set_u32_array("a.u32", {0, 4000000000u});
  w.set_i32_array("a.i32", {-2147483647 - 1, 2147483647});
  w.set_f32_array("a.f32", {0.5f, -0.0f, 3.0e38f});
  w.set("a.u64", scalar_array(ValueType::kU64, u64s));
  w.set("a.i64", scalar_array(ValueType::kI64, i64s));
  w.set("a.f64", scalar_array(ValueType::kF64, f64s));
  w.set("a.bool", scalar_array(ValueType::kBool, bools));
  w.set_string_array("a.strings", {"Ġ t", "", "x y z", std::string(300, 'q')});
  w.set_string_array("a.empty_strings", {});
  w.set_u32_array("a.empty_u32", empty_u32);
  w.set("a.empty_nested", array_of_arrays({}));
  w.set("a.nested", array_of_arrays({string_array({"p", ""}), scalar_array(ValueType::kI32, inner_ints),
                                     array_of_arrays({array_of_arrays({})})}));
  auto f = write_and_open(w, "arrays.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->metadata().size(), 16u);

  auto arr = [&](const char* key) {
    auto a = f->get_array(key);
    EXPECT_TRUE(a.ok()) << key;
    return *a;
  };
  auto ints = [](const Array* a) {
    std::vector<int64_t> out;
    for (uint64_t i = 0; i < a->count; ++i) out.push_back(a->int_at(i));
    return out;
  };
  EXPECT_EQ(arr("a.u8")->elem_type, ValueType::kU8);
  EXPECT_EQ(ints(arr("a.u8")), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(ints(arr("a.i8")), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(ints(arr("a.u16")), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(ints(arr("a.i16")), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(arr("a.u32")->elem_type, ValueType::kU32);
  EXPECT_EQ(ints(arr("a.u32")), (std::vector<int64_t>{0, 4000000000}));
  EXPECT_EQ(arr("a.i32")->elem_type, ValueType::kI32);
  EXPECT_EQ(ints(arr("a.i32")), (std::vector<int64_t>{-2147483648LL, 2147483647}));
  const Array* f32s = arr("a.f32");
  EXPECT_EQ(f32s->elem_type, ValueType::kF32);
  ASSERT_EQ(f32s->count, 3u);
  EXPECT_EQ(f32s->float_at(0), 0.5);
  EXPECT_TRUE(std::signbit(f32s->float_at(1)));
  EXPECT_EQ(f32s->float_at(2), double{3.0e38f});
  EXPECT_EQ(arr("a.u64")->uint_at(1), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ints(arr("a.i64")), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 7}));
  EXPECT_EQ(arr("a.f64")->float_at(1), 1e300);
  const Array* b = arr("a.bool");
  EXPECT_EQ(b->elem_type, ValueType::kBool);
  ASSERT_EQ(b->raw.size(), 4u);
  EXPECT_EQ(std::vector<uint8_t>(b->raw.begin(), b->raw.end()), bools);

  const Array* s = arr("a.strings");
  ASSERT_EQ(s->count, 4u);
  ASSERT_EQ(s->strings.size(), 4u);
  EXPECT_EQ(s->strings[0], "Ġ t");
  EXPECT_EQ(s->strings[1], "");
  EXPECT_EQ(s->strings[3], std::string(300, 'q'));
  EXPECT_EQ(arr("a.empty_strings")->elem_type, ValueType::kString);
  EXPECT_EQ(arr("a.empty_strings")->count, 0u);
  EXPECT_EQ(arr("a.empty_u32")->elem_type, ValueType::kU32);
  EXPECT_EQ(arr("a.empty_u32")->count, 0u);
  EXPECT_EQ(arr("a.empty_nested")->elem_type, ValueType::kArray);
  EXPECT_EQ(arr("a.empty_nested")->count, 0u);

  const Array* n = arr("a.nested");
  ASSERT_EQ(n->elem_type, ValueType::kArray);
  ASSERT_EQ(n->arrays.size(), 3u);
  const Array* n0 = n->arrays[0].array();
  ASSERT_NE(n0, nullptr);
  EXPECT_EQ(n0->elem_type, ValueType::kString);
  EXPECT_EQ(n0->strings, (std::vector<std::string_view>{"p", ""}));
  EXPECT_EQ(ints(n->arrays[1].array()), (std::vector<int64_t>{5, -6}));
  const Array* n2 = n->arrays[2].array();
  ASSERT_EQ(n2->count, 1u);
  EXPECT_EQ(n2->arrays[0].array()->elem_type, ValueType::kArray);
  EXPECT_EQ(n2->arrays[0].array()->count, 0u);

  EXPECT_EQ(f->find("a.strings")->summary(), "[string x 4: \"Ġ t\", \"\", \"x y z\", \"qqqqqqqqqqqqqqqq...\"]");
  EXPECT_EQ(f->find("a.bool")->summary(), "[bool x 4: true, false, false, true]");
  EXPECT_EQ(f->find("a.i8")->summary(), "[i8 x 3: -128, 0, 127]");
  EXPECT_EQ(f->find("a.empty_u32")->summary(), "[u32 x 0]");
  EXPECT_EQ(f->find("a.nested")->summary(),
            "[array x 3: [string x 2: \"p\", \"\"], [i32 x 2: 5, -6], [array x 1: [array x 0]]]");
}

TEST(GgufRoundTrip, SetReplacesInPlace) {
  GgufWriter w;
  w.set_u32("k.first", 1);
  w.set_f32_array("k.floats", {1.0f});
  w.set_string("k.text", "old");
  w.set_u32("k.last", 9);
  w.set_f32_array("k.floats", {2.0f, 3.0f});
  w.set_string("k.text", "new");
  w.set_u32("k.first", 7);
  auto f = write_and_open(w, "replace.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->metadata().size(), 4u);
  EXPECT_EQ(f->metadata()[0].key, "k.first");
  EXPECT_EQ(f->metadata()[1].key, "k.floats");
  EXPECT_EQ(f->metadata()[2].key, "k.text");
  EXPECT_EQ(f->metadata()[3].key, "k.last");
  EXPECT_EQ(*f->get_u32("k.first"), 7u);
  EXPECT_EQ((*f->get_array("k.floats"))->count, 2u);
  EXPECT_EQ(*f->get_string("k.text"), "new");
}

// The byte at (row, col) of tensor `id`: a cheap hash, so a misplaced row or tensor shows.
uint8_t pattern(int id, uint64_t row, uint64_t col) {
  return static_cast<uint8_t>((id * 131 + row * 31 + col * 7 + (row * col >> 3)) & 0xFF);
}

struct TestTensor {
  std::string name;
  QuantType type;
  std::vector<uint64_t> ne;
  uint64_t row_bytes;
  uint64_t n_rows;
};

// f32 [7] (28 bytes: needs padding), f16 [64, 3], q8_0 [64, 5] (68-byte rows), q4_K
// [256, 4, 3] (an expert tensor), bf16 [3, 2].
std::vector<TestTensor> test_tensors() {
  return {{"f32.weight", QuantType::F32, {7}, 28, 1},
          {"blk.0.f16.weight", QuantType::F16, {64, 3}, 128, 3},
          {"blk.0.q8_0.weight", QuantType::Q8_0, {64, 5}, 68, 5},
          {"blk.0.ffn_up_exps.weight", QuantType::Q4_K, {256, 4, 3}, 144, 12},
          {"bf16.bias", QuantType::BF16, {3, 2}, 6, 2}};
}

// Adds the test tensors; rows_seen[i][r] counts how often FillRows produced row r of tensor i.
void add_test_tensors(GgufWriter& w, std::vector<std::vector<int>>* rows_seen) {
  const auto tensors = test_tensors();
  rows_seen->assign(tensors.size(), {});
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TestTensor& t = tensors[i];
    (*rows_seen)[i].assign(t.n_rows, 0);
    std::vector<int>* seen = &(*rows_seen)[i];
    const int id = static_cast<int>(i);
    w.add_tensor(t.name, t.type, t.ne, [id, t, seen](uint64_t first, uint64_t n, uint8_t* dst) {
      ASSERT_LE(first + n, t.n_rows);
      for (uint64_t r = first; r < first + n; ++r) {
        ++(*seen)[r];
        for (uint64_t c = 0; c < t.row_bytes; ++c) *dst++ = pattern(id, r, c);
      }
    });
  }
}

void expect_test_tensors(const GgufFile& f, bool sparse) {
  const auto expected = test_tensors();
  ASSERT_EQ(f.tensors().size(), expected.size());
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  uint64_t next_offset = 0;  // ggml's layout: each tensor at the aligned end of the previous one
  for (size_t i = 0; i < expected.size(); ++i) {
    const TestTensor& e = expected[i];
    const TensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(e.name);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(f.find_tensor(e.name), &t);
    EXPECT_EQ(t.type, e.type);
    EXPECT_EQ(t.n_dims, e.ne.size());
    for (size_t d = 0; d < kMaxDims; ++d) EXPECT_EQ(t.ne[d], d < e.ne.size() ? e.ne[d] : 1u);
    EXPECT_EQ(t.row_bytes(), e.row_bytes);
    EXPECT_EQ(t.nbytes, e.row_bytes * e.n_rows);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    EXPECT_EQ((f.data_offset() + t.offset) % f.alignment(), 0u);
    EXPECT_EQ(t.offset, next_offset);
    next_offset = *checked_align_up(t.offset + t.nbytes, f.alignment());
    std::span<const uint8_t> data = f.tensor_data(t);
    ASSERT_EQ(data.size(), t.nbytes);
    bool all_equal = true;
    for (uint64_t r = 0; r < e.n_rows; ++r) {
      for (uint64_t c = 0; c < e.row_bytes; ++c) {
        const uint8_t want = sparse ? 0 : pattern(static_cast<int>(i), r, c);
        all_equal = all_equal && data[r * e.row_bytes + c] == want;
      }
    }
    EXPECT_TRUE(all_equal);
  }
  EXPECT_EQ(f.data_offset() + next_offset, f.file_size());
  EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypes) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  std::vector<std::vector<int>> rows_seen;
  add_test_tensors(w, &rows_seen);
  auto f = write_and_open(w, "tensors.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), kDefaultAlignment);
  EXPECT_EQ(f->find("general.alignment"), nullptr);  // the default is not written
  for (const auto& seen : rows_seen) {
    for (int n : seen) EXPECT_EQ(n, 1);  // every row filled exactly once
  }
  expect_test_tensors(*f, false);
  const TensorInfo* exps = f->find_tensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(exps, nullptr);
  EXPECT_EQ(exps->n_elements(), 256u * 4 * 3);
  EXPECT_EQ(exps->matrix_bytes(), 144u * 4);
  EXPECT_EQ(*w.file_size(), f->file_size());
  EXPECT_EQ(std::filesystem::file_size(test::temp_path("tensors.gguf")), f->file_size());
}

TEST(GgufRoundTrip, Alignment64IsWrittenAndHonoured) {
  GgufWriter w(64);
  w.set_string("general.architecture", "llama");
  std::vector<std::vector<int>> rows_seen;
  add_test_tensors(w, &rows_seen);
  auto f = write_and_open(w, "align64.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  ASSERT_NE(f->find("general.alignment"), nullptr);
  EXPECT_EQ(f->find("general.alignment")->type, ValueType::kU32);  // ggml insists on u32
  EXPECT_EQ(*f->get_u32("general.alignment"), 64u);
  expect_test_tensors(*f, false);
  for (const TensorInfo& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

TEST(GgufRoundTrip, SparseWriteMatchesFullWrite) {
  GgufWriter w(64);
  w.set_string("general.architecture", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  std::vector<std::vector<int>> rows_seen;
  add_test_tensors(w, &rows_seen);
  const std::string full_path = test::temp_path("full.gguf");
  const std::string sparse_path = test::temp_path("sparse.gguf");
  ASSERT_TRUE(w.write(full_path).ok());
  WriteOptions sparse;
  sparse.sparse = true;
  ASSERT_TRUE(w.write(sparse_path, sparse).ok());
  for (const auto& seen : rows_seen) {
    for (int n : seen) EXPECT_EQ(n, 1);  // the sparse write never called FillRows
  }
  auto full = GgufFile::open(full_path);
  auto hole = GgufFile::open(sparse_path);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE(hole.ok()) << hole.status().to_string();
  EXPECT_EQ(std::filesystem::file_size(full_path), std::filesystem::file_size(sparse_path));
  EXPECT_EQ(full->file_size(), hole->file_size());
  EXPECT_EQ(full->data_offset(), hole->data_offset());
  auto header = [](const std::string& path, uint64_t n) {
    std::vector<char> out(n);
    std::ifstream(path, std::ios::binary).read(out.data(), static_cast<std::streamsize>(n));
    return out;
  };
  EXPECT_EQ(header(full_path, full->data_offset()), header(sparse_path, full->data_offset()));
  expect_test_tensors(*hole, true);
}

TEST(GgufRoundTrip, WriterRejectsBadTensors) {
  auto fails = [](QuantType type, std::vector<uint64_t> ne, std::string name, const char* needle) {
    GgufWriter w;
    w.add_tensor(name, type, ne, {});
    Status s = w.write(test::temp_path("bad.gguf"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  fails(QuantType::Q8_0, {33}, "t", "not a multiple");
  fails(QuantType::F32, {}, "t", "dims");
  fails(QuantType::F32, {1, 1, 1, 1, 1}, "t", "dims");
  fails(QuantType::F32, {8}, std::string(64, 'n'), "1..63");
  fails(QuantType::F32, {8}, "", "1..63");
  GgufWriter twice;
  twice.add_tensor("t", QuantType::F32, {8}, {});
  twice.add_tensor("t", QuantType::F32, {8}, {});
  EXPECT_NE(twice.file_size().status().message().find("added twice"), std::string::npos);
}

}  // namespace
}  // namespace mt::gguf
